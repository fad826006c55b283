"""Regular-language operations the grammar front ends share: intersection, difference and
complement of terminal expressions, through byte DFAs and back to IR expressions.

GLRM's ``a & b`` / ``a - b`` and llguidance-style Lark terminals (``A & B``, ``~A``) have no
IR node: the operands' minimal byte DFAs (``ir.automata.build_dfa``) are combined by a
product construction, trimmed, and written back as one expression by state elimination,
which is bounded in size (``MAX_EXPRESSION_NODES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import numpy as np
from gramkiln.frontend._regex_exprs import flat_choice, merged_seq
from gramkiln.ir import Bytes, CharClass, Choice, Empty, Expr, Ref, Repeat, Seq
from gramkiln.ir.automata import ByteDFA, build_dfa, minimal_dfa
from gramkiln.ir.grammar import walk

# Past this many nodes an automaton is not written back as one expression: state elimination
# can grow it exponentially.
MAX_EXPRESSION_NODES = 20_000
# The operands' DFAs are built with this state limit (CompileError past it).
MAX_OPERAND_STATES = 4096


def combine(operator: str, left: ByteDFA | None, right: ByteDFA) -> ByteDFA:
    """The minimal DFA of ``left & right``, ``left - right`` or ``~right`` (complement over
    all byte strings, ``left`` None)."""
    if operator == "~":
        left, operator = _all_byte_strings(), "-"
    assert left is not None
    table, accepting = _product(left, right, operator)
    return minimal_dfa(table, accepting)


def dfa_expression(dfa: ByteDFA) -> Expr | None:
    """A byte DFA as one IR expression; None past ``MAX_EXPRESSION_NODES``."""
    if dfa.is_empty:
        return CharClass(ranges=())
    edges: list[tuple[object, object, Expr]] = []
    for state, row in enumerate(dfa.table.tolist()):
        by_target: dict[int, list[int]] = {}
        for byte, target in enumerate(row):
            if target >= 0:
                by_target.setdefault(target, []).append(byte)
        for target, byte_values in by_target.items():
            edges.append((state, target, byte_set(byte_values)))
    accepting = {state for state, flag in enumerate(dfa.accepting) if flag}
    return eliminate_states(dfa.start, accepting, edges)


def compute_operations(
    operations: Mapping[str, tuple[str, Expr | None, Expr, int]],
    terminals: Mapping[str, Expr],
    fail: Callable[[str, int], Exception],
) -> dict[str, Expr]:
    """The body of every helper terminal standing for an operation, by its name.

    ``operations`` maps each helper name to (operator, left or None, right, source offset);
    operands may reference terminals declared anywhere, and those may use other operations,
    so each operation is computed after the ones it reaches (terminal cycles must have been
    refused already). ``fail(message, offset)`` builds the front end's located error.
    """
    computer = _OperationComputer(operations, terminals, fail)
    for name in operations:
        computer.compute(name)
    return {name: computer.computed[name] for name in operations}


class _OperationComputer:
    """compute_operations' state: operations are computed depth first, each after those its
    operands reach. Methods rather than nested functions: a nested function that calls itself
    is a reference cycle, which would keep all of this alive until a garbage collection."""

    def __init__(
        self,
        operations: Mapping[str, tuple[str, Expr | None, Expr, int]],
        terminals: Mapping[str, Expr],
        fail: Callable[[str, int], Exception],
    ) -> None:
        self.operations = operations
        self.fail = fail
        self.known = dict(terminals)
        self.computed: dict[str, Expr] = {}
        self.automata: dict[str, ByteDFA] = {}

    def reached(self, expr: Expr, seen: set[str]) -> list[str]:
        """The operations `expr` names, directly or through terminals."""
        found: list[str] = []
        for node in walk(expr):
            if not isinstance(node, Ref) or node.name in seen:
                continue
            seen.add(node.name)
            if node.name in self.operations:
                found.append(node.name)
            elif node.name in self.known:
                found.extend(self.reached(self.known[node.name], seen))
        return found

    def operand_dfa(self, expr: Expr) -> ByteDFA:
        """An operand's automaton; one that names an operation (directly or through terminals
        that only name one) reuses its automaton: its expression form can be far costlier to
        rebuild."""
        seen: set[str] = set()
        while isinstance(expr, Ref) and expr.name not in seen:
            seen.add(expr.name)
            if expr.name in self.automata:
                return self.automata[expr.name]
            if expr.name not in self.known:
                break
            expr = self.known[expr.name]
        return build_dfa(expr, self.known, max_states=MAX_OPERAND_STATES)

    def compute(self, name: str) -> None:
        """Compute operation `name` (after the operations its operands reach)."""
        from gramkiln.errors import CompileError

        if name in self.computed:
            return
        operator, left, right, offset = self.operations[name]
        for operand in (left, right):
            if operand is not None:
                for inner in self.reached(operand, set()):
                    self.compute(inner)
        try:
            left_dfa = None if left is None else self.operand_dfa(left)
            self.automata[name] = combine(operator, left_dfa, self.operand_dfa(right))
        except CompileError as error:
            raise self.fail(f"'{operator}': {error}", offset) from None
        body = dfa_expression(self.automata[name])
        if body is None:
            raise self.fail(
                f"the result of '{operator}' is too large to write as one regular expression",
                offset,
            )
        self.known[name] = self.computed[name] = body


def eliminate_states(
    start: object,
    accepting: AbstractSet[object],
    edges: Sequence[tuple[object, object, Expr]],
) -> Expr | None:
    """The language of an automaton with expression-labelled edges, as one expression
    (state elimination); None when the expression would pass MAX_EXPRESSION_NODES."""

    # A fresh initial and final state; removing the others one by one leaves the language
    # on the initial -> final edge.
    initial, final = object(), object()
    table: dict[tuple[object, object], Expr] = {}

    def add(source: object, target: object, label: Expr) -> None:
        known = table.get((source, target))
        table[(source, target)] = label if known is None else flat_choice([known, label])

    add(initial, start, Empty())
    for accept_state in accepting:
        add(accept_state, final, Empty())
    for source, target, label in edges:
        add(source, target, label)
    middle = {s for pair in table for s in pair} - {initial, final}
    while middle:
        # Fewest paths through first: it keeps the expression smallest.
        def cost(state: object) -> int:
            ins = sum(1 for (s, t) in table if t == state and s != state)
            outs = sum(1 for (s, t) in table if s == state and t != state)
            return ins * outs

        state = min(middle, key=lambda s: (cost(s), str(s)))
        middle.discard(state)
        loop = table.pop((state, state), None)
        ins = [(s, e) for (s, t), e in table.items() if t == state]
        outs = [(t, e) for (s, t), e in table.items() if s == state]
        for s, _ in ins:
            del table[(s, state)]
        for t, _ in outs:
            del table[(state, t)]
        star = [Repeat(item=loop, min=0, max=None)] if loop is not None else []
        for before, into in ins:
            for after, out in outs:
                add(before, after, merged_seq([into, *star, out]))
        if sum(_size(e) for e in table.values()) > MAX_EXPRESSION_NODES:
            return None
    return table.get((initial, final), CharClass(ranges=()))


def _product(left: ByteDFA, right: ByteDFA, operator: str) -> tuple[np.ndarray, list[bool]]:
    """The reachable product of two byte DFAs (state 0 the start): its states accept where
    both do (``&``) or the left only (``-``). ``minimal_dfa`` trims and minimises it."""
    dead = -1
    intersect = operator == "&"
    if left.is_empty or (intersect and right.is_empty):
        return np.zeros((0, 256), dtype=np.int32), []
    left_rows = left.table.tolist()
    right_rows = right.table.tolist() if right.num_states else []
    numbers = {(left.start, right.start): 0}
    pairs = [(left.start, right.start)]
    rows: list[list[int]] = []
    index = 0
    while index < len(pairs):
        a, b = pairs[index]
        row = [dead] * 256
        for byte in range(256):
            next_a = left_rows[a][byte]
            if next_a == dead:
                continue
            next_b = right_rows[b][byte] if b != dead else dead
            if intersect and next_b == dead:
                continue
            pair = (next_a, next_b)
            number = numbers.get(pair)
            if number is None:
                number = numbers[pair] = len(pairs)
                pairs.append(pair)
            row[byte] = number
        rows.append(row)
        index += 1
    accepting = []
    for a, b in pairs:
        in_right = b != dead and right.accepting[b]
        accepting.append(left.accepting[a] and (in_right if intersect else not in_right))
    return np.array(rows, dtype=np.int32), accepting


def byte_set(values: list[int]) -> Expr:
    """Single bytes: ASCII ones as a character class, the others as raw bytes."""
    ascii_ranges: list[tuple[int, int]] = []
    for value in sorted(v for v in values if v < 0x80):
        if ascii_ranges and ascii_ranges[-1][1] == value - 1:
            ascii_ranges[-1] = (ascii_ranges[-1][0], value)
        else:
            ascii_ranges.append((value, value))
    parts: list[Expr] = []
    if ascii_ranges:
        parts.append(CharClass(ranges=tuple(ascii_ranges)))
    parts.extend(Bytes(data=bytes([v])) for v in sorted(v for v in values if v >= 0x80))
    return flat_choice(parts)


def _all_byte_strings() -> ByteDFA:
    """The DFA of every byte string: one accepting state, every byte a loop."""
    return ByteDFA(start=0, accepting=(True,), table=np.zeros((1, 256), dtype=np.int32))


def _size(expr: Expr) -> int:
    if isinstance(expr, Seq):
        return 1 + sum(_size(item) for item in expr.items)
    if isinstance(expr, Choice):
        return 1 + sum(_size(item) for item in expr.alternatives)
    if isinstance(expr, Repeat):
        return 1 + _size(expr.item)
    return 1
