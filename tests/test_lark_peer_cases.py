"""Behaviour the peer engines' own Lark tests expect, in this project's words and examples.

Each test pins down one point where gramkiln used to disagree with XGrammar (the reference
dialect, seed ``shared/seeds/000_393662a2e08c0778.txt``) and now agrees. Membership goes
through the reference matcher; where the compiled runtime could differ (embedded JSON), the
byte-level runtime is checked too.
"""

from __future__ import annotations

import itertools
import re

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.frontend.lark_dispatch import FREE_TEXT_NAME, _trigger_languages
from gramkiln.ir import GrammarIR, Ref, Rule
from gramkiln.runtime.vocab import Vocab

from gramkiln import Grammar
from gramkiln.errors import GrammarError


def check(source: str, accepted=(), rejected=(), runtime: bool = False) -> Grammar:
    """Membership of each string by the reference matcher (and the runtime when asked)."""
    grammar = Grammar.from_lark(source)
    compiled = grammar.compile(Vocab.byte_level()) if runtime else None
    for text, expected in [(t, True) for t in accepted] + [(t, False) for t in rejected]:
        assert grammar.accepts(text) == expected, f"reference: {text!r} should be {expected}"
        if compiled is not None:
            matcher = compiled.matcher()
            got = matcher.accept_string(text) and matcher.is_accepting()
            assert got == expected, f"runtime: {text!r} should be {expected}"
    return grammar


def error_text(source: str) -> str:
    with pytest.raises(GrammarError) as caught:
        parse_lark(source)
    text = str(caught.value)
    assert re.match(r"Lark error at line \d+, column \d+: ", text), text
    return text


# -- %json takes JSON whitespace inside the value, none around it -------------------------------


def test_embedded_json_accepts_compact_and_spaced_separators() -> None:
    check(
        'start: "point=" %json {"type": "object", "properties": {"x": {"type": "integer"}, '
        '"y": {"type": "array", "items": {"type": "integer"}}}, "required": ["x"], '
        '"additionalProperties": false}',
        accepted=[
            'point={"x":3}',
            'point={"x": 3}',
            'point={ "x" : 3 , "y" : [ 1 ,2 ] }',
            'point={"y":[],"x":-4}',
            'point={\n  "x": 5\n}',
        ],
        rejected=['point= {"x":3}', 'point={"x":3} ', 'point={"x" 3}', 'point={"x":3,}'],
        runtime=True,
    )


def test_embedded_json_outer_whitespace_comes_from_the_lark_grammar() -> None:
    check(
        '%import common.WS\n%ignore WS\nstart: "[" %json {"type": "boolean"} "]"',
        accepted=["[true]", "[ true ]", "[\nfalse\n]"],
        rejected=["[ tru e ]", " [true]"],
        runtime=True,
    )


@pytest.mark.filterwarnings("ignore::gramkiln.EmptyLanguageWarning")  # unsatisfiable on purpose
def test_embedded_json_schema_false_matches_nothing() -> None:
    check('start: "v=" %json false | "none"', accepted=["none"], rejected=["v=", "v=1", "v={}"])


# -- %grammar_options -----------------------------------------------------------------------------


def test_llguidance_options_spelled_at_their_default_are_accepted() -> None:
    check(
        '%grammar_options {"no_forcing": false, "allow_invalid_utf8": false}\nstart: "ok"',
        accepted=["ok"],
        rejected=["", "o"],
    )


@pytest.mark.parametrize("option", ["no_forcing", "allow_invalid_utf8"])
def test_llguidance_options_set_to_true_are_rejected_by_name(option: str) -> None:
    text = error_text(f'%grammar_options {{"{option}": true}}\nstart: "ok"')
    assert f"grammar option '{option}' is not supported" in text
    text = error_text(f'%grammar_options {{"{option}": "no"}}\nstart: "ok"')
    assert f"grammar option '{option}' must be true or false" in text


# -- located errors -------------------------------------------------------------------------------


def test_missing_start_rule_is_located() -> None:
    assert error_text('\nvalue: "v"\n') == (
        "Lark error at line 1, column 1: grammar has no 'start' rule\n\n^"
    )


