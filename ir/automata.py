"""Byte-level DFAs for terminal-only expressions (used by the runtime compiler).

``build_dfa`` goes expression -> Thompson NFA over byte ranges -> subset construction over
byte equivalence classes -> (lazy: accepting states lose their edges) -> trim -> Hopcroft
minimisation -> breadth-first renumbering. Code point classes are turned into UTF-8 byte-range
sequences (:func:`gramkiln.ir.utf8.utf8_sequences`), never enumerated code point by code
point, and the subset construction only looks at one representative byte per class of bytes
that every edge treats alike, so ``[^"\\\\]*`` over all of Unicode stays tiny.
"""

from __future__ import annotations

import array
import bisect
import functools
import sys
import threading
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any
from typing import Literal as Literal_

import numpy as np
from gramkiln.ir.memo import register as register_memo
from gramkiln.ir.nodes import (
    Bytes,
    CharClass,
    Choice,
    Empty,
    Expr,
    Literal,
    Node,
    Ref,
    Repeat,
    Seq,
)
from gramkiln.ir.utf8 import utf8_sequences

from gramkiln.errors import AutomatonSizeError, CompileError

DEAD = -1


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A deterministic automaton over bytes.

    ``table[state, byte]`` is the next state or -1 (dead). Every state is reachable from
    ``start`` and can still reach an accepting state, the automaton is minimal, and states
    are numbered breadth-first from ``start`` (0) in byte order, so two DFAs for the same
    language are identical. The empty language is the one exception to "trimmed": it has no
    states at all and ``start == -1``.
    """

    start: int
    accepting: tuple[bool, ...]
    table: np.ndarray

    def __post_init__(self) -> None:
        table = self.table
        if not isinstance(table, np.ndarray) or table.dtype != np.int32 or table.ndim != 2:
            raise ValueError("ByteDFA.table must be a 2-D numpy int32 array")
        count = len(self.accepting)
        if table.shape != (count, 256):
            raise ValueError(f"ByteDFA.table has shape {table.shape}, expected ({count}, 256)")
        if not (-1 <= self.start < count) or (self.start == DEAD) != (count == 0):
            raise ValueError(f"ByteDFA.start {self.start} is invalid for {count} states")
        if count and (int(table.min()) < DEAD or int(table.max()) >= count):
            raise ValueError("ByteDFA.table has a transition to a state that does not exist")
        table.setflags(write=False)

    def __setstate__(self, state: dict[str, object]) -> None:
        # Unpickling bypasses __init__: restore the fields, then re-check and re-freeze.
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    @property
    def num_states(self) -> int:
        """Number of states."""
        return len(self.accepting)

    @property
    def is_empty(self) -> bool:
        """Whether the language is empty."""
        return self.start == DEAD

    def run(self, state: int, data: bytes) -> int:
        """The state after reading ``data`` from ``state`` (-1 once dead)."""
        table = self.table
        for byte in data:
            if state == DEAD:
                return DEAD
            state = int(table[state, byte])
        return state

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` is in the language."""
        state = self.run(self.start, data)
        return state != DEAD and self.accepting[state]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ByteDFA):
            return NotImplemented
        return (
            self.start == other.start
            and self.accepting == other.accepting
            and np.array_equal(self.table, other.table)
        )

    def __hash__(self) -> int:
        return hash((self.start, self.accepting, self.table.tobytes()))


class _ByteNFA:
    """Thompson NFA with epsilon edges and inclusive byte-range edges."""

    def __init__(self, max_states: int) -> None:
        self.max_states = max_states
        # Sparse: most states have only one or two outgoing edges of one kind.
        self.epsilon: defaultdict[int, list[int]] = defaultdict(list)
        self.edges: defaultdict[int, list[tuple[int, int, int]]] = defaultdict(list)
        self.count = 0
        # Exit states of choice alternatives and terminal copies: each one's only edge is an
        # epsilon to the state it forwards to (constructions add edges into their target,
        # never out of it), so its future is exactly that state's.
        self.forward: dict[int, int] = {}
        # Entry state of the copy of a terminal built towards a continuation, by (name, end
        # of the target's forwarding chain): a terminal used many times before the same
        # continuation (a key complement's string tail after every key prefix) is built
        # once, which keeps the subset construction near the minimal DFA.
        self.copies: dict[tuple[str, int], int] = {}
        # UTF-8 suffix states shared by every class: (lo, hi, next) -> the state whose one
        # edge reads lo..hi into next (the same future wherever it is used).
        self.suffix_states: dict[tuple[int, int, int], int] = {}

    def new_state(self) -> int:
        if self.count >= self.max_states:
            raise AutomatonSizeError(
                f"terminal expression needs more than {self.max_states:,} NFA states "
                "(raise max_states or simplify the expression)"
            )
        self.count += 1
        return self.count - 1

    def forward_to(self, state: int, target: int) -> None:
        """Give the fresh exit `state` its one edge, an epsilon to `target`."""
        self.epsilon[state].append(target)
        self.forward[state] = target

    def resolve(self, state: int) -> int:
        """The end of the chain of forwarding states from `state`."""
        forward = self.forward
        while state in forward:
            state = forward[state]
        return state


