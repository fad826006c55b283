"""Languages of strings over decoded code points as automata: patterns, fixed key sets and
their complements (used for object keys and for string constraints that must intersect)."""

from __future__ import annotations

from functools import lru_cache

from gramkiln.frontend.json_schema.automaton import (
    Dfa,
    accepts,
    complement,
    dfa_from_expr,
)
from gramkiln.frontend.regex import search_regex


@lru_cache(maxsize=512)
def pattern_dfa(pattern: str) -> Dfa:
    """The automaton of strings containing a match of an ECMA-262 ``pattern``."""
    return dfa_from_expr(search_regex(pattern))


def pattern_matches(pattern: str, text: str) -> bool:
    """Whether the ECMA-262 ``pattern`` matches somewhere in ``text`` (exact)."""
    return accepts(pattern_dfa(pattern), text)


def word_set_dfa(words: tuple[str, ...]) -> Dfa:
    """The automaton accepting exactly the given strings (their trie)."""
    edges: list[dict[int, int]] = [{}]
    accepting: set[int] = set()
    for word in words:
        state = 0
        for char in word:
            code = ord(char)
            if code not in edges[state]:
                edges.append({})
                edges[state][code] = len(edges) - 1
            state = edges[state][code]
        accepting.add(state)
    return Dfa(
        edges=[[(c, c, t) for c, t in sorted(out.items())] for out in edges], accepting=accepting
    )


def not_words_dfa(words: tuple[str, ...]) -> Dfa:
    """Every string except the given ones."""
    return complement(word_set_dfa(words))


def any_string_dfa() -> Dfa:
    """Every string."""
    return complement(Dfa(edges=[[]], accepting=set()))