@pytest.mark.parametrize(
    "source",
    ['start: "z"{1000001}', 'start: "z"{2,99999999999999999999}', 'start: "z"~5..1000001'],
)
def test_huge_repetition_counts_are_a_located_error(source: str) -> None:
    text = error_text(source)
    assert "exceeds the limit of 1,000,000" in text
    assert text.splitlines()[1] == source


def test_repetition_count_at_the_limit_parses() -> None:
    parse_lark('start: "z"{0,1000000}')


# -- dynamic dispatch: the first complete trigger commits to a tool ------------------------------

SINGLE_TRIGGER = r"""
start: call* tail
tail: TEXT
call_head[lazy]: TEXT "<<run>"
call: call_head %json {"type": "array", "items": {"type": "integer"}} "<</run>"
TEXT: /(\n|.)*/
"""


def test_dispatch_free_text_cannot_contain_the_trigger() -> None:
    check(
        SINGLE_TRIGGER,
        accepted=[
            "",
            "just words",
            "a <<ru prefix of the trigger at the end <<ru",
            "<<run>[1,2]<</run>",
            "x<<run>[]<</run>y<<run>[3]<</run>z",
            "multi\nline<<run>[ 4 ]<</run>",
            "<<<run>[5]<</run>",
        ],
        rejected=[
            "<<run>",
            "words <<run> and more words",
            "<<run>[1,2]",
            "<<run>[1]<</run>tail <<run>",
            "<<run>[true]<</run>",
        ],
        runtime=True,
    )


def test_dispatch_one_tools_text_cannot_swallow_another_tools_trigger() -> None:
    check(
        r"""
start: (ask | say)* tail
tail: FREE
ask_head[lazy]: FREE "[ask]"
ask: ask_head /[a-z]+/ "[/ask]"
say_head[suffix="[say]"]: FREE
say: say_head /[0-9]+/ "[/say]"
FREE: TEXT
TEXT: /.*/s
""",
        accepted=["[ask]who[/ask]", "hi[say]42[/say]bye", "[say]1[/say][ask]x[/ask]"],
        rejected=[
            # the say trigger comes first, so its payload (digits) is due, not free text
            "[say]oops[ask]x[/ask]",
            "[ask]7[/ask]",
            "[say]x[/say]",
        ],
        runtime=True,
    )


def test_dispatch_shared_trigger_differs_on_what_follows() -> None:
    check(
        r"""
start: (get | put)* tail
tail: TEXT
get_head[lazy]: TEXT "@@"
get: get_head "get " /[a-z]+/ ";"
put_head[lazy]: TEXT "@@"
put: put_head "put " /[0-9]+/ ";"
TEXT: /(\n|.)*/
""",
        accepted=["@@get abc;", "x@@put 12;y@@get q;", "one @ is text"],
        rejected=["@@", "@@del x;", "@@get 12;", "a@@put", "@@put 1;@@"],
        runtime=True,
    )


def test_dispatch_regex_suffix_head_with_escaped_trigger() -> None:
    check(
        r"""
start: fix* tail
tail: TEXT
fix_head[lazy]: /(\n|.)*\n=====/
fix: fix_head "ok"
TEXT: /(\n|.)*/
""",
        accepted=["text ===== text", "before\n=====okafter", "\n====="[:-1]],
        rejected=["\n=====", "a\n=====no", "a\n=====ok\n====="],
        runtime=True,
    )


def test_overlapping_triggers_follow_the_earliest_complete_one() -> None:
    # 'ab' completes inside 'xab>' before '>' arrives, so the 'ab' tool is dispatched.
    check(
        r"""
start: (one | two)* tail
tail: TEXT
one_head[lazy]: TEXT "ab"
one: one_head "1"
two_head[lazy]: TEXT "xab>"
two: two_head "2"
TEXT: /(\n|.)*/
""",
        accepted=["ab1", "xab1>", "zz", "xa", "xab1xab1"],
        rejected=["xab>2", "ab", "xab>", "ab2"],
        runtime=True,
    )


