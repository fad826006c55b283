"""Rule options the runtime enforces per occurrence: max_tokens, max_chars, temperature
(seed 000: "Token Budgets", "Character Budgets", "Sampling Temperature").

Masks are checked against accepting each token on a fork (brute force), and acceptance
against small models of the documented semantics written here from the seed's sentences.
"""

from __future__ import annotations

import itertools
import logging
import random
import re

import pytest
from gramkiln.runtime.compiled import CompiledGrammar, allocate_token_bitmask, bitmask_to_ids

from gramkiln import CompileError, Grammar, Vocab


def allowed(compiled, matcher) -> set[int]:
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return set(bitmask_to_ids(bitmask[0], compiled.vocab_size))


def brute_force(compiled, matcher) -> set[int]:
    ids = set()
    for token_id in range(compiled.vocab_size):
        probe = matcher.fork()
        if probe.accept_token(token_id):
            ids.add(token_id)
    return ids


def texts(vocab: Vocab, ids) -> list[bytes]:
    return sorted(vocab.tokens[i] for i in ids)


# -- max_tokens ------------------------------------------------------------------------------
TAG_VOCAB = Vocab([b"<", b">", b"a", b"b", b"ab", b"aaa", b"a>", b">x", b"x", b"ba>"])


def test_spent_token_budget_forces_the_rule_to_end() -> None:
    compiled = Grammar.from_lark('start: "<" r ">" "x"\nr[max_tokens=2]: /[ab]*/').compile(
        TAG_VOCAB
    )
    matcher = compiled.matcher()
    ids = {text: i for i, text in enumerate(TAG_VOCAB.tokens)}
    assert matcher.accept_token(ids[b"<"])
    assert texts(TAG_VOCAB, allowed(compiled, matcher)) == sorted(
        [b">", b"a", b"b", b"ab", b"aaa", b"a>", b">x", b"ba>"]
    )
    assert matcher.accept_token(ids[b"a"])
    assert matcher.accept_token(ids[b"b"])
    # Two tokens went into r and r can end here: only tokens that leave it.
    assert texts(TAG_VOCAB, allowed(compiled, matcher)) == [b">", b">x"]
    assert not matcher.accept_token(ids[b"a"])
    assert not matcher.accept_token(ids[b"ba>"])
    assert matcher.accept_token(ids[b">x"])
    assert matcher.is_accepting()


def test_a_token_that_ends_the_rule_counts_as_its_last() -> None:
    compiled = Grammar.from_lark('start: "<" r ">" "x"\nr[max_tokens=1]: /[ab]*/').compile(
        TAG_VOCAB
    )
    matcher = compiled.matcher()
    ids = {text: i for i, text in enumerate(TAG_VOCAB.tokens)}
    assert matcher.accept_token(ids[b"<"])
    assert matcher.accept_token(ids[b"ba>"])  # one token into r, which ends inside it
    assert texts(TAG_VOCAB, allowed(compiled, matcher)) == [b"x"]


def test_budget_is_relaxed_where_the_body_cannot_end() -> None:
    # r needs an even number of characters: after "aaa" (one token) it cannot end.
    compiled = Grammar.from_lark('start: "<" r ">"\nr[max_tokens=1]: /(aa)+/').compile(TAG_VOCAB)
    matcher = compiled.matcher()
    ids = {text: i for i, text in enumerate(TAG_VOCAB.tokens)}
    assert matcher.accept_token(ids[b"<"])
    assert matcher.accept_token(ids[b"aaa"])
    assert texts(TAG_VOCAB, allowed(compiled, matcher)) == [b"a", b"a>", b"aaa"]
    assert matcher.accept_token(ids[b"a"])  # past the budget: allowed, then forced to end
    assert texts(TAG_VOCAB, allowed(compiled, matcher)) == [b">"]


