"""EBNF behaviour that XGrammar's and llama.cpp's own grammars and tests rely on.

Each test pins one point where gramkiln used to disagree with those engines (found by running
their test cases through ``Grammar.from_ebnf``); the examples here are our own.
"""

from __future__ import annotations

import time

import pytest
from gramkiln.frontend import ebnf_dispatch
from gramkiln.frontend.ebnf import parse_ebnf
from gramkiln.ir import CharClass, Literal, Ref, Repeat, Seq

from gramkiln import Grammar, Vocab, allocate_token_bitmask
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
    body = parse_ebnf("root ::= ((digit{3, -1}))\ndigit ::= [0-9]").rule("root").body
    assert body == Repeat(item=Ref(name="digit"), min=3, max=None)
    source = "root ::= ((digit{3, -1}))\ndigit ::= [0-9]"
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
    source = "root ::= digit. digit\ndigit ::= [0-9]"
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


def test_temperature_rule_option_is_kept_in_the_ir() -> None:
    # A sampling setting: the IR carries it (as from Lark); the language does not change.
    source = 'root ::= "n=" num\nnum[temperature=0.25] ::= [0-9]+'
    grammar = parse_ebnf(source)
    assert grammar.rule("num").options.temperature == 0.25
    assert grammar.rule("root").options.temperature is None
    assert accepted(source, "n=42")
    assert not accepted(source, "n=")


@pytest.mark.parametrize(
    ("options", "message", "column"),
    [
        ("temperature=-0.5", "bad value for rule option 'temperature': 'temperature=-0.5'", 5),
        ("temperature=nan", "bad value for rule option 'temperature': 'temperature=nan'", 5),
        ("temperature", "bad value for rule option 'temperature': 'temperature'", 5),
        ("lazy, temperature=1", "bad rule options: temperature cannot be combined with lazy", 4),
    ],
)
def test_bad_temperature_options(options: str, message: str, column: int) -> None:
    error = error_of(f"root ::= num\nnum[{options}] ::= [0-9]+")
    assert (error.message, error.line, error.column) == (message, 2, column)


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


# ---------------------------------------------------------------------------------------------
# XGrammar's TagDispatch / TokenTagDispatch macros


@pytest.fixture(params=["regex", "rules"])
def dispatch_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with both lowerings of the dispatch free text: regular expressions (the
    default) and the left-linear rules used when those would grow too large."""
    if request.param == "rules":
        monkeypatch.setattr(ebnf_dispatch, "REGEX_NODE_BUDGET", 0)
    return request.param


TOOLS = """
root ::= TagDispatch(("<call>", call), ("<note>", note))
call ::= "{" [a-z]+ "}"
note ::= [A-Z]+ "."
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("plain text, no tags", True),
        ("before <call>{get} after", True),
        ("<call>{a}<note>OK.<call>{b}", True),
        ("<note>X. dangling half tag <cal", True),
        ("<<call>{a}", True),  # a '<' of free text right before the tag
        ("<call>", False),  # a dispatched rule must complete
        ("<call>{}", False),
        ("<call> {a}", False),  # the first complete tag dispatches at once
        ("x <note>ok.", False),
        ("<note>A.<call>{a", False),
    ],
)
def test_tag_dispatch_membership(text: str, expected: bool, dispatch_form: str) -> None:
    assert Grammar.from_ebnf(TOOLS).accepts(text) is expected


def test_tag_dispatch_rule_may_end_anywhere_its_body_can(dispatch_form: str) -> None:
    # After "<r>" the rule takes "r"+; every split between it and the free text that follows
    # counts, as in any context-free match.
    source = 'root ::= TagDispatch(("<r>", rs))\nrs ::= "r"+'
    assert accepted(source, "<r>rrr and more")
    assert accepted(source, "<r>rr<r>r")
    assert not accepted(source, "<r><r>r")


def test_the_first_tag_to_complete_wins(dispatch_form: str) -> None:
    # "ab" completes inside "xaby" before "xaby" can, so "xaby" never dispatches.
    source = 'root ::= TagDispatch(("ab", one), ("xaby", two))\none ::= "1"\ntwo ::= "2"'
    assert accepted(source, "xab1")
    assert not accepted(source, "xaby2")


def test_of_two_tags_ending_together_the_longer_counts(dispatch_form: str) -> None:
    source = 'root ::= TagDispatch(("ca", long), ("a", short))\nlong ::= "L"\nshort ::= "S"'
    assert accepted(source, "caL")
    assert not accepted(source, "caS")
    assert accepted(source, "b aS")


def test_tag_dispatch_without_loop_ends_after_the_rule(dispatch_form: str) -> None:
    source = 'root ::= TagDispatch(("#", n), loop_after_dispatch=false) "!"\nn ::= [0-9]'
    assert accepted(source, "text#7!")
    assert accepted(source, "text!")
    assert not accepted(source, "#7#8!")
    assert not accepted(source, "#7 more!")


