"""Tests of the regex front end: IR structure, every error message, and differential tests
against Python's ``re`` through the reference matcher."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import shutil
import subprocess
import warnings
from functools import cache

import pytest
from gramkiln.frontend.regex import (
    MAX_REPEAT,
    RegexError,
    parse_regex,
    regex_grammar,
    search_regex,
)
from gramkiln.ir import (
    CharClass,
    Choice,
    Empty,
    GrammarIR,
    Literal,
    Repeat,
    Rule,
    Seq,
    parse_expr,
    print_expr,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.errors import GrammarError

DIGITS = CharClass.of([(0x30, 0x39)])
ANYTHING = Repeat(item=CharClass.of([(0, 0x10FFFF)]), min=0, max=None)


def lit(text: str, case_insensitive: bool = False) -> Literal:
    return Literal(text=text, case_insensitive=case_insensitive)


def chars(text: str, negated: bool = False) -> CharClass:
    return CharClass.of([(ord(c), ord(c)) for c in text], negated=negated)


def contains(expr: CharClass, char: str) -> bool:
    return any(lo <= ord(char) <= hi for lo, hi in expr.positive_ranges())


# ---------------------------------------------------------------------------------------------
# structure


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("", Empty()),
        ("()", Empty()),
        ("abc", lit("abc")),
        ("a|b|", Choice(alternatives=(lit("a"), lit("b"), Empty()))),
        ("(?:ab)(?P<n>c)(?<m>d)", lit("abcd")),
        ("^ab$", lit("ab")),
        ("^a|b$", chars("ab")),
        ("^a|bc$", Choice(alternatives=(lit("a"), lit("bc")))),
        ("ab*", Seq(items=(lit("a"), Repeat(item=lit("b"))))),
        ("(ab)+", Repeat(item=lit("ab"), min=1)),
        ("x?", Repeat(item=lit("x"), min=0, max=1)),
        ("x{4}", Repeat(item=lit("x"), min=4, max=4)),
        ("x{2,}", Repeat(item=lit("x"), min=2)),
        ("x{,3}", Repeat(item=lit("x"), min=0, max=3)),
        ("x{,}", Repeat(item=lit("x"), min=0)),
        ("x{2,5}", Repeat(item=lit("x"), min=2, max=5)),
        (
            r"[a-z]+\d{2,3}",
            Seq(
                items=(
                    Repeat(item=CharClass.of([(97, 122)]), min=1),
                    Repeat(item=DIGITS, min=2, max=3),
                )
            ),
        ),
        (r"[^\d]", CharClass.of([(0x30, 0x39)], negated=True)),
        (r"\D", CharClass.of([(0x30, 0x39)], negated=True)),
        (r"[\d_]", CharClass.of([(0x30, 0x39), (0x5F, 0x5F)])),
        (r"[^\D]", CharClass.of([(0, 0x2F), (0x3A, 0x10FFFF)], negated=True)),
        (r"\w", CharClass.of([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])),
        (r"\s", CharClass.of([(0x09, 0x0D), (0x20, 0x20)])),
        (r"[\s]", CharClass.of([(0x09, 0x0D), (0x20, 0x20)])),
        (".", chars("\n", negated=True)),
        ("(?s).", CharClass.of([(0, 0x10FFFF)])),
        ("(?s:.)", CharClass.of([(0, 0x10FFFF)])),
        ("[-a]", chars("-a")),
        ("[a-]", chars("-a")),
        (r"[a\-c]", chars("-ac")),
        ("[]a]", chars("]a")),
        ("[^]a]", chars("]a", negated=True)),
        (r"[\b]", chars("\b")),
        ("a{}", lit("a{}")),
        ("a{x}", lit("a{x}")),
        (
            r"\x41\u0042\u{43}\U00000044\N{LATIN SMALL LETTER E}\101\0\t\n\r\f\v\a",
            lit("ABCDeA\x00\t\n\r\f\v\a"),
        ),
        (r"\.\*\+\?\(\)\[\]\{\}\|\\\/\ \^\$", lit(".*+?()[]{}|\\/ ^$")),
        (r"[\x41-\x43\u00e9]", CharClass.of([(0x41, 0x43), (0xE9, 0xE9)])),
        ("a(?#a comment)*", Repeat(item=lit("a"))),
        ("(a|b)|c", chars("abc")),
        ("(a|bc)|d", Choice(alternatives=(lit("a"), lit("bc"), lit("d")))),
        (r"x|\d|[^\d]", CharClass.of([(0, 0x10FFFF)])),
        ("a{1000000}", Repeat(item=lit("a"), min=MAX_REPEAT, max=MAX_REPEAT)),
        ("中文", lit("中文")),
    ],
)
def test_structure(pattern: str, expected) -> None:
    assert parse_regex(pattern) == expected


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("(?i)ab-1", lit("ab-1", case_insensitive=True)),
        # k and s have non-ASCII case partners (Kelvin sign, long s) as in Python's re.
        ("(?i)select", Seq(items=(chars("Ss\u017f"), lit("elect", case_insensitive=True)))),
        ("(?i)é", chars("Éé")),
        ("(?i)中", lit("中")),
        ("(?i)[a-c]", CharClass.of([(0x41, 0x43), (0x61, 0x63)])),
        ("(?i)[^b]", chars("Bb", negated=True)),
        ("a(?i:b)c", Seq(items=(lit("a"), lit("b", case_insensitive=True), lit("c")))),
        ("(?i)a(?-i:b)", Seq(items=(lit("a", case_insensitive=True), lit("b")))),
    ],
)
def test_case_insensitive_structure(pattern: str, expected) -> None:
    assert parse_regex(pattern) == expected


@pytest.mark.parametrize(
    ("pattern", "flags"),
    [
        (r"(.|\n)*", ""),
        (r"(\n|.)*", ""),
        (r"(?:.|\n)*", ""),
        (r"[\s\S]*", ""),
        (r"(?s:.*)", ""),
        (r".*", "s"),
        (r"(?s).*", ""),
    ],
)
def test_every_any_text_spelling_gives_the_same_ir(pattern: str, flags: str) -> None:
    """Single-character alternatives fold into one class, so later passes see one shape."""
    assert parse_regex(pattern, flags) == ANYTHING


def test_single_character_alternatives_fold_with_case() -> None:
    assert parse_regex("(?i)a|b") == CharClass.of([(0x41, 0x42), (0x61, 0x62)])


def test_flags_argument() -> None:
    assert parse_regex("ab", "i") == lit("ab", case_insensitive=True)
    assert parse_regex(".", "s") == CharClass.of([(0, 0x10FFFF)])
    assert parse_regex(".", "is") == CharClass.of([(0, 0x10FFFF)])


def test_large_repetition_is_not_expanded() -> None:
    expr = parse_regex("[ab]{3,900000}")
    assert expr == Repeat(item=chars("ab"), min=3, max=900_000)


def test_ecma_dialect_structure() -> None:
    assert parse_regex(".", dialect="ecma") == CharClass.of(
        [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)], negated=True
    )
    ecma_space = parse_regex(r"\s", dialect="ecma")
    assert isinstance(ecma_space, CharClass)
    for char in " \t\n\r\v\f\u00a0\ufeff\u2028\u2029\u3000\u1680":
        assert contains(ecma_space, char)
    assert not contains(ecma_space, "\x1c")
    assert not contains(parse_regex(r"\s"), "\u00a0")
    assert parse_regex(r"\uD83D\uDE00", dialect="ecma") == lit("😀")
    assert parse_regex(r"\u{1F600}", dialect="ecma") == lit("😀")
    assert parse_regex(r"\cJ", dialect="ecma") == lit("\n")
    assert parse_regex("[]", dialect="ecma") == CharClass(ranges=())
    assert parse_regex("[^]", dialect="ecma") == CharClass(ranges=(), negated=True)
    assert parse_regex(r"\{\}\]", dialect="ecma") == lit("{}]")


def test_unicode_properties() -> None:
    upper = parse_regex(r"\p{Lu}", dialect="ecma")
    assert contains(upper, "A") and contains(upper, "É") and not contains(upper, "a")
    not_letter = parse_regex(r"\P{L}", dialect="ecma")
    assert contains(not_letter, "1") and not contains(not_letter, "a")
    assert parse_regex(r"\p{Letter}", dialect="ecma") == parse_regex(r"\p{L}", dialect="ecma")
    assert parse_regex(r"\p{gc=Nd}", dialect="ecma") == parse_regex(r"\p{Nd}", dialect="ecma")
    assert parse_regex(r"\p{General_Category=Zs}", dialect="ecma") == parse_regex(
        r"\p{Space_Separator}", dialect="ecma"
    )
    mixed = parse_regex(r"[\p{Nd}x]", dialect="ecma")
    assert contains(mixed, "x") and contains(mixed, "٣") and not contains(mixed, "y")
    for name, member, outsider in [
        ("N", "½", "a"),
        ("Nl", "Ⅳ", "4"),
        ("No", "½", "4"),
        ("Lt", "ǅ", "D"),
        ("Lm", "ʰ", "h"),
        ("Lo", "中", "a"),
        ("Ll", "a", "A"),
        ("P", "!", "a"),
        ("Pd", "-", "!"),
        ("S", "+", "a"),
        ("Sc", "$", "+"),
        ("Z", " ", "a"),
        ("Zs", "\u3000", "\n"),
        ("C", "\x00", "a"),
        ("Cc", "\x7f", " "),
        ("ASCII", "~", "é"),
        ("Any", "\U0010ffff", None),
    ]:
        expr = parse_regex(rf"\p{{{name}}}", dialect="ecma")
        assert contains(expr, member), name
        if outsider is not None:
            assert not contains(expr, outsider), name


def test_regex_grammar() -> None:
    grammar = regex_grammar("a+", "i")
    assert grammar == GrammarIR(
        start="start", rules=(Rule(name="start", body=Repeat(item=lit("a", True), min=1)),)
    )
    assert Grammar.from_regex("ab|c").ir.rule("start").body == Choice(
        alternatives=(lit("ab"), lit("c"))
    )


def test_search_regex_structure() -> None:
    assert search_regex("ab") == Seq(items=(ANYTHING, lit("ab"), ANYTHING))
    assert search_regex("^ab") == Seq(items=(lit("ab"), ANYTHING))
    assert search_regex("ab$") == Seq(items=(ANYTHING, lit("ab")))
    assert search_regex("^ab$") == lit("ab")
    assert search_regex("a|bc") == Seq(
        items=(ANYTHING, Choice(alternatives=(lit("a"), lit("bc"))), ANYTHING)
    )
    assert search_regex("^ab|c$") == Choice(
        alternatives=(Seq(items=(lit("ab"), ANYTHING)), Seq(items=(ANYTHING, lit("c"))))
    )
    assert search_regex("") == ANYTHING
    assert search_regex("()|a*") == Seq(
        items=(ANYTHING, Choice(alternatives=(Empty(), Repeat(item=lit("a")))), ANYTHING)
    )


def test_printed_form_is_readable() -> None:
    assert print_expr(parse_regex(r"[a-z]+\d{2,3}|x?")) == '[a-z]+ [0-9]{2,3} | "x"?'


# ---------------------------------------------------------------------------------------------
# errors: exact text, position, and the contract the Lark front end relies on


ERRORS = [
    # (pattern, flags, dialect, message, offset)
    ("abcd(?=x)", "", "python", "lookahead '(?=' is not supported", 4),
    ("a(?!x)", "", "python", "negative lookahead '(?!' is not supported", 1),
    ("(?<=x)a", "", "python", "lookbehind '(?<=' is not supported", 0),
    ("(?<!x)a", "", "python", "negative lookbehind '(?<!' is not supported", 0),
    ("(?>a)", "", "python", "atomic group '(?>' is not supported", 0),
    ("(a)(?(1)b)", "", "python", "conditional group '(?(' is not supported", 3),
    (r"(a)\1", "", "python", r"backreference '\1' is not supported", 3),
    (r"(a)\12", "", "python", r"backreference '\12' is not supported", 3),
    (r"(?<n>a)\k<n>", "", "ecma", r"backreference '\k<n>' is not supported", 7),
    ("(?P<n>a)(?P=n)", "", "python", "backreference '(?P=n)' is not supported", 8),
    ("a*?", "", "python", "lazy quantifier '*?' is not supported", 1),
    ("a+?", "", "python", "lazy quantifier '+?' is not supported", 1),
    ("a??", "", "python", "lazy quantifier '??' is not supported", 1),
    ("a{1,2}?", "", "python", "lazy quantifier '{1,2}?' is not supported", 1),
    ("a*+", "", "python", "possessive quantifier '*+' is not supported", 1),
    ("a{2}+", "", "python", "possessive quantifier '{2}+' is not supported", 1),
    ("a**", "", "python", "multiple repeat: '*' follows another quantifier", 2),
    ("a{2}{3}", "", "python", "multiple repeat: '{3}' follows another quantifier", 4),
    (r"a\b", "", "python", r"word boundary '\b' is not supported", 1),
    (r"\Ba", "", "python", r"non-word-boundary '\B' is not supported", 0),
    (r"\Aa", "", "python", r"anchor '\A' is not supported", 0),
    (r"a\Z", "", "python", r"anchor '\Z' is not supported", 1),
    (r"a\z", "", "python", r"anchor '\z' is not supported", 1),
    ("(^a)*", "", "ecma", "a group containing an anchor cannot be repeated", 4),
    ("^(a|$)+", "", "ecma", "a group containing an anchor cannot be repeated", 6),
    ("$^", "", "python", "anchor '^' is only supported at the start of the pattern", 1),
    (r"\q", "", "python", r"unknown escape '\q'", 0),
    (r"[\q]", "", "python", r"unknown escape '\q'", 1),
    (r"\a", "", "ecma", r"unknown escape '\a'", 0),
    (r"[\B]", "", "python", r"unknown escape '\B' inside a class", 1),
    (r"[\1]", "", "ecma", r"backreference '\1' is not supported inside a class", 1),
    (r"\01", "", "ecma", r"invalid escape '\0' followed by a digit", 0),
    ("(ab", "", "python", "missing ')': this group is never closed", 0),
    ("a(b(c)", "", "python", "missing ')': this group is never closed", 1),
    ("ab)", "", "python", "unbalanced ')': no group is open", 2),
    ("(?#note", "", "python", "missing ')': this comment is never closed", 0),
    ("[z-a]", "", "python", "bad character range 'z-a': the start is after the end", 1),
    (
        r"[\d-z]",
        "",
        "python",
        r"bad character range '\d-z': a class escape cannot be a range endpoint",
        1,
    ),
    (
        r"[a-\w]",
        "",
        "python",
        r"bad character range 'a-\w': a class escape cannot be a range endpoint",
        1,
    ),
    ("[abc", "", "python", "unterminated character class: missing ']'", 0),
    ("[]", "", "python", "unterminated character class: missing ']'", 0),
    (
        "a{3,1}",
        "",
        "python",
        "bad repetition bounds {3,1}: the minimum is greater than the maximum",
        1,
    ),
    (
        "a{1000001}",
        "",
        "python",
        "bad repetition bounds {1000001}: 1000001 exceeds the limit of 1,000,000",
        1,
    ),
    ("*a", "", "python", "nothing to repeat before '*'", 0),
    ("a|+", "", "python", "nothing to repeat before '+'", 2),
    ("(?)", "", "python", "unknown group syntax '(?)'", 0),
    ("(?P>n)", "", "python", "unknown group syntax '(?P>'", 0),
    ("{2}", "", "python", "nothing to repeat before '{2}'", 0),
    ("^*", "", "python", "nothing to repeat before '*'", 1),
    ("\\", "", "python", "pattern ends with a lone backslash", 0),
    ("[\\", "", "python", "pattern ends with a lone backslash", 1),
    (r"\xZ1", "", "python", r"invalid escape '\x': expected 2 hex digits", 0),
    (r"\u12", "", "python", r"invalid escape '\u': expected 4 hex digits", 0),
    (r"\U0011FFFF", "", "python", "code point U+11FFFF is out of range", 0),
    (r"\u{110000}", "", "ecma", r"code point \u{110000} is out of range", 0),
    (r"\u{}", "", "ecma", r"invalid escape '\u{': expected hex digits and '}'", 0),
    (r"a\ud800", "", "ecma", "surrogate code point U+D800 cannot be matched", 1),
    (r"\N{NO SUCH NAME}", "", "python", "unknown Unicode character name 'NO SUCH NAME'", 0),
    (r"\p{Foo}", "", "ecma", r"unknown Unicode property '\p{Foo}'", 0),
    (r"[a\P{Script=Grekk}]", "", "ecma", r"unknown Unicode property '\P{Script=Grekk}'", 2),
    (r"\p{Script=Foo}", "", "ecma", r"unknown Unicode property '\p{Script=Foo}'", 0),
    (r"\p{Block=Greek}", "", "python", r"unknown Unicode property '\p{Block=Greek}'", 0),
    (r"\p{Alphabetic=Yes}", "", "ecma", r"unknown Unicode property '\p{Alphabetic=Yes}'", 0),
    (r"\pL", "", "ecma", r"invalid escape '\p': expected '{Property}'", 0),
    ("(?m)a", "", "python", "unsupported inline flag 'm' (supported: i, s)", 2),
    ("(?i:a)(?x:b)", "", "python", "unsupported inline flag 'x' (supported: i, s)", 8),
    ("a(?i)b", "", "python", "global flags '(?i)' must be at the start of the pattern", 1),
    ("(?P<1x>a)", "", "python", "bad group name '1x'", 4),
    ("(?<n>a)(?<n>b)", "", "ecma", "duplicate group name 'n'", 10),
    ("(?P<n", "", "python", "missing '>' after the group name", 0),
    ("a", "m", "python", "unsupported regex flag 'm' (supported: i, s)", 0),
]


@pytest.mark.parametrize(("pattern", "flags", "dialect", "message", "offset"), ERRORS)
def test_error_messages(pattern: str, flags: str, dialect: str, message: str, offset: int) -> None:
    with pytest.raises(RegexError) as info:
        parse_regex(pattern, flags, dialect=dialect)
    error = info.value
    assert error.message == message
    assert error.offset == offset
    assert error.language == "Regex"
    assert error.line == 1 and error.column == offset + 1


# (property, a member, a code point outside it): scripts, script extensions and binary
# properties, each written the ways ECMA-262, Rust's regex and the regex package write them.
SCRIPT_AND_BINARY_PROPERTIES = [
    ("Script=Greek", "α", "a"),
    ("sc=Grek", "Ω", "ω̃"[1]),
    ("Greek", "λ", "l"),
    ("Script=Han", "中", "あ"),
    ("Han", "字", "a"),
    ("sc=Hira", "あ", "ア"),
    ("Katakana", "ア", "あ"),
    ("Script=Cyrillic", "ж", "x"),
    ("Arabic", "ب", "b"),
    ("Script=Latin", "é", "1"),
    ("Common", "1", "a"),
    ("Script_Extensions=Greek", "\u0342", "a"),
    ("scx=Hira", "ー", "a"),
    ("Alphabetic", "ß", "1"),
    ("Alpha", "中", "!"),
    ("White_Space", "\u3000", "a"),
    ("space", "\u2028", "_"),
    ("Emoji", "😀", "a"),
    ("Extended_Pictographic", "😀", "a"),
    ("Emoji_Presentation", "😀", "#"),
    ("ID_Start", "a", "1"),
    ("ID_Continue", "1", "-"),
    ("XID_Start", "é", "0"),
    ("Uppercase", "Ⅳ", "a"),
    ("Lowercase", "ª", "A"),
    ("Hex_Digit", "F", "G"),
    ("ASCII_Hex_Digit", "f", "Ｆ"),
    ("Regional_Indicator", "\U0001f1e6", "A"),
    ("Ideographic", "〇", "a"),
    ("Math", "+", "a"),
    ("Dash", "—", "_"),
    ("Noncharacter_Code_Point", "\ufdd0", "a"),
]


@pytest.mark.parametrize(("name", "member", "outsider"), SCRIPT_AND_BINARY_PROPERTIES)
def test_scripts_and_binary_properties(name: str, member: str, outsider: str) -> None:
    for dialect in ("ecma", "python"):
        inside = parse_regex(f"\\p{{{name}}}", dialect=dialect)
        outside = parse_regex(f"\\P{{{name}}}", dialect=dialect)
        assert contains(inside, member) and not contains(inside, outsider), (name, dialect)
        assert contains(outside, outsider) and not contains(outside, member), (name, dialect)


def test_property_names_compare_loosely_after_the_exact_ones() -> None:
    greek = parse_regex(r"\p{Script=Greek}", dialect="ecma")
    for spelling in ("sc=Grek", "script=greek", "SC=GREEK", "Greek", "grek", "Script = Greek"):
        assert parse_regex(f"\\p{{{spelling}}}", dialect="ecma") == greek, spelling
    letters = parse_regex(r"\p{L}", dialect="ecma")
    for spelling in ("letter", "LETTER", "gc=letter", "General-Category=L"):
        assert parse_regex(f"\\p{{{spelling}}}", dialect="ecma") == letters, spelling
    white = parse_regex(r"\p{White_Space}", dialect="ecma")
    assert parse_regex(r"\p{whitespace}", dialect="ecma") == white
    assert parse_regex(r"\p{WSpace}", dialect="ecma") == white
    # A script and its extensions differ: U+0342 (a combining Greek accent) is Inherited.
    assert not contains(greek, "\u0342")


def test_scripts_in_json_schema_patterns_and_lark_terminals() -> None:
    schema = {"type": "string", "pattern": "^\\p{Script=Greek}+( \\p{sc=Grek}+)*$"}
    grammar = Grammar.from_json_schema(schema)
    assert grammar.accepts('"αβγ δε"')
    assert not grammar.accepts('"abc"') and not grammar.accepts('"αβ de"')
    lark = Grammar.from_lark('start: WORD ("," WORD)*\nWORD: /[\\p{Han}\\p{Hiragana}]+/')
    assert lark.accepts("漢字,ひらがな") and not lark.accepts("漢字,kanji")


def test_scripts_and_binary_properties_agree_with_the_regex_package() -> None:
    regex = pytest.importorskip("regex", reason="the table is generated from the regex package")
    from gramkiln.frontend._regex_unicode import _property_table

    generated_from = _property_table()["regex"]
    if regex.__version__ != generated_from:
        # Releases revise their Unicode data (regex 2026.12.2 moved U+1CF5 out of scx=Deva).
        pytest.skip(
            f"the table was generated from regex {generated_from}, this is {regex.__version__}"
        )
    rng = random.Random(50)
    points = [rng.randrange(0x110000) for _ in range(3000)] + list(range(0x30A0))
    points = [cp for cp in points if not 0xD800 <= cp <= 0xDFFF]
    for name in (
        "Greek",
        "Han",
        "Latin",
        "Common",
        "Inherited",
        "Arabic",
        "Devanagari",
        "scx=Deva",
        "scx=Hani",
        "Alphabetic",
        "Emoji",
        "White_Space",
        "ID_Continue",
        "Cased",
        "Diacritic",
        "Extended_Pictographic",
        "Unified_Ideograph",
    ):
        ours = parse_regex(f"\\p{{{name}}}", dialect="ecma")
        theirs = regex.compile(f"\\p{{{name}}}")
        for cp in points:
            assert contains(ours, chr(cp)) == bool(theirs.fullmatch(chr(cp))), (name, hex(cp))


def test_error_rendering_matches_the_house_format() -> None:
    with pytest.raises(GrammarError) as info:
        parse_regex("abcd(?=x)")
    assert str(info.value) == (
        "Regex error at line 1, column 5: lookahead '(?=' is not supported\nabcd(?=x)\n    ^"
    )


def test_error_in_a_multi_line_pattern_points_at_the_right_line() -> None:
    with pytest.raises(RegexError) as info:
        parse_regex("ab\ncd(?=x)")
    assert (info.value.line, info.value.column, info.value.offset) == (2, 3, 5)
    assert info.value.source_line == "cd(?=x)"


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    assert parse_regex("(" * 100 + "a" + ")" * 100) == lit("a")
    with pytest.raises(RegexError) as info:
        parse_regex("(" * 5000)
    assert info.value.message == "groups are nested more than 100 deep"
    assert info.value.offset == 100


INNER_ANCHORS = [
    "a^b",
    "x(^a)",
    "(a$)b",
    "(a$)b?",
    "(^a|b)(^c)",
    "a$b",
    "a$b*",
    "a*^b",
    "/^[0-9]{4}$/",
    "(?:foo$|bar)baz?",
    "(^a|b)c",
]


@pytest.mark.parametrize("pattern", INNER_ANCHORS)
def test_inner_anchors_are_exact(pattern: str) -> None:
    """'^' and '$' inside a pattern assert a position: what precedes a '^' (follows a '$')
    can only match the empty string there, so it is dropped when it can and the reading
    matches nothing when it cannot. Compared with Python's re for search and full match."""
    import re

    from gramkiln import Grammar

    texts = ["", "a", "b", "c", "ab", "ac", "bc", "xa", "1234", "/1234/", "foo", "bar", "barba"]
    searching = Grammar.from_json_schema({"type": "string", "pattern": pattern})
    whole = Grammar.from_regex(pattern)
    for text in texts:
        assert searching.accepts(json.dumps(text)) == bool(re.search(pattern, text)), text
        assert whole.accepts(text) == bool(re.fullmatch(pattern, text)), text


