"""EBNF behaviour that XGrammar's and llama.cpp's own grammars and tests rely on.

Each test pins one point where gramkiln used to disagree with those engines (found by running
their test cases through ``Grammar.from_ebnf``); the examples here are our own.
"""

from __future__ import annotations

import pytest
from gramkiln.frontend.ebnf import parse_ebnf
from gramkiln.ir import CharClass, Literal, Ref, Repeat, Seq

from gramkiln import Grammar
from gramkiln.errors import GrammarError


def accepted(source: str, text: str | bytes, root: str = "root") -> bool:
    return Grammar.from_ebnf(source, root=root).accepts(text)


def error_of(source: str) -> GrammarError:
    with pytest.raises(GrammarError) as info:
        parse_ebnf(source)
    assert info.value.language == "EBNF"
    return info.value


# ---------------------------------------------------------------------------------------------
# quantifiers may follow blanks, as both engines allow


@pytest.mark.parametrize(
    "source",
    [
        'root ::= "ab" {2, 3}',
        'root ::= "ab"{ 2 , 3 }',
        'root ::= ("ab") {2,3}',
        'root ::= "ab"\n    {2,3}',
    ],
)
def test_counted_repetition_after_blanks(source: str) -> None:
    assert parse_ebnf(source).rule("root").body == Repeat(item=Literal(text="ab"), min=2, max=3)
    grammar = Grammar.from_ebnf(source)
    assert [grammar.accepts("ab" * count) for count in range(1, 5)] == [
        False,
        True,
        True,
        False,
    ]


def test_operators_after_blanks() -> None:
    source = 'root ::= [0-9] + "." ? word *\nword ::= [a-z]'
    assert parse_ebnf(source).rule("root").body == Seq(
        items=(
            Repeat(item=CharClass.of([(0x30, 0x39)]), min=1),
            Repeat(item=Literal(text="."), max=1),
            Repeat(item=Ref(name="word")),
        )
    )
    assert accepted(source, "42.xyz")
    assert accepted(source, "7")
    assert not accepted(source, ".x")


def test_a_comment_between_element_and_quantifier() -> None:
    assert accepted('root ::= "z" # one or more\n  +', "zzz")


@pytest.mark.parametrize(
    ("source", "column"),
    [('root ::= "q"+ ?', 15), ('root ::= "q"{2} {3}', 17), ('root ::= "q" * *', 16)],
)
def test_two_quantifiers_stay_an_error_with_blanks_between(source: str, column: int) -> None:
    error = error_of(source)
    assert error.message.startswith("multiple repeat:")
    assert (error.line, error.column) == (1, column)


def test_a_blank_before_a_new_rule_is_not_taken_for_a_quantifier() -> None:
    grammar = parse_ebnf('root ::= item\n\nitem ::= "i"')
    assert grammar.rule("root").body == Ref(name="item")


# ---------------------------------------------------------------------------------------------
# {m, -1}: XGrammar prints unbounded repetition this way, and reads its own output back


def test_minus_one_upper_bound_means_unbounded() -> None:
    body = parse_ebnf('root ::= ((digit{3, -1}))\ndigit ::= [0-9]').rule("root").body
    assert body == Repeat(item=Ref(name="digit"), min=3, max=None)
    source = 'root ::= ((digit{3, -1}))\ndigit ::= [0-9]'
    assert not accepted(source, "12")
    assert accepted(source, "123")
    assert accepted(source, "1234567890" * 5)


@pytest.mark.parametrize("bounds", ["{-1}", "{-1,3}", "{2,-2}", "{2, - 1}"])
def test_other_negative_bounds_are_errors(bounds: str) -> None:
    error = error_of(f'root ::= "r"{bounds}')
    assert error.message.startswith(f"bad repetition bounds {bounds}")


# ---------------------------------------------------------------------------------------------
# escapes


def test_slash_and_question_mark_escapes_in_strings() -> None:
    assert parse_ebnf(r'root ::= "a\/b\?"').rule("root").body == Literal(text="a/b?")


def test_regex_metacharacters_escaped_in_classes() -> None:
    source = r"root ::= [\$\.\*\+\?\(\)\{\}\|]+"
    assert accepted(source, "{(a)}") is False
    assert accepted(source, "$.*+?(){}|")
    assert accepted(source, "||")
    assert not accepted(source, "\\")


@pytest.mark.parametrize(
    ("escape", "expected"),
    [
        (r"\x41", "A"),
        (r"\x7", "\x07"),
        (r"\x20AC", "\u20ac"),  # any number of hex digits, as XGrammar reads them
        (r"\x1F642", "\U0001f642"),
        (r"\x0000041", "A"),
    ],
)
def test_hex_escape_takes_every_following_hex_digit(escape: str, expected: str) -> None:
    assert parse_ebnf(f'root ::= "{escape}"').rule("root").body == Literal(text=expected)