def test_token_trigger_dispatch_is_unchanged_and_text_free() -> None:
    vocab = Vocab([b"hi", b"<|go|>", b"7", b"</go>", b"<|end|>"], special_ids=[1, 4])
    grammar = Grammar.from_lark(
        'start: go* tail\ntail: TEXT\ngo: TEXT <|go|> /[0-9]+/ "</go>"\nTEXT: /(\\n|.)*/',
        vocab=vocab,
    )
    compiled = grammar.compile(vocab)
    for tokens, expected in [([0], True), ([0, 1, 2, 3, 0], True), ([1], False), ([1, 0], False)]:
        matcher = compiled.matcher()
        got = all(matcher.accept_token(t) for t in tokens) and matcher.is_accepting()
        assert got == expected, tokens


def test_grammar_outside_the_dispatch_shape_keeps_cfg_semantics() -> None:
    # The tail is used a second time, so the rewrite would change another use: not dispatch.
    check(
        r"""
start: call* tail
tail: TEXT
call_head[lazy]: TEXT "<c>"
call: call_head "x" tail "</c>"
TEXT: /(\n|.)*/
""",
        accepted=["<c>", "a<c>b"],
    )


# -- standalone lazy head: the trigger is optional at the end -------------------------------------


def test_standalone_lazy_head_accepts_text_without_the_trigger() -> None:
    for head in ['head[lazy]: TEXT "#end"', 'head[suffix="#end"]: TEXT', 'head[stop="#end"]: TEXT']:
        check(
            f"start: head\n{head}\nTEXT: /(\\n|.)*/",
            accepted=["", "no marker here", "#en", "done#end", "#end"],
            rejected=["#endx", "a#end#end", "a#endb"],
            runtime=True,
        )


def test_standalone_lazy_head_with_a_token_trigger() -> None:
    vocab = Vocab([b"ab", b"<|stop|>"], special_ids=[1])
    grammar = Grammar.from_lark(
        "start: head\nhead[lazy]: TEXT <|stop|>\nTEXT: /(\\n|.)*/", vocab=vocab
    )
    compiled = grammar.compile(vocab)
    for tokens, expected in [([], True), ([0, 0], True), ([0, 1], True), ([1, 0], False)]:
        matcher = compiled.matcher()
        got = all(matcher.accept_token(t) for t in tokens) and matcher.is_accepting()
        assert got == expected, tokens


def test_lazy_head_inside_a_sequence_stays_committed_shortest() -> None:
    check(
        'start: head "!"\nhead[lazy]: TEXT "#end"\nTEXT: /(\\n|.)*/',
        accepted=["a#end!"],
        rejected=["a!", "a#end#end!"],
    )


# -- dispatch restrictions from the seed -----------------------------------------------------------

DISPATCH_WITH = """start: tool* tail
tail: TEXT
tool_head[lazy]: TEXT "<t>"
{tool}
TEXT: /(\\n|.)*/
"""


@pytest.mark.parametrize(
    ("tool", "option"),
    [
        ('tool[capture]: tool_head "x"', "capture"),
        ('tool[capture="args"]: tool_head "x"', "capture"),
        ('tool[max_tokens=8]: tool_head "x"', "max_tokens"),
    ],
)
def test_dispatch_rules_cannot_capture_or_budget(tool: str, option: str) -> None:
    text = error_text(DISPATCH_WITH.format(tool=tool))
    assert text.startswith(
        f"Lark error at line 4, column 1: {option} is not supported on rules consumed by the "
        "dynamic dispatch pattern (rule 'tool')"
    )


def test_dispatch_triggers_cannot_mix_strings_and_tokens() -> None:
    vocab = Vocab([b"x", b"<|b|>"], special_ids=[1])
    with pytest.raises(GrammarError) as caught:
        parse_lark(
            'start: (a | b)* tail\ntail: TEXT\na_head[lazy]: TEXT "<a>"\na: a_head "x"\n'
            'b: TEXT <|b|> "x"\nTEXT: /(\\n|.)*/',
            vocab=vocab,
        )
    assert str(caught.value).startswith(
        "Lark error at line 5, column 9: dispatch triggers cannot mix string and token triggers"
    )


