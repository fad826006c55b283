"""A small byte-level DFA builder used by the compiler while `gramkiln.ir.automata` is absent.

It follows the same contract as ``gramkiln.ir.automata.build_dfa``: the result has ``start``,
``accepting`` (tuple of bools) and ``table`` (numpy int32 ``[n, 256]``, -1 = dead), and is
trimmed (every state reaches acceptance), minimised and numbered breadth-first from the start
in byte order, so equal languages give equal tables. An empty language gives zero states and
``start == -1``. Construction: Thompson NFA over byte ranges (code points become UTF-8 byte
range sequences), subset construction, optional lazy cut, trim, Moore minimisation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from gramkiln.ir import Bytes, CharClass, Choice, Empty, Expr, Literal, Ref, Repeat, Seq

from gramkiln.errors import CompileError

# Largest unrolled repetition bound accepted inside one terminal; bigger bounds would build
# automata too large to be useful and are reported instead of exhausting memory.
MAX_UNROLL = 2000
_UTF8_LIMITS = (0x7F, 0x7FF, 0xFFFF, 0x10FFFF)


@dataclass(frozen=True)
class SimpleByteDFA:
    """A deterministic automaton over bytes (see the module docstring for invariants)."""

    start: int
    accepting: tuple[bool, ...]
    table: np.ndarray

    @property
    def num_states(self) -> int:
        """Number of states."""
        return len(self.accepting)


def utf8_range_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences whose union is exactly the UTF-8 encodings of code points lo..hi."""
    out: list[list[tuple[int, int]]] = []
    start = lo
    for limit in _UTF8_LIMITS:
        if start > hi:
            break
        if start <= limit:
            end = min(hi, limit)
            _split_same_length(start, end, out)
            start = end + 1
    return out


