"""Unit-level automata for the reference matcher: a Thompson NFA and an on-the-fly subset DFA.

This module is deliberately independent of ``gramkiln.ir.automata`` (the production DFA
builder), so that the oracle can check it. It trades speed for obviousness:

* the NFA is the textbook Thompson construction over the IR expression tree;
* a character class is not expanded into UTF-8 byte ranges; instead an edge carries the
  class's code point ranges and the subset simulation *decodes* UTF-8 byte by byte. A
  partially decoded character survives only while some code point of the class is still a
  possible completion, which is what makes prefixes that end inside a character exact;
* an input unit is a byte (0..255) or a whole vocabulary token; token edges exist only for the
  special-token elements ``TokenSet`` and ``SpecialToken``;
* the DFA is built lazily, one subset per reached configuration, with memoised transitions.
  ``lazy=True`` gives committed-shortest matching: a subset that contains the final state
  has no outgoing transitions at all.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gramkiln.errors import CompileError
from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Literal,
    Ref,
    Repeat,
    Seq,
    SpecialToken,
    TokenSet,
)
from gramkiln.ir.nodes import Node

DEAD = -1

# Valid code point range for each UTF-8 sequence length (index = length - 1).
_UTF8_RANGES = ((0x00, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF))
_LEAD_MASKS = (0x7F, 0x1F, 0x0F, 0x07)


def token_symbol(token_id: int) -> int:
    """The DFA input symbol for a whole token (bytes are 0..255; tokens are negative)."""
    return -1 - token_id


def utf8_sequence_length(lead: int) -> int:
    """Length of the UTF-8 sequence a lead byte starts, or 0 if it cannot start one."""
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return 0


def possible_code_points(prefix: bytes) -> tuple[int, int] | None:
    """The interval of scalar values whose UTF-8 encoding starts with ``prefix``.

    Returns None when no valid encoding starts that way (bad lead byte, bad continuation
    byte, an overlong form, or a value above U+10FFFF). Surrogates are not removed here;
    callers intersect with classes that never contain them.
    """
    length = utf8_sequence_length(prefix[0])
    if length == 0 or len(prefix) > length:
        return None
    value = prefix[0] & _LEAD_MASKS[length - 1]
    for byte in prefix[1:]:
        if not 0x80 <= byte <= 0xBF:
            return None
        value = (value << 6) | (byte & 0x3F)
    missing_bits = 6 * (length - len(prefix))
    lo = value << missing_bits
    hi = lo + (1 << missing_bits) - 1
    valid_lo, valid_hi = _UTF8_RANGES[length - 1]
    lo, hi = max(lo, valid_lo), min(hi, valid_hi)
    return (lo, hi) if lo <= hi else None


@dataclass(frozen=True)
class CodePointSet:
    """Sorted disjoint code point ranges with a fast overlap test."""

    ranges: tuple[tuple[int, int], ...]
    _his: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_his", tuple(hi for _, hi in self.ranges))

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether some member lies in ``[lo, hi]``."""
        index = bisect.bisect_left(self._his, lo)
        return index < len(self.ranges) and self.ranges[index][0] <= hi


@dataclass(frozen=True)
class TokenMatcher:
    """Which token ids a special-token element accepts."""

    ids: frozenset[int] = frozenset()
    ranges: tuple[tuple[int, int], ...] = ()
    negated: bool = False
    wildcard: bool = False

    def matches(self, token_id: int) -> bool:
        """Whether the element accepts the token ``token_id``."""
        if self.wildcard:
            return True
        inside = token_id in self.ids or any(lo <= token_id <= hi for lo, hi in self.ranges)
        return inside != self.negated


class UnitNFA:
    """A Thompson NFA whose edges read bytes, whole code points (by decoding) or tokens."""

    def __init__(self, max_states: int) -> None:
        self.max_states = max_states
        self.epsilon: list[list[int]] = []
        # Most states have only epsilon edges, so the other kinds are kept sparsely.
        self.byte_edges: dict[int, list[tuple[int, int, int]]] = {}
        self.class_edges: dict[int, list[tuple[CodePointSet, int]]] = {}
        self.token_edges: dict[int, list[tuple[TokenMatcher, int]]] = {}
        self.start = self.new_state()
        self.final = self.new_state()

    def new_state(self) -> int:
        """Add a state with no edges and return its number."""
        if len(self.epsilon) >= self.max_states:
            raise CompileError(
                f"expression needs more than {self.max_states:,} automaton states "
                "(the reference matcher's max_nfa_states limit)"
            )
        self.epsilon.append([])
        return len(self.epsilon) - 1

    def successors(self, state: int) -> list[int]:
        """Every state one edge away from ``state``."""
        out = list(self.epsilon[state])
        out.extend(target for _, _, target in self.byte_edges.get(state, ()))
        out.extend(target for _, target in self.class_edges.get(state, ()))
        out.extend(target for _, target in self.token_edges.get(state, ()))
        return out

    def useful_states(self) -> set[int]:
        """States on some path from the start to the final state (the trimmed automaton)."""
        successors = [self.successors(state) for state in range(len(self.epsilon))]
        reachable = _closure_of({self.start}, successors.__getitem__)
        predecessors: list[list[int]] = [[] for _ in self.epsilon]
        for state, targets in enumerate(successors):
            for target in targets:
                predecessors[target].append(state)
        coreachable = _closure_of({self.final}, lambda state: predecessors[state])
        return reachable & coreachable


