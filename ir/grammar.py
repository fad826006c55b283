"""Rules, rule options and the root of the gramkiln IR."""

from __future__ import annotations

import hashlib
import math
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple

from gramkiln.ir.memo import register as register_memo
from gramkiln.ir.nodes import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    Literal,
    Node,
    Ref,
    Repeat,
    Seq,
    Span,
    SpecialToken,
    TokenSet,
    normalise_ranges,
)
from pydantic import model_validator

IR_VERSION = 1
CAPTURE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
MAX_TOKENS_LIMIT = 1_000_000
MAX_CHARS_LIMIT = 2_147_483_647


class RuleOptions(Node):
    """Per-rule options of the Lark dialect (``name[lazy, max_tokens=5]: ...``)."""

    lazy: bool = False
    suffix: Expr | None = None
    stop: Expr | None = None
    stop_capture: str | None = None
    max_tokens: int | None = None
    max_chars: int | None = None
    capture: str | None = None
    temperature: float | None = None

    @model_validator(mode="after")
    def _combinations(self) -> RuleOptions:
        if self.suffix is not None and self.stop is not None:
            raise ValueError("suffix and stop cannot be used together")
        if self.stop_capture is not None and self.suffix is None and self.stop is None:
            raise ValueError("stop_capture requires suffix or stop")
        for marker in (self.suffix, self.stop):
            if isinstance(marker, Literal) and marker.text == "":
                raise ValueError("an empty string marker is not accepted")
        if self.max_tokens is not None and not (1 <= self.max_tokens <= MAX_TOKENS_LIMIT):
            raise ValueError(f"max_tokens must be between 1 and {MAX_TOKENS_LIMIT:,}")
        if self.max_chars is not None and not (0 <= self.max_chars <= MAX_CHARS_LIMIT):
            raise ValueError(f"max_chars must be between 0 and {MAX_CHARS_LIMIT:,}")
        for label, name in (("capture", self.capture), ("stop_capture", self.stop_capture)):
            if name is not None and not CAPTURE_NAME.match(name):
                raise ValueError(
                    f"{label} name {name!r} may contain only letters, digits, '_', '-' and '.'"
                )
        if self.temperature is not None:
            if not math.isfinite(self.temperature) or self.temperature < 0:
                raise ValueError("temperature must be a finite non-negative number")
            clashing = [
                label
                for label, on in (
                    ("max_tokens", self.max_tokens is not None),
                    ("lazy", self.lazy),
                    ("suffix", self.suffix is not None),
                    ("stop", self.stop is not None),
                )
                if on
            ]
            if clashing:
                raise ValueError(f"temperature cannot be combined with {', '.join(clashing)}")
        return self

    def is_default(self) -> bool:
        """True when no option is set."""
        return self == RuleOptions()


class Rule(Node):
    """A named definition: a rule (CFG nonterminal) or a terminal (one indivisible lexeme)."""

    name: str
    body: Expr
    terminal: bool = False
    options: RuleOptions = RuleOptions()
    span: Span | None = None

    @model_validator(mode="after")
    def _terminal_has_no_options(self) -> Rule:
        if self.terminal and not self.options.is_default():
            raise ValueError(f"terminal {self.name} cannot carry rule options")
        return self


class GrammarOptions(Node):
    """Whole-grammar options (``%grammar_options``)."""

    allow_initial_skip: bool = False


class Subgrammar(Node):
    """A nested grammar with its own namespace, ignore set and options."""

    name: str
    grammar: GrammarIR


