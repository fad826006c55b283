"""Grammars that accept nothing compile to an all-empty mask and say so with a warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gramkiln import EmptyLanguageWarning, Grammar, Vocab, allocate_token_bitmask


def _unsatisfiable_schema(schema: object) -> Grammar:
    # The front end already says so, naming the contradiction; the compile says it again.
    with pytest.warns(EmptyLanguageWarning, match="admits no JSON document"):
        return Grammar.from_json_schema(schema)


@pytest.mark.parametrize(
    "grammar",
    [
        Grammar.from_lark('start: loop\nloop: loop "x"'),  # no base case
        _unsatisfiable_schema({"type": "array", "minItems": 3, "maxItems": 1}),
        _unsatisfiable_schema(False),
    ],
    ids=["unproductive-rule", "minItems-above-maxItems", "false-schema"],
)
def test_empty_language_warns_and_allows_no_token(grammar: Grammar) -> None:
    with pytest.warns(EmptyLanguageWarning, match="accepts no string"):
        compiled = grammar.compile(Vocab.byte_level())
    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    assert not np.any(bitmask)
    assert not matcher.is_accepting()


def test_a_grammar_that_accepts_something_compiles_silently() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyLanguageWarning)
        Grammar.from_lark('start: "x" | start "y"').compile(Vocab.byte_level())