def test_anchors_inside_groups_at_the_edges() -> None:
    """Real JSON Schema patterns put anchors inside groups; at the edges that is exact."""
    assert search_regex("(^a)") == Seq(items=(lit("a"), ANYTHING))
    assert search_regex("^([^,]|$)") == Choice(
        alternatives=(Seq(items=(chars(",", negated=True), ANYTHING)), Empty())
    )
    assert search_regex("(^a|b$)") == Choice(
        alternatives=(Seq(items=(lit("a"), ANYTHING)), Seq(items=(ANYTHING, lit("b"))))
    )
    assert search_regex("^$|(^x+$)") == Choice(alternatives=(Empty(), Repeat(item=lit("x"), min=1)))
    # For full matches the anchors are no-ops.
    assert parse_regex("(^a|b$)") == chars("ab")
    assert parse_regex("^(?:a|(?:b$))") == chars("ab")


def test_ecma_reads_lone_braces_and_lazy_quantifiers_leniently() -> None:
    """As JSON Schema validators built on Python or Annex B do: literal text, and a lazy
    quantifier has the greedy one's language."""
    assert parse_regex(r"\{d}", dialect="ecma") == lit("{d}")
    assert parse_regex("a{,x}]", dialect="ecma") == lit("a{,x}]")
    assert parse_regex("(.*?)x+?", dialect="ecma") == parse_regex("(.*)x+", dialect="ecma")
    with pytest.raises(RegexError, match=r"lazy quantifier '\*\?' is not supported"):
        parse_regex("a*?")