class GrammarIR(Node):
    """The root of the IR: rules, the start rule, the ignore expression and sub-grammars."""

    ir_version: int = IR_VERSION
    start: str = "start"
    rules: tuple[Rule, ...]
    ignore: tuple[Expr, ...] = ()
    options: GrammarOptions = GrammarOptions()
    subgrammars: tuple[Subgrammar, ...] = ()

    def rule_map(self) -> dict[str, Rule]:
        """Rules by name (the last definition wins; `verify` rejects duplicates)."""
        return {rule.name: rule for rule in self.rules}

    def rule(self, name: str) -> Rule:
        """The rule called ``name``; KeyError if absent."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def subgrammar(self, name: str) -> GrammarIR:
        """The sub-grammar called ``name``; KeyError if absent."""
        for sub in self.subgrammars:
            if sub.name == name:
                return sub.grammar
        raise KeyError(name)

    def with_rules(self, rules: tuple[Rule, ...] | list[Rule]) -> GrammarIR:
        """A copy with ``rules`` replaced."""
        return self.model_copy(update={"rules": tuple(rules)})

    def verify(self) -> GrammarIR:
        """Check cross-node invariants; raise IRError listing every problem. Returns self."""
        from gramkiln.errors import IRError

        if _VERIFIED.get(id(self)) is self:
            return self
        # The quick check reads memoised per-subtree facts, so subtrees that earlier
        # grammars shared (the passes keep what they do not change) cost nothing; it only
        # says yes or "maybe not", and the full walk below words every problem.
        if not self._quickly_valid():
            problems = list(self.problems())
            if problems:
                raise IRError("invalid IR:\n  " + "\n  ".join(problems))
        # A grammar is immutable, so one check holds for its lifetime; front ends, Grammar and
        # compile all verify the same object, which costs seconds on big JSON Schemas.
        _VERIFIED[id(self)] = self
        return self

    def _quickly_valid(self) -> bool:
        """True when ``problems`` would yield nothing, judged from ``expr_facts``; False
        means "maybe not" (the caller then runs ``problems`` for the exact messages)."""
        if self.ir_version != IR_VERSION:
            return False
        is_terminal: dict[str, bool] = {}
        for rule in self.rules:
            if rule.name in is_terminal:
                return False
            is_terminal[rule.name] = rule.terminal
        sub_names = frozenset(sub.name for sub in self.subgrammars)
        if self.start not in is_terminal or len(sub_names) != len(self.subgrammars):
            return False
        terminal_refs: dict[str, frozenset[str]] = {}
        for rule in self.rules:
            for expr in (rule.body, rule.options.suffix, rule.options.stop):
                if expr is None:
                    continue
                facts = expr_facts(expr)
                if facts.unnormalised_token_set or not facts.embeds <= sub_names:
                    return False
                if rule.terminal and facts.token_elements:
                    return False
                for name in facts.refs:
                    target_is_terminal = is_terminal.get(name)
                    if target_is_terminal is None or (rule.terminal and not target_is_terminal):
                        return False
            if rule.terminal:
                terminal_refs[rule.name] = expr_facts(rule.body).refs
        for expr in self.ignore:
            facts = expr_facts(expr)
            if facts.token_elements or not all(is_terminal.get(n) for n in facts.refs):
                return False
        if _has_cycle(terminal_refs):
            return False
        return all(sub.grammar._quickly_valid() for sub in self.subgrammars)

    def problems(self, where: str = "") -> Iterator[str]:
        """Yield a description of every invariant this IR violates."""
        if self.ir_version != IR_VERSION:
            yield f"{where}ir_version {self.ir_version} is not {IR_VERSION}"
        names: dict[str, Rule] = {}
        for rule in self.rules:
            if rule.name in names:
                yield f"{where}duplicate definition of {rule.name}"
            names[rule.name] = rule
        if self.start not in names:
            yield f"{where}start rule {self.start!r} is not defined"
        elif names[self.start].terminal:
            # A terminal start is allowed: it is simply one lexeme.
            pass
        sub_names = [sub.name for sub in self.subgrammars]
        if len(set(sub_names)) != len(sub_names):
            yield f"{where}duplicate sub-grammar names"
        for rule in self.rules:
            exprs = [rule.body]
            if rule.options.suffix is not None:
                exprs.append(rule.options.suffix)
            if rule.options.stop is not None:
                exprs.append(rule.options.stop)
            for expr in exprs:
                for node in walk(expr):
                    yield from _node_problems(node, rule, names, set(sub_names), where)
        for expr in self.ignore:
            for node in walk(expr):
                if isinstance(node, Ref):
                    target = names.get(node.name)
                    if target is None:
                        yield f"{where}%ignore references undefined {node.name}"
                    elif not target.terminal:
                        yield f"{where}%ignore references rule {node.name}; only terminals"
                elif isinstance(node, (TokenSet, SpecialToken, Embed)):
                    yield f"{where}%ignore cannot contain {node.kind} elements"
        yield from _terminal_cycles(self, where)
        for sub in self.subgrammars:
            yield from sub.grammar.problems(f"{where}{sub.name}: ")


# Grammars that passed verify(), by identity. The values are weak: an entry goes with its
# grammar, so an id is never looked up for a later object, and no grammar is kept alive here.
_VERIFIED: weakref.WeakValueDictionary[int, GrammarIR] = weakref.WeakValueDictionary()


def _node_problems(
    node: Node, rule: Rule, names: dict[str, Rule], subs: set[str], where: str
) -> Iterator[str]:
    if isinstance(node, Ref):
        target = names.get(node.name)
        if target is None:
            yield f"{where}{rule.name} references undefined {node.name}"
        elif rule.terminal and not target.terminal:
            yield f"{where}terminal {rule.name} references rule {node.name}"
    elif isinstance(node, (TokenSet, SpecialToken, Embed)) and rule.terminal:
        yield f"{where}terminal {rule.name} cannot contain {node.kind} elements"
    if isinstance(node, Embed) and node.name not in subs:
        yield f"{where}{rule.name} embeds unknown sub-grammar {node.name}"
    if isinstance(node, TokenSet) and list(node.ranges) != normalise_ranges(node.ranges):
        yield f"{where}{rule.name} has an unnormalised token set"


def _terminal_cycles(grammar: GrammarIR, where: str) -> Iterator[str]:
    terminals = {r.name: r for r in grammar.rules if r.terminal}
    edges = {
        name: sorted({n.name for n in walk(r.body) if isinstance(n, Ref) and n.name in terminals})
        for name, r in terminals.items()
    }
    for cycle in reference_cycles(edges):
        yield f"{where}terminal {cycle[-1]} is recursive: {' -> '.join(cycle)}"


def reference_cycles(edges: Mapping[str, Iterable[str]]) -> Iterator[list[str]]:
    """The cycles a depth-first walk of ``edges`` (each name's targets, in order; a target
    without an entry is a leaf) closes, in walk order: each as the names from the target of
    its closing edge round to that target again (``[a, b, a]``). Without recursion: chains of
    references can be thousands long."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in edges:
        if root in state:
            continue
        state[root] = 1
        path = [root]  # the names from the root to the one being visited
        stack = [iter(edges[root])]
        while stack:
            for target in stack[-1]:
                seen = state.get(target)
                if seen == 1:
                    yield path[path.index(target) :] + [target]
                elif seen is None and target in edges:
                    state[target] = 1
                    path.append(target)
                    stack.append(iter(edges[target]))
                    break
            else:
                stack.pop()
                state[path.pop()] = 2


