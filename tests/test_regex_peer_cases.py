"""Regex behaviour that peer engines (XGrammar, llguidance, outlines) test, checked here with
our own examples: lazy quantifiers in whole-pattern regexes, the ``\\e`` and ``\\cX`` escapes,
nested counted repetitions, astral-plane classes, and JSON Schema ``pattern`` search.

Membership goes through the reference matcher (``Grammar.accepts``) and, for a few patterns,
through the compiled byte-level runtime; expectations are cross-checked with Python's ``re``
wherever its dialect agrees with ours.
"""

from __future__ import annotations

import itertools
import re

import pytest
from gramkiln.frontend.regex import RegexError, parse_regex, regex_grammar, search_regex
from gramkiln.ir import GrammarIR, Rule
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar, Vocab


def _strings(alphabet: str, max_length: int) -> list[str]:
    """Every string over ``alphabet`` up to ``max_length`` characters."""
    return [
        "".join(chars)
        for length in range(max_length + 1)
        for chars in itertools.product(alphabet, repeat=length)
    ]


def _runtime_accepts(grammar: Grammar, text: str) -> bool:
    """Whole-string acceptance by the compiled runtime over the byte vocabulary."""
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    return matcher.accept_string(text) and matcher.is_accepting()


# ---------------------------------------------------------------------------------------------
# lazy quantifiers: a full match reads them as the greedy ones

LAZY_PATTERNS = [r"x+?y", r"(pq)*?r", r"m{2,3}?", r"z??w", r"[uv]+?uv", r"k{2,}?"]


@pytest.mark.parametrize("pattern", LAZY_PATTERNS)
def test_lazy_quantifiers_in_a_whole_pattern_match_what_fullmatch_matches(pattern: str) -> None:
    grammar = Grammar.from_regex(pattern)
    for text in _strings("xyzwpqrmuvk", 4) + ["pqpqr", "uvuuv", "kkkkk", "mmmm"]:
        assert grammar.accepts(text) == (re.fullmatch(pattern, text) is not None), text


def test_a_lazy_quantifier_gives_the_greedy_ir() -> None:
    assert regex_grammar("(ab)*?c{1,4}?d??e+?") == regex_grammar("(ab)*c{1,4}d?e+")


def test_lazy_quantifiers_through_the_runtime() -> None:
    grammar = Grammar.from_regex(r"<[a-c]*?>")
    assert _runtime_accepts(grammar, "<abca>")
    assert _runtime_accepts(grammar, "<>")
    assert not _runtime_accepts(grammar, "<ad>")


def test_embedded_python_patterns_still_reject_lazy_quantifiers_unless_asked() -> None:
    """Lark terminals parse with the default, where a lexer would stop at the shortest match."""
    with pytest.raises(RegexError, match=r"lazy quantifier '\+\?' is not supported"):
        parse_regex("q+?")
    assert parse_regex("q+?", lazy_as_greedy=True) == parse_regex("q+")
    with pytest.raises(RegexError, match=r"lazy quantifier '\*\?' is not supported"):
        parse_regex("q*?", dialect="ecma", lazy_as_greedy=False)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("b???", "multiple repeat: '?' follows another quantifier"),
        ("b*?+", "multiple repeat: '+' follows another quantifier"),
        ("b{2,5}?{2}", "multiple repeat: '{2}' follows another quantifier"),
        ("b+?*", "multiple repeat: '*' follows another quantifier"),
        ("b++", "possessive quantifier '++' is not supported"),
    ],
)
def test_a_quantifier_after_a_lazy_one_is_an_error(pattern: str, message: str) -> None:
    with pytest.raises(RegexError) as info:
        Grammar.from_regex(pattern)
    assert info.value.message == message


# ---------------------------------------------------------------------------------------------
# escapes beyond Python's re: \e (escape) and \cX (control character)