def build_dfa(
    expr: Expr,
    terminals: Mapping[str, Expr] | None = None,
    *,
    lazy: bool = False,
    max_states: int = 100_000,
) -> ByteDFA:
    """The minimal, trimmed, canonically numbered byte DFA of a terminal-only expression.

    ``terminals`` maps names to bodies for the ``Ref`` nodes in ``expr`` (they may refer to
    each other, but not recursively). ``lazy=True`` builds committed-shortest matching:
    accepting states keep no outgoing edges, so the language becomes
    ``{w in L : no proper prefix of w is in L}``. More than ``max_states`` DFA states (or ten
    times as many NFA states) raises CompileError naming the limit.

    Runs in C++ (``gramkiln.runtime._core``, GIL released) when the extension is built, else
    in Python (:func:`build_dfa_python`); both give identical results and errors.
    """
    if max_states < 1:
        raise ValueError("max_states must be at least 1")
    native = _native_builder()
    if native is None:
        return build_dfa_python(expr, terminals, lazy=lazy, max_states=max_states)
    program = _encode_program(expr, terminals or {})
    # Names only shape error messages, and failures are not memoised: leave them out, so
    # that equal bodies under different terminal names share one DFA.
    key = (program.code, program.terminal_offsets, lazy, max_states)
    cached = _DFA_MEMO.get(key)
    if cached is not None:
        return cached
    result = native(
        program.code,
        program.terminal_offsets,
        lazy,
        min(max_states, _NATIVE_STATE_CAP),
        min(sys.getrecursionlimit(), _NATIVE_MAX_DEPTH),
    )
    if result[0] is None:
        error = AutomatonSizeError if result[1] in _SIZE_FAILURES else CompileError
        raise error(_failure_message(result[1], result[2], program.names, max_states))
    start, accepting, table_bytes = result
    table = np.frombuffer(table_bytes, dtype=np.int32).reshape(len(accepting), 256)
    dfa = ByteDFA(start=start, accepting=tuple(map(bool, accepting)), table=table)
    _DFA_MEMO.put(key, dfa, table.nbytes)
    return dfa


def minimal_dfa(table: np.ndarray, accepting: Sequence[bool]) -> ByteDFA:
    """The minimal, trimmed, canonical DFA of a complete-or-partial byte table (state 0 the
    start, ``table[state, byte]`` the next state or -1), e.g. a product of two DFAs."""
    if table.ndim != 2 or table.shape != (len(accepting), 256):
        raise ValueError("minimal_dfa needs a (states, 256) table and one flag per state")
    if not len(accepting):
        return _canonical(np.zeros((0, 256), dtype=np.int32), [], DEAD, np.arange(256))
    work = np.ascontiguousarray(table, dtype=np.int32).copy()
    return _canonical(*_minimise(*_trim(work, list(map(bool, accepting)))), np.arange(256))


def build_dfa_python(
    expr: Expr,
    terminals: Mapping[str, Expr] | None = None,
    *,
    lazy: bool = False,
    max_states: int = 100_000,
) -> ByteDFA:
    """:func:`build_dfa` in pure Python: the fallback without the extension, and the oracle
    the native path is tested against."""
    if max_states < 1:
        raise ValueError("max_states must be at least 1")
    nfa = _ByteNFA(max_states * 10)
    start, final = nfa.new_state(), nfa.new_state()
    try:
        _connect(nfa, expr, start, final, terminals or {}, ())
    except RecursionError as exc:
        raise CompileError("terminal expression nesting is too deep") from exc
    # Until the very end the table has one column per byte class, not per byte.
    table, accepting, class_of_byte = _determinise(nfa, start, final, max_states)
    if lazy:
        for state, is_final in enumerate(accepting):
            if is_final:
                table[state] = DEAD
    return _canonical(*_minimise(*_trim(table, accepting)), class_of_byte)