def test_tag_dispatch_excludes_keep_a_closing_tag_out_of_the_free_text(dispatch_form: str) -> None:
    source = """root ::= "<a>" inner "</a>"
inner ::= TagDispatch(("<b>", bold), excludes=("</a>",))
bold ::= [a-z]* "</b>"
"""
    assert accepted(source, "<a>x <b>y</b> z</a>")
    assert accepted(source, "<a></a>")
    assert not accepted(source, "<a>x</a>y</a>")
    assert not accepted(source, "<a><b></a></b></a>")


def test_tag_dispatch_stops_end_the_free_text(dispatch_form: str) -> None:
    source = """root ::= TagDispatch(("<t>", t), stops=("END", "STOP"), stop_eos=false) "."
t ::= "x"
"""
    assert accepted(source, "abc END.")
    assert accepted(source, "<t>x yz STOP.")
    assert not accepted(source, "abc.")  # stop_eos=false: only a stop string ends it
    assert not accepted(source, "ENDEND.")  # the first stop string ends the free text
    # The older spelling stop_str is read too, and stop_eos=true also allows ending anywhere.
    older = 'root ::= TagDispatch(("<t>", t), stop_str=("END",))\nt ::= "x"'
    assert accepted(older, "a END")
    assert accepted(older, "a EN")
    assert not accepted(older, "a END b")