@pytest.mark.parametrize(
    "source",
    [
        "start: head\nhead[lazy]: TEXT <[^2]>\nTEXT: /(\\n|.)*/",
        'start: tool* tail\ntail: TEXT\ntool: TEXT <[^2]> "x"\nTEXT: /(\\n|.)*/',
    ],
)
def test_negated_token_sets_cannot_be_triggers(source: str) -> None:
    assert "a negated token set cannot be used as a trigger" in error_text(source)


# -- the generated languages against a brute-force definition ------------------------------------


def _first_completion(text: str, triggers: list[str]) -> tuple[int, set[str]] | None:
    """End position of the earliest complete trigger in ``text`` and the triggers ending there."""
    for end in range(1, len(text) + 1):
        done = {t for t in triggers if text[:end].endswith(t)}
        if done:
            return end, done
    return None


@pytest.mark.parametrize(
    "triggers",
    [
        ["<t>"],
        ["<a>", "<bb>", "[c]"],
        ["aab"],
        ["abab"],
        ["ab", "xab>"],
        ["<a>", "<b>", "<ab"],
        ["aa", "a"],
        ["ba", "ab"],
    ],
)
def test_trigger_languages_match_their_definition(triggers: list[str]) -> None:
    def locate(message, span):  # type: ignore[no-untyped-def]
        raise AssertionError(message)

    free, until = _trigger_languages(sorted(set(triggers)), locate, None)

    def language(expr) -> Grammar:  # type: ignore[no-untyped-def]
        rules = (
            Rule(name="start", body=Ref(name="T")),
            Rule(name="T", body=expr, terminal=True),
            Rule(name=FREE_TEXT_NAME, body=free, terminal=True),
        )
        return Grammar(GrammarIR(start="start", rules=rules))

    free_grammar = language(free)
    until_grammars = {t: language(e) for t, e in zip(sorted(set(triggers)), until, strict=True)}
    alphabet = sorted({c for t in triggers for c in t}) + ["z"]
    for length in range(6):
        for letters in itertools.product(alphabet, repeat=length):
            text = "".join(letters)
            first = _first_completion(text, triggers)
            assert free_grammar.accepts(text) == (first is None), text
            for trigger, grammar in until_grammars.items():
                expected = first is not None and first[0] == len(text) and trigger in first[1]
                assert grammar.accepts(text) == expected, (text, trigger)


# -- llguidance syntax outside the seed's dialect: errors that name the feature -------------------


@pytest.mark.parametrize(
    ("source", "message", "where"),
    [
        (
            'start: word\nword: "a" & "b"',
            "intersection '&' (an llguidance extension) applies to terminal definitions only",
            (2, 11),
        ),
        (
            'start: ~"x"',
            "complement '~' (an llguidance extension) applies to terminal definitions only",
            (1, 8),
        ),
        ('start: pair::1\npair::_: "p"', "parametric rules (name::param", (1, 12)),
        ('start::_: "p"', "parametric rules (name::param", (1, 6)),
        ('start: "p" %if on', "parametric %if conditions (an llguidance extension)", (1, 12)),
        ('start: %regex {"substring_words": "a b"}', "structured %regex", (1, 8)),
        ('start: wrap{item}\nwrap: "w"', "rule templates are not supported", (1, 12)),
        ('%override start\nstart: "a"', "directive %override is not supported", (1, 1)),
        ('%extend start\nstart: "a"', "directive %extend is not supported", (1, 1)),
        ("start: <[*,4]>", "the wildcard * cannot be combined with token ids", (1, 8)),
        ("start: <|open", "unterminated special token", (1, 8)),
        ("start: <a b>", "invalid special token", (1, 8)),
    ],
)
def test_llguidance_only_syntax_is_named_in_the_error(
    source: str, message: str, where: tuple[int, int]
) -> None:
    text = error_text(source)
    assert text.startswith(f"Lark error at line {where[0]}, column {where[1]}: "), text
    assert message in text


def test_llguidance_directive_spells_the_grammar_options() -> None:
    check(
        '%llguidance {"allow_initial_skip": true, "no_forcing": false}\n'
        "%ignore /[ ]+/\n"
        'start: "x" "y"',
        accepted=[" x y", "xy "],
        rejected=["x-y"],
    )
    assert "unknown grammar option 'weird'" in error_text('%llguidance {"weird": 1}\nstart: "x"')