# ---- native path ---------------------------------------------------------------------------
# The expression goes to C++ as one flat int32 program (layout in cpp/src/dfa.hpp): every
# node is [op, size, payload..., children...]; references name terminals by index, and each
# referenced body is encoded once, after the root.
_OP_EMPTY, _OP_BYTES, _OP_CLASS, _OP_SEQ, _OP_CHOICE, _OP_REPEAT, _OP_REF, _OP_INVALID = range(8)
_FAILURE_NFA_LIMIT, _FAILURE_DFA_LIMIT, _FAILURE_RECURSIVE = 1, 2, 3
_FAILURE_UNKNOWN_REF, _FAILURE_INVALID, _FAILURE_TOO_DEEP, _FAILURE_WORK_LIMIT = 4, 5, 6, 7
_SIZE_FAILURES = (_FAILURE_NFA_LIMIT, _FAILURE_DFA_LIMIT, _FAILURE_WORK_LIMIT)
# Beyond these the native limits are unreachable in practice (memory runs out first); the
# caps keep the C++ arithmetic in range. The depth cap bounds the C++ recursion's stack.
_NATIVE_STATE_CAP = 1 << 40
_NATIVE_MAX_DEPTH = 10_000
_INT32_MAX = 2**31 - 1
_INT32_TYPECODE = "i" if array.array("i").itemsize == 4 else "l"
# None: not looked up yet; False: the extension (or its DFA builder) is missing.
_native_function: Callable[..., tuple[Any, ...]] | Literal_[False] | None = None


def _native_builder() -> Callable[..., tuple[Any, ...]] | None:
    """``_core.build_byte_dfa``, or None where the extension is not built (imported lazily:
    ir/ must import without it)."""
    global _native_function
    if _native_function is None:
        try:
            from gramkiln.runtime import _core
        except ImportError:
            _native_function = False
        else:
            function = getattr(_core, "build_byte_dfa", None)
            _native_function = function if callable(function) else False
    return _native_function or None


@dataclass(frozen=True)
class _Program:
    code: bytes
    terminal_offsets: bytes
    names: tuple[str, ...]  # terminal names by index, then error messages