def _has_cycle(edges: Mapping[str, Iterable[str]]) -> bool:
    """Whether the graph ``edges`` has a cycle."""
    return next(reference_cycles(edges), None) is not None


class ExprFacts(NamedTuple):
    """What ``verify`` and the passes ask about a whole subtree, without walking it."""

    refs: frozenset[str]
    """Names of every ``Ref`` in the subtree."""
    embeds: frozenset[str]
    """Sub-grammar names of every ``Embed`` in the subtree."""
    token_elements: bool
    """Whether it contains a ``TokenSet``, ``SpecialToken`` or ``Embed``: the only kinds
    that may not appear inside a terminal."""
    unnormalised_token_set: bool
    """Whether it contains a ``TokenSet`` whose ranges are not normalised."""
    has_text: bool
    """Whether it contains a ``Literal``, ``Bytes``, ``CharClass`` or ``Ref``."""
    largest_count: int
    """The largest ``min`` or ``max`` of any ``Repeat`` in it (0 without repeats)."""
    has_repeat: bool
    """Whether it contains a ``Repeat`` at all."""


_NO_NAMES: frozenset[str] = frozenset()
_PLAIN_FACTS = ExprFacts(_NO_NAMES, _NO_NAMES, False, False, False, 0, False)
_TEXT_FACTS = ExprFacts(_NO_NAMES, _NO_NAMES, False, False, True, 0, False)