# -- named grammars ---------------------------------------------------------------------------------


def test_named_grammars_must_be_a_mapping() -> None:
    with pytest.raises(TypeError, match="named_grammars must be a mapping"):
        Grammar.from_lark("start: @a", named_grammars=[Grammar.from_lark('start: "a"')])  # type: ignore[arg-type]


def test_named_grammar_cycle_is_reported_with_at_names() -> None:
    with pytest.raises(GrammarError, match=r"circular named grammar reference: @x -> @y -> @x"):
        Grammar.from_lark("start: @x", named_grammars={"x": "start: @y", "y": 'start: "1" @x'})


# ---------------------------------------------------------------------------------------------
# a regex terminal is a whole-match language: a lazy quantifier means what the greedy one does


def test_lazy_quantifiers_in_regex_terminals_read_as_greedy() -> None:
    check(
        "start: WORD\nWORD: /[a-z]+?[0-9]{1,2}?/",
        accepted=["ab1", "z99"],
        rejected=["ab", "a123"],
        runtime=True,
    )
    check('start: "<" BODY ">"\nBODY: /.*?/', accepted=["<>", "<x>y>"], rejected=["<x"])


# -- lark syntax seen in lark's own tests -------------------------------------------------------


@pytest.mark.parametrize("prefix", ["!?", "?!", "?", "!"])
def test_both_tree_shaping_prefixes_are_accepted_and_ignored(prefix: str) -> None:
    check(f'start: a "c"\n{prefix}a: "b"? "x"\n', accepted=["xc", "bxc"], rejected=["bc"])


def test_a_repeated_prefix_is_an_error() -> None:
    assert "expected a rule name after the prefix" in error_text('start: a\n!!a: "x"\n')


def test_backslash_continues_a_line() -> None:
    check('start: "a" \\\n    "b"\n', accepted=["ab"], rejected=["a", "b"])
    check('start: "a" \\  \r\n  | "b"\n', accepted=["a", "b"])
    # Anywhere else a backslash is still an error.
    assert "unexpected character" in error_text('start: "a" \\ "b"\n')


# -- llguidance's '&' and '~' on terminals ----------------------------------------------------


@pytest.mark.parametrize(
    ("source", "accepted", "rejected"),
    [
        ("start: WORD\nWORD: /[a-z]+/ & /[^q]+/", ["abc"], ["aqb", ""]),
        # Identifiers minus keywords, declared after their use.
        ('start: ID\nID: /[a-z]+/ & ~KW\nKW: "if" | "in"', ["iff", "i", "x"], ["if", "in"]),
        # llguidance's documented example: lines without an empty line between them.
        (
            "start: L\nL: /[a-zA-Z \\n]*/ & ~/(?s:.*)\\n\\n(?s:.*)/",
            ["ab\ncd", "", "a \n"],
            ["a\n\nb", "\n\n"],
        ),
        # '&' binds tighter than '|'; '~' needs no count after it to be a complement.
        ('start: A B\nA: "a"\nB: "b" & /b/ | "c"', ["ab", "ac"], ["a", "abc"]),
        ('start: A\nA: ~"x" & /[a-z]*/', ["", "xx", "ab"], ["x", "A"]),
        # '~' followed by a count is still a repetition.
        ('start: A\nA: "a"~2 "b"', ["aab"], ["ab"]),
        ('%ignore WS\nWS: " " & / +/\nstart: "a" "b"', ["a b", "ab"], [" ab"]),
    ],
)
def test_terminal_intersection_and_complement(
    source: str, accepted: list[str], rejected: list[str]
) -> None:
    check(source, accepted=accepted, rejected=rejected, runtime=True)


def test_complement_matches_bytes_as_llguidance_does() -> None:
    # Unlike other regexes, a complement may match invalid UTF-8 (llguidance's docs say so).
    grammar = Grammar.from_lark('start: A\nA: ~"x"')
    assert grammar.accepts(b"\xff") and grammar.accepts("y") and not grammar.accepts("x")