def test_escape_character_escape() -> None:
    grammar = Grammar.from_regex(r"\e\[[0-9]+m")
    assert grammar.accepts("\x1b[31m")
    assert not grammar.accepts("e[31m")
    assert Grammar.from_regex(r"[\e\t]+").accepts("\t\x1b\t")
    # ECMA-262 with the u flag has no \e: JSON Schema patterns keep rejecting it.
    with pytest.raises(RegexError, match=r"unknown escape '\\e'"):
        search_regex(r"\e")


def test_control_character_escapes() -> None:
    grammar = Grammar.from_regex(r"a\cMb[\ci\cJ]")
    assert grammar.accepts("a\rb\t")
    assert grammar.accepts("a\rb\n")
    assert not grammar.accepts("a\rbi")
    with pytest.raises(RegexError, match=r"unknown escape '\\c'"):
        Grammar.from_regex(r"\c1")


def test_escaped_metacharacters_are_literal() -> None:
    text = "{[(^$.|?*+)]}/\\"
    pattern = "".join("\\" + char for char in text)
    assert Grammar.from_regex(pattern).accepts(text)


# ---------------------------------------------------------------------------------------------
# repetitions, empty patterns, classes


@pytest.mark.parametrize(
    ("pattern", "accepted", "rejected"),
    [
        ("(b{3,}){1,2}", ["bbb", "bbbb", "bbbbbb", "bbbbbbbbb"], ["", "b", "bb"]),
        ("(c{2,}){2}", ["cccc", "ccccc"], ["", "cc", "ccc"]),
        ("(d+){2,3}e", ["dde", "ddde"], ["e", "de"]),
        ("(f|[gh]{3,}){2,3}", ["ff", "fghg", "ghhggg", "ffggg"], ["f", "gh", "ffff", "fgh"]),
    ],
)
def test_counted_repetition_of_repetitions(
    pattern: str, accepted: list[str], rejected: list[str]
) -> None:
    grammar = Grammar.from_regex(pattern)
    for text in accepted:
        assert grammar.accepts(text) and re.fullmatch(pattern, text), text
    for text in rejected:
        assert not grammar.accepts(text) and not re.fullmatch(pattern, text), text


@pytest.mark.parametrize("pattern", ["", "()", "(())", "(|)", "^", "$", "^$", "()|()", "(?:)"])
def test_patterns_that_match_only_the_empty_string(pattern: str) -> None:
    grammar = Grammar.from_regex(pattern)
    assert grammar.accepts("")
    assert not grammar.accepts("x")


def test_empty_alternatives_anywhere() -> None:
    assert [Grammar.from_regex("|p|q").accepts(t) for t in ("", "p", "q", "pq")] == [
        True,
        True,
        True,
        False,
    ]
    grammar = Grammar.from_regex(r"^$|^ftp://h\.org$")
    assert grammar.accepts("") and grammar.accepts("ftp://h.org")
    assert not grammar.accepts("ftp://h.orgx")


def test_nul_is_an_ordinary_character() -> None:
    """XGrammar rejects NUL in a pattern (a C-string limit); for us it is a literal."""
    grammar = Grammar.from_regex("k\0[0-9]+\0")
    assert grammar.accepts("k\x0012\x00")
    assert not grammar.accepts("k12")


def test_astral_plane_ranges_and_their_complement() -> None:
    inside = Grammar.from_regex("[\U0001f680-\U0001f6a0]{2}")
    outside = Grammar.from_regex("[^\U0001f680-\U0001f6a0]{2}")
    # (text, matched by the class twice, matched by its complement twice)
    for text, in_class, in_complement in [
        ("\U0001f680\U0001f6a0", True, False),
        ("\U0001f690\U0001f681", True, False),
        ("\U0001f67f\U0001f680", False, False),
        ("\U0001f6a1\U0001f67f", False, True),
        ("ab", False, True),
    ]:
        assert inside.accepts(text) == in_class, text
        assert outside.accepts(text) == in_complement, text
    assert Grammar.from_regex("[^x-z]+").accepts("\U0001f600")
    assert _runtime_accepts(inside, "\U0001f690\U0001f681")