def test_overrun_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    compiled = Grammar.from_lark('start: "<" r ">"\nr[max_tokens=1]: /(aa)+/').compile(TAG_VOCAB)
    matcher = compiled.matcher()
    ids = {text: i for i, text in enumerate(TAG_VOCAB.tokens)}
    with caplog.at_level(logging.WARNING, logger="gramkiln"):
        assert matcher.accept_tokens([ids[b"<"], ids[b"aaa"], ids[b"a"]])  # past the budget
        assert not matcher.accept_token(ids[b"a"])  # "aaaa" can end: it must end here
        matcher.rollback(1)
        assert matcher.accept_token(ids[b"aaa"])  # past the budget again: not logged again
    messages = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert len(messages) == 1


def test_each_occurrence_gets_its_own_budget() -> None:
    grammar = Grammar.from_lark('start: (r ",")* r\nr[max_tokens=2]: /[ab]*/')
    vocab = Vocab([b"a", b"b", b",", b"ab", b"b,"])
    compiled = grammar.compile(vocab)
    matcher = compiled.matcher()
    assert matcher.accept_tokens([0, 1])  # "ab": two tokens in the first r
    assert texts(vocab, allowed(compiled, matcher)) == [b","]
    assert matcher.accept_token(2)
    assert matcher.accept_tokens([3, 0])  # "aba" in the second r
    assert texts(vocab, allowed(compiled, matcher)) == [b","]


def test_accept_string_does_not_count_tokens() -> None:
    compiled = Grammar.from_lark('start: "<" r ">"\nr[max_tokens=1]: /[ab]*/').compile(TAG_VOCAB)
    matcher = compiled.matcher()
    assert matcher.accept_string("<abab")
    # No token went into r yet: one more may.
    assert b"ab" in texts(TAG_VOCAB, allowed(compiled, matcher))


def test_seed_reasoning_budget_with_special_tokens() -> None:
    vocab = Vocab(
        [b"<think>", b"</think>", b"hm", b" ", b"ok", b"1", b"2", b"12", b"</", b"think>"],
        special_ids=[0, 1],
    )
    source = (
        "start: <think> reasoning </think> answer\n"
        "reasoning[max_tokens=3]: TEXT\n"
        "answer: /[0-9]+/\n"
        "TEXT: /(\\n|.)*/\n"
    )
    compiled = Grammar.from_lark(source).compile(vocab)
    matcher = compiled.matcher()
    assert matcher.accept_tokens([0, 2, 3, 4])  # three tokens of reasoning
    assert allowed(compiled, matcher) == {1}  # only </think> leaves it
    assert matcher.accept_token(1)
    assert matcher.accept_token(7)
    assert matcher.is_accepting()


# -- max_chars --------------------------------------------------------------------------------
def budget_model(pattern: str, budget: int, body: str) -> bool:
    """The seed's character budget on one occurrence: the body must be in the language, and
    it ends at the first codepoint boundary at or past the budget where it can."""
    if re.fullmatch(pattern, body) is None:
        return False
    return not any(re.fullmatch(pattern, body[:k]) for k in range(budget, len(body)))


@pytest.mark.parametrize(
    ("pattern", "budget"),
    [
        ("[a-zé]*", 0),
        ("[a-zé]*", 3),
        ("[a-zé]+", 0),
        ("(ab|é)*", 3),
        ("a(b|é)*c?", 2),
        ("(aé)+", 3),
    ],
)
def test_char_budget_acceptance_matches_the_model(pattern: str, budget: int) -> None:
    source = f'start: "<" r ">"\nr[max_chars={budget}]: /{pattern}/'
    compiled = Grammar.from_lark(source).compile(Vocab.byte_level())
    for length in range(6):
        for chars in itertools.product("abcé", repeat=length):
            body = "".join(chars)
            matcher = compiled.matcher()
            ok = matcher.accept_string(f"<{body}>")
            assert ok == budget_model(pattern, budget, body), (body, ok)


