"""Tests of the pass framework and the passes: golden fixtures and language preservation.

Golden fixtures live in tests/golden/passes/<pass>/<case>.txt with ``--- before ---`` and
``--- after ---`` sections in the canonical IR text form. ``GRAMKILN_BLESS=1 pytest
tests/test_passes.py`` rewrites the ``after`` sections from the current output (review the
diff before committing it).

The property tests run every pass on random grammars from gramkiln.testing.strategies and
ask the reference matcher whether the language stayed the same, on strings sampled from
the grammar before and after the pass, mutated samples and short random strings.
"""

from __future__ import annotations

import importlib
import io
import os
import random
from pathlib import Path

import pytest
from gramkiln.ir import GrammarIR, parse_grammar, print_grammar
from gramkiln.passes import (
    COMPILE_PIPELINE,
    FRONTEND_PIPELINE,
    PASSES,
    Pass,
    eliminate_dead_rules,
    fuse_terminals,
    get_pass,
    inline_subgrammars,
    lower_repeats,
    lower_suffix_stop,
    normalise_expressions,
    run_pipeline,
    weave_ignore,
)
from gramkiln.passes._common import is_terminal_only, rules_inside_lexemes
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln.errors import IRError
from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.strategies import (
    grammar_strings,
    grammars,
    probe_strings,
    sample_string,
)

GOLDEN_DIR = Path(__file__).parent / "golden" / "passes"
BEFORE, AFTER = "--- before ---", "--- after ---"
BLESS = os.environ.get("GRAMKILN_BLESS") == "1"

# ---------------------------------------------------------------------------------------------
# golden fixtures


def _golden_cases() -> list[Path]:
    return sorted(GOLDEN_DIR.glob("*/*.txt"))


def _split_fixture(text: str) -> tuple[str, str, str]:
    """(header comments, before section, after section) of a fixture file."""
    head, found, rest = text.partition(BEFORE + "\n")
    assert found, "fixture lacks a '--- before ---' line"
    before, found, after = rest.partition(AFTER + "\n")
    assert found, "fixture lacks a '--- after ---' line"
    return head, before, after


