"""XGrammar's ``TagDispatch`` and ``TokenTagDispatch`` macros, lowered to plain IR rules.

``TagDispatch(("<a>", rule_a), ("<b>", rule_b), ...)`` is free text until the first complete
tag; then the tag's rule must match; then (``loop_after_dispatch=true``, the default) free text
again. Free text never contains an ``excludes`` string, ends at the first ``stops`` string
(which is matched), and may end anywhere when ``stop_eos=true`` (the default).

"First complete tag" is a regular condition on the free text, decided by an Aho-Corasick
automaton over all tag, stop and exclude strings: where several of them end at the same
character, the longest one counts. The automaton becomes regular expressions by state
elimination (the compiler fuses them into byte DFAs, which keeps masks fast), or, when those
would grow too large, a left-linear grammar with one rule per automaton state (see
docs/ebnf.md for the measurements behind both choices).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gramkiln.frontend._regex_exprs import flat_choice, merged_seq
from gramkiln.ir import CharClass, Empty, Expr, Ref, Repeat, Rule, Span, TokenSet
from gramkiln.ir.nodes import normalise_ranges

__all__ = ["DispatchSpec", "TokenDispatchSpec", "lower_tag_dispatch", "lower_token_dispatch"]

_TAG, _STOP, _EXCLUDE = "tag", "stop", "exclude"


@dataclass
class DispatchSpec:
    """The arguments of one ``TagDispatch(...)``: ``(tag, rule name)`` pairs and options."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    excludes: list[str] = field(default_factory=list)
    stop_eos: bool = True
    loop_after_dispatch: bool = True


@dataclass
class TokenDispatchSpec:
    """The arguments of one ``TokenTagDispatch(...)``: ``(token id, rule name)`` pairs."""

    pairs: list[tuple[int, str]] = field(default_factory=list)
    excludes: list[int] = field(default_factory=list)
    loop_after_dispatch: bool = True


class _PatternAutomaton:
    """Aho-Corasick automaton over code points; ``match[s]`` is the index of the longest
    pattern that ends on entering state ``s`` (-1: none)."""

    def __init__(self, patterns: list[str]) -> None:
        self.children: list[dict[int, int]] = [{}]
        own: list[int] = [-1]
        for index, pattern in enumerate(patterns):
            node = 0
            for char in map(ord, pattern):
                child = self.children[node].get(char)
                if child is None:
                    child = len(self.children)
                    self.children.append({})
                    own.append(-1)
                    self.children[node][char] = child
                node = child
            if own[node] < 0:
                own[node] = index
        self.alphabet = sorted({ord(char) for pattern in patterns for char in pattern})
        self.fail = [0] * len(self.children)
        self.match = list(own)
        queue = deque(self.children[0].values())
        while queue:
            node = queue.popleft()
            for char, child in self.children[node].items():
                self.fail[child] = self._step(self.fail[node], char) if node else 0
                if self.match[child] < 0:
                    # No pattern ends exactly here: the longest one ending here is the
                    # longest that ends at the failure state (a shorter suffix).
                    self.match[child] = self.match[self.fail[child]]
                queue.append(child)

    def _step(self, state: int, char: int) -> int:
        while char not in self.children[state] and state:
            state = self.fail[state]
        return self.children[state].get(char, 0)

    def transitions(self) -> tuple[list[int], dict[tuple[int, int], list[int]]]:
        """States reachable from the start without completing a pattern, and for each such
        source state and each target the pattern characters leading there (characters outside
        every pattern lead back to the start and are not listed)."""
        reachable = [0]
        seen = {0}
        edges: dict[tuple[int, int], list[int]] = {}
        queue = deque([0])
        while queue:
            state = queue.popleft()
            for char in self.alphabet:
                target = self._step(state, char)
                edges.setdefault((state, target), []).append(char)
                if self.match[target] < 0 and target not in seen:
                    seen.add(target)
                    reachable.append(target)
                    queue.append(target)
        return reachable, edges


# Outcomes of a free-text segment: ("tag", i) dispatches to pair i; STOPPED ends at a stop
# string; OPEN ends anywhere (stop_eos).
_STOPPED = ("stop", -1)
_OPEN = ("open", -1)
_START = ("start", -1)
# A node of state elimination: an automaton state, _START or an outcome.
_Node = int | tuple[str, int]
# Node count past which the regular-expression form is abandoned for the rule form (state
# elimination can grow exponentially; 50 tags of 20 characters take 57,000 nodes).
REGEX_NODE_BUDGET = 300_000