def lazy_marker_model(body: str, marker: str, budget: int, text: str) -> bool:
    """The seed's suffix rule with a character budget: it ends at the first occurrence of
    its marker, or, once the budget is spent, wherever its body can end (without the
    marker), whichever comes first; the budget is relaxed until one of them."""
    whole = f"(?:{body})(?:{marker})"

    def ends(k: int) -> bool:
        with_marker = re.fullmatch(whole, text[:k]) is not None and not any(
            re.fullmatch(whole, text[:j]) for j in range(k)
        )
        return with_marker or (k >= budget and re.fullmatch(body, text[:k]) is not None)

    return ends(len(text)) and not any(ends(k) for k in range(budget, len(text)))


@pytest.mark.parametrize(
    ("body", "marker", "budget"),
    [("[a-z]*", "END", 3), ("[a-z]*", "!!+", 2), ("(ab)*", "E", 1), ("[a-z]+", "N", 2)],
)
def test_char_budget_on_a_suffix_rule_ends_it_without_its_marker(
    body: str, marker: str, budget: int
) -> None:
    source = f'start: field "x"\nfield[suffix=/{marker}/, max_chars={budget}]: /{body}/'
    compiled = Grammar.from_lark(source).compile(Vocab.byte_level())
    for length in range(6):
        for chars in itertools.product("abEND!", repeat=length):
            text = "".join(chars)
            matcher = compiled.matcher()
            accepted = matcher.accept_string(text + "x") and matcher.is_accepting()
            assert accepted == lazy_marker_model(body, marker, budget, text), text


def test_grammar_membership_honours_char_budgets() -> None:
    grammar = Grammar.from_lark('start: "<" r ">"\nr[max_chars=2]: /[a-zé]*/')
    for body in ("", "a", "ab", "abc", "é", "éé", "ééé"):
        expected = budget_model("[a-zé]*", 2, body)
        assert grammar.accepts(f"<{body}>") == expected
        assert grammar.is_prefix(f"<{body}") == (len(body) <= 2)


def test_token_budget_on_a_suffix_rule_ends_it_without_its_marker() -> None:
    tokens = [b"a", b"b", b"ab", b"E", b"N", b"D", b"END", b"!", b"b!", b"END!"]
    vocab = Vocab(tokens)
    grammar = Grammar.from_lark('start: field "!"\nfield[suffix="END", max_tokens=2]: /[a-z]*/')
    compiled = grammar.compile(vocab)
    ids = {text: i for i, text in enumerate(tokens)}
    matcher = compiled.matcher()
    assert matcher.accept_tokens([ids[b"a"], ids[b"b"]])
    # Two tokens, and "ab" is a whole body: the rule ended there, without "END".
    assert texts(vocab, allowed(compiled, matcher)) == [b"!"]
    relaxed = compiled.matcher()
    assert relaxed.accept_tokens([ids[b"a"], ids[b"E"]])  # "aE": neither body nor marker
    assert texts(vocab, allowed(compiled, relaxed)) == [b"N"]
    assert relaxed.accept_tokens([ids[b"N"], ids[b"D"]])
    assert texts(vocab, allowed(compiled, relaxed)) == [b"!"]


@pytest.mark.parametrize("seed", range(4))
def test_budgeted_suffix_rule_masks_equal_brute_force(seed: int) -> None:
    rng = random.Random(200 + seed)
    vocab = random_vocab(rng, "abEN!", 40, 3)
    budget = rng.randint(1, 3)
    chars = rng.choice(["", f", max_chars={rng.randint(2, 6)}"])
    source = (
        f'start: (field ",")* field "!"\nfield[suffix="EN", max_tokens={budget}{chars}]: /[ab]*/'
    )
    vocab = Vocab(sorted(set(vocab.tokens) | {b","}))
    decode_against_brute_force(Grammar.from_lark(source).compile(vocab), rng, steps=12)


