"""Bad input never crashes the Lark front end: it parses to valid IR or raises GrammarError."""

from __future__ import annotations

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.ir import GrammarIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gramkiln.errors import GrammarError

FRAGMENTS = [
    "start",
    "item",
    "INT",
    "A",
    "_x",
    "my-rule",
    ":",
    " ",
    "\n",
    "\n    | ",
    "|",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "{2,4}",
    "~2..3",
    "~",
    " & ",
    "~/[a-z]*x/",
    "WORD: /[a-z]+/ & ~KW\n",
    "?",
    "*",
    "+",
    "->",
    "..",
    ".",
    ",",
    '"a"',
    '"yes"i',
    '"\\u03bb"',
    '"',
    "/[a-z]+/",
    "/a.b/s",
    "/(/",
    "/",
    "%import common.INT",
    "%import common (WS, INT)",
    "%ignore WS",
    '%grammar_options {"allow_initial_skip": true}',
    '%json {"type": "integer"}',
    "%lark {",
    '%lark { start: "x" }',
    "@named",
    "<[1,3-8]>",
    "<[^*]>",
    "<|tool|>",
    "[lazy]",
    '[suffix="x"]',
    "[max_tokens=3, capture]",
    "# comment",
    "// comment",
    "\\",
    "😀",
    "\t",
    "\r\n",
]

SEED_GRAMMARS = [
    '%import common.INT\n%import common.WS\n%ignore WS\nstart: item ("," item)*\nitem: "id=" INT\n',
    'start: value\nvalue: "x" | "(" value ")" | "[" (value ("," value)*)? "]"\n',
    'start: "<" name ">" rest\nname[lazy]: /[a-z]+/\nrest: /[a-z]+/\n',
    'start: "[" %lark {\n  %import common.WS\n  %ignore WS\n  start: item\n  item: "x"\n} "]"\n',
    'start: f "z"\nf[suffix=/!!+/, stop_capture="m", capture="c"]: /[a-z]*/\n',
    'start: <[1,3-8,10]> <|tool|> @named x{2,} y~1..2\nx: "x"\ny: "y"\n',
    'start: ID\nID: /[a-z]+/ & ~KW | "~"~2\nKW: "if" & /i./\n',
]


def parse_or_grammar_error(source: str) -> None:
    """The contract for any input: valid IR or a GrammarError, nothing else."""
    try:
        grammar = parse_lark(source, named_grammars={"named": 'start: "n"'})
    except GrammarError as error:
        assert error.message
        if error.line is not None:
            assert error.line >= 1 and error.column is not None and error.column >= 1
        return
    assert isinstance(grammar, GrammarIR)
    grammar.verify()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=25))
def test_fragment_soup_never_crashes(fragments: list[str]) -> None:
    parse_or_grammar_error("".join(fragments))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SEED_GRAMMARS),
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=0, max_value=3),
    st.text(alphabet='"/\\()[]{}|:%@<>^*,.-~i \n#', max_size=3),
)
def test_mutated_grammars_never_crash(source: str, at: int, delete: int, insert: str) -> None:
    at = min(at, len(source))
    parse_or_grammar_error(source[:at] + insert + source[at + delete :])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes(source: str) -> None:
    parse_or_grammar_error(source)


@pytest.mark.parametrize("source", SEED_GRAMMARS)
def test_robustness_corpus_is_valid(source: str) -> None:
    parse_lark(source, named_grammars={"named": 'start: "n"'}).verify()


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    assert parse_lark("start: " + "(" * 100 + '"a"' + ")" * 100).rules
    with pytest.raises(GrammarError, match="nested more than 100 levels deep"):
        parse_lark("start: " + "(" * 101 + '"a"' + ")" * 101)
    with pytest.raises(GrammarError, match="nested more than 100 levels deep"):
        parse_lark("start: " + "%lark { start: " * 101 + '"a"' + " }" * 101)


def test_long_named_grammar_chain_is_an_error_not_a_crash() -> None:
    named = {f"g{i}": f"start: @g{i + 1}" for i in range(3000)}
    named["g3000"] = 'start: "x"'
    with pytest.raises(GrammarError, match="nested too deeply"):
        parse_lark("start: @g0", named_grammars=named)


def test_byte_order_mark_and_crlf_line_endings() -> None:
    grammar = parse_lark('\ufeffstart: "a"\r\n     | "b"\r\nx: "c"\r\n')
    assert [rule.name for rule in grammar.rules] == ["start", "x"]


def test_a_long_terminal_cycle_is_reported_with_its_chain() -> None:
    # 3,000 terminals each naming the next, the last naming the first: the cycle check walks
    # the chain without recursion (it hit the recursion limit before, a bare "nested too
    # deeply" with no location).
    source = "start: T0\n" + "\n".join(f"T{i}: T{i + 1}" for i in range(3000)) + "\nT3000: T0\n"
    with pytest.raises(
        GrammarError, match=r"line 3002, column 8: terminal 'T0' is recursive: T0 -> T1 -> T2"
    ):
        parse_lark(source)