def test_programming_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="unknown regex dialect 'perl'"):
        parse_regex("a", dialect="perl")
    with pytest.raises(TypeError, match="must be a str"):
        parse_regex(b"a")  # type: ignore[arg-type]


@given(st.text(alphabet="ab()[]{}|*+?^$\\.-,:=!<>Pk0123dDwWsSxupiN#²٣é", max_size=12))
@settings(max_examples=300, deadline=None)
def test_arbitrary_patterns_never_crash(pattern: str) -> None:
    """Any input gives an expression or a located RegexError, never another exception;
    every expression survives the IR's canonical text form."""
    for dialect in ("python", "ecma"):
        try:
            expr = parse_regex(pattern, dialect=dialect)
        except RegexError as error:
            assert 0 <= error.offset <= len(pattern)
        else:
            assert parse_expr(print_expr(expr)) == expr


@given(st.text(alphabet="ab()[]{}|*+?-,:.\\dws", max_size=10))
@settings(max_examples=300, deadline=None)
def test_rejects_what_python_rejects(pattern: str) -> None:
    """Where Python's re cannot compile a pattern, neither do we (we may reject more)."""
    try:
        with warnings.catch_warnings():
            # "Possible nested set" warnings about '[[' are irrelevant here.
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern)
    except re.error:
        with pytest.raises(RegexError):
            parse_regex(pattern)