def test_char_budget_counts_codepoints_split_across_tokens() -> None:
    e_acute = "é".encode()
    vocab = Vocab([b"<", b">", b"a", e_acute[:1], e_acute[1:], e_acute, b"aa", b"a" + e_acute[:1]])
    compiled = Grammar.from_lark('start: "<" r ">"\nr[max_chars=2]: /[aé]*/').compile(vocab)
    matcher = compiled.matcher()
    assert matcher.accept_tokens([0, 7, 4])  # "<", "a" + first byte of é, its last byte
    assert texts(vocab, allowed(compiled, matcher)) == [b">"]


def random_vocab(rng: random.Random, alphabet: str, size: int, longest: int) -> Vocab:
    pieces = {ch.encode() for ch in alphabet} | {b"<", b">"}
    while len(pieces) < size:
        length = rng.randint(2, longest)
        pieces.add("".join(rng.choice(alphabet) for _ in range(length)).encode())
    return Vocab(sorted(pieces))


def decode_against_brute_force(compiled, rng: random.Random, steps: int) -> None:
    """Four random decodes, each mask compared with accepting every token on a fork."""
    for _ in range(4):
        matcher = compiled.matcher()
        for _step in range(steps):
            mask = allowed(compiled, matcher)
            assert mask == brute_force(compiled, matcher)
            if not mask:
                break
            assert matcher.accept_token(rng.choice(sorted(mask)))


@pytest.mark.parametrize("seed", range(6))
def test_char_budget_masks_equal_brute_force_past_the_window(seed: int) -> None:
    # Tokens of up to 3 characters and budgets past that: threads start far from the budget
    # and move into its near copy on the way.
    rng = random.Random(seed)
    vocab = random_vocab(rng, "abé>", 40, 3)
    pattern = rng.choice(["[abé]*", "(ab|é)*", "a[bé]*", "(aé|b)+"])
    budget = rng.randint(4, 9)
    source = f'start: ("<" r ">")+\nr[max_chars={budget}]: /{pattern}/'
    decode_against_brute_force(Grammar.from_lark(source).compile(vocab), rng, steps=14)


@pytest.mark.parametrize("seed", range(6))
def test_token_budget_masks_equal_brute_force(seed: int) -> None:
    rng = random.Random(100 + seed)
    vocab = random_vocab(rng, "ab>,", 30, 3)
    pattern = rng.choice(["[ab]*", "(ab)+", "a[ab]*", "(aab|b)+"])
    budget = rng.randint(1, 4)
    source = f'start: "<" (r ",")* r ">"\nr[max_tokens={budget}]: /{pattern}/'
    decode_against_brute_force(Grammar.from_lark(source).compile(vocab), rng, steps=12)


def test_rollback_and_fork_restore_the_counts() -> None:
    rng = random.Random(7)
    vocab = random_vocab(rng, "abé>", 40, 3)
    source = 'start: ("<" r ">")+\nr[max_chars=5, max_tokens=3]: /[abé]*/'
    compiled = Grammar.from_lark(source).compile(vocab)
    matcher = compiled.matcher()
    taken: list[int] = []
    for _ in range(20):
        mask = sorted(allowed(compiled, matcher))
        if not mask:
            break
        token = rng.choice(mask)
        assert matcher.accept_token(token)
        taken.append(token)
    for back in range(1, len(taken)):
        replay = compiled.matcher()
        assert replay.accept_tokens(taken[:-back])
        rolled = matcher.fork()
        rolled.rollback(back)
        assert allowed(compiled, rolled) == allowed(compiled, replay)


def test_zero_char_budget_closes_the_rule_where_it_can_end() -> None:
    compiled = Grammar.from_lark('start: "<" r ">"\nr[max_chars=0]: /a*/').compile(
        Vocab.byte_level()
    )
    assert compiled.matcher().accept_string("<>")
    assert not compiled.matcher().accept_string("<a>")


