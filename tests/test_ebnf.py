"""Tests of the EBNF front end: IR structure, membership through the reference matcher, and
every error kind by exact text and position."""

from __future__ import annotations

import importlib.util
import re

import pytest
from gramkiln.frontend.ebnf import parse_ebnf
from gramkiln.ir import (
    CharClass,
    Choice,
    Empty,
    Literal,
    Ref,
    Repeat,
    RuleOptions,
    Seq,
    Span,
    SpecialToken,
    TokenSet,
    parse_grammar,
    print_grammar,
    strip_spans,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.errors import GrammarError


def lit(text: str) -> Literal:
    return Literal(text=text)


def body(source: str, rule: str = "root"):
    return parse_ebnf(source).rule(rule).body


# ---------------------------------------------------------------------------------------------
# structure


def test_rules_references_and_start() -> None:
    grammar = parse_ebnf('root ::= item ("," item)*\nitem ::= "a" | "b"\n')
    assert grammar.start == "root"
    assert [rule.name for rule in grammar.rules] == ["root", "item"]
    assert all(not rule.terminal for rule in grammar.rules)
    assert grammar.rule("root").body == Seq(
        items=(Ref(name="item"), Repeat(item=Seq(items=(lit(","), Ref(name="item")))))
    )
    assert grammar.rule("item").body == Choice(alternatives=(lit("a"), lit("b")))
    assert grammar.rule("item").span == Span(line=2, column=1)


def test_printed_form() -> None:
    source = 'root ::= "x" digit{2,} ws?\ndigit ::= [0-9]\nws ::= [ \\t]+\n'
    assert print_grammar(parse_ebnf(source)) == (
        "%ir 1\n%start root\n"
        'rule root = "x" digit{2,} ws?\n'
        "rule digit = [0-9]\n"
        "rule ws = [\\u{9}\\u{20}]+\n"
    )


def test_multi_line_rules_and_comments() -> None:
    source = """
# a comment line
root ::= "a"      # trailing comment
       | "b" rest # rules continue until the next 'name ::='
       "c"
rest ::=
    "d"
    | "e"
"""
    grammar = parse_ebnf(source)
    assert grammar.rule("root").body == Choice(
        alternatives=(lit("a"), Seq(items=(lit("b"), Ref(name="rest"), lit("c"))))
    )
    assert grammar.rule("rest").body == Choice(alternatives=(lit("d"), lit("e")))
    assert grammar.rule("rest").span == Span(line=6, column=1)


def test_rule_names_with_digits_and_dashes() -> None:
    grammar = parse_ebnf('root ::= json-value_2\njson-value_2 ::= "v"')
    assert grammar.rule("root").body == Ref(name="json-value_2")


def test_string_escapes() -> None:
    source = r'root ::= "\n\t\r\\\"\x41\u00e9\U0001F600" "" "中\0"'
    assert body(source) == lit('\n\t\r\\"Aé😀中\0')
    assert body('root ::= ""') == Empty()
    assert body("root ::= ()") == Empty()


def test_character_classes() -> None:
    assert body("root ::= [a-z_]") == CharClass.of([(0x61, 0x7A), (0x5F, 0x5F)])
    assert body('root ::= [^"\\\\]') == CharClass.of([(0x22, 0x22), (0x5C, 0x5C)], negated=True)
    assert body(r"root ::= [\]\-\[\n\x41-\x43\u00e9]") == CharClass.of(
        [(0x5D, 0x5D), (0x2D, 0x2D), (0x5B, 0x5B), (0x0A, 0x0A), (0x41, 0x43), (0xE9, 0xE9)]
    )
    assert body("root ::= [-a]") == CharClass.of([(0x2D, 0x2D), (0x61, 0x61)])
    assert body("root ::= [a-]") == CharClass.of([(0x2D, 0x2D), (0x61, 0x61)])
    assert body(r"root ::= [\d_]") == CharClass.of([(0x30, 0x39), (0x5F, 0x5F)])
    assert body(r"root ::= [^\s]") == CharClass.of([(0x09, 0x0D), (0x20, 0x20)], negated=True)
    assert body("root ::= [α-γ]") == CharClass.of([(0x3B1, 0x3B3)])
    assert body("root ::= .") == CharClass.of([(0, 0x10FFFF)])


def test_quantifiers() -> None:
    x = Ref(name="x")
    tail = '\nx ::= "x"'
    assert body("root ::= x*" + tail) == Repeat(item=x)
    assert body("root ::= x+" + tail) == Repeat(item=x, min=1)
    assert body("root ::= x?" + tail) == Repeat(item=x, max=1)
    assert body("root ::= x{3}" + tail) == Repeat(item=x, min=3, max=3)
    assert body("root ::= x{2,}" + tail) == Repeat(item=x, min=2)
    assert body("root ::= x{2,5}" + tail) == Repeat(item=x, min=2, max=5)
    assert body("root ::= x{,4}" + tail) == Repeat(item=x, min=0, max=4)
    assert body("root ::= x{ 1 , 2 }" + tail) == Repeat(item=x, min=1, max=2)
    assert body("root ::= (x+)?" + tail) == Repeat(item=Repeat(item=x, min=1), max=1)
    # Large counts stay Repeat nodes.
    assert body('root ::= "ab"{100000}') == Repeat(item=lit("ab"), min=100_000, max=100_000)


def test_rule_options() -> None:
    grammar = parse_ebnf(
        'root ::= name ">" tail\nname[lazy] ::= [a-z]+\n'
        'tail [max_tokens=5, capture] ::= "t"\nx[capture="out"] ::= "x"\n'
    )
    assert grammar.rule("name").options == RuleOptions(lazy=True)
    assert grammar.rule("tail").options == RuleOptions(max_tokens=5, capture="tail")
    assert grammar.rule("x").options == RuleOptions(capture="out")
    assert grammar.rule("root").options == RuleOptions()


def test_class_after_a_reference_is_not_taken_for_rule_options() -> None:
    grammar = parse_ebnf('root ::= x [a-z]\nx ::= "x"')
    assert grammar.rule("root").body == Seq(items=(Ref(name="x"), CharClass.of([(97, 122)])))


def test_xgrammar_macros() -> None:
    assert body(r'root ::= Regex("[a-c]+\\d")') == Seq(
        items=(Repeat(item=CharClass.of([(97, 99)]), min=1), CharClass.of([(48, 57)]))
    )
    assert body("root ::= Token(5, 1, 2, 3)") == TokenSet(ranges=((1, 3), (5, 5)))
    assert body("root ::= ExcludeToken(7)") == TokenSet(ranges=((7, 7),), negated=True)
    # A rule that happens to be called like a macro is still a rule.
    grammar = parse_ebnf('root ::= Token ("x")\nToken ::= "t"')
    assert grammar.rule("root").body == Seq(items=(Ref(name="Token"), lit("x")))


def test_llama_cpp_token_elements() -> None:
    grammar = parse_ebnf("root ::= <think> thinking </think> <[7]>\nthinking ::= !<[1001]>*\n")
    assert grammar.rule("root").body == Seq(
        items=(
            SpecialToken(text="<think>"),
            Ref(name="thinking"),
            SpecialToken(text="</think>"),
            TokenSet(ranges=((7, 7),)),
        )
    )
    assert grammar.rule("thinking").body == Repeat(
        item=TokenSet(ranges=((1001, 1001),), negated=True)
    )


def test_custom_root() -> None:
    grammar = parse_ebnf('start ::= "a" other\nother ::= "b"', root="start")
    assert grammar.start == "start"
    assert Grammar.from_ebnf('main ::= "a"', root="main").ir.start == "main"


# ---------------------------------------------------------------------------------------------
# membership (through the reference matcher)

needs_reference = pytest.mark.skipif(
    importlib.util.find_spec("gramkiln.testing") is None,
    reason="gramkiln.testing.ReferenceMatcher is not available yet",
)

JSON_LIKE = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
"""

ARITHMETIC = """
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")"
number ::= [0-9]+
"""


@needs_reference
@pytest.mark.parametrize(
    ("source", "text", "accepted"),
    [
        (JSON_LIKE, '{"a": 1}', True),
        (JSON_LIKE, '{"a": [1, 2.5e3, "x\\n", true, null], "b": {}}', True),
        (JSON_LIKE, '{"a": 01}', False),
        (JSON_LIKE, '{"a" 1}', False),
        (JSON_LIKE, '{"\\u00e9": -0.5}', True),
        (JSON_LIKE, '{"a": "\\q"}', False),
        (ARITHMETIC, "1+2*(3-4)/5", True),
        (ARITHMETIC, "((7))", True),
        (ARITHMETIC, "1+", False),
        (ARITHMETIC, "(1", False),
        ('root ::= "ab"{2,3}', "abab", True),
        ('root ::= "ab"{2,3}', "ababababab"[:8], False),
        ('root ::= "ab"{,2}', "", True),
        ('root ::= [^a-c]+ "!"', "xyz!", True),
        ('root ::= [^a-c]+ "!"', "xaz!", False),
        ('root ::= . "."', "😀.", True),
        ('root ::= "\\u00e9\\x41"', "éA", True),
        ('root ::= Regex("(ab|c)+")', "abcab", True),
        ('root ::= Regex("(ab|c)+")', "abb", False),
        # [lazy] is committed-shortest: name ends at the first position it can.
        ('root ::= "<" name ">" rest\nname[lazy] ::= [a-z]+\nrest ::= [a-z]*', "<a>b", True),
        ('root ::= "<" name ">" rest\nname[lazy] ::= [a-z]+\nrest ::= [a-z]*', "<ab>c", False),
    ],
)
def test_membership(source: str, text: str, accepted: bool) -> None:
    assert Grammar.from_ebnf(source).accepts(text) is accepted


BALANCED = 'root ::= "" | "(" root ")" root'


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += 1 if char == "(" else -1
        if depth < 0:
            return False
    return depth == 0


@needs_reference
@given(st.text(alphabet="()", max_size=10))
@settings(max_examples=80, deadline=None)
def test_recursive_rule_membership(text: str) -> None:
    assert Grammar.from_ebnf(BALANCED).accepts(text) == _balanced(text)


# ---------------------------------------------------------------------------------------------
# errors by exact text and position

ERRORS = [
    # (source, message, line, column)
    ('root ::= "a" foo', "undefined rule 'foo'", 1, 14),
    (
        'root ::= "a"\nx ::= "b"\nx ::= "c"',
        "rule 'x' is defined more than once (first on line 2)",
        3,
        1,
    ),
    ('start ::= "a"', "the root rule 'root' is not defined", 1, 1),
    ("", "the root rule 'root' is not defined", 1, 1),
    ('\nexpr ::= "a"\n', "the root rule 'root' is not defined", 2, 1),  # at the first rule
    ('root ::= "abc', "unterminated string literal", 1, 10),
    ('root ::= "ab\nc"', "unterminated string literal", 1, 10),
    ("root ::= [z-a]", "bad character range 'z-a': the start is after the end", 1, 11),
    ("root ::= [abc", "unterminated character class: missing ']'", 1, 10),
    (
        'root ::= "a"{3,1}',
        "bad repetition bounds {3,1}: the minimum is greater than the maximum",
        1,
        13,
    ),
    ('root ::= "a"{x}', "bad repetition bounds {x}: expected {m}, {m,}, {m,n} or {,n}", 1, 13),
    ('root ::= "a"{}', "bad repetition bounds {}: expected {m}, {m,}, {m,n} or {,n}", 1, 13),
    ('root ::= "a"{2', "unterminated repetition bounds: missing '}'", 1, 13),
    (
        'root ::= "a"{2000000}',
        "bad repetition bounds {2000000}: 2000000 exceeds the limit of 1,000,000",
        1,
        13,
    ),
    ('root = "a"', "expected '::=' after rule name 'root'", 1, 6),
    ('root ::= "a"\nnext "b"', "undefined rule 'next'", 2, 1),
    ('::= "a"', "expected a rule name before '::='", 1, 1),
    ('"a" ::= "b"', "expected a rule name, found '\"'", 1, 1),
    ('root ::= "a" ;', "unexpected character ';'", 1, 14),
    ('root ::= "a" - "b"', "unexpected character '-'", 1, 14),
    (
        'root ::= x\n.x ::= "a"',
        "rule name '.x' must start with a letter, a digit, '_' or '-'",
        2,
        1,
    ),
    ('root ::= "a" )', "unbalanced ')': no group is open", 1, 14),
    ('root ::= ("a" | "b"', "missing ')': this group is never closed", 1, 10),
    ('root ::= ("a"\nx ::= "b"', "missing ')': this group is never closed", 1, 10),
    ('root ::= * "a"', "nothing to repeat before '*'", 1, 10),
    ('root ::= "a"+?', "multiple repeat: '?' follows another quantifier", 1, 14),
    ('root ::= "a"{2}*', "multiple repeat: '*' follows another quantifier", 1, 16),
    ('root ::= "\\q"', "invalid escape '\\q'", 1, 11),
    ('root ::= "\\xg"', "invalid escape '\\x': expected hex digits", 1, 11),
    ('root ::= "\\U00110000"', "code point U+110000 is out of range", 1, 11),
    ('root ::= "\\ud800"', "surrogate code point U+D800 cannot be matched", 1, 11),
    ("root ::= 'a'", "strings use double quotes in EBNF", 1, 10),
    ("root ::= /a+/", "'/regex/' terminals are not part of EBNF; write Regex(\"...\")", 1, 10),
    (
        'root ::= "a" (= "b")',
        "XGrammar lookahead assertions '(= ...)' are not supported: remove it (the language "
        "is unchanged when the grammar already implies it)",
        1,
        14,
    ),
    (
        'root ::= TagDispatch(("<t>", x), stop_eos=false)\nx ::= "x"',
        "TagDispatch(...) needs stop_eos=true or some stops",
        1,
        10,
    ),
    # Errors inside a Regex() pattern point at the offending character of the EBNF source.
    ('root ::= Regex("ab(?=c)")', "lookahead '(?=' is not supported", 1, 19),
    (
        'root ::= Regex("\\\\d[z-a]")',
        "bad character range 'z-a': the start is after the end",
        1,
        21,
    ),
    ("root ::= Regex(abc)", 'Regex() takes one string argument: Regex("pattern")', 1, 16),
    ("root ::= Token(1, x)", "Token() takes non-negative integer token ids", 1, 19),
    ("root ::= Token(1 2)", "expected ',' or ')' in Token(...)", 1, 18),
    ("root ::= <think", "unterminated token: missing '>'", 1, 10),
    ("root ::= <>", "empty token '<>'", 1, 10),
    ("root ::= <[x1]>", "bad token id '[x1]': expected <[N]>", 1, 10),
    (
        "root ::= !<think>",
        "negated token text '!<think>' is not supported; use its id: !<[N]>",
        1,
        10,
    ),
    ('root[fast] ::= "a"', "unknown rule option 'fast'", 1, 6),
    ('root[lazy, la] ::= "a"', "unknown rule option 'la'", 1, 12),
    (
        'root[max_tokens=\u00b2] ::= "a"',
        "bad value for rule option 'max_tokens': 'max_tokens=\u00b2'",
        1,
        6,
    ),
    (
        'root ::= "a"{\u00b2}',
        "bad repetition bounds {\u00b2}: expected {m}, {m,}, {m,n} or {,n}",
        1,
        13,
    ),
    ('root[max_tokens=x] ::= "a"', "bad value for rule option 'max_tokens': 'max_tokens=x'", 1, 6),
    (
        'root[max_tokens=0] ::= "a"',
        "bad rule options: max_tokens must be between 1 and 1,000,000",
        1,
        5,
    ),
    (
        'root[capture="a b"] ::= "a"',
        "bad rule options: capture name 'a b' may contain only letters, digits, '_', '-' and '.'",
        1,
        5,
    ),
    ("root ::= " + "(" * 300 + '"a"' + ")" * 300, "groups are nested more than 100 deep", 1, 110),
    ('root ::= "a"{,}', "bad repetition bounds {,}: expected {m}, {m,}, {m,n} or {,n}", 1, 13),
    (
        'root ::= "a"{ ,-1}',
        "bad repetition bounds { ,-1}: expected {m}, {m,}, {m,n} or {,n}",
        1,
        13,
    ),
    ("root ::= [a\\", "unterminated character class: missing ']'", 1, 10),
    ("root ::= [a-\\\nx ::= [b]", "unterminated character class: missing ']'", 1, 10),
    (
        "root ::= <[2147483648]>",
        "token id 2147483648 is beyond the largest token id (2,147,483,647)",
        1,
        10,
    ),
    (
        "root ::= Token(1, 2147483648)",
        "token id 2147483648 is beyond the largest token id (2,147,483,647)",
        1,
        19,
    ),
    (
        'root ::= "<" r ">"\nr[lazy] ::= sub\nsub ::= sub [a-z] | [a-z]',
        "lazy rule 'r' must compile to one automaton, but it reaches a recursive rule (sub -> sub)",
        2,
        1,
    ),
    (
        'root ::= r\nr[lazy] ::= a\na ::= "x" b\nb ::= "y" | a',
        "lazy rule 'r' must compile to one automaton, but it reaches a recursive rule "
        "(a -> b -> a)",
        2,
        1,
    ),
]


def test_lazy_rules_may_name_rules_that_are_not_recursive() -> None:
    grammar = Grammar.from_ebnf('root ::= "<" r ">"\nr[lazy] ::= sub "x"\nsub ::= [a-z]+')
    assert grammar.accepts("<abx>") and not grammar.accepts("<axbx>")


@pytest.mark.parametrize(("source", "message", "line", "column"), ERRORS)
def test_error_messages(source: str, message: str, line: int, column: int) -> None:
    with pytest.raises(GrammarError) as info:
        parse_ebnf(source)
    error = info.value
    assert error.language == "EBNF"
    assert error.message == message
    assert (error.line, error.column) == (line, column)


def test_error_rendering() -> None:
    with pytest.raises(GrammarError) as info:
        Grammar.from_ebnf('root ::= item\nitem ::= "a" missing\n')
    assert str(info.value) == (
        "EBNF error at line 2, column 14: undefined rule 'missing'\n"
        'item ::= "a" missing\n'
        "             ^"
    )


def test_non_string_source_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        parse_ebnf(b'root ::= "a"')  # type: ignore[arg-type]


@given(st.text(alphabet='root:= "ab|()[]{}*+?^-\\#\n,.12xRegexTok²<>!', max_size=30))
@settings(max_examples=300, deadline=None)
def test_arbitrary_sources_never_crash(source: str) -> None:
    """Any input gives a verified grammar or a located GrammarError, never another exception;
    every grammar survives the IR's canonical text form."""
    try:
        grammar = parse_ebnf(source)
    except GrammarError as error:
        assert error.line is not None and error.column is not None
    else:
        assert parse_grammar(print_grammar(grammar)) == strip_spans(grammar)


# ---------------------------------------------------------------------------------------------
# random expressions written both as EBNF and as a Python regex must agree


def _random_expression() -> st.SearchStrategy[tuple[str, str]]:
    """Pairs (EBNF body, equivalent Python regex) built from the same random tree."""
    leaves = st.sampled_from(
        [
            ('"a"', "a"),
            ('"ab"', "ab"),
            ('""', ""),
            ("[a-b]", "[a-b]"),
            ("[^a]", "[^a]"),
            (r'"\n"', r"\n"),
            (".", "(?s:.)"),
        ]
    )

    def extend(inner: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[tuple[str, str]]:
        suffixes = st.sampled_from(["*", "+", "?", "{2}", "{1,2}", "{,1}", "{0,}"])
        quantified = st.tuples(inner, suffixes).map(
            lambda pair: (f"({pair[0][0]}){pair[1]}", f"(?:{pair[0][1]}){pair[1]}")
        )
        parts = st.lists(inner, min_size=2, max_size=3)
        sequence = parts.map(
            lambda xs: (" ".join(f"({e})" for e, _ in xs), "".join(f"(?:{r})" for _, r in xs))
        )
        choice = parts.map(
            lambda xs: (" | ".join(e for e, _ in xs), "(?:" + "|".join(r for _, r in xs) + ")")
        )
        return quantified | sequence | choice

    return st.recursive(leaves, extend, max_leaves=6)


@needs_reference
@given(
    pair=_random_expression(),
    texts=st.lists(st.text(alphabet="ab\n", max_size=5), min_size=1, max_size=6),
)
@settings(max_examples=120, deadline=None)
def test_random_expressions_agree_with_python_regex(
    pair: tuple[str, str], texts: list[str]
) -> None:
    ebnf_body, pattern = pair
    grammar = Grammar.from_ebnf(f"root ::= {ebnf_body}\n")
    for text in texts:
        assert grammar.accepts(text) == (re.fullmatch(pattern, text) is not None), text