def test_tag_dispatch_masks_match_the_language(dispatch_form: str) -> None:
    # The mask for every prefix must allow exactly the tokens that keep it a prefix of the
    # language (checked against the reference matcher).
    grammar = Grammar.from_ebnf(TOOLS)
    pieces = ["<", "call", "<call>", ">", "{", "}", "ab", "{a}", "<note>", "N.", ".", " ", "x<c"]
    vocab = Vocab([piece.encode() for piece in pieces], eos_ids=[])
    compiled = grammar.compile(vocab)
    text = "a<<call>{ab}<note>N. x<c"
    for cut in range(len(text) + 1):
        matcher = compiled.matcher()
        assert matcher.accept_string(text[:cut])
        bitmask = allocate_token_bitmask(1, len(pieces))
        matcher.fill_next_token_bitmask(bitmask)
        allowed = {
            piece
            for index, piece in enumerate(pieces)
            if (int(bitmask[0, index // 32]) >> (index % 32)) & 1
        }
        assert allowed == {piece for piece in pieces if grammar.is_prefix(text[:cut] + piece)}, (
            text[:cut]
        )


def test_tag_dispatch_free_text_is_linear_time(dispatch_form: str) -> None:
    # The free text is a left-linear grammar: 20,000 characters take milliseconds (a
    # right-linear one took over a second for 4,000).
    compiled = Grammar.from_ebnf(TOOLS).compile()
    matcher = compiled.matcher()
    text = "some <cal free text <note>A. " * 700
    started = time.process_time()
    assert matcher.accept_string(text)
    assert time.process_time() - started < 2.0
    assert matcher.is_accepting()


def test_nested_tag_dispatch(dispatch_form: str) -> None:
    source = """root ::= TagDispatch(("[", block))
block ::= TagDispatch(("(", paren), stops=("]",), stop_eos=false)
paren ::= [a-z]* ")"
"""
    assert accepted(source, "a[b(c)d]e[]")
    assert not accepted(source, "a[b(c]")
    assert not accepted(source, "a[b(c)")  # a block ends only at its stop string


@pytest.mark.parametrize(
    ("source", "message", "column"),
    [
        ('root ::= TagDispatch(("", x))\nx ::= "x"', "a TagDispatch tag must not be empty", 23),
        (
            'root ::= TagDispatch("<t>", x)\nx ::= "x"',
            "TagDispatch(...) takes (trigger, rule) pairs and name=value options, found '\"'",
            22,
        ),
        ('root ::= TagDispatch(("<t>" x))\nx ::= "x"', "expected ',' after the tag", 29),
        ('root ::= TagDispatch(("<t>", 5))', "expected a rule name in a TagDispatch(...) pair", 30),
        ('root ::= TagDispatch(("<t>", nope))', "undefined rule 'nope'", 30),
        (
            'root ::= TagDispatch(("<t>", x), ("<t>", x))\nx ::= "x"',
            "TagDispatch(...) lists the trigger '<t>' twice",
            34,
        ),
        (
            'root ::= TagDispatch(("<t>", x), stops=true)\nx ::= "x"',
            'expected a parenthesised tuple, e.g. ("a", "b")',
            40,
        ),
        (
            'root ::= TagDispatch(("<t>", x), stop_eos=no)\nx ::= "x"',
            "'stop_eos' takes true or false",
            43,
        ),
        (
            'root ::= TagDispatch(("<t>", x), colour=1)\nx ::= "x"',
            "unknown TagDispatch(...) option 'colour'",
            34,
        ),
        (
            'root ::= TagDispatch(("<t>", x), stops=("e",), stops=("f",))\nx ::= "x"',
            "TagDispatch(...) option 'stops' is given twice",
            48,
        ),
        (
            'root ::= TagDispatch(("<t>", x), excludes=("<",))\nx ::= "x"',
            "TagDispatch(...) excluded string '<' is a prefix of the tag '<t>'",
            10,
        ),
        (
            'root ::= TagDispatch(("<t>", x), stop_eos=false)\nx ::= "x"',
            "TagDispatch(...) needs stop_eos=true or some stops",
            10,
        ),
        (
            'root ::= TagDispatch(("<t>", x)\nx ::= "x"',
            "expected ',' or ')' in TagDispatch(...)",
            1,
        ),
        (
            'root ::= TokenTagDispatch((7, x), excludes=(7,))\nx ::= "x"',
            "TokenTagDispatch(...) token 7 is both a trigger and excluded",
            10,
        ),
        (
            'root ::= TokenTagDispatch(("7", x))\nx ::= "x"',
            "TokenTagDispatch(...) takes non-negative integer token ids",
            28,
        ),
        (
            'root ::= TokenTagDispatch((7, x), stops=(8,))\nx ::= "x"',
            "unknown TokenTagDispatch(...) option 'stops'",
            35,
        ),
    ],
)
def test_dispatch_macro_errors(source: str, message: str, column: int) -> None:
    error = error_of(source)
    assert error.message == message
    assert error.column == column


def test_a_rule_named_like_the_macro_is_an_ordinary_reference() -> None:
    source = 'root ::= TagDispatch\nTagDispatch ::= "td"'
    assert accepted(source, "td")


def test_helper_rule_names_never_collide_with_the_users(dispatch_form: str) -> None:
    source = """root ::= TagDispatch(("<t>", tag_dispatch_0_free0))
tag_dispatch_0_free0 ::= "mine"
"""
    grammar = parse_ebnf(source)
    names = [rule.name for rule in grammar.rules]
    assert len(names) == len(set(names))
    assert grammar.rule("tag_dispatch_0_free0").body == Literal(text="mine")
    assert accepted(source, "a<t>mine b")
    assert not accepted(source, "a<t>b")


TOKENS = [b"</s>", b"a", b"b", b"{", b"}", b"<tool>", b"<stop>", b"x{"]


def token_run(source: str, ids: list[int]) -> bool:
    vocab = Vocab(TOKENS, eos_ids=[0], special_ids=[5, 6])
    matcher = Grammar.from_ebnf(source).compile(vocab).matcher()
    return all(matcher.accept_token(token) for token in ids) and matcher.is_accepting()


def test_token_tag_dispatch() -> None:
    source = 'root ::= TokenTagDispatch((5, args), excludes=(6,))\nargs ::= "{" [ab]* "}"'
    assert token_run(source, [])
    assert token_run(source, [1, 2, 1])
    assert token_run(source, [1, 5, 3, 1, 4, 2, 5, 3, 4])
    assert not token_run(source, [5, 3])  # the dispatched rule must complete
    assert not token_run(source, [6])  # excluded
    assert not token_run(source, [5, 7])  # the text "x{" does not start the rule


def test_token_tag_dispatch_without_loop() -> None:
    source = 'root ::= TokenTagDispatch((5, args), loop_after_dispatch=false)\nargs ::= "{}"'
    assert token_run(source, [1, 6, 5, 3, 4])
    assert not token_run(source, [5, 3, 4, 1])


# ---------------------------------------------------------------------------------------------
# Regex("...") is a whole-match language, where a lazy quantifier means what the greedy one does


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("x+?y", "xxxy", True),
        ("x+?y", "y", False),
        ("(ab)*?c", "ababc", True),
        ("q{2,3}?", "qqq", True),
        ("q{2,3}?", "qqqq", False),
    ],
)
def test_regex_macro_reads_lazy_quantifiers_as_greedy(
    pattern: str, text: str, expected: bool
) -> None:
    assert accepted(f'root ::= Regex("{pattern}")', text) is expected


def test_gbnf_rule_names_may_start_with_a_digit_or_a_dash() -> None:
    # llama.cpp's JSON-schema converter writes `-kv ::= ...` for an empty property name, and
    # its parser takes any run of [a-zA-Z0-9-] as a name; the IR gets names it can print.
    source = 'root ::= -kv 1st _-kv\n-kv ::= "a"\n1st ::= "b" | 1st "b"\n_-kv ::= "c"\n'
    grammar = Grammar.from_ebnf(source)
    assert {rule.name for rule in grammar.ir.rules} == {"root", "__-kv", "_1st", "_-kv"}
    assert accepted(source, "abbc")
    assert not accepted(source, "ac")
    matcher = grammar.compile().matcher()
    assert matcher.accept_string("abc") and matcher.is_accepting()
    assert "undefined rule '2nd'" in str(error_of('root ::= 2nd\n1st ::= "a"\n'))