# ---------------------------------------------------------------------------------------------
# differential tests against Python's re through the reference matcher

HAVE_REFERENCE = importlib.util.find_spec("gramkiln.testing") is not None
needs_reference = pytest.mark.skipif(
    not HAVE_REFERENCE, reason="gramkiln.testing.ReferenceMatcher is not available yet"
)

# Patterns whose meaning is the same under our rules and Python's (ASCII text only, so that
# \d \w \s agree; no '\r' near '.', whose meaning is the same anyway in both).
FULL_MATCH_PATTERNS = [
    r"a*b",
    r"(ab|a)*",
    r"a{2,3}b?",
    r"[^a]b*",
    r"(?i)ab[a-c]",
    r"a|b|",
    r"(a|)+b",
    r"[a-c]{,2}",
    r"(?s:.)b",
    r".a",
    r"\d+",
    r"[\w-]*",
    r"\s?a",
    r"(?i)[^B]a",
    r"(a*)*",
    r"(?:a|bc){2}",
    r"[]a]+",
    r"a{0}",
    r"[\x61-\x63]",
    r"(?i)\x41",
    r"^a+$",
    r"[a\-c]",
    r"\D\W",
    r"(?i:a)b|B",
]
# Python's \d \w \s are Unicode-aware, ours ASCII: text is ASCII except for case-folding
# patterns, which also see the Kelvin sign and the long s (case partners of k and s).
ASCII_ALPHABET = "abcAB\n-1 _]"
FOLDING_PATTERNS = [r"(?i)k+s", r"(?i)[j-l]s?", r"(?i)[^k]", r"(?i:S)k"]
FOLDING_ALPHABET = "kKsS\u212a\u017fa"