class _Encoder:
    """Encodes an expression and the terminal bodies it reaches into one program.

    Names (terminals, and error messages for elements that cannot appear in a terminal,
    marked with a leading NUL) are numbered in the order they are first met, so a program is
    a pure function of the expression and the bodies: equal inputs give equal programs.
    """

    def __init__(self, terminals: Mapping[str, Expr]) -> None:
        self.terminals = terminals
        self.code: list[int] = []
        self.names: list[str] = []
        self.name_index: dict[str, int] = {}
        # (position in code, name) of every name slot, so that a body's encoding can be
        # reused in another program, whose name numbers differ.
        self.name_slots: list[tuple[int, str]] = []

    def program(self, expr: Expr) -> _Program:
        self.encode(expr)
        offsets: list[int] = []
        # Bodies are appended as references to them are found, so the list grows as we go.
        while len(offsets) < len(self.names):
            body = self.terminals.get(self.names[len(offsets)])
            if body is None:
                offsets.append(-1)
            else:
                offsets.append(len(self.code))
                self._encode_body(body)
        return _Program(
            code=_int32_bytes(self.code),
            terminal_offsets=_int32_bytes(offsets),
            names=tuple(self.names),
        )

    def _encode_body(self, body: Expr) -> None:
        """Encode a terminal body, reusing its encoding from an earlier program if any (the
        same bodies recur in every lexeme of a grammar that references them)."""
        code = self.code
        start = len(code)
        cached = _BODY_ENCODINGS.get(id(body))
        if cached is not None and cached[0] is body:
            code += cached[1]
            for position, name in cached[2]:
                code[start + position] = self._name(name)
            return
        first_slot = len(self.name_slots)
        self.encode(body)
        slots = tuple((position - start, name) for position, name in self.name_slots[first_slot:])
        if len(_BODY_ENCODINGS) >= _MAX_BODY_ENCODINGS:
            _BODY_ENCODINGS.clear()
        # Holding the body keeps its id from being reused while the entry exists.
        _BODY_ENCODINGS[id(body)] = (body, code[start:], slots)

    def encode(self, expr: Node) -> None:
        handler = _ENCODERS.get(type(expr))
        if handler is None:
            kind = getattr(expr, "kind", type(expr).__name__)
            self.code += (_OP_INVALID, 3, self._slot(f"\0{kind}"))
        else:
            handler(self, expr)

    def _slot(self, name: str) -> int:
        """The number of ``name`` for the slot about to be written at the end of the code."""
        self.name_slots.append((len(self.code) + 2, name))
        return self._name(name)

    def _name(self, name: str) -> int:
        index = self.name_index.get(name)
        if index is None:
            index = self.name_index[name] = len(self.names)
            self.names.append(name)
        return index

    def _empty(self, expr: Empty) -> None:
        self.code += (_OP_EMPTY, 2)

    def _literal(self, expr: Literal) -> None:
        data = expr.text.encode("utf-8")
        self.code += (_OP_BYTES, 3 + len(data), 1 if expr.case_insensitive else 0)
        self.code += data

    def _bytes(self, expr: Bytes) -> None:
        self.code += (_OP_BYTES, 3 + len(expr.data), 0)
        self.code += expr.data

    def _class(self, expr: CharClass) -> None:
        ranges = expr.ranges
        self.code += (_OP_CLASS, 3 + 2 * len(ranges), 1 if expr.negated else 0)
        self.code.extend(chain.from_iterable(ranges))

    def _seq(self, expr: Seq) -> None:
        self._with_children(_OP_SEQ, expr.items)

    def _choice(self, expr: Choice) -> None:
        self._with_children(_OP_CHOICE, expr.alternatives)

    def _with_children(self, op: int, children: tuple[Expr, ...]) -> None:
        code = self.code
        at = len(code)
        code += (op, 0)
        for child in children:
            self.encode(child)
        code[at + 1] = len(code) - at

    def _repeat(self, expr: Repeat) -> None:
        code = self.code
        at = len(code)
        # Bounds past int32 are clamped: every copy adds an NFA state, so such a repeat hits
        # the NFA limit (at most 2**30 states natively) at the same point either way.
        low = min(expr.min, _INT32_MAX)
        high = -1 if expr.max is None else min(expr.max, _INT32_MAX)
        code += (_OP_REPEAT, 0, low, high)
        self.encode(expr.item)
        code[at + 1] = len(code) - at

    def _ref(self, expr: Ref) -> None:
        self.code += (_OP_REF, 3, self._slot(expr.name))


# Dispatch by node type (a class-level table: building bound methods per program costs more
# than encoding a short literal).
_ENCODERS = {
    Empty: _Encoder._empty,
    Literal: _Encoder._literal,
    Bytes: _Encoder._bytes,
    CharClass: _Encoder._class,
    Seq: _Encoder._seq,
    Choice: _Encoder._choice,
    Repeat: _Encoder._repeat,
    Ref: _Encoder._ref,
}

# Encodings of terminal bodies by id(body): (body, code, name slots). Bounded; cleared when full.
_BODY_ENCODINGS: dict[int, tuple[Node, list[int], tuple[tuple[int, str], ...]]] = register_memo({})
_MAX_BODY_ENCODINGS = 8192


def _int32_bytes(values: list[int]) -> bytes:
    # array.array converts a list of ints several times faster than numpy for short lists.
    return array.array(_INT32_TYPECODE, values).tobytes()


def _encode_program(expr: Expr, terminals: Mapping[str, Expr]) -> _Program:
    try:
        return _Encoder(terminals).program(expr)
    except RecursionError as exc:
        raise CompileError("terminal expression nesting is too deep") from exc


def _failure_message(kind: int, detail: list[int], names: tuple[str, ...], max_states: int) -> str:
    """The CompileError text of a native failure: the same words as the Python path."""
    if kind == _FAILURE_NFA_LIMIT:
        return (
            f"terminal expression needs more than {max_states * 10:,} NFA states "
            "(raise max_states or simplify the expression)"
        )
    if kind == _FAILURE_DFA_LIMIT:
        return (
            f"terminal expression needs more than {max_states:,} DFA states (the max_states limit)"
        )
    if kind == _FAILURE_WORK_LIMIT:
        return _work_limit_message(max_states)
    if kind == _FAILURE_RECURSIVE:
        chain = " -> ".join(names[index] for index in detail)
        return f"terminal {names[detail[-1]]} is recursive: {chain}"
    if kind == _FAILURE_UNKNOWN_REF:
        return f"unknown terminal {names[detail[0]]} in a terminal expression"
    if kind == _FAILURE_INVALID:
        return f"{names[detail[0]][1:]} elements cannot appear in a terminal expression"
    return "terminal expression nesting is too deep"


