"""Small finite automata over code-point ranges, used where a keyword needs exact language
operations that plain IR expressions cannot state: intersection (``pattern`` with
``maxLength``, several ``pattern``s), complement (keys that are *not* declared property
names, strings that are not an enum value), and digit automata for numeric bounds.

Automata here are private to the JSON Schema front end: they are built, combined and then
emitted back into ordinary IR rules (see :func:`dfa_to_expr_rules`), so the rest of gramkiln
never sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from gramkiln.ir import CharClass, Choice, Empty, Expr, Literal, Repeat, Seq
from gramkiln.ir.nodes import MAX_CODEPOINT, normalise_ranges

Ranges = tuple[tuple[int, int], ...]

# Guards against state explosion; exceeding one is reported as an unsupported construct.
MAX_NFA_STATES = 20_000
MAX_DFA_STATES = 4_000
# A length bound times a pattern automaton is a plain product (length x pattern state) that
# stays cheap to build and minimise, so it may grow larger than the other constructions.
MAX_LENGTH_PRODUCT_STATES = 24_000


class AutomatonTooLarge(Exception):
    """An automaton construction exceeded its size limit."""


@dataclass
class Nfa:
    """A Thompson-style NFA: ``edges[s]`` are ``(lo, hi, target)``, ``eps[s]`` epsilon moves."""

    edges: list[list[tuple[int, int, int]]] = field(default_factory=list)
    eps: list[list[int]] = field(default_factory=list)
    start: int = 0
    accept: int = 0

    def new_state(self) -> int:
        """Add a state and return its number."""
        if len(self.edges) >= MAX_NFA_STATES:
            raise AutomatonTooLarge(f"more than {MAX_NFA_STATES} automaton states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1


@dataclass
class Dfa:
    """A deterministic automaton; ``edges[s]`` holds disjoint ``(lo, hi, target)`` triples.

    Missing transitions go to an implicit dead state.
    """

    edges: list[list[tuple[int, int, int]]]
    accepting: set[int]
    start: int = 0

    @property
    def size(self) -> int:
        """Number of states."""
        return len(self.edges)


# ---------------------------------------------------------------------------------------------
# construction


def nfa_from_expr(expr: Expr) -> Nfa:
    """Thompson construction for a regular IR expression over code points."""
    nfa = Nfa()
    start = nfa.new_state()
    accept = nfa.new_state()
    _build(nfa, expr, start, accept)
    nfa.start, nfa.accept = start, accept
    return nfa


def _build(nfa: Nfa, expr: Expr, src: int, dst: int) -> None:
    if isinstance(expr, Empty):
        nfa.eps[src].append(dst)
    elif isinstance(expr, Literal):
        current = src
        for index, char in enumerate(expr.text):
            nxt = dst if index == len(expr.text) - 1 else nfa.new_state()
            for lo, hi in _char_ranges(char, expr.case_insensitive):
                nfa.edges[current].append((lo, hi, nxt))
            current = nxt
        if not expr.text:
            nfa.eps[src].append(dst)
    elif isinstance(expr, CharClass):
        for lo, hi in expr.positive_ranges():
            nfa.edges[src].append((lo, hi, dst))
    elif isinstance(expr, Seq):
        current = src
        for index, item in enumerate(expr.items):
            nxt = dst if index == len(expr.items) - 1 else nfa.new_state()
            _build(nfa, item, current, nxt)
            current = nxt
        if not expr.items:
            nfa.eps[src].append(dst)
    elif isinstance(expr, Choice):
        for alternative in expr.alternatives:
            _build(nfa, alternative, src, dst)
    elif isinstance(expr, Repeat):
        current = src
        for _ in range(expr.min):
            nxt = nfa.new_state()
            _build(nfa, expr.item, current, nxt)
            current = nxt
        if expr.max is None:
            loop = nfa.new_state()
            nfa.eps[current].append(loop)
            body_end = nfa.new_state()
            _build(nfa, expr.item, loop, body_end)
            nfa.eps[body_end].append(loop)
            nfa.eps[loop].append(dst)
        else:
            nfa.eps[current].append(dst)
            for _ in range(expr.max - expr.min):
                nxt = nfa.new_state()
                _build(nfa, expr.item, current, nxt)
                nfa.eps[nxt].append(dst)
                current = nxt
    else:
        raise AutomatonTooLarge(f"{type(expr).__name__} is not a regular construct")


def _char_ranges(char: str, fold: bool) -> list[tuple[int, int]]:
    if fold and char.isascii() and char.isalpha():
        return [(ord(char.lower()), ord(char.lower())), (ord(char.upper()), ord(char.upper()))]
    return [(ord(char), ord(char))]


def _closure(nfa: Nfa, states: Iterable[int]) -> frozenset[int]:
    seen = set(states)
    stack = list(seen)
    while stack:
        state = stack.pop()
        for nxt in nfa.eps[state]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


def _partition(triples: list[tuple[int, int, int]]) -> list[tuple[int, int, frozenset[int]]]:
    """Split overlapping labelled ranges into disjoint pieces with their target sets."""
    points: set[int] = set()
    for lo, hi, _ in triples:
        points.add(lo)
        points.add(hi + 1)
    bounds = sorted(points)
    pieces: list[tuple[int, int, frozenset[int]]] = []
    for lo, nxt in zip(bounds, bounds[1:], strict=False):
        targets = frozenset(t for a, b, t in triples if a <= lo and nxt - 1 <= b)
        if targets:
            if pieces and pieces[-1][2] == targets and pieces[-1][1] == lo - 1:
                pieces[-1] = (pieces[-1][0], nxt - 1, targets)
            else:
                pieces.append((lo, nxt - 1, targets))
    return pieces


def determinize(nfa: Nfa) -> Dfa:
    """Subset construction with range-partitioned transitions."""
    start = _closure(nfa, [nfa.start])
    index: dict[frozenset[int], int] = {start: 0}
    order = [start]
    edges: list[list[tuple[int, int, int]]] = []
    accepting: set[int] = set()
    position = 0
    while position < len(order):
        subset = order[position]
        if nfa.accept in subset:
            accepting.add(position)
        triples = [edge for state in subset for edge in nfa.edges[state]]
        out: list[tuple[int, int, int]] = []
        for lo, hi, targets in _partition(triples):
            target_set = _closure(nfa, targets)
            if target_set not in index:
                if len(order) >= MAX_DFA_STATES:
                    raise AutomatonTooLarge(f"more than {MAX_DFA_STATES} automaton states")
                index[target_set] = len(order)
                order.append(target_set)
            out.append((lo, hi, index[target_set]))
        edges.append(_merge_adjacent(out))
        position += 1
    return Dfa(edges=edges, accepting=accepting)


def _merge_adjacent(edges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    merged: list[tuple[int, int, int]] = []
    for lo, hi, target in sorted(edges):
        if merged and merged[-1][2] == target and merged[-1][1] + 1 == lo:
            merged[-1] = (merged[-1][0], hi, target)
        else:
            merged.append((lo, hi, target))
    return merged


def dfa_from_expr(expr: Expr) -> Dfa:
    """The minimal DFA of a regular IR expression."""
    return minimize(determinize(nfa_from_expr(expr)))


def explore(
    start: Hashable,
    step: Callable[[Hashable, int], Hashable | None],
    alphabet: Iterable[int],
    accepting: Callable[[Hashable], bool],
) -> Dfa:
    """Build a DFA from a deterministic step function over a small alphabet of code points.

    ``step`` returns the next abstract state or None for "reject". Used for digit automata,
    where the abstract state is e.g. (comparison so far, remainder).
    """
    symbols = sorted(set(alphabet))
    index = {start: 0}
    order = [start]
    edges: list[list[tuple[int, int, int]]] = []
    position = 0
    while position < len(order):
        state = order[position]
        out = []
        for symbol in symbols:
            nxt = step(state, symbol)
            if nxt is None:
                continue
            if nxt not in index:
                if len(order) >= MAX_DFA_STATES:
                    raise AutomatonTooLarge(f"more than {MAX_DFA_STATES} automaton states")
                index[nxt] = len(order)
                order.append(nxt)
            out.append((symbol, symbol, index[nxt]))
        edges.append(_merge_adjacent(out))
        position += 1
    return trim(Dfa(edges=edges, accepting={i for i, s in enumerate(order) if accepting(s)}))


# ---------------------------------------------------------------------------------------------
# operations


def intersect(left: Dfa, right: Dfa, max_states: int = MAX_DFA_STATES) -> Dfa:
    """Product automaton accepting the intersection of two languages (at most
    ``max_states`` states, else AutomatonTooLarge)."""
    index = {(left.start, right.start): 0}
    order = [(left.start, right.start)]
    edges: list[list[tuple[int, int, int]]] = []
    position = 0
    while position < len(order):
        a, b = order[position]
        out = []
        for alo, ahi, at in left.edges[a]:
            for blo, bhi, bt in right.edges[b]:
                lo, hi = max(alo, blo), min(ahi, bhi)
                if lo > hi:
                    continue
                pair = (at, bt)
                if pair not in index:
                    if len(order) >= max_states:
                        raise AutomatonTooLarge(f"more than {max_states} automaton states")
                    index[pair] = len(order)
                    order.append(pair)
                out.append((lo, hi, index[pair]))
        edges.append(_merge_adjacent(out))
        position += 1
    accepting = {
        i for i, (a, b) in enumerate(order) if a in left.accepting and b in right.accepting
    }
    return trim(Dfa(edges=edges, accepting=accepting))


def complement(dfa: Dfa, universe: Ranges = ((0, MAX_CODEPOINT),)) -> Dfa:
    """Strings over ``universe`` not accepted by ``dfa``."""
    dead = dfa.size
    edges: list[list[tuple[int, int, int]]] = []
    for state_edges in [*dfa.edges, []]:
        covered = normalise_ranges([(lo, hi) for lo, hi, _ in state_edges])
        missing = _subtract(universe, tuple(covered))
        out = [(lo, hi, t) for lo, hi, t in state_edges] + [(lo, hi, dead) for lo, hi in missing]
        edges.append(_merge_adjacent(out))
    accepting = {s for s in range(dfa.size + 1) if s not in dfa.accepting}
    return trim(Dfa(edges=edges, accepting=accepting, start=dfa.start))


def _subtract(base: Ranges, removed: Ranges) -> list[tuple[int, int]]:
    out = []
    for lo, hi in base:
        cursor = lo
        for rlo, rhi in removed:
            if rhi < cursor or rlo > hi:
                continue
            if rlo > cursor:
                out.append((cursor, rlo - 1))
            cursor = max(cursor, rhi + 1)
        if cursor <= hi:
            out.append((cursor, hi))
    return out


def trim(dfa: Dfa) -> Dfa:
    """Remove states that are unreachable or cannot reach acceptance; renumber from 0."""
    reachable = {dfa.start}
    stack = [dfa.start]
    while stack:
        state = stack.pop()
        for _, _, t in dfa.edges[state]:
            if t not in reachable:
                reachable.add(t)
                stack.append(t)
    reverse: dict[int, set[int]] = {}
    for state in reachable:
        for _, _, t in dfa.edges[state]:
            reverse.setdefault(t, set()).add(state)
    live = {s for s in reachable if s in dfa.accepting}
    stack = list(live)
    while stack:
        state = stack.pop()
        for prev in reverse.get(state, ()):
            if prev not in live:
                live.add(prev)
                stack.append(prev)
    if dfa.start not in live:
        return Dfa(edges=[[]], accepting=set(), start=0)
    order = [dfa.start] + sorted(live - {dfa.start})
    renumber = {old: new for new, old in enumerate(order)}
    edges = [[(lo, hi, renumber[t]) for lo, hi, t in dfa.edges[old] if t in live] for old in order]
    accepting = {renumber[s] for s in live if s in dfa.accepting}
    return Dfa(edges=edges, accepting=accepting, start=0)


def minimize(dfa: Dfa) -> Dfa:
    """Moore-style partition refinement (adequate for the small automata built here)."""
    dfa = trim(dfa)
    block = [1 if s in dfa.accepting else 0 for s in range(dfa.size)]
    while True:
        signatures: dict[tuple, int] = {}
        new_block = []
        for state in range(dfa.size):
            signature = (
                block[state],
                tuple((lo, hi, block[t]) for lo, hi, t in dfa.edges[state]),
            )
            new_block.append(signatures.setdefault(_canonical(signature), len(signatures)))
        if len(signatures) == len(set(block)):
            break
        block = new_block
    block = new_block
    count = max(block) + 1 if block else 1
    edges: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
    done = set()
    for state in range(dfa.size):
        if block[state] in done:
            continue
        done.add(block[state])
        edges[block[state]] = _merge_adjacent(
            [(lo, hi, block[t]) for lo, hi, t in dfa.edges[state]]
        )
    accepting = {block[s] for s in dfa.accepting}
    result = Dfa(edges=edges, accepting=accepting, start=block[dfa.start])
    return _renumber_from_start(result)


def _canonical(signature: tuple) -> tuple:
    own, edges = signature
    merged: list[tuple[int, int, int]] = []
    for lo, hi, target in edges:
        if merged and merged[-1][2] == target and merged[-1][1] + 1 == lo:
            merged[-1] = (merged[-1][0], hi, target)
        else:
            merged.append((lo, hi, target))
    return own, tuple(merged)


def _renumber_from_start(dfa: Dfa) -> Dfa:
    order = [dfa.start]
    seen = {dfa.start}
    position = 0
    while position < len(order):
        for _, _, t in dfa.edges[order[position]]:
            if t not in seen:
                seen.add(t)
                order.append(t)
        position += 1
    renumber = {old: new for new, old in enumerate(order)}
    edges = [[(lo, hi, renumber[t]) for lo, hi, t in dfa.edges[old]] for old in order]
    return Dfa(edges=edges, accepting={renumber[s] for s in dfa.accepting if s in renumber})


def length_dfa(min_length: int, max_length: int | None) -> Dfa:
    """Strings of any code points whose length is within the bounds."""
    top = max_length if max_length is not None else min_length
    if top + 1 > MAX_DFA_STATES:
        raise AutomatonTooLarge(f"length bound {top} is too large to intersect")
    edges: list[list[tuple[int, int, int]]] = []
    for count in range(top + 1):
        if count < top:
            edges.append([(0, MAX_CODEPOINT, count + 1)])
        elif max_length is None:
            edges.append([(0, MAX_CODEPOINT, count)])
        else:
            edges.append([])
    accepting = {c for c in range(top + 1) if c >= min_length}
    return Dfa(edges=edges, accepting=accepting)


def length_range(dfa: Dfa) -> tuple[int, int | None] | None:
    """(shortest, longest) accepted length in code points, longest None when unbounded, or
    None when the automaton accepts nothing."""
    live = trim(dfa)
    if not live.accepting:
        return None
    # Longest path over the live states (a cycle among them makes lengths unbounded), by a
    # depth-first search that finishes each state after its successors.
    longest: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[int, int]] = [(live.start, 0)]
    while stack:
        state, next_edge = stack.pop()
        if next_edge == 0:
            on_path.add(state)
        edges = live.edges[state]
        if next_edge < len(edges):
            stack.append((state, next_edge + 1))
            target = edges[next_edge][2]
            if target in on_path:
                longest = {}
                break
            if target not in longest:
                stack.append((target, 0))
            continue
        on_path.discard(state)
        best = 0 if state in live.accepting else -1
        for _, _, target in edges:
            if longest.get(target, -1) >= 0:
                best = max(best, longest[target] + 1)
        longest[state] = best
    top = longest.get(live.start) if longest else None
    shortest: dict[int, int] = {live.start: 0}
    frontier = [live.start]
    while frontier:
        following = []
        for state in frontier:
            for _, _, target in live.edges[state]:
                if target not in shortest:
                    shortest[target] = shortest[state] + 1
                    following.append(target)
        frontier = following
    return min(shortest[s] for s in live.accepting if s in shortest), top


def is_empty(dfa: Dfa) -> bool:
    """Whether the automaton accepts nothing."""
    return not trim(dfa).accepting


def accepts(dfa: Dfa, text: str) -> bool:
    """Run the automaton on a string (used in tests and for enum filtering)."""
    state = dfa.start
    for char in text:
        code = ord(char)
        for lo, hi, t in dfa.edges[state]:
            if lo <= code <= hi:
                state = t
                break
        else:
            return False
    return state in dfa.accepting


# ---------------------------------------------------------------------------------------------
# emission back into IR


def group_edges(edges: list[tuple[int, int, int]]) -> dict[int, Ranges]:
    """Collect the ranges leading to each target, in first-seen order of targets."""
    grouped: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, t in edges:
        grouped.setdefault(t, []).append((lo, hi))
    return {t: tuple(normalise_ranges(r)) for t, r in grouped.items()}


def only_self_loops(dfa: Dfa) -> bool:
    """True when the automaton has no cycle other than self-loops."""
    # Depth first without recursion (automata have thousands of states).
    colour = [0] * dfa.size  # 0 unseen, 1 on the current path, 2 finished
    for root in range(dfa.size):
        if colour[root]:
            continue
        colour[root] = 1
        stack = [(root, iter(dfa.edges[root]))]
        while stack:
            state, edges = stack[-1]
            for _, _, target in edges:
                if target == state:
                    continue
                if colour[target] == 1:
                    return False
                if colour[target] == 0:
                    colour[target] = 1
                    stack.append((target, iter(dfa.edges[target])))
                    break
            else:
                colour[state] = 2
                stack.pop()
    return True