@cache
def _full_match_grammar(pattern: str) -> Grammar:
    return Grammar.from_regex(pattern)


@needs_reference
@pytest.mark.parametrize("pattern", FULL_MATCH_PATTERNS)
@given(text=st.text(alphabet=ASCII_ALPHABET, max_size=6))
@settings(max_examples=60, deadline=None)
def test_full_match_agrees_with_python(pattern: str, text: str) -> None:
    expected = re.fullmatch(pattern, text) is not None
    assert _full_match_grammar(pattern).accepts(text) == expected


@needs_reference
@pytest.mark.parametrize("pattern", FOLDING_PATTERNS)
@given(text=st.text(alphabet=FOLDING_ALPHABET, max_size=4))
@settings(max_examples=60, deadline=None)
def test_case_folding_agrees_with_python(pattern: str, text: str) -> None:
    expected = re.fullmatch(pattern, text) is not None
    assert _full_match_grammar(pattern).accepts(text) == expected


@needs_reference
@pytest.mark.parametrize("pattern", FULL_MATCH_PATTERNS[:8])
def test_full_match_members_are_accepted(pattern: str) -> None:
    """Strings Python matches are accepted, checked on short strings exhaustively."""
    import itertools

    grammar = _full_match_grammar(pattern)
    for length in range(4):
        for letters in itertools.product("ab", repeat=length):
            text = "".join(letters)
            assert grammar.accepts(text) == (re.fullmatch(pattern, text) is not None), text