def _split_same_length(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    # Split until every continuation byte position covers a full or aligned range, so the
    # encodings of lo..hi become a product of per-byte ranges.
    length = len(chr(lo).encode("utf-8", "surrogatepass"))
    for i in range(1, length):
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                _split_same_length(lo, lo | mask, out)
                _split_same_length((lo | mask) + 1, hi, out)
                return
            if hi & mask != mask:
                _split_same_length(lo, (hi & ~mask) - 1, out)
                _split_same_length(hi & ~mask, hi, out)
                return
    a = chr(lo).encode("utf-8", "surrogatepass")
    b = chr(hi).encode("utf-8", "surrogatepass")
    out.append(list(zip(a, b, strict=True)))


class _Nfa:
    """Thompson NFA: per state a list of (lo, hi, target) byte edges and epsilon targets."""

    def __init__(self) -> None:
        self.edges: list[list[tuple[int, int, int]]] = []
        self.eps: list[list[int]] = []

    def new_state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def byte_path(self, start: int, ranges: list[tuple[int, int]], end: int) -> None:
        current = start
        for index, (lo, hi) in enumerate(ranges):
            nxt = end if index == len(ranges) - 1 else self.new_state()
            self.edges[current].append((lo, hi, nxt))
            current = nxt


def _build(
    nfa: _Nfa, expr: Expr, start: int, end: int, terminals: Mapping[str, Expr], depth: int
) -> None:
    if depth > 200:
        raise CompileError("terminal nesting is too deep (recursive terminal?)")
    if isinstance(expr, Empty):
        nfa.eps[start].append(end)
    elif isinstance(expr, (Literal, Bytes)):
        if isinstance(expr, Bytes):
            units = [[(b, b)] for b in expr.data]
        else:
            units = []
            for ch in expr.text:
                options = {ch.lower(), ch.upper()} if expr.case_insensitive else {ch}
                units.append(sorted((ord(c), ord(c)) for c in options))
        if not units:
            nfa.eps[start].append(end)
            return
        current = start
        for index, unit in enumerate(units):
            nxt = end if index == len(units) - 1 else nfa.new_state()
            for lo, hi in unit:
                if isinstance(expr, Bytes):
                    nfa.edges[current].append((lo, hi, nxt))
                else:
                    for seq in utf8_range_sequences(lo, hi):
                        nfa.byte_path(current, seq, nxt)
            current = nxt
    elif isinstance(expr, CharClass):
        for lo, hi in expr.positive_ranges():
            for seq in utf8_range_sequences(lo, hi):
                nfa.byte_path(start, seq, end)
    elif isinstance(expr, Seq):
        current = start
        for index, item in enumerate(expr.items):
            nxt = end if index == len(expr.items) - 1 else nfa.new_state()
            _build(nfa, item, current, nxt, terminals, depth + 1)
            current = nxt
        if not expr.items:
            nfa.eps[start].append(end)
    elif isinstance(expr, Choice):
        for alt in expr.alternatives:
            _build(nfa, alt, start, end, terminals, depth + 1)
    elif isinstance(expr, Repeat):
        bound = expr.max if expr.max is not None else expr.min
        if bound > MAX_UNROLL:
            raise CompileError(f"repetition bound {bound} exceeds the limit {MAX_UNROLL}")
        current = start
        for _ in range(expr.min):
            nxt = nfa.new_state()
            _build(nfa, expr.item, current, nxt, terminals, depth + 1)
            current = nxt
        if expr.max is None:
            loop = nfa.new_state()
            nfa.eps[current].append(loop)
            after = nfa.new_state()
            _build(nfa, expr.item, loop, after, terminals, depth + 1)
            nfa.eps[after].append(loop)
            nfa.eps[loop].append(end)
        else:
            for _ in range(expr.max - expr.min):
                nfa.eps[current].append(end)
                nxt = nfa.new_state()
                _build(nfa, expr.item, current, nxt, terminals, depth + 1)
                current = nxt
            nfa.eps[current].append(end)
    elif isinstance(expr, Ref):
        if expr.name not in terminals:
            raise CompileError(f"terminal body references unknown terminal {expr.name}")
        _build(nfa, terminals[expr.name], start, end, terminals, depth + 1)
    else:
        raise CompileError(f"{expr.kind} elements cannot appear inside a terminal")


def _closure(nfa: _Nfa, states: set[int]) -> frozenset[int]:
    stack = list(states)
    seen = set(states)
    while stack:
        state = stack.pop()
        for nxt in nfa.eps[state]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


def build_dfa(
    expr: Expr,
    terminals: Mapping[str, Expr] | None = None,
    *,
    lazy: bool = False,
    max_states: int = 20000,
) -> SimpleByteDFA:
    """Compile a terminal-only expression to a trimmed, minimised byte DFA.

    ``terminals`` maps terminal names to bodies for ``Ref`` nodes. ``lazy`` removes the
    outgoing edges of accepting states (committed-shortest). Raises CompileError when the
    expression is not terminal-only or the automaton exceeds ``max_states``.
    """
    terminals = terminals or {}
    nfa = _Nfa()
    nfa_start, nfa_end = nfa.new_state(), nfa.new_state()
    _build(nfa, expr, nfa_start, nfa_end, terminals, 0)

    start_set = _closure(nfa, {nfa_start})
    index: dict[frozenset[int], int] = {start_set: 0}
    order = [start_set]
    rows: list[list[int]] = []
    accepting: list[bool] = []
    position = 0
    while position < len(order):
        current = order[position]
        position += 1
        is_accepting = nfa_end in current
        accepting.append(is_accepting)
        row = [-1] * 256
        if not (lazy and is_accepting):
            targets: list[set[int] | None] = [None] * 256
            for state in current:
                for lo, hi, nxt in nfa.edges[state]:
                    for byte in range(lo, hi + 1):
                        bucket = targets[byte]
                        if bucket is None:
                            targets[byte] = {nxt}
                        else:
                            bucket.add(nxt)
            for byte, bucket in enumerate(targets):
                if bucket is None:
                    continue
                closed = _closure(nfa, bucket)
                if closed not in index:
                    if len(order) >= max_states:
                        raise CompileError(f"terminal automaton exceeds {max_states} states")
                    index[closed] = len(order)
                    order.append(closed)
                row[byte] = index[closed]
        rows.append(row)
    table = np.array(rows, dtype=np.int32).reshape(len(rows), 256)
    return _trim_and_minimise(table, np.array(accepting, dtype=bool))


def _trim_and_minimise(table: np.ndarray, accepting: np.ndarray) -> SimpleByteDFA:
    n = len(accepting)
    # Co-reachability: states from which an accepting state can be reached.
    live = accepting.copy()
    changed = True
    while changed:
        targets_live = np.where(table >= 0, live[np.maximum(table, 0)], False)
        new_live = live | targets_live.any(axis=1)
        changed = bool((new_live != live).any())
        live = new_live
    if not live[0]:
        return SimpleByteDFA(start=-1, accepting=(), table=np.zeros((0, 256), dtype=np.int32))
    table = np.where((table >= 0) & live[np.maximum(table, 0)], table, -1)
    # Moore refinement; the dead state is class -1 throughout.
    classes = np.where(live, accepting.astype(np.int64), -1)
    while True:
        targets = np.where(table >= 0, classes[np.maximum(table, 0)], -1)
        signature = np.concatenate([classes[:, None], targets], axis=1)
        _, new_classes = np.unique(signature, axis=0, return_inverse=True)
        new_classes = np.where(live, new_classes.reshape(-1), -1)
        if len(np.unique(new_classes[live])) == len(np.unique(classes[live])):
            break
        classes = new_classes
    # Breadth-first renumbering from the start class, in byte order, for determinism.
    representative: dict[int, int] = {}
    for state in range(n):
        if live[state]:
            representative.setdefault(int(classes[state]), state)
    number = {int(classes[0]): 0}
    queue = [int(classes[0])]
    out_rows: list[list[int]] = []
    out_accepting: list[bool] = []
    while len(out_rows) < len(queue):
        cls = queue[len(out_rows)]
        rep = representative[cls]
        row = []
        for byte in range(256):
            target = int(table[rep, byte])
            if target < 0:
                row.append(-1)
                continue
            target_cls = int(classes[target])
            if target_cls not in number:
                number[target_cls] = len(queue)
                queue.append(target_cls)
            row.append(number[target_cls])
        out_rows.append(row)
        out_accepting.append(bool(accepting[rep]))
    return SimpleByteDFA(
        start=0,
        accepting=tuple(out_accepting),
        table=np.array(out_rows, dtype=np.int32).reshape(len(out_rows), 256),
    )