def lower_tag_dispatch(
    spec: DispatchSpec, fresh_name: Callable[[str], str], span: Span
) -> tuple[Expr, list[Rule]]:
    """The expression standing for ``TagDispatch(...)`` and the helper rules it refers to.

    ``fresh_name(hint)`` must return a rule name used nowhere else. Preserves the semantics in
    the module docstring exactly; tags that can never complete first (one that contains
    another tag) simply never dispatch. Free text becomes one regular expression per outcome
    when that stays within :data:`REGEX_NODE_BUDGET` nodes, else left-linear rules.
    """
    patterns = [tag for tag, _ in spec.pairs] + spec.stops + spec.excludes
    kinds = [_TAG] * len(spec.pairs) + [_STOP] * len(spec.stops) + [_EXCLUDE] * len(spec.excludes)
    automaton = _PatternAutomaton(patterns)
    reachable, edges = automaton.transitions()

    def outcome(target: int) -> tuple[str, int] | None:
        """Where a step into ``target`` leads: a free-text state (None) or an outcome; an
        excluded string gives ``("dead", -1)``."""
        pattern = automaton.match[target]
        if pattern < 0:
            return None
        kind = kinds[pattern]
        return (_TAG, pattern) if kind == _TAG else _STOPPED if kind == _STOP else ("dead", -1)

    segments = _segments_as_regex(automaton, reachable, edges, outcome, spec.stop_eos)
    rules: list[Rule] = []
    if segments is None:
        segments, rules = _segments_as_rules(
            automaton, reachable, edges, outcome, spec.stop_eos, fresh_name, span
        )

    endings = [segments[key] for key in (_OPEN, _STOPPED) if key in segments]
    # With no way to end (every stop string contains a tag or an excluded string), the macro
    # matches nothing.
    end = flat_choice(endings) if endings else CharClass.of([])
    dispatches = [
        merged_seq([segments[(_TAG, index)], Ref(name=body_rule)])
        for index, (_, body_rule) in enumerate(spec.pairs)
        if (_TAG, index) in segments
    ]
    if not spec.loop_after_dispatch:
        return flat_choice([end, *dispatches]), rules
    if not dispatches:
        return end, rules
    return merged_seq([Repeat(item=flat_choice(dispatches)), end]), rules


def _char_class(chars: list[int], negated: bool = False) -> CharClass:
    return CharClass.of(normalise_ranges([(char, char) for char in chars]), negated=negated)


def _steps(
    automaton: _PatternAutomaton,
    reachable: list[int],
    edges: dict[tuple[int, int], list[int]],
    outcome: Callable[[int], tuple[str, int] | None],
) -> list[tuple[int, int | tuple[str, int], CharClass]]:
    """Every step of the free-text automaton: (source state, target state or outcome, the
    characters as a class). Steps into excluded strings are left out: they match nothing."""
    steps: list[tuple[int, int | tuple[str, int], CharClass]] = []
    for source in reachable:
        # Back to the start: pattern characters that lead there plus every other character,
        # i.e. all characters except those leading elsewhere.
        to_start = set(edges.get((source, 0), ()))
        elsewhere = [char for char in automaton.alphabet if char not in to_start]
        steps.append((source, 0, _char_class(elsewhere, negated=True)))
    for (source, target), chars in edges.items():
        if target == 0:
            continue
        result = outcome(target)
        if result is None:
            steps.append((source, target, _char_class(chars)))
        elif result[0] != "dead":
            steps.append((source, result, _char_class(chars)))
    return steps