def _random_patterns() -> st.SearchStrategy[str]:
    """Random patterns over constructs whose meaning Python and we agree on for ASCII text."""
    atoms = st.sampled_from(["a", "b", "1", ".", "[ab]", "[^a]", r"\d", r"\w", "[a-b1]", "()"])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        quantified = st.tuples(
            inner, st.sampled_from(["*", "+", "?", "{2}", "{1,2}", "{,1}", "{0,}"])
        ).map(lambda pair: f"(?:{pair[0]}){pair[1]}")
        concatenated = st.lists(inner, min_size=2, max_size=3).map("".join)
        alternated = st.lists(inner, min_size=2, max_size=3).map(
            lambda xs: "(" + "|".join(xs) + ")"
        )
        return quantified | concatenated | alternated

    return st.recursive(atoms, extend, max_leaves=6)


@needs_reference
@given(
    pattern=_random_patterns(),
    texts=st.lists(st.text(alphabet="ab1\n", max_size=5), min_size=1, max_size=6),
)
@settings(max_examples=150, deadline=None)
def test_random_patterns_agree_with_python(pattern: str, texts: list[str]) -> None:
    grammar = Grammar.from_regex(pattern)
    for text in texts:
        assert grammar.accepts(text) == (re.fullmatch(pattern, text) is not None), text