def test_limits_survive_the_artifact() -> None:
    compiled = Grammar.from_lark('start: "<" r ">"\nr[max_chars=2, temperature=0.5]: /a*/').compile(
        Vocab.byte_level()
    )
    loaded = CompiledGrammar.load(compiled.to_bytes())
    matcher = loaded.matcher()
    assert matcher.accept_string("<a")
    assert matcher.temperature == 0.5
    assert matcher.accept_string("a")
    assert not matcher.fork().accept_string("a")
    assert matcher.temperature is None  # r has ended: only ">" may follow


def test_nonregular_or_nested_limits_are_refused_with_the_rule_named() -> None:
    with pytest.raises(
        CompileError, match="rule r .*max_tokens needs a body that compiles to one terminal"
    ):
        Grammar.from_lark('start: r\nr[max_tokens=3]: "(" r ")" | "x"').compile(Vocab.byte_level())
    with pytest.raises(CompileError, match="nested limits are not supported"):
        Grammar.from_lark('start: r\nr[max_chars=3]: "a" s\ns[max_chars=1]: "b"').compile(
            Vocab.byte_level()
        )


def test_limits_inline_ordinary_rules_and_keep_ignore() -> None:
    grammar = Grammar.from_lark(
        'start: "<" r ">"\nr[max_chars=5]: word word\nword: /[a-z]+/\n%ignore " "'
    )
    compiled = grammar.compile(Vocab.byte_level())
    assert compiled.matcher().accept_string("<ab cd>")
    assert not compiled.matcher().accept_string("<abc def>")


def test_max_chars_on_dispatch_rules_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = (
        "start: tool* tail\n"
        "tail[max_chars=5]: TEXT\n"
        'tool_head[lazy]: TEXT "<tool_call>"\n'
        'tool: tool_head arg "</tool_call>"\n'
        "arg: /[0-9]+/\n"
        "TEXT: /(\\n|.)*/\n"
    )
    with caplog.at_level(logging.WARNING, logger="gramkiln"):
        compiled = Grammar.from_lark(source).compile(Vocab.byte_level())
    assert any("max_chars on rule 'tail' is ignored" in r.getMessage() for r in caplog.records)
    assert compiled.matcher().accept_string("long free text<tool_call>42</tool_call>more text")


def test_ebnf_rule_options_are_enforced_too() -> None:
    grammar = Grammar.from_ebnf('root ::= "<" r ">"\nr[max_tokens=2, capture] ::= [a-z]*')
    compiled = grammar.compile(Vocab([b"<", b">", b"a", b"b", b"ab"]))
    matcher = compiled.matcher()
    assert matcher.accept_tokens([0, 2, 3])
    assert not matcher.accept_token(2)  # two tokens went into r, which can end here
    assert matcher.accept_token(1)
    assert matcher.get_captures() == [("r", b"ab")]


# -- temperature ------------------------------------------------------------------------------
def test_seed_temperature_example() -> None:
    grammar = Grammar.from_lark('start: "answer:" value\nvalue[temperature=0.7]: /[a-z]+/')
    compiled = grammar.compile(Vocab.byte_level())
    matcher = compiled.matcher(default_temperature=0.2)
    assert matcher.temperature == 0.2
    assert matcher.accept_string("answer:")
    assert matcher.temperature == 0.7
    assert matcher.accept_string("abc")
    assert matcher.temperature == 0.7
    assert compiled.matcher().temperature is None