def expr_facts(expr: Node) -> ExprFacts:
    """The :class:`ExprFacts` of ``expr``, memoised by node identity like ``structural_key``.

    Computed bottom-up, so a tree costs one visit per node however often (and by however
    many grammars) its subtrees are asked about.
    """
    kind = type(expr)
    if kind is Seq or kind is Choice or kind is Repeat:
        entry = _EXPR_FACTS.get(id(expr))
        if entry is not None and entry[0] is expr:
            return entry[1]
        try:
            facts = _combined_facts(expr, expr_facts)
        except RecursionError:
            # Absurdly deep trees (verify must word their problems, not crash): the same
            # facts from an explicit stack.
            facts = _facts_without_recursion(expr)
        _remember_facts(expr, facts)
        return facts
    # Leaves are cheap to describe and far more numerous: not memoised.
    if kind is Ref:
        name: str = expr.name  # type: ignore[attr-defined]
        ref_facts = _REF_FACTS.get(name)
        if ref_facts is None:
            ref_facts = ExprFacts(frozenset((name,)), _NO_NAMES, False, False, True, 0, False)
            if len(_REF_FACTS) >= _EXPR_FACTS_LIMIT:
                _REF_FACTS.clear()
            _REF_FACTS[name] = ref_facts
        return ref_facts
    if kind is Literal or kind is Bytes or kind is CharClass:
        return _TEXT_FACTS
    if kind is Embed:
        return ExprFacts(_NO_NAMES, frozenset((expr.name,)), True, False, False, 0, False)  # type: ignore[attr-defined]
    if kind is TokenSet:
        ranges = expr.ranges  # type: ignore[attr-defined]
        unnormalised = list(ranges) != normalise_ranges(ranges)
        return ExprFacts(_NO_NAMES, _NO_NAMES, True, unnormalised, False, 0, False)
    if kind is SpecialToken:
        return ExprFacts(_NO_NAMES, _NO_NAMES, True, False, False, 0, False)
    return _PLAIN_FACTS


def _remember_facts(expr: Node, facts: ExprFacts) -> None:
    if len(_EXPR_FACTS) >= _EXPR_FACTS_LIMIT:
        _EXPR_FACTS.clear()  # facts are recomputed from content: clearing is always safe
    _EXPR_FACTS[id(expr)] = (expr, facts)  # the node is kept so its id stays unique


def _facts_without_recursion(root: Node) -> ExprFacts:
    """``expr_facts(root)`` by an explicit post-order walk (no Python recursion)."""
    computed: dict[int, ExprFacts] = {}

    def known(child: Node) -> ExprFacts:
        facts = computed.get(id(child))
        return facts if facts is not None else expr_facts(child)  # leaves: no recursion

    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in computed:
            continue
        if children_done:
            computed[id(node)] = facts = _combined_facts(node, known)
            _remember_facts(node, facts)
            continue
        stack.append((node, True))
        for child in children(node):
            if type(child) in (Seq, Choice, Repeat) and id(child) not in computed:
                stack.append((child, False))
    return computed[id(root)]


def _combined_facts(expr: Node, facts_of: Callable[[Node], ExprFacts]) -> ExprFacts:
    """The facts of a ``Seq``/``Choice``/``Repeat`` from those of its children."""
    kind = type(expr)
    if kind is Seq:
        kids = expr.items  # type: ignore[attr-defined]
        largest = 0
    elif kind is Choice:
        kids = expr.alternatives  # type: ignore[attr-defined]
        largest = 0
    else:
        kids = (expr.item,)  # type: ignore[attr-defined]
        largest = max(expr.min, expr.max or 0)  # type: ignore[attr-defined]
    has_repeat = kind is Repeat
    # The names of the children's sets: shared as long as at most one child brings names,
    # collected in a private set once several do (joining frozensets pairwise would copy
    # the growing set once per child: quadratic on a choice of 900 keyed members).
    refs = embeds = _NO_NAMES
    collected: set[str] | None = None
    token_elements = unnormalised = has_text = False
    for child in kids:
        # Text leaves and references are most children: handled here without a call.
        child_kind = type(child)
        if child_kind is Ref:
            if collected is None:
                collected = set(refs)
            collected.add(child.name)
            has_text = True
            continue
        if child_kind is Literal or child_kind is CharClass or child_kind is Bytes:
            has_text = True
            continue
        if child_kind is Empty:
            continue
        (
            part_refs,
            part_embeds,
            part_tokens,
            part_unnormalised,
            part_text,
            part_largest,
            part_repeat,
        ) = facts_of(child)
        if part_refs:
            if collected is not None:
                collected.update(part_refs)
            elif not refs:
                refs = part_refs
            elif part_refs is not refs and not part_refs <= refs:
                collected = set(refs)
                collected.update(part_refs)
        if part_embeds and not part_embeds <= embeds:
            embeds = part_embeds if not embeds else embeds | part_embeds
        token_elements |= part_tokens
        unnormalised |= part_unnormalised
        has_text |= part_text
        has_repeat |= part_repeat
        if part_largest > largest:
            largest = part_largest
    if collected is not None:
        refs = frozenset(collected)
    return ExprFacts(refs, embeds, token_elements, unnormalised, has_text, largest, has_repeat)