# ECMA patterns that Python reads the same way (no '\n' in the text: Python's '$' would also
# match before a final newline).
SEARCH_PATTERNS = [
    r"ab",
    r"^ab",
    r"ab$",
    r"^ab|c$",
    r"^a*$",
    r"b+c?",
    r"^(a|b)c",
    r"[^a]$",
    r"",
    r"^([^a]|$)",
    r"(^a|b$)",
    r"(a|^b)",
    r"c?(a$|b)",
    r"^$|(^(?:a+b)+$)",
    r"x*?c",
]
SEARCH_ALPHABET = "abcx"


@cache
def _search_grammar(pattern: str) -> Grammar:
    body = search_regex(pattern)
    return Grammar(GrammarIR(start="start", rules=(Rule(name="start", body=body),)))


@needs_reference
@pytest.mark.parametrize("pattern", SEARCH_PATTERNS)
@given(text=st.text(alphabet=SEARCH_ALPHABET, max_size=6))
@settings(max_examples=60, deadline=None)
def test_search_agrees_with_python(pattern: str, text: str) -> None:
    expected = re.search(pattern, text) is not None
    assert _search_grammar(pattern).accepts(text) == expected


# ---------------------------------------------------------------------------------------------
# ECMA dialect against a real ECMA-262 engine (Node.js), when one is installed