class _DfaMemo:
    """Recently built DFAs by program (the same terminal body recurs across the lexemes of a
    grammar and across grammars), bounded by the bytes of their tables. Thread-safe: the
    native build releases the GIL, so compiles in several threads share it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.entries: OrderedDict[object, tuple[ByteDFA, int]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: object) -> ByteDFA | None:
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                return None
            self.entries.move_to_end(key)
            return entry[0]

    def put(self, key: object, dfa: ByteDFA, size: int) -> None:
        if size > self.max_bytes // 4:
            return
        with self.lock:
            previous = self.entries.pop(key, None)
            if previous is not None:
                self.used -= previous[1]
            self.entries[key] = (dfa, size)
            self.used += size
            while self.used > self.max_bytes:
                _, (_, dropped) = self.entries.popitem(last=False)
                self.used -= dropped

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.used = 0


_DFA_MEMO = _DfaMemo(64 << 20)


def _connect(
    nfa: _ByteNFA,
    expr: Node,
    source: int,
    target: int,
    terminals: Mapping[str, Expr],
    inlining: tuple[str, ...],
) -> None:
    """Add NFA states and edges so that the paths from source to target spell ``expr``."""
    if isinstance(expr, Empty):
        nfa.epsilon[source].append(target)
    elif isinstance(expr, (Literal, Bytes)):
        data = expr.data if isinstance(expr, Bytes) else expr.text.encode("utf-8")
        folding = isinstance(expr, Literal) and expr.case_insensitive
        current = source
        for index, byte in enumerate(data):
            nxt = target if index == len(data) - 1 else nfa.new_state()
            if folding and (0x41 <= byte <= 0x5A or 0x61 <= byte <= 0x7A):
                nfa.edges[current].append((byte | 0x20, byte | 0x20, nxt))
                nfa.edges[current].append((byte & ~0x20, byte & ~0x20, nxt))
            else:
                nfa.edges[current].append((byte, byte, nxt))
            current = nxt
        if not data:
            nfa.epsilon[source].append(target)
    elif isinstance(expr, CharClass):
        # Sequences share their common suffixes (most end in the same continuation-byte
        # ranges), which keeps the NFA and the subset construction close to minimal.
        # They are shared by all classes of the expression, towards the end of the
        # target's forwarding chain.
        suffix_states = nfa.suffix_states
        end = nfa.resolve(target)
        for sequence in _class_sequences(expr.positive_ranges()):
            nxt = end
            for byte_lo, byte_hi in reversed(sequence[1:]):
                key = (byte_lo, byte_hi, nxt)
                state = suffix_states.get(key)
                if state is None:
                    state = suffix_states[key] = nfa.new_state()
                    nfa.edges[state].append((byte_lo, byte_hi, nxt))
                nxt = state
            nfa.edges[source].append((sequence[0][0], sequence[0][1], nxt))
    elif isinstance(expr, Seq):
        current = source
        items = expr.items
        for index, item in enumerate(items):
            if index == len(items) - 2:
                # The last item is a terminal already built towards this target: the item
                # before it leads straight into that copy.
                shared = _existing_copy(nfa, items[-1], target, inlining)
                if shared is not None:
                    _connect(nfa, item, current, shared, terminals, inlining)
                    break
            nxt = target if index == len(items) - 1 else nfa.new_state()
            _connect(nfa, item, current, nxt, terminals, inlining)
            current = nxt
        if not expr.items:
            nfa.epsilon[source].append(target)
    elif isinstance(expr, Choice):
        for alternative in expr.alternatives:
            entry, exit_ = nfa.new_state(), nfa.new_state()
            nfa.epsilon[source].append(entry)
            nfa.forward_to(exit_, target)
            _connect(nfa, alternative, entry, exit_, terminals, inlining)
    elif isinstance(expr, Repeat):
        current = source
        for _ in range(expr.min):
            nxt = nfa.new_state()
            _connect(nfa, expr.item, current, nxt, terminals, inlining)
            current = nxt
        if expr.max is None:
            head, body_end = nfa.new_state(), nfa.new_state()
            nfa.epsilon[current].append(head)
            nfa.epsilon[head].append(target)
            _connect(nfa, expr.item, head, body_end, terminals, inlining)
            nfa.epsilon[body_end].append(head)
        else:
            # Optional copies, each of which may jump straight to the end: linear in the
            # bound, with epsilon closures of constant size.
            for _ in range(expr.max - expr.min):
                nxt = nfa.new_state()
                nfa.epsilon[current].append(target)
                _connect(nfa, expr.item, current, nxt, terminals, inlining)
                current = nxt
            nfa.epsilon[current].append(target)
    elif isinstance(expr, Ref):
        _check_not_recursive(expr.name, inlining)
        body = terminals.get(expr.name)
        if body is None:
            raise CompileError(f"unknown terminal {expr.name} in a terminal expression")
        copy_key = (expr.name, nfa.resolve(target))
        shared = nfa.copies.get(copy_key)
        if shared is not None:
            nfa.epsilon[source].append(shared)
            return
        entry, exit_ = nfa.new_state(), nfa.new_state()
        nfa.epsilon[source].append(entry)
        nfa.forward_to(exit_, target)
        _connect(nfa, body, entry, exit_, terminals, inlining + (expr.name,))
        nfa.copies[copy_key] = entry
    else:
        kind = getattr(expr, "kind", type(expr).__name__)
        raise CompileError(f"{kind} elements cannot appear in a terminal expression")


def _check_not_recursive(name: str, inlining: tuple[str, ...]) -> None:
    if name in inlining:
        chain = " -> ".join(inlining + (name,))
        raise CompileError(f"terminal {name} is recursive: {chain}")


def _existing_copy(nfa: _ByteNFA, item: Node, target: int, inlining: tuple[str, ...]) -> int | None:
    """When `item` references a terminal with a copy built towards `target`'s continuation,
    that copy's entry state (after the check the reference itself would make, so errors stay
    the same); else None."""
    if not isinstance(item, Ref):
        return None
    _check_not_recursive(item.name, inlining)
    return nfa.copies.get((item.name, nfa.resolve(target)))


@functools.lru_cache(maxsize=1024)
def _class_sequences(
    ranges: tuple[tuple[int, int], ...],
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """UTF-8 byte-range sequences of a class (cached: a repeated class is split once)."""
    return tuple(tuple(sequence) for lo, hi in ranges for sequence in utf8_sequences(lo, hi))


def _byte_classes(nfa: _ByteNFA) -> list[tuple[int, int]]:
    """Maximal byte intervals that every NFA edge either fully contains or avoids."""
    cuts = {0, 256}
    for edges in nfa.edges.values():
        for lo, hi, _ in edges:
            cuts.add(lo)
            cuts.add(hi + 1)
    bounds = sorted(cuts)
    return [(bounds[i], bounds[i + 1] - 1) for i in range(len(bounds) - 1)]


def _work_limit(max_states: int) -> int:
    """How many NFA states the subsets and closures of one subset construction may hold
    together (see the C++ determinise: nested counted repetitions make each of them hold a
    large part of the NFA, quadratic in time and memory, within the DFA state limit)."""
    return max(max_states, 4096) * 16


def _work_limit_message(max_states: int) -> str:
    return (
        f"terminal expression is too costly to determinise: its subsets hold more than "
        f"{_work_limit(max_states):,} NFA states together (nested counted repetitions "
        "multiply; simplify the expression)"
    )


def _determinise(
    nfa: _ByteNFA, start: int, final: int, max_states: int
) -> tuple[np.ndarray, list[bool], np.ndarray]:
    """Subset construction over byte classes.

    Returns the table with one column per byte class (classes are byte intervals in
    ascending order), the accepting flags, and the class of every byte.
    """
    closure_cache: dict[int, frozenset[int]] = {}
    edges = nfa.edges
    work_limit = _work_limit(max_states)
    # NFA states held by the cached closures, and by the subsets, checked as in the C++ build.
    closure_work = subset_work = 0

    def closure_of_state(state: int) -> frozenset[int]:
        """The important states of the epsilon closure: those with byte edges, and the final
        state. The others (epsilon-only states a closure passes through) change neither
        what a subset reads next nor whether it accepts, so subsets keep just these, and
        paths through different epsilon states into the same states give one DFA state."""
        nonlocal closure_work
        cached = closure_cache.get(state)
        if cached is None:
            seen = {state}
            stack = [state]
            while stack:
                for nxt in nfa.epsilon.get(stack.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            cached = closure_cache[state] = frozenset(s for s in seen if s == final or edges.get(s))
            closure_work += len(cached)
            if closure_work > work_limit:
                raise AutomatonSizeError(_work_limit_message(max_states))
        return cached

    classes = _byte_classes(nfa)
    class_starts = [lo for lo, _ in classes]
    start_set = closure_of_state(start)
    index = {start_set: 0}
    subsets = [start_set]
    rows: list[list[int]] = []
    position = 0
    while position < len(subsets):
        subset = subsets[position]
        position += 1
        # Edge by edge (not class by class): big Unicode classes have many edges.
        targets_by_class: dict[int, set[int]] = {}
        for state in subset:
            for lo, hi, nxt in nfa.edges.get(state, ()):
                closure = closure_of_state(nxt)
                first = bisect.bisect_left(class_starts, lo)
                last = bisect.bisect_right(class_starts, hi) - 1
                for class_number in range(first, last + 1):
                    targets_by_class.setdefault(class_number, set()).update(closure)
        row = [DEAD] * len(classes)
        for class_number, targets in sorted(targets_by_class.items()):
            key = frozenset(targets)
            target_index = index.get(key)
            if target_index is None:
                if len(subsets) >= max_states:
                    raise AutomatonSizeError(
                        f"terminal expression needs more than {max_states:,} DFA states "
                        "(the max_states limit)"
                    )
                target_index = index[key] = len(subsets)
                subsets.append(key)
                subset_work += len(key)
                if closure_work + subset_work > work_limit:
                    raise AutomatonSizeError(_work_limit_message(max_states))
            row[class_number] = target_index
        rows.append(row)
    class_of_byte = np.empty(256, dtype=np.intp)
    for class_number, (class_lo, class_hi) in enumerate(classes):
        class_of_byte[class_lo : class_hi + 1] = class_number
    table = np.array(rows, dtype=np.int32).reshape(len(rows), len(classes))
    return table, [final in subset for subset in subsets], class_of_byte


def _trim(table: np.ndarray, accepting: list[bool]) -> tuple[np.ndarray, list[bool], int]:
    """Drop states that are unreachable from 0 or cannot reach acceptance.

    Returns the new table, accepting flags and start (-1 for the empty language).
    """
    count = len(accepting)
    # Forward, level by level: every state reachable from the start (state 0).
    reachable = np.zeros(count, dtype=bool)
    reachable[0] = True
    frontier = np.array([0])
    while frontier.size:
        successors = np.unique(table[frontier])
        successors = successors[successors != DEAD]
        frontier = successors[~reachable[successors]]
        reachable[frontier] = True
    # Backward, over predecessor lists in compressed form (sources sorted by target).
    sources, columns = np.nonzero(table != DEAD)
    targets = table[sources, columns]
    order = np.argsort(targets, kind="stable")
    predecessor_sources = sources[order]
    bounds = np.searchsorted(targets[order], np.arange(count + 1)).tolist()
    useful = np.array(accepting, dtype=bool)
    frontier = np.nonzero(useful)[0]
    while frontier.size:
        pieces = [predecessor_sources[bounds[t] : bounds[t + 1]] for t in frontier.tolist()]
        candidates = np.unique(np.concatenate(pieces))
        frontier = candidates[~useful[candidates]]
        useful[frontier] = True
    keep = reachable & useful
    if not keep[0]:
        return np.zeros((0, 256), dtype=np.int32), [], DEAD
    new_number = np.full(count + 1, DEAD, dtype=np.int32)  # index -1 maps dead to dead
    kept = np.nonzero(keep)[0]
    new_number[kept] = np.arange(len(kept), dtype=np.int32)
    new_table = new_number[table[kept]]
    return new_table, [accepting[s] for s in kept.tolist()], int(new_number[0])


def _minimise(
    table: np.ndarray, accepting: list[bool], start: int
) -> tuple[np.ndarray, list[bool], int]:
    """Hopcroft's partition refinement of a trimmed DFA (columns are byte classes)."""
    count = len(accepting)
    if count == 0:
        return table, accepting, start
    sink = count  # explicit dead state so that every transition is defined
    # incoming[target] = [(symbol, the states that go to target on symbol), ...], only for
    # symbols that have such states (the sink included); grouped with numpy.
    incoming: list[list[tuple[int, list[int]]]] = [[] for _ in range(count + 1)]
    for symbol in range(table.shape[1]):
        column = table[:, symbol]
        live = np.nonzero(column != DEAD)[0]
        if live.size:
            order = np.argsort(column[live], kind="stable")
            sorted_targets, sorted_sources = column[live][order], live[order]
            starts = (np.flatnonzero(np.diff(sorted_targets)) + 1).tolist()
            sources_list = sorted_sources.tolist()
            heads = sorted_targets[[0, *starts]].tolist()
            for target, lo, hi in zip(
                heads, [0, *starts], [*starts, len(sources_list)], strict=True
            ):
                incoming[target].append((symbol, sources_list[lo:hi]))
        incoming[sink].append((symbol, np.nonzero(column == DEAD)[0].tolist() + [sink]))
    # The sink starts in a block of its own: no real state is equivalent to it (the DFA is
    # trimmed), and this way its huge in-degree is scanned once, not at every split.
    finals = {s for s in range(count) if accepting[s]}
    others = set(range(count)) - finals
    blocks: list[set[int]] = [block for block in (finals, others) if block] + [{sink}]
    block_of = [0] * (count + 1)
    for number, block in enumerate(blocks):
        for state in block:
            block_of[state] = number
    # Hopcroft: all initial blocks but one must be splitters; leave out the largest.
    largest = max(range(len(blocks)), key=lambda number: len(blocks[number]))
    pending = set(range(len(blocks))) - {largest}
    while pending:
        # Gather the predecessors of the splitter per symbol first (a snapshot of the
        # splitter), then split symbol by symbol with the current blocks.
        predecessors: dict[int, list[int]] = {}
        for target in list(blocks[pending.pop()]):
            for symbol, sources in incoming[target]:
                gathered = predecessors.get(symbol)
                if gathered is None:
                    predecessors[symbol] = list(sources)
                else:
                    gathered.extend(sources)
        for sources in predecessors.values():
            # A DFA has one successor per symbol, so each source appears at most once here.
            touched: dict[int, list[int]] = {}
            for source in sources:
                number = block_of[source]
                members = touched.get(number)
                if members is None:
                    touched[number] = [source]
                else:
                    members.append(source)
            for number, inside in touched.items():
                block = blocks[number]
                if len(inside) == len(block):
                    continue
                block.difference_update(inside)
                new_number = len(blocks)
                blocks.append(set(inside))
                for state in inside:
                    block_of[state] = new_number
                if number in pending or len(inside) <= len(block):
                    pending.add(new_number)
                else:
                    pending.add(number)
    number_of_block: dict[int, int] = {}
    for state in range(count):
        number_of_block.setdefault(block_of[state], len(number_of_block))
    # Equivalent states have equivalent successors, so one representative row per block
    # suffices. No real state shares the sink's block: the DFA is trimmed.
    representatives = [0] * len(number_of_block)
    for state in range(count):
        representatives[number_of_block[block_of[state]]] = state
    block_number = np.full(count + 1, DEAD, dtype=np.int32)  # index -1 keeps dead dead
    for state in range(count):
        block_number[state] = number_of_block[block_of[state]]
    merged = block_number[table[representatives]]
    merged_accepting = [accepting[state] for state in representatives]
    return merged, merged_accepting, number_of_block[block_of[start]]