def test_hex_escape_stops_at_the_first_non_hex_character() -> None:
    assert parse_ebnf(r'root ::= "\x41g\x42"').rule("root").body == Literal(text="AgB")
    source = r"root ::= [\x30-\x39\x2D]+"
    assert accepted(source, "12-3")
    assert not accepted(source, "1a")


@pytest.mark.parametrize(
    ("source", "message", "column"),
    [
        (r'root ::= "\x"', "invalid escape '\\x': expected hex digits", 11),
        (r'root ::= "ab\x110000"', "code point U+110000 is out of range", 13),
        (r"root ::= [\xD800]", "surrogate code point U+D800 cannot be matched", 11),
    ],
)
def test_bad_hex_escapes(source: str, message: str, column: int) -> None:
    error = error_of(source)
    assert (error.message, error.line, error.column) == (message, 1, column)


def test_empty_negated_class_matches_any_one_character() -> None:
    source = "root ::= [^] [^]"
    assert accepted(source, "\n\u00e9")
    assert not accepted(source, "x")
    assert not accepted(source, "xyz")


# ---------------------------------------------------------------------------------------------
# rule names with dots (XGrammar) next to GBNF's '.' any-character element


def test_dotted_rule_names() -> None:
    source = 'root ::= pkg.item ("," pkg.item)*\npkg.item ::= [a-z]+'
    grammar = parse_ebnf(source)
    assert [rule.name for rule in grammar.rules] == ["root", "pkg.item"]
    assert accepted(source, "ab,c")
    assert not accepted(source, "ab,")


def test_a_dot_after_a_plain_rule_name_is_any_character() -> None:
    source = 'root ::= digit. digit\ndigit ::= [0-9]'
    assert parse_ebnf(source).rule("root").body == Seq(
        items=(Ref(name="digit"), CharClass.of([(0, 0x10FFFF)]), Ref(name="digit"))
    )
    assert accepted(source, "1x2")
    assert not accepted(source, "12")


def test_an_undefined_dotted_name_is_reported_whole() -> None:
    error = error_of('root ::= a.b "x"')
    assert (error.message, error.column) == ("undefined rule 'a.b'", 10)


# ---------------------------------------------------------------------------------------------
# XGrammar features without an exact equivalent are named in the error


def test_temperature_rule_option_is_a_clear_error() -> None:
    error = error_of('root ::= word\nword[lazy, temperature=0.5] ::= [a-z]+')
    assert error.message == (
        "the XGrammar rule option 'temperature' (sampling temperature) is not supported"
    )
    assert (error.line, error.column) == (2, 12)


@pytest.mark.parametrize(
    ("source", "column"),
    [
        ('root ::= "x" (= "y")', 14),
        ('root ::= (("x")) (=(item))\nitem ::= "y"', 18),
    ],
)
def test_lookahead_assertions_are_a_clear_error(source: str, column: int) -> None:
    error = error_of(source)
    assert error.message.startswith("XGrammar lookahead assertions '(= ...)' are not supported")
    assert (error.line, error.column) == (1, column)


# ---------------------------------------------------------------------------------------------
# the layout of XGrammar's and llama.cpp's grammars


def test_xgrammar_printed_layout_parses() -> None:
    # XGrammar's printer wraps every body in double parentheses and names helper rules
    # rule_N; such text must read back with the same language.
    source = (
        "root ::= ((pair pair_1))\n"
        'pair ::= (("<" key ">"))\n'
        "key ::= (([a-z] key_1))\n"
        'pair_1 ::= ("" | (("," pair) pair_1))\n'
        'key_1 ::= ("" | ([a-z0-9] key_1))\n'
    )
    assert accepted(source, "<a1>,<bc>")
    assert not accepted(source, "<1a>")
    assert not accepted(source, "<a>,")


def test_gbnf_layout_parses() -> None:
    # The conventions of llama.cpp's sample grammars: indented continuation lines, an empty
    # first alternative, names with '-', a class up to U+10FFFF, counted repetition, and a
    # comment after an alternative.
    source = r"""
# a tiny key=value list
root      ::= entry ("\n" entry)*
entry     ::=
  key-name sp "=" sp value    # one entry per line
key-name  ::= [a-z] [a-z0-9-]{0,15}
value     ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\nt] )* "\""
            | "-"? [0-9]+
sp        ::= | " " | "\t"
"""
    grammar = Grammar.from_ebnf(source)
    assert grammar.accepts('max-len = 12\nname="a\\"b \u00e9"')
    assert grammar.accepts("k=-7")
    assert not grammar.accepts("k = 1\n")
    assert not grammar.accepts("a-very-long-key-name-here=1")
    assert not grammar.accepts('k="\x01"')