@pytest.mark.parametrize("path", _golden_cases(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden(path: Path) -> None:
    head, before_text, after_text = _split_fixture(path.read_text())
    before = parse_grammar(before_text).verify()
    transform = get_pass(path.parent.name)
    result = transform(before).verify()
    printed = print_grammar(result)
    if BLESS:
        path.write_text(f"{head}{BEFORE}\n{before_text}{AFTER}\n{printed}")
        return
    assert printed == after_text, f"{path}: output differs (GRAMKILN_BLESS=1 to accept)"
    # The expected text must itself describe the result, not just print like it.
    assert parse_grammar(after_text) == result
    _assert_same_language_on_samples(before, result, count=30)


def test_every_pass_has_three_golden_cases() -> None:
    counts = {name: len(list((GOLDEN_DIR / name).glob("*.txt"))) for name in PASSES}
    assert all(count >= 3 for count in counts.values()), counts


def _assert_same_language_on_samples(before: GrammarIR, after: GrammarIR, count: int) -> None:
    old, new = ReferenceMatcher(before), ReferenceMatcher(after)
    rnd = random.Random(0)
    texts = {""}
    for grammar in (before, after):
        for _ in range(count):
            sample = sample_string(grammar, rnd)
            if sample is not None:
                texts.update((sample, sample[:-1], sample + sample[-1:]))
    for text in sorted(texts):
        assert old.accepts(text) == new.accepts(text), text
        assert old.is_prefix(text) == new.is_prefix(text), text


# ---------------------------------------------------------------------------------------------
# language preservation on random grammars

# Each example builds two oracles; half the profile's examples keeps the file fast under the
# default profile while HYPOTHESIS_PROFILE=thorough still scales it up.
language_settings = settings(max_examples=max(15, settings.default.max_examples // 2))


def _check_language(data: st.DataObject, before: GrammarIR, after: GrammarIR) -> None:
    after.verify()
    old, new = ReferenceMatcher(before), ReferenceMatcher(after)
    texts = [data.draw(probe_strings(before), label="probe") for _ in range(5)]
    texts += [data.draw(grammar_strings(after), label="sample of result") for _ in range(2)]
    for text in texts:
        assert old.accepts(text) == new.accepts(text), (text, print_grammar(after))
        assert old.is_prefix(text) == new.is_prefix(text), (text, print_grammar(after))


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_normalise_expressions_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    _check_language(data, grammar, normalise_expressions(grammar))


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_eliminate_dead_rules_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    _check_language(data, grammar, eliminate_dead_rules(grammar))


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_weave_ignore_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    woven = weave_ignore(grammar)
    assert not woven.ignore and all(not sub.grammar.ignore for sub in woven.subgrammars)
    _check_language(data, grammar, woven)


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_inline_subgrammars_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    woven = weave_ignore(grammar)
    inlined = inline_subgrammars(woven)
    assert not inlined.subgrammars
    _check_language(data, grammar, inlined)


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_lower_suffix_stop_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    lowered = lower_suffix_stop(grammar)
    assert all(rule.options.suffix is None and rule.options.stop is None for rule in lowered.rules)
    _check_language(data, grammar, lowered)


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True), weave_first=st.booleans())
def test_fuse_terminals_keeps_language(
    data: st.DataObject, grammar: GrammarIR, weave_first: bool
) -> None:
    source = weave_ignore(grammar) if weave_first else grammar
    _check_language(data, grammar, fuse_terminals(source))


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_lower_repeats_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    lowered = lower_repeats(grammar)
    _check_language(data, grammar, lowered)


@language_settings
@given(data=st.data(), grammar=grammars(subgrammars=True))
def test_compile_pipeline_keeps_language(data: st.DataObject, grammar: GrammarIR) -> None:
    lowered = run_pipeline(grammar, COMPILE_PIPELINE)
    assert not lowered.ignore and not lowered.subgrammars
    _check_language(data, grammar, lowered)


# ---------------------------------------------------------------------------------------------
# shape guarantees of the lowering


def _rule_names_are_unique(grammar: GrammarIR) -> bool:
    names = [rule.name for rule in grammar.rules]
    return len(names) == len(set(names))


@given(grammar=grammars(subgrammars=True))
def test_compile_pipeline_output_shape(grammar: GrammarIR) -> None:
    from gramkiln.ir import CharClass, Literal, Repeat, walk

    lowered = run_pipeline(grammar, COMPILE_PIPELINE)
    assert _rule_names_are_unique(lowered)
    terminals = {rule.name for rule in lowered.rules if rule.terminal}
    assert not rules_inside_lexemes(lowered)
    for rule in lowered.rules:
        assert rule.options.suffix is None and rule.options.stop is None
        if rule.terminal:
            continue
        if rule.options.lazy:
            # The runtime compiles a lazy rule as one lazy DFA over terminal references.
            assert is_terminal_only(rule.body, terminals), print_grammar(lowered)
            continue
        for node in walk(rule.body):
            # CFG rules hold no text and no repeats: those live in terminals.
            assert not isinstance(node, (Literal, CharClass, Repeat)), print_grammar(lowered)


@language_settings
@given(grammar=grammars(subgrammars=True))
def test_passes_are_deterministic_and_idempotent_where_expected(grammar: GrammarIR) -> None:
    once = run_pipeline(grammar, COMPILE_PIPELINE)
    assert run_pipeline(grammar, COMPILE_PIPELINE) == once
    normal = normalise_expressions(grammar)
    assert normalise_expressions(normal) == normal
    pruned = eliminate_dead_rules(grammar)
    assert eliminate_dead_rules(pruned) == pruned


TRICKY_GRAMMARS = {
    # A plain rule used both normally (ignore woven) and inside a lazy rule (no ignore).
    "shared_rule_in_lazy_body": (
        '%ignore " "\nrule start = head pair\nrule head [lazy] = [a-z]* pair\nrule pair = "(" ")"',
        {"ab() ( )": True, "() ()": True, "ab( ) ()": False, "ab()() ": True},
    ),
    # Committed-shortest: the lazy name ends at the first ">" it can end at.
    "lazy_commits": (
        'rule start = "<" name ">" rest\nrule name [lazy] = [a-z]+\nrule rest = [a-z]*',
        {"<a>b": True, "<ab>c": False, "<a>": True},
    ),
    # stop_capture and ignore around a suffix rule; the marker is part of the lexeme.
    "suffix_with_capture": (
        '%ignore " "\nrule start = field field\n'
        'rule field [suffix=("!"), stop_capture="m"] = [a-z]*',
        {"ab! c!": True, "ab !c!": False, "! !": True, "a!b!c!": False},
    ),
    # A terminal start with initial skip, and ignore after it.
    "terminal_start_initial_skip": (
        '%start N\n%options allow_initial_skip\n%ignore " "\nterm N = [0-9]+',
        {" 12 ": True, "1 2": False, "  ": False},
    ),
    # Each grammar its own ignore: "_" only inside the embed, " " only outside.
    "subgrammar_ignore_scopes": (
        '%ignore " "\nrule start = "[" @sub{1,2} "]"\n%subgrammar sub {\n'
        '  %ignore "_"\n  rule start = "a" "b"*\n}',
        {"[ a_b_ ]": True, "[a b]": False, "[a_ ab]": True, "[_a]": False},
    ),
}


@pytest.mark.parametrize("name", sorted(TRICKY_GRAMMARS))
def test_compile_pipeline_on_tricky_grammars(name: str) -> None:
    text, expectations = TRICKY_GRAMMARS[name]
    grammar = parse_grammar(text).verify()
    lowered = run_pipeline(grammar, COMPILE_PIPELINE)
    old, new = ReferenceMatcher(grammar), ReferenceMatcher(lowered)
    for sample, accepted in expectations.items():
        assert old.accepts(sample) is accepted, sample
        assert new.accepts(sample) is accepted, (sample, print_grammar(lowered))
    _assert_same_language_on_samples(grammar, lowered, count=40)


def test_inline_subgrammars_requires_woven_ignore() -> None:
    grammar = parse_grammar(
        """
        %start start
        rule start = @sub
        %subgrammar sub {
          %ignore " "
          rule start = "a" "b"
        }
        """
    )
    with pytest.raises(IRError, match="run weave_ignore first"):
        inline_subgrammars(grammar)


def test_lower_repeats_large_bound_is_linear() -> None:
    grammar = parse_grammar('rule start = item{0,300}\nrule item = "x" | "y" "z"')
    lowered = lower_repeats(grammar)
    assert len(lowered.rules) <= 2 + 300 + 1
    matcher = ReferenceMatcher(lowered)
    assert matcher.accepts("x" * 300) and not matcher.accepts("x" * 301)
    assert matcher.accepts("yz" * 150 + "x")


def test_counts_past_the_fallback_bound_are_split_by_the_blocks_variant() -> None:
    """``fuse_terminals`` fuses ``x{0,1100}`` whole; ``fuse_terminals_in_blocks`` (the
    compiler's second lowering) splits every count past BLOCKS_FALLBACK_COUNT into 32-item
    blocks, keeping the language."""
    from gramkiln.ir import Repeat, walk
    from gramkiln.passes.fuse_terminals import BLOCKS_FALLBACK_COUNT, fuse_terminals_in_blocks

    grammar = parse_grammar('%start start\nrule start = "<" ("ab" | "c"){2,1100} ">"').verify()

    def largest_terminal_count(lowered: GrammarIR) -> int:
        return max(
            max(n.min, n.max or 0)
            for rule in lowered.rules
            if rule.terminal
            for n in walk(rule.body)
            if isinstance(n, Repeat)
        )

    assert largest_terminal_count(get_pass("fuse_terminals")(grammar)) == 1100
    blocks = fuse_terminals_in_blocks(grammar).verify()
    assert largest_terminal_count(blocks) <= BLOCKS_FALLBACK_COUNT
    old, new = ReferenceMatcher(grammar), ReferenceMatcher(blocks)
    for count in (0, 1, 2, 3, 31, 32, 33, 1099, 1100, 1101):
        text = "<" + "".join(random.Random(count).choice(["ab", "c"]) for _ in range(count))
        assert old.accepts(text + ">") == new.accepts(text + ">") == (2 <= count <= 1100)


def test_the_leaves_variant_keeps_every_lexeme_boundary_of_ordinary_rules() -> None:
    """``fuse_terminal_leaves`` (the compiler's last lowering) fuses only single leaves of
    ordinary rules, where ``fuse_terminals`` fuses a terminal-only body whole; a lexeme-like
    rule is still one terminal; the language is the same."""
    from gramkiln.ir import Ref, Repeat, Seq
    from gramkiln.passes.fuse_terminals import fuse_terminal_leaves

    grammar = parse_grammar(
        '%start start\nrule start = "a" [b-c] ("d" "e")* word\nrule word [lazy] = "x" "y"'
    ).verify()
    whole = get_pass("fuse_terminals")(grammar).rule_map()["start"].body
    # The run "a" [b-c] ("d" "e")* is one terminal, then the lazy rule.
    assert isinstance(whole, Seq) and [type(item) for item in whole.items] == [Ref, Ref]
    leaves = fuse_terminal_leaves(grammar).verify()
    body = leaves.rule_map()["start"].body
    assert isinstance(body, Seq) and [type(item) for item in body.items] == [Ref, Ref, Repeat, Ref]
    assert isinstance(leaves.rule_map()["word"].body, Ref)  # lexeme-like: fused whole
    old, new = ReferenceMatcher(grammar), ReferenceMatcher(leaves)
    for text in ("abxy", "acdedexy", "abdxy", "abxyz", "ab", "adexy"):
        assert old.accepts(text) == new.accepts(text), text


@pytest.mark.parametrize(
    "low, high",
    [(0, 100), (0, 65), (1, 96), (70, 70), (5, 130), (40, None)],
)
def test_large_counts_are_split_into_blocks_exactly(
    low: int, high: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gramkiln.ir import Repeat, walk

    fuse_module = importlib.import_module("gramkiln.passes.fuse_terminals")

    # A small threshold keeps the oracle fast; the split does not depend on its value.
    threshold = 64
    monkeypatch.setattr(fuse_module, "MAX_FUSED_COUNT", threshold)
    bound = "" if high is None else high
    grammar = parse_grammar(f'%start start\nrule start = "<" ([a] | [b] "c"){{{low},{bound}}} ">"')
    lowered = run_pipeline(grammar, COMPILE_PIPELINE)
    for rule in lowered.rules:
        if rule.terminal:
            counts = [max(n.min, n.max or 0) for n in walk(rule.body) if isinstance(n, Repeat)]
            assert max(counts, default=0) <= threshold, print_grammar(lowered)
    old, new = ReferenceMatcher(grammar), ReferenceMatcher(lowered)
    edges = {0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 97, low - 1, low, low + 1}
    if high is not None:
        edges |= {high - 1, high, high + 1}
    for count in sorted(c for c in edges if c >= 0):
        text = "<" + "a" * count + ">"
        assert old.accepts(text) == new.accepts(text), count
        mixed = "<" + "".join(random.Random(count).choice(["a", "bc"]) for _ in range(count))
        assert (
            old.accepts(mixed + ">")
            == new.accepts(mixed + ">")
            == (low <= count and (high is None or count <= high))
        )
        assert new.is_prefix(mixed) == (high is None or count <= high)


@pytest.mark.parametrize(
    "low, high",
    [(0, 40), (0, 31), (0, 32), (3, 50), (20, 20), (37, None), (9, 200), (6, 7)],
)
def test_counts_past_the_linear_limit_lower_to_blocks_exactly(
    low: int, high: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    lowering = importlib.import_module("gramkiln.passes.lower_repeats")
    # A small limit keeps the oracle fast; the block construction does not depend on it.
    monkeypatch.setattr(lowering, "LINEAR_COUNT_LIMIT", 4)
    bound = "" if high is None else high
    grammar = parse_grammar(
        f'%start start\nrule start = "<" item{{{low},{bound}}} ">"\nrule item = "a" | "b" "c"'
    )
    lowered = lower_repeats(grammar).verify()
    assert any(rule.name.startswith("__blk_") for rule in lowered.rules), print_grammar(lowered)
    matcher = ReferenceMatcher(lowered)
    edges = {0, 1, 2, 4, 5, 15, 16, 17, 31, 32, 33, low - 1, low, low + 1}
    if high is not None:
        edges |= {high - 1, high, high + 1}
    for count in sorted(c for c in edges if c >= 0):
        inside = low <= count and (high is None or count <= high)
        mixed = "".join(random.Random(count).choice(["a", "bc"]) for _ in range(count))
        assert matcher.accepts("<" + mixed + ">") == inside, count
        assert matcher.accepts("<" + "a" * count + ">") == inside, count
        assert matcher.is_prefix("<" + mixed) == (high is None or count <= high), count


def test_billion_counts_lower_to_a_few_dozen_rules() -> None:
    grammar = parse_grammar(
        'rule start = item{1000000000,} "," item{0,999999999} "," item{12345678}\n'
        'rule item = "a" | "b" "c"'
    )
    lowered = lower_repeats(grammar).verify()
    assert len(lowered.rules) < 200, len(lowered.rules)
    matcher = ReferenceMatcher(lowered)
    assert matcher.is_prefix("a" * 50 + "bc")
    assert not matcher.is_prefix("a" * 50 + ",")


# ---------------------------------------------------------------------------------------------
# the framework


def test_registry_holds_every_pass_with_a_docstring() -> None:
    expected = {
        "normalise_expressions",
        "eliminate_dead_rules",
        "weave_ignore",
        "inline_subgrammars",
        "lower_suffix_stop",
        "fuse_terminals",
        "lower_repeats",
    }
    assert expected <= set(PASSES)
    for name, registered in PASSES.items():
        assert registered.name == name
        assert "Preserves" in registered.description, name
    with pytest.raises(KeyError, match="unknown pass 'nope'"):
        get_pass("nope")


def test_pipelines_are_tuples_of_registered_passes() -> None:
    for pipeline in (FRONTEND_PIPELINE, COMPILE_PIPELINE):
        assert isinstance(pipeline, tuple)
        assert all(isinstance(step, Pass) and PASSES[step.name] is step for step in pipeline)
    names = [step.name for step in COMPILE_PIPELINE]
    assert names.index("weave_ignore") < names.index("inline_subgrammars")
    assert names.index("weave_ignore") < names.index("fuse_terminals")
    assert names.index("lower_suffix_stop") < names.index("weave_ignore")


SIMPLE = parse_grammar('%ignore " "\nrule start = "a" "b"*\nrule dead = "d"')


def test_run_pipeline_prints_after_named_pass() -> None:
    out = io.StringIO()
    result = run_pipeline(
        SIMPLE, ("normalise_expressions", weave_ignore), print_after="weave_ignore", out=out
    )
    text = out.getvalue()
    assert text.startswith("# after weave_ignore (step 2)\n")
    assert text.split("\n", 1)[1] == print_grammar(result)


def test_run_pipeline_prints_after_several_passes_to_stderr(capsys: pytest.CaptureFixture) -> None:
    run_pipeline(SIMPLE, COMPILE_PIPELINE, print_after={"weave_ignore", "eliminate_dead_rules"})
    err = capsys.readouterr().err
    assert "# after weave_ignore (step 3)" in err
    assert "# after eliminate_dead_rules (step 9)" in err
    assert "rule dead" not in err.split("# after eliminate_dead_rules")[1]


def test_run_pipeline_rejects_unknown_print_after() -> None:
    with pytest.raises(KeyError, match="lower_repeats"):
        run_pipeline(SIMPLE, FRONTEND_PIPELINE, print_after="lower_repeats")


def test_run_pipeline_names_the_pass_that_broke_an_invariant() -> None:
    def drop_all_rules(grammar: GrammarIR) -> GrammarIR:
        """Breaks the IR on purpose. Preserves: nothing."""
        return grammar.with_rules(())

    with pytest.raises(IRError, match=r"after pass drop_all_rules \(step 2\)"):
        run_pipeline(SIMPLE, (normalise_expressions, drop_all_rules))
    # Without verification the broken IR comes back unchecked.
    assert run_pipeline(SIMPLE, (drop_all_rules,), verify=False).rules == ()


def test_run_pipeline_checks_its_input() -> None:
    broken = GrammarIR(rules=SIMPLE.rules, start="missing")
    with pytest.raises(IRError, match="in the pipeline input"):
        run_pipeline(broken, FRONTEND_PIPELINE)


def test_passes_are_pure() -> None:
    before = print_grammar(SIMPLE)
    for step in COMPILE_PIPELINE:
        step(SIMPLE)
    assert print_grammar(SIMPLE) == before