NODE = shutil.which("node")
ECMA_PATTERNS = [
    r"ab",
    r"^ab|c$",
    r"^a.c$",
    r"^\s+$",
    r"^[^\s]b",
    r"\d{2}",
    r"^\w*$",
    r"^(?:a|b)+\.c?$",
    r"^[\u00e9\u2028]+$",
    r"^\p{Lu}\p{Ll}*$",
    r"^\P{L}$",
    r"x|^$",
    r"^[^]$",
    r"^[]$|a",
    r"^\u{1F600}|\uD83D\uDE00$",
    r"^(?<name>a)\cJ?$",
    r"^[\d\-x]{1,2}$",
]
ECMA_TEXTS = [
    "",
    "a",
    "ab",
    "xabx",
    "c",
    "cc",
    "\u2028",
    "a\nc",
    "a\rc",
    "abc",
    "A",
    "Ab",
    "\u00e9",
    "\u00a0",
    " \t",
    "12",
    "a.c",
    "ab.",
    "\ufeff",
    "\u3000",
    "_9",
    "É",
    "1",
    "\U0001f600",
    "x\U0001f600",
    "a\n",
    "-x",
    "1-",
    "a.b",
    "ab\r",
    "\u2029b",
    "b 1",
]


def _random_ecma_pattern(rng: random.Random, depth: int = 0) -> str:
    """A random ECMA pattern built from constructs both engines read the same way."""
    if depth >= 2 or rng.random() < 0.3:
        return rng.choice(["a", "b", ".", "[ab]", "[^a]", r"\s", r"\S", r"\d", "\\.", "[\\s\\S]"])
    shape = rng.choice(["quantified", "sequence", "alternation"])
    parts = [_random_ecma_pattern(rng, depth + 1) for _ in range(rng.randint(2, 3))]
    if shape == "quantified":
        return f"(?:{parts[0]}){rng.choice(['*', '+', '?', '{2}', '{1,2}'])}"
    if shape == "sequence":
        return "".join(parts)
    return "(" + "|".join(parts) + ")"


def _random_ecma_patterns(count: int) -> list[str]:
    rng = random.Random(20261129)
    patterns = []
    for _ in range(count):
        body = _random_ecma_pattern(rng)
        patterns.append(rng.choice(["", "^"]) + body + rng.choice(["", "$"]))
    return patterns


@pytest.mark.skipif(NODE is None, reason="no node executable to run ECMA-262 regexes")
def test_search_regex_agrees_with_node() -> None:
    script = (
        "const [patterns, texts] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(patterns.map(p => texts.map(t => new RegExp(p, 'u').test(t)))));"
    )
    patterns = ECMA_PATTERNS + _random_ecma_patterns(60)
    payload = json.dumps([patterns, ECMA_TEXTS])
    result = subprocess.run(
        [NODE, "-e", script], input=payload, capture_output=True, text=True, timeout=60, check=True
    )
    verdicts = json.loads(result.stdout)
    for pattern, row in zip(patterns, verdicts, strict=True):
        grammar = _search_grammar(pattern)
        for text, expected in zip(ECMA_TEXTS, row, strict=True):
            assert grammar.accepts(text) == expected, (pattern, text)
