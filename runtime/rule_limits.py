"""Rule options the runtime enforces per occurrence: ``max_tokens``, ``max_chars`` and
``temperature`` (seed 000, "Token Budgets", "Character Budgets", "Sampling Temperature").

A rule carrying one of them is compiled as one lexeme of its own (its body must be a regular
language), so the runtime can tell the occurrence apart: a lexer thread is one occurrence,
started at its origin Earley set.

- ``max_tokens=N``: the matcher counts, per thread, the tokens whose bytes went into the
  occurrence. Once N have, a mask or a token that would go on inside it is refused where the
  body can end (its DFA state accepts); where it cannot, the budget is relaxed for that step.
- ``max_chars=M``: counted in codepoints (UTF-8 bytes other than continuation bytes). The
  lexeme's automaton is rewritten here so that the budget is part of its states wherever a
  single token could run past it: a *near* copy of the DFA per remaining budget
  ``r = 0..K`` (``K`` = the most codepoints of any vocabulary token), where a codepoint that
  starts with ``r == 0`` from an accepting state is refused. While more than ``K`` remain,
  the thread runs in the original (*far*) states, which no single token can tell apart from
  the budgeted ones, and the matcher moves it into the near copy when the count reaches
  ``K`` (``switch`` below). Masks are then exact without any runtime search.
- ``temperature``: a number per lexeme; the matcher reports the temperatures of the
  lexemes its live threads are inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

NO_CHAR_BUDGET = 0xFFFFFFFF

# Bytes that start a codepoint (everything but UTF-8 continuation bytes 10xxxxxx): a byte
# outside UTF-8 counts as one character, so every byte string has a count.
_STARTS_CODEPOINT = np.array([(b & 0xC0) != 0x80 for b in range(256)], dtype=bool)


@dataclass(frozen=True)
class LexemeLimits:
    """What a rule's options ask of its lexeme (None: not set)."""

    max_tokens: int | None = None
    max_chars: int | None = None
    temperature: float | None = None


@dataclass(frozen=True)
class BudgetedAutomaton:
    """A lexeme DFA with its character budget in its states (see the module docstring).

    ``table``/``accepting``/``start`` replace the DFA's. ``switch[t]`` is, for a far state
    ``t``, the id of its near copy with no budget left (the copy with ``r`` left is
    ``switch[t] + r``), else -1; ``remaining[s]`` is a near state's ``r``, else -1.
    """

    table: np.ndarray
    accepting: tuple[bool, ...]
    start: int
    switch: np.ndarray
    remaining: np.ndarray
    source_state: np.ndarray  # the state of `dfa` each state copies


def codepoints_per_token(tokens: Any, special_ids: Any = ()) -> int:
    """The most codepoints any text token holds (at least 1)."""
    most = 1
    specials = set(special_ids)
    for index, token in enumerate(tokens):
        if index in specials or not token:
            continue
        count = int(_STARTS_CODEPOINT[np.frombuffer(token, dtype=np.uint8)].sum())
        most = max(most, count)
    return most


@dataclass(frozen=True)
class TaggedAutomaton:
    """A DFA (``table``, ``accepting``, ``start``) with one flag per state (``tags``)."""

    table: np.ndarray
    accepting: tuple[bool, ...]
    start: int
    tags: np.ndarray


def with_body_ends(dfa: Any, body: Any) -> TaggedAutomaton:
    """The reachable product of a suffix / stop lexeme's DFA with its body's DFA: the same
    language, each state tagged with whether the input so far is in the body's language
    (where a spent budget may end the rule without its marker)."""
    table = np.asarray(dfa.table, dtype=np.int32)
    body_table = np.asarray(body.table, dtype=np.int32)
    body_accepting = np.asarray(body.accepting, dtype=bool)
    index: dict[tuple[int, int], int] = {}
    pairs: list[tuple[int, int]] = []

    def state(pair: tuple[int, int]) -> int:
        if pair not in index:
            index[pair] = len(pairs)
            pairs.append(pair)
        return index[pair]

    state((int(dfa.start), int(body.start)))
    rows: list[np.ndarray] = []
    position = 0
    while position < len(pairs):
        outer, inner = pairs[position]
        position += 1
        row = np.full(256, -1, dtype=np.int32)
        for byte in np.nonzero(table[outer] >= 0)[0]:
            target = int(table[outer, byte])
            inner_target = int(body_table[inner, byte]) if inner >= 0 else -1
            row[byte] = state((target, inner_target))
        rows.append(row)
    accepting = np.asarray(dfa.accepting, dtype=bool)
    return TaggedAutomaton(
        table=np.stack(rows),
        accepting=tuple(bool(accepting[outer]) for outer, _ in pairs),
        start=0,
        tags=np.array([inner >= 0 and bool(body_accepting[inner]) for _, inner in pairs]),
    )


def char_budget_automaton(
    dfa: Any, budget: int, window: int, body_ends: np.ndarray | None = None
) -> BudgetedAutomaton:
    """``dfa`` limited to ``budget`` codepoints per occurrence, for tokens of at most
    ``window`` codepoints: a far part (the DFA itself) when ``budget > window``, then a near
    copy of every state per remaining budget ``0..min(budget, window)``. With ``body_ends``
    (a suffix / stop rule, see ``with_body_ends``), a spent budget also ends the rule where
    its body can end, without its marker."""
    table = np.asarray(dfa.table, dtype=np.int32)
    states = table.shape[0]
    accepting = np.asarray(dfa.accepting, dtype=bool)
    # Where a spent budget ends the occurrence.
    ends = accepting if body_ends is None else accepting | np.asarray(body_ends, dtype=bool)
    far = budget > window
    span = min(budget, window) + 1
    near_base = states if far else 0
    total = near_base + states * span
    out = np.full((total, 256), -1, dtype=np.int32)
    if far:
        out[:states] = table
    alive = table >= 0
    for left in range(span):
        after = np.where(_STARTS_CODEPOINT, max(left - 1, 0), left)  # per byte
        rows = np.where(alive, near_base + table * span + after[None, :], -1)
        if left == 0:
            # The budget is spent: the occurrence must end where its body can.
            rows[ends[:, None] & _STARTS_CODEPOINT[None, :]] = -1
        out[near_base + np.arange(states) * span + left] = rows
    near_accepting = np.repeat(accepting, span)
    near_accepting[::span] = ends  # remaining budget 0
    all_accepting = np.concatenate([accepting, near_accepting]) if far else near_accepting
    switch = np.full(total, -1, dtype=np.int32)
    remaining = np.full(total, -1, dtype=np.int32)
    source_state = np.repeat(np.arange(states, dtype=np.int64), span)
    if far:
        source_state = np.concatenate([np.arange(states, dtype=np.int64), source_state])
    remaining[near_base:] = np.tile(np.arange(span, dtype=np.int32), states)
    if far:
        switch[:states] = near_base + np.arange(states, dtype=np.int32) * span
        start = int(dfa.start)
    else:
        start = near_base + int(dfa.start) * span + budget
    return BudgetedAutomaton(
        table=out,
        accepting=tuple(bool(a) for a in all_accepting),
        start=start,
        switch=switch,
        remaining=remaining,
        source_state=source_state,
    )


def temperature_words(temperature: float | None) -> tuple[int, int]:
    """A temperature as the two little-endian 32-bit words of its float64 (NaN: none)."""
    bits = int(np.float64(math.nan if temperature is None else temperature).view(np.uint64))
    return bits & 0xFFFFFFFF, bits >> 32
