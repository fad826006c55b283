"""Behaviour the peer engines' own Lark tests expect, in this project's words and examples.

Each test pins down one point where gramkiln used to disagree with XGrammar (the reference
dialect, seed ``shared/seeds/000_393662a2e08c0778.txt``) and now agrees. Membership goes
through the reference matcher; where the compiled runtime could differ (embedded JSON), the
byte-level runtime is checked too.
"""

from __future__ import annotations

import re

import pytest
from gramkiln.frontend.lark import parse_lark
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