def test_dot_is_one_code_point_but_not_a_newline() -> None:
    grammar = Grammar.from_regex("<...>")
    assert grammar.accepts("<\u00e9\u4e2d\U0001f600>")
    assert not grammar.accepts("<\u00e9\u4e2d>")
    assert not grammar.accepts("<a\nb>")


def test_case_insensitive_non_ascii_word() -> None:
    grammar = Grammar.from_regex("(?i)\u0141\u00f3d\u017a")  # Łódź
    for text in ("\u0141\u00f3d\u017a", "\u0142\u00d3D\u0179", "\u0142\u00f3d\u017a"):
        assert grammar.accepts(text)
    assert not grammar.accepts("Lodz")


# ---------------------------------------------------------------------------------------------
# JSON Schema pattern: ECMA search semantics on the decoded string


def _search_grammar(pattern: str) -> Grammar:
    return Grammar(
        GrammarIR(start="start", rules=(Rule(name="start", body=search_regex(pattern)),))
    )


@pytest.mark.parametrize(
    ("pattern", "text", "found"),
    [
        ("k9", "..k9..", True),
        ("k9", "k", False),
        ("^k9", "k9..", True),
        ("^k9", ".k9", False),
        ("k9$", ".k9", True),
        ("k9$", "k9.", False),
        ("^p$|^q$", "q", True),
        ("^p$|^q$", "pq", False),
        ("(^p$)|(^q$)", ".q", False),
        ("^p|q$", "p..", True),
        ("^p|q$", "..q", True),
        ("^p|q$", "..p", False),
        (r"\^p\$", "-^p$-", True),
        (r"[\$\^]", "a$", True),
    ],
)
def test_search_anchors_belong_to_their_alternative(pattern: str, text: str, found: bool) -> None:
    assert _search_grammar(pattern).accepts(text) == found
    assert (re.search(pattern, text) is not None) == found


def test_schema_pattern_applies_to_the_decoded_string() -> None:
    """``"p\\bq"`` decodes to p, backspace, q: no white space, so ``^\\S+$`` holds."""
    grammar = Grammar.from_json_schema({"type": "string", "pattern": r"^\S+$"})
    assert grammar.accepts('"p\\bq"')
    assert grammar.accepts('"p\\u0071"')
    assert not grammar.accepts('"p\\tq"')
    assert not grammar.accepts('"p q"')
    assert not grammar.accepts('""')
    astral = Grammar.from_json_schema({"type": "string", "pattern": r"^\u{1F680}$"})
    assert astral.accepts('"\U0001f680"')
    assert astral.accepts('"\\ud83d\\ude80"')
    assert not astral.accepts('"\\ud83d"')


# ---------------------------------------------------------------------------------------------
# Python's '$' also holds before a newline that ends the string


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("k$\n?", "k\n", True),
        ("k$\n?", "k", True),
        ("k$\n", "k\n", True),
        ("k$\n$", "k\n", True),
        ("k$\n\n", "k\n\n", False),
        (r"k$\s*", "k\n", True),
        (r"k$\s*", "k\n\n", False),
        (r"k$\s*", "k ", False),
        ("(k$|m)\n", "k\n", True),
        ("(k$|m)\n", "m\n", True),
        ("(k$\n?)\n?", "k\n", True),
        ("(k$\n?)\n?", "k\n\n", False),
        ("(k$\n)x", "k\nx", False),
        ("(?:k$|m)(?:\n|x)*", "k\n", True),
        ("(?:k$|m)(?:\n|x)*", "k\nx", False),
    ],
)
def test_dollar_before_a_final_newline(pattern: str, text: str, matches: bool) -> None:
    assert (re.fullmatch(pattern, text) is not None) == matches
    assert Grammar.from_regex(pattern).accepts(text) == matches


def test_search_patterns_keep_the_ecma_dollar() -> None:
    """ECMA-262 without the m flag: '$' is only the end of the string."""
    grammar = _search_grammar("k$")
    assert grammar.accepts("xk")
    assert not grammar.accepts("xk\n")


