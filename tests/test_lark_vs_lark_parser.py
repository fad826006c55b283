"""Random grammars in the subset shared with the ``lark`` package: same language as Lark's parser.

Lark's Earley parser with the ``dynamic_complete`` lexer tries every length for every
terminal, so it decides exact context-free membership like our reference matcher. Random
grammars (sequences, alternatives, groups, ``? * + ~n ~m..n [..]``, ranges, regexes, rule
and terminal references, aliases, prefixes) must accept exactly the same strings over a small
alphabet. ``%ignore`` is left out on purpose: Lark also skips ignored text before the first
token, which this dialect forbids unless ``allow_initial_skip`` is set.
"""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gramkiln import Grammar

lark = pytest.importorskip(
    "lark", reason="the lark package (the differential oracle) is not installed"
)

ALPHABET = "abc"
ALL_STRINGS = tuple(
    "".join(chars) for length in range(5) for chars in itertools.product(ALPHABET, repeat=length)
)
ATOMS = ['"a"', '"b"', '"ab"', '"c"', '"a".."b"', "/[bc]/", "/a+/", "/(ab|c)b?/", "T", "r1", "r2"]


def expressions(depth: int) -> st.SearchStrategy[str]:
    """Lark expressions over ATOMS, nested at most ``depth`` levels."""
    atom = st.sampled_from(ATOMS)
    if depth == 0:
        return atom
    inner = expressions(depth - 1)
    return st.one_of(
        atom,
        st.lists(inner, min_size=2, max_size=3).map(" ".join),
        st.lists(inner, min_size=2, max_size=3).map(lambda alts: "(" + " | ".join(alts) + ")"),
        st.tuples(inner, st.sampled_from(["?", "*", "+", "~2", "~1..2"])).map(
            lambda pair: f"({pair[0]}){pair[1]}"
        ),
        inner.map(lambda e: f"[{e}]"),
    )


@st.composite
def grammars(draw: st.DrawFn) -> str:
    start = draw(st.lists(expressions(2), min_size=1, max_size=3))
    rule1 = draw(expressions(2))
    # r2 may recurse through r1 or itself; the first alternative keeps it productive.
    rule2 = draw(st.sampled_from(['"c"', '"b" r2?', 'r1 "c"', "T | r2 T"]))
    return (
        "?start: " + "\n    | ".join(f"{alt} -> alt{i}" for i, alt in enumerate(start)) + "\n"
        f"r1: {rule1}\n"
        f"!r2: {rule2}\n"
        'T: "c" | "ab"\n'
    )


@functools.lru_cache(maxsize=64)
def lark_parser(source: str):  # type: ignore[no-untyped-def]
    return lark.Lark(source, parser="earley", lexer="dynamic_complete")


def lark_accepts(source: str, text: str) -> bool:
    try:
        lark_parser(source).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(grammars())
def test_random_grammars_match_lark(source: str) -> None:
    try:
        lark_parser(source)
    except lark.exceptions.GrammarError:
        return  # a grammar Lark refuses (e.g. a regex it considers zero-width); not comparable
    ours = Grammar.from_lark(source)
    for text in ALL_STRINGS:
        assert ours.accepts(text) == lark_accepts(source, text), (source, text)