def test_ambiguous_temperatures_take_the_largest_and_warn_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grammar = Grammar.from_lark(
        "start: hot | cold\nhot[temperature=0.9]: /[a-z]+!/\ncold[temperature=0.1]: /[a-z]+\\?/"
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    with caplog.at_level(logging.WARNING, logger="gramkiln"):
        assert matcher.temperature == 0.9
        assert matcher.temperature == 0.9
        assert matcher.accept_string("ab?")
    assert len([r for r in caplog.records if "temperature" in r.getMessage()]) == 1


def test_temperature_on_a_json_subgrammar_body() -> None:
    grammar = Grammar.from_lark(
        'start: "answer:" value " ok"\n'
        'value[temperature=0.5]: %json {"type": "object", "properties": '
        '{"a": {"type": "integer"}}, "required": ["a"]}\n'
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher(default_temperature=0.1)
    assert matcher.temperature == 0.1
    for text in ("answer:", '{"a"', ": 1"):
        assert matcher.accept_string(text)
        assert matcher.temperature == 0.5
    assert matcher.accept_string("}")
    assert matcher.temperature == 0.1  # only " ok" may follow
    assert matcher.accept_string(" ok")
    assert matcher.is_accepting()


def test_temperature_scope_copies_shared_rules_and_inner_overrides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `word` is used inside and outside the scope: only the inside copy is warm.
    grammar = Grammar.from_lark(
        'start: word ":" hot\n'
        'hot[temperature=0.8]: "[" word ("," word)* "]" | cold\n'
        "cold[temperature=0.2]: /[0-9]+/\n"
        "word: /[a-z]+/\n"
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.temperature is None
    assert matcher.accept_string("ab:")
    with caplog.at_level(logging.WARNING, logger="gramkiln"):
        assert matcher.temperature == 0.8  # "[" (0.8) or a number of cold (0.2)
    assert matcher.accept_string("[x")
    assert matcher.temperature == 0.8
    fresh = grammar.compile(Vocab.byte_level()).matcher()
    assert fresh.accept_string("ab:1")
    assert fresh.temperature == 0.2


def test_temperature_around_a_rule_with_its_own_temperature() -> None:
    grammar = Grammar.from_lark(
        'start: outer\nouter[temperature=0.5]: "a" inner "b"\ninner[temperature=0.9]: /[0-9]+/'
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.temperature == 0.5
    assert matcher.accept_string("a")
    assert matcher.temperature == 0.9
    assert matcher.accept_string("1")
    assert matcher.temperature == 0.9  # more digits (0.9) or "b" (0.5): the largest
    assert matcher.accept_string("b")
    assert matcher.is_accepting()


def test_default_temperature_is_validated() -> None:
    compiled = Grammar.from_lark('start: "a"').compile(Vocab.byte_level())
    with pytest.raises(ValueError, match="default_temperature"):
        compiled.matcher(default_temperature=-1.0)
    assert compiled.matcher(default_temperature=0.3).default_temperature == 0.3


def test_batch_fill_temperature_writes_minus_one_where_none_applies() -> None:
    import numpy as np

    from gramkiln import batch_fill_temperature

    grammar = Grammar.from_lark('start: "answer:" value\nvalue[temperature=0.7]: /[a-z]+/')
    compiled = grammar.compile(Vocab.byte_level())
    inside, outside, defaulted = compiled.matcher(), compiled.matcher(), compiled.matcher(0.2)
    assert inside.accept_string("answer:")
    out = np.zeros(3, dtype=np.float32)
    batch_fill_temperature([inside, outside, defaulted], out)
    assert out.tolist() == pytest.approx([0.7, -1.0, 0.2])
    with pytest.raises(ValueError, match="one-dimensional with 3 entries"):
        batch_fill_temperature([inside, outside, defaulted], np.zeros(2, dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        batch_fill_temperature([inside], np.zeros(1))


def test_batch_fill_temperature_takes_a_cpu_torch_tensor() -> None:
    torch = pytest.importorskip("torch")
    from gramkiln import batch_fill_temperature

    grammar = Grammar.from_lark('start: "answer:" value\nvalue[temperature=0.7]: /[a-z]+/')
    compiled = grammar.compile(Vocab.byte_level())
    inside = compiled.matcher()
    assert inside.accept_string("answer:")
    tensor = torch.zeros(2, dtype=torch.float32)
    batch_fill_temperature([inside, compiled.matcher()], tensor)
    assert tensor.tolist() == pytest.approx([0.7, -1.0])