def _closure_of(seeds: set[int], step: Callable[[int], list[int]]) -> set[int]:
    seen = set(seeds)
    stack = list(seeds)
    while stack:
        for nxt in step(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


class ExpressionResolver:
    """How a builder resolves names: the rule bodies a ``Ref`` may be inlined from."""

    def __init__(self, bodies: Mapping[str, Node], special_texts: Mapping[int, str]) -> None:
        self.bodies = bodies
        self.special_texts = special_texts
        self.facts_by_name: dict[str, tuple[bool, bool]] = {}

    def special_ids(self, text: str) -> frozenset[int]:
        """The token ids whose text is ``text``."""
        return frozenset(i for i, known in self.special_texts.items() if known == text)


def expression_facts(
    expr: Node, resolver: ExpressionResolver, inlining: tuple[str, ...] = ()
) -> tuple[bool, bool]:
    """(non-empty language, matches the empty string) of a lexeme body, without an automaton.

    Raises the same CompileErrors as :func:`build_nfa` for bodies that cannot be lexemes
    (recursion, unknown names, embeds), so that they surface when the matcher is built.
    """
    if isinstance(expr, Empty):
        return True, True
    if isinstance(expr, (Literal, Bytes)):
        return True, not (expr.data if isinstance(expr, Bytes) else expr.text)
    if isinstance(expr, CharClass):
        return bool(_code_point_set(expr.ranges, expr.negated).ranges), False
    if isinstance(expr, Seq):
        facts = [expression_facts(item, resolver, inlining) for item in expr.items]
        return all(f[0] for f in facts), all(f[1] for f in facts)
    if isinstance(expr, Choice):
        facts = [expression_facts(alt, resolver, inlining) for alt in expr.alternatives]
        return any(f[0] for f in facts), any(f[1] for f in facts)
    if isinstance(expr, Repeat):
        if expr.max == 0:
            return True, True
        productive, nullable = expression_facts(expr.item, resolver, inlining)
        return expr.min == 0 or productive, expr.min == 0 or nullable
    if isinstance(expr, Ref):
        _check_reference(expr.name, resolver, inlining)
        known = resolver.facts_by_name.get(expr.name)
        if known is None:
            body = resolver.bodies[expr.name]
            known = expression_facts(body, resolver, inlining + (expr.name,))
            resolver.facts_by_name[expr.name] = known
        return known
    if isinstance(expr, TokenSet):
        return True, False
    if isinstance(expr, SpecialToken):
        return bool(resolver.special_ids(expr.text)), False
    if isinstance(expr, Embed):
        raise CompileError(f"a lexeme body cannot embed the sub-grammar {expr.name}")
    raise CompileError(f"unsupported expression {type(expr).__name__} in a lexeme body")


def _check_reference(name: str, resolver: ExpressionResolver, inlining: tuple[str, ...]) -> None:
    if name in inlining:
        raise CompileError(
            f"{name} is recursive ({' -> '.join(inlining + (name,))}); "
            "a lexeme body must be regular"
        )
    if name not in resolver.bodies:
        raise CompileError(
            f"a lexeme body cannot reference {name} (terminals only; plain rules "
            "only inside lazy bodies)"
        )


def build_nfa(
    expr: Node, resolver: ExpressionResolver, max_states: int, owner: str | None = None
) -> UnitNFA:
    """Thompson construction of ``expr`` (Refs are inlined through ``resolver``).

    ``owner`` names the rule whose body ``expr`` is, so that a reference back to it is
    reported as recursion.
    """
    nfa = UnitNFA(max_states)
    _connect(nfa, expr, nfa.start, nfa.final, resolver, (owner,) if owner else ())
    return nfa


def _connect(
    nfa: UnitNFA,
    expr: Node,
    source: int,
    target: int,
    resolver: ExpressionResolver,
    inlining: tuple[str, ...],
) -> None:
    """Add states and edges so that the paths from source to target spell ``expr``."""
    if isinstance(expr, Empty):
        nfa.epsilon[source].append(target)
    elif isinstance(expr, (Literal, Bytes)):
        data = expr.data if isinstance(expr, Bytes) else expr.text.encode("utf-8")
        folding = isinstance(expr, Literal) and expr.case_insensitive
        current = source
        for index, byte in enumerate(data):
            nxt = target if index == len(data) - 1 else nfa.new_state()
            for variant in _byte_variants(byte, folding):
                nfa.byte_edges.setdefault(current, []).append((variant, variant, nxt))
            current = nxt
        if not data:
            nfa.epsilon[source].append(target)
    elif isinstance(expr, CharClass):
        code_points = _code_point_set(expr.ranges, expr.negated)
        if code_points.ranges:  # an empty class has no edge: the fragment's language is empty
            nfa.class_edges.setdefault(source, []).append((code_points, target))
    elif isinstance(expr, Seq):
        current = source
        for index, item in enumerate(expr.items):
            nxt = target if index == len(expr.items) - 1 else nfa.new_state()
            _connect(nfa, item, current, nxt, resolver, inlining)
            current = nxt
        if not expr.items:
            nfa.epsilon[source].append(target)
    elif isinstance(expr, Choice):
        for alternative in expr.alternatives:
            # Each alternative gets private entry/exit states so that loops inside one
            # alternative cannot leak into another.
            entry, exit_ = nfa.new_state(), nfa.new_state()
            nfa.epsilon[source].append(entry)
            nfa.epsilon[exit_].append(target)
            _connect(nfa, alternative, entry, exit_, resolver, inlining)
    elif isinstance(expr, Repeat):
        _connect_repeat(nfa, expr, source, target, resolver, inlining)
    elif isinstance(expr, Ref):
        _check_reference(expr.name, resolver, inlining)
        body = resolver.bodies[expr.name]
        entry, exit_ = nfa.new_state(), nfa.new_state()
        nfa.epsilon[source].append(entry)
        nfa.epsilon[exit_].append(target)
        _connect(nfa, body, entry, exit_, resolver, inlining + (expr.name,))
    elif isinstance(expr, TokenSet):
        matcher = TokenMatcher(ranges=expr.ranges, negated=expr.negated, wildcard=expr.wildcard)
        nfa.token_edges.setdefault(source, []).append((matcher, target))
    elif isinstance(expr, SpecialToken):
        ids = resolver.special_ids(expr.text)
        if ids:  # a special token absent from the vocabulary matches nothing
            nfa.token_edges.setdefault(source, []).append((TokenMatcher(ids=ids), target))
    elif isinstance(expr, Embed):
        raise CompileError(f"a lexeme body cannot embed the sub-grammar {expr.name}")
    else:
        raise CompileError(f"unsupported expression {type(expr).__name__} in a lexeme body")


def _connect_repeat(
    nfa: UnitNFA,
    expr: Repeat,
    source: int,
    target: int,
    resolver: ExpressionResolver,
    inlining: tuple[str, ...],
) -> None:
    """``item{min,max}``: min mandatory copies, then a loop or max-min optional copies."""
    current = source
    for _ in range(expr.min):
        nxt = nfa.new_state()
        _connect(nfa, expr.item, current, nxt, resolver, inlining)
        current = nxt
    if expr.max is None:
        # A private loop head: entering the loop is optional and it can be left at any time.
        head, body_end = nfa.new_state(), nfa.new_state()
        nfa.epsilon[current].append(head)
        nfa.epsilon[head].append(target)
        _connect(nfa, expr.item, head, body_end, resolver, inlining)
        nfa.epsilon[body_end].append(head)
        return
    for _ in range(expr.max - expr.min):
        nxt = nfa.new_state()
        nfa.epsilon[current].append(target)
        _connect(nfa, expr.item, current, nxt, resolver, inlining)
        current = nxt
    nfa.epsilon[current].append(target)


@functools.lru_cache(maxsize=4096)
def _code_point_set(ranges: tuple[tuple[int, int], ...], negated: bool) -> CodePointSet:
    """The scalar values a class matches (cached: bounded repeats copy one class many times)."""
    return CodePointSet(CharClass(ranges=ranges, negated=negated).positive_ranges())


def _byte_variants(byte: int, folding: bool) -> tuple[int, ...]:
    """The bytes a literal byte matches (both ASCII cases under case-insensitivity)."""
    if folding and (0x41 <= byte <= 0x5A or 0x61 <= byte <= 0x7A):
        return (byte | 0x20, byte & ~0x20)
    return (byte,)


# A configuration of the simulation: an NFA state, or a character being decoded on a class
# edge (state, edge index, bytes read so far).
Config = int | tuple[int, int, bytes]


class SubsetDFA:
    """The subset automaton of a trimmed :class:`UnitNFA`, built on demand.

    ``lazy=True`` makes every accepting subset a sink (committed-shortest matching). Every
    live subset can still reach acceptance, because the NFA is trimmed and a partial
    character is kept only while the class can complete it.
    """

    def __init__(self, nfa: UnitNFA, lazy: bool = False) -> None:
        self.nfa = nfa
        self.lazy = lazy
        self.useful = nfa.useful_states()
        self.subsets: list[frozenset[Config]] = []
        self.accepting: list[bool] = []
        self._index: dict[frozenset[Config], int] = {}
        self._transitions: dict[tuple[int, int], int] = {}
        self.has_token_edges = any(s in self.useful for s in nfa.token_edges)
        self.start = self._intern(self._closure({nfa.start}))

    @property
    def nullable(self) -> bool:
        """Whether the empty string is in the language."""
        return self.start != DEAD and self.accepting[self.start]

    def step(self, state: int, symbol: int) -> int:
        """The state after reading ``symbol`` (a byte, or ``token_symbol(id)``); DEAD if none."""
        if state == DEAD:
            return DEAD
        key = (state, symbol)
        cached = self._transitions.get(key)
        if cached is None:
            if self.lazy and self.accepting[state]:
                cached = DEAD
            elif symbol >= 0:
                cached = self._intern(self._byte_step(self.subsets[state], symbol))
            else:
                cached = self._intern(self._token_step(self.subsets[state], -1 - symbol))
            self._transitions[key] = cached
        return cached

    def _intern(self, subset: frozenset[Config]) -> int:
        if not subset:
            return DEAD
        index = self._index.get(subset)
        if index is None:
            index = len(self.subsets)
            self._index[subset] = index
            self.subsets.append(subset)
            self.accepting.append(self.nfa.final in subset)
        return index

    def _closure(self, states: set[int]) -> frozenset[Config]:
        useful = self.useful
        seeds = {s for s in states if s in useful}
        return frozenset(
            _closure_of(seeds, lambda s: [t for t in self.nfa.epsilon[s] if t in useful])
        )

    def _byte_step(self, subset: frozenset[Config], byte: int) -> frozenset[Config]:
        nfa, useful = self.nfa, self.useful
        targets: set[int] = set()
        partial: set[Config] = set()
        for config in subset:
            if isinstance(config, int):
                for lo, hi, target in nfa.byte_edges.get(config, ()):
                    if lo <= byte <= hi and target in useful:
                        targets.add(target)
                for edge_index, (code_points, target) in enumerate(nfa.class_edges.get(config, ())):
                    if target in useful:
                        self._decode(
                            (config, edge_index), code_points, target, b"", byte, targets, partial
                        )
            else:
                state, edge_index, read = config
                code_points, target = nfa.class_edges[state][edge_index]
                self._decode((state, edge_index), code_points, target, read, byte, targets, partial)
        return self._closure(targets) | frozenset(partial)

    @staticmethod
    def _decode(
        edge: tuple[int, int],
        code_points: CodePointSet,
        target: int,
        read: bytes,
        byte: int,
        targets: set[int],
        partial: set[Config],
    ) -> None:
        """Feed one byte to a character being decoded on a class edge."""
        prefix = read + bytes((byte,))
        interval = possible_code_points(prefix)
        if interval is None or not code_points.overlaps(*interval):
            return
        if len(prefix) == utf8_sequence_length(prefix[0]):
            targets.add(target)
        else:
            partial.add((edge[0], edge[1], prefix))

    def _token_step(self, subset: frozenset[Config], token_id: int) -> frozenset[Config]:
        targets = {
            target
            for config in subset
            if isinstance(config, int)
            for matcher, target in self.nfa.token_edges.get(config, ())
            if target in self.useful and matcher.matches(token_id)
        }
        return self._closure(targets)


class LexemeAutomaton:
    """One lexeme: its facts now, its (lazy-)subset automaton on first use.

    Large grammars have many lexemes an input never reaches (a JSON Schema with thousands of
    properties); building automata on demand keeps constructing the matcher cheap.
    """

    def __init__(
        self,
        expr: Node,
        resolver: ExpressionResolver,
        lazy: bool,
        max_states: int,
        owner: str | None = None,
    ) -> None:
        self.expr = expr
        self.resolver = resolver
        self.lazy = lazy
        self.max_states = max_states
        self.owner = owner
        self.productive, self.nullable = expression_facts(expr, resolver, (owner,) if owner else ())
        self._dfa: SubsetDFA | None = None

    @property
    def dfa(self) -> SubsetDFA:
        """The subset automaton (built the first time it is needed)."""
        if self._dfa is None:
            nfa = build_nfa(self.expr, self.resolver, self.max_states, owner=self.owner)
            self._dfa = SubsetDFA(nfa, lazy=self.lazy)
        return self._dfa