_EXPR_FACTS: dict[int, tuple[Node, ExprFacts]] = register_memo({})
_REF_FACTS: dict[str, ExprFacts] = register_memo({})  # a Ref's facts depend on its name only
_EXPR_FACTS_LIMIT = 1 << 19


def children(node: Node) -> tuple[Expr, ...]:
    """Direct sub-expressions of an expression node."""
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, Choice):
        return node.alternatives
    if isinstance(node, Repeat):
        return (node.item,)
    return ()


def walk(expr: Node) -> Iterator[Node]:
    """Pre-order traversal of an expression tree."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def strip_spans(model: Node) -> Node:
    """A copy of any IR model with every source span removed (spans are not canonical).

    Subtrees without spans are shared, not copied: passes use this for structural keys on
    every expression, so it must not serialise and re-validate whole trees.
    """
    return _strip_node(model)


def _strip_node(node: Node) -> Node:
    updates: dict[str, object] = {}
    for name, value in node.__dict__.items():
        if name == "span":
            if value is not None:
                updates[name] = None
            continue
        stripped = _strip_value(value)
        if stripped is not value:
            updates[name] = stripped
    # Dropping a span cannot break a validator, so the copy needs no re-validation.
    return node.model_copy(update=updates) if updates else node


def _strip_value(value: object) -> object:
    if isinstance(value, Node):
        return _strip_node(value)
    if isinstance(value, tuple):
        stripped = tuple(_strip_value(item) for item in value)
        if all(new is old for new, old in zip(stripped, value, strict=True)):
            return value
        return stripped
    return value


def structural_key(expr: Node) -> bytes:
    """A 128-bit digest of ``expr`` without its spans: equal keys mean identical structure.

    Passes key their deduplication tables with it at every node, so it must be cheap: keys
    are computed bottom-up and memoised by node identity (nodes are immutable), which makes
    keying a whole tree linear in its size instead of quadratic, and a later pass that keeps
    a subtree pays nothing for it. A collision needs two different trees with the same
    BLAKE2b-128 digest.
    """
    entry = _STRUCTURAL_KEYS.get(id(expr))
    if entry is not None and entry[0] is expr:
        return entry[1]
    kind = type(expr)
    # The common node kinds are spelled out (this runs a few hundred thousand times on big
    # JSON Schemas); every other model goes through its fields generically.
    if kind is Seq or kind is Choice:
        # Children's keys are nearly always memoised already: looked up here, not called.
        memo = _STRUCTURAL_KEYS
        data_parts = [b"S" if kind is Seq else b"C"]
        for child in expr.items if kind is Seq else expr.alternatives:  # type: ignore[attr-defined]
            known = memo.get(id(child))
            if known is not None and known[0] is child:
                data_parts.append(known[1])
            else:
                data_parts.append(structural_key(child))
        data = b"".join(data_parts)
    elif kind is Ref:
        data = b"F" + expr.name.encode()  # type: ignore[attr-defined]
    else:
        parts = [kind.__name__.encode()]
        for name, value in expr.__dict__.items():
            if name != "span":
                parts.append(name.encode())
                parts.append(_field_key(value))
        data = b"\x00".join(parts)
    key = hashlib.blake2b(data, digest_size=16).digest()
    if len(_STRUCTURAL_KEYS) >= _STRUCTURAL_KEY_LIMIT:
        _STRUCTURAL_KEYS.clear()  # keys are content digests: recomputing gives the same ones
    # The node is kept with its key so that its id cannot be reused while the entry lives.
    _STRUCTURAL_KEYS[id(expr)] = (expr, key)
    return key


_STRUCTURAL_KEYS: dict[int, tuple[Node, bytes]] = register_memo({})
_STRUCTURAL_KEY_LIMIT = 1 << 19


def _field_key(value: object) -> bytes:
    if isinstance(value, Node):
        return b"N" + structural_key(value)
    if isinstance(value, tuple):
        return b"(" + b"".join(_field_key(item) for item in value) + b")"
    text = repr(value).encode()
    return b"V%d:" % len(text) + text


LEXEME_KINDS = (Literal, Bytes, CharClass)
ATOMIC_KINDS = (Empty, Literal, Bytes, CharClass, Ref, TokenSet, SpecialToken, Embed)

Subgrammar.model_rebuild()
GrammarIR.model_rebuild()