def _anchor_free_patterns() -> st.SearchStrategy[str]:
    atoms = st.sampled_from(["a", "b", "\\n", r"\s", "[^a]", ".", "()", "(?s:.)"])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        quantified = st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{,2}"])).map(
            lambda pair: f"(?:{pair[0]}){pair[1]}"
        )
        concatenated = st.lists(inner, min_size=2, max_size=3).map("".join)
        alternated = st.lists(inner, min_size=2, max_size=3).map(
            lambda parts: "(" + "|".join(parts) + ")"
        )
        return quantified | concatenated | alternated

    return st.recursive(atoms, extend, max_leaves=5)


def _anchored_patterns() -> st.SearchStrategy[str]:
    """Patterns with '^' and '$' anywhere we accept them: every '^' before every '$', and
    no anchor in a repeated group."""
    piece = _anchor_free_patterns()
    opening = st.one_of(
        piece, st.just("^"), piece.map(lambda p: f"(^{p}|b)"), piece.map(lambda p: f"(?:{p}|^)")
    )
    closing = st.one_of(
        piece, st.just("$"), piece.map(lambda p: f"({p}$|a)"), piece.map(lambda p: f"(?:$|{p})")
    )
    return st.tuples(st.lists(opening, max_size=3), st.lists(closing, max_size=3)).map(
        lambda parts: "".join(parts[0] + parts[1])
    )


@given(
    pattern=_anchored_patterns(),
    texts=st.lists(st.text(alphabet="ab\n ", max_size=4), min_size=1, max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_anchored_random_patterns_agree_with_python(pattern: str, texts: list[str]) -> None:
    grammar = Grammar.from_regex(pattern)
    for text in texts + ["", "a\n", "\n"]:
        assert grammar.accepts(text) == (re.fullmatch(pattern, text) is not None), (pattern, text)


# -- case folding (found by comparing with Python's re and Rust's regex) ------------------------


@pytest.mark.parametrize(
    "pattern, text, expected",
    [
        # ASCII \W holds the Kelvin sign, long s and dotless i: folding it let k, s, i in.
        (r"(?i)[^\W\d_]+", "kiss", True),
        (r"(?i)[\W]", "k", False),
        (r"(?i)[\W]", "S", False),
        (r"(?i)\W", "i", False),
        (r"(?i)[\w]+", "KiSs", True),
        # Python's re pairs U+0130 with i (its simple lower-case table).
        (r"(?i)i", "\u0130", True),
        (r"(?i)[^a-z]", "\u0130", False),
        # A property outside a class is folded like one inside.
        (r"(?i)\p{Ll}", "A", True),
        (r"(?i)[\p{Ll}]", "A", True),
        (r"\p{Ll}", "A", False),
        # A negated property is folded before its negation, as in Rust's regex and the regex
        # package (until session 50 the complement was folded, so nearly every letter matched).
        (r"(?i)\P{Ll}", "a", False),
        (r"(?i)\P{Ll}", "A", False),
        (r"(?i)\P{Ll}", "1", True),
        (r"(?i)\P{Lu}", "a", False),
        (r"(?i)\P{Greek}", "\u03c3", False),
        (r"(?i)\P{Greek}", "s", True),
        (r"(?i)[\P{Ll}]", "A", False),
        (r"(?i)[x\P{Ll}]", "X", True),
        (r"(?i)[x\P{Ll}]", "a", False),
        (r"(?i)[^\P{Ll}]", "A", True),
        (r"(?i)[^\P{Ll}]", "1", False),
    ],
)
def test_case_insensitive_classes(pattern: str, text: str, expected: bool) -> None:
    grammar = Grammar.from_regex(pattern)
    assert grammar.accepts(text) == expected
    matcher = grammar.compile().matcher()
    assert (matcher.accept_string(text) and matcher.is_accepting()) == expected