def _canonical(
    table: np.ndarray, accepting: list[bool], start: int, class_of_byte: np.ndarray
) -> ByteDFA:
    """Renumber breadth-first from the start in byte order, expand to 256 columns, freeze.

    Byte classes are ascending intervals, so class order is byte order.
    """
    if start == DEAD:
        empty = np.zeros((0, 256), dtype=np.int32)
        empty.setflags(write=False)
        return ByteDFA(start=DEAD, accepting=(), table=empty)
    # Successors of every state in order of the first byte that reaches them.
    count = len(accepting)
    sources, columns = np.nonzero(table != DEAD)
    targets = table[sources, columns].astype(np.int64)
    _, first = np.unique(sources.astype(np.int64) * count + targets, return_index=True)
    first.sort()  # nonzero() is row-major, so this is (source, first byte) order
    successors: list[list[int]] = [[] for _ in range(count)]
    for source, target in zip(sources[first].tolist(), targets[first].tolist(), strict=True):
        successors[source].append(target)
    order = [start]
    number = {start: 0}
    queue = deque([start])
    while queue:
        for target in successors[queue.popleft()]:
            if target not in number:
                number[target] = len(order)
                order.append(target)
                queue.append(target)
    renumber = np.full(len(accepting) + 1, DEAD, dtype=np.int32)
    for old, new in number.items():
        renumber[old] = new
    new_table = renumber[table[order]][:, class_of_byte]
    new_table = np.ascontiguousarray(new_table, dtype=np.int32)
    new_table.setflags(write=False)
    return ByteDFA(start=0, accepting=tuple(bool(accepting[s]) for s in order), table=new_table)