def _segments_as_regex(
    automaton: _PatternAutomaton,
    reachable: list[int],
    edges: dict[tuple[int, int], list[int]],
    outcome: Callable[[int], tuple[str, int] | None],
    stop_eos: bool,
) -> dict[tuple[str, int], Expr] | None:
    """One regular expression per outcome, by state elimination (Brzozowski-McCluskey) on
    the free-text automaton; None when the expressions outgrow the node budget.

    The compiler fuses such expressions into byte DFAs: on the Llama 3 vocabulary, 10 tags
    gave masks of 12 us p50 / 3 ms max, against 100 us / 30 ms for the rule form."""
    successors: dict[_Node, dict[_Node, tuple[Expr, int]]] = {}
    predecessors: dict[_Node, set[_Node]] = {}
    budget = REGEX_NODE_BUDGET

    def add(source: _Node, target: _Node, expr: Expr, size: int) -> None:
        nonlocal budget
        existing = successors.setdefault(source, {}).get(target)
        if existing is not None:
            expr, size = flat_choice([existing[0], expr]), existing[1] + size + 1
        successors[source][target] = (expr, size)
        predecessors.setdefault(target, set()).add(source)
        budget -= size

    add(_START, 0, Empty(), 1)
    for step_source, step_target, char_class in _steps(automaton, reachable, edges, outcome):
        add(step_source, step_target, char_class, 1)
    if stop_eos:
        for state in reachable:
            add(state, _OPEN, Empty(), 1)
    remaining = set(reachable)
    while remaining:
        # Eliminate the state whose removal creates the fewest new paths.
        state = min(
            remaining,
            key=lambda q: len(predecessors.get(q, ())) * len(successors.get(q, {})),
        )
        remaining.discard(state)
        outgoing = successors.pop(state, {})
        loop = outgoing.pop(state, None)
        for target in outgoing:
            predecessors[target].discard(state)
        incoming = [p for p in predecessors.pop(state, set()) if p != state]
        for source in incoming:
            into, into_size = successors[source].pop(state)
            for target, (out_of, out_size) in outgoing.items():
                parts = [into, out_of]
                size = into_size + out_size + 1
                if loop is not None:
                    parts.insert(1, Repeat(item=loop[0]))
                    size += loop[1] + 1
                add(source, target, merged_seq(parts), size)
                if budget < 0:
                    return None
    # Every automaton state is eliminated: what the start still reaches are the outcomes.
    return {
        target: expr
        for target, (expr, _) in successors.get(_START, {}).items()
        if isinstance(target, tuple)
    }


def _segments_as_rules(
    automaton: _PatternAutomaton,
    reachable: list[int],
    edges: dict[tuple[int, int], list[int]],
    outcome: Callable[[int], tuple[str, int] | None],
    stop_eos: bool,
    fresh_name: Callable[[str], str],
    span: Span,
) -> tuple[dict[tuple[str, int], Expr], list[Rule]]:
    """The left-linear rule form: one rule per free-text state, ``state_t ::= state_s
    [chars]``, and one per outcome; returns the outcome expressions and the rules.

    Left recursion costs an Earley parser one item per state and position (linear time); the
    right-linear form ``state_s ::= [chars] state_t`` made every completion walk back over the
    whole free text (4,000 characters: 1.05 s of CPU against 0.002 s)."""
    state_names = {state: fresh_name(f"free{state}") for state in reachable}
    arrivals: dict[int | tuple[str, int], list[Expr]] = {}
    for source, target, char_class in _steps(automaton, reachable, edges, outcome):
        step = merged_seq([Ref(name=state_names[source]), char_class])
        arrivals.setdefault(target, []).append(step)
    rules: list[Rule] = []
    for state in reachable:
        alternatives = ([Empty()] if state == 0 else []) + arrivals.get(state, [])
        rules.append(Rule(name=state_names[state], body=flat_choice(alternatives), span=span))
    segments: dict[tuple[str, int], Expr] = {}
    for key, steps in arrivals.items():
        if isinstance(key, tuple):
            name = fresh_name(f"{key[0]}{max(key[1], 0)}")
            rules.append(Rule(name=name, body=flat_choice(steps), span=span))
            segments[key] = Ref(name=name)
    if stop_eos:
        segments[_OPEN] = flat_choice([Ref(name=state_names[state]) for state in reachable])
    return segments, rules


def lower_token_dispatch(spec: TokenDispatchSpec) -> Expr:
    """The expression standing for ``TokenTagDispatch(...)``: any tokens but the triggers and
    the excluded ones, then a trigger token and its rule, repeated when looping."""
    special = normalise_ranges(
        [(token, token) for token, _ in spec.pairs] + [(token, token) for token in spec.excludes]
    )
    any_free_token = (
        TokenSet(ranges=tuple(special), negated=True) if special else TokenSet(wildcard=True)
    )
    free = Repeat(item=any_free_token)
    if not spec.pairs:
        return free
    dispatch = flat_choice(
        [
            merged_seq([TokenSet(ranges=((token, token),)), Ref(name=body_rule)])
            for token, body_rule in spec.pairs
        ]
    )
    if not spec.loop_after_dispatch:
        return merged_seq([free, Repeat(item=dispatch, max=1)])
    return merged_seq([Repeat(item=merged_seq([free, dispatch])), free])
