"""Compile a grammar IR against a vocabulary into runtime tables.

Steps: `lower_for_runtime` (the pass pipeline) -> `flatten_grammar` (context-free productions
over three kinds of symbols: nonterminals, lexemes whose languages are byte DFAs, and token
sets) -> the C++ table builder (token trie, per-DFA-state token tables; GIL released) ->
`CompiledGrammar`. The flattener accepts any valid IR, not only lowered IR, so the pipeline can
change without breaking compilation.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Seq,
    SpecialToken,
    TokenSet,
    expr_facts,
    print_expr,
    structural_key,
    walk,
)
from gramkiln.ir.automata import build_dfa
from gramkiln.ir.memo import operation
from gramkiln.passes._common import STOP_MARKER_PREFIX, SUFFIX_MARKER_PREFIX
from gramkiln.passes.fuse_terminals import BLOCKS_FALLBACK_COUNT, FUSED_PREFIX, inline_plain_rules
from gramkiln.runtime.rule_limits import (
    NO_CHAR_BUDGET,
    LexemeLimits,
    char_budget_automaton,
    codepoints_per_token,
    temperature_words,
    with_body_ends,
)

from gramkiln.errors import (
    AutomatonSizeError,
    CompileError,
    EmptyLanguageWarning,
    EndTokenWarning,
)

NO_NAME = 0xFFFFFFFF  # a captured symbol without a rule or marker capture name
# Largest bounded repetition expanded into productions (each bound adds one helper rule).
MAX_REPEAT_EXPANSION = 100_000
MAX_DFA_STATES = 200_000
# The C++ mask walk recurses once per lexeme boundary inside a token; this bounds its depth.
MAX_TEXT_TOKEN_BYTES = 4096


@operation()
def lower_for_runtime(ir: GrammarIR, fusion: str = "whole") -> GrammarIR:
    """The IR the flattener consumes: the compile pass pipeline's output.

    The verifier runs once on the result rather than after every pass: the passes are tested
    with per-pass verification, and per-pass checks cost more than the passes themselves on
    large JSON Schema grammars. ``fusion`` picks the fusing pass: ``"whole"`` (the pipeline's
    ``fuse_terminals``), ``"blocks"`` (``fuse_terminals_in_blocks``: counted repetitions past
    ``BLOCKS_FALLBACK_COUNT`` split into blocks) or ``"leaves"`` (``fuse_terminal_leaves``:
    ordinary rules keep every lexeme boundary), the compiler's fallbacks in that order.
    """
    from gramkiln.passes.fuse_terminals import fuse_terminal_leaves, fuse_terminals_in_blocks
    from gramkiln.passes.pipeline import COMPILE_PIPELINE, FUSE_TERMINALS, run_pipeline

    replacements = {"blocks": fuse_terminals_in_blocks, "leaves": fuse_terminal_leaves}
    if fusion != "whole" and fusion not in replacements:
        raise ValueError(f"unknown fusion {fusion!r}")
    pipeline = COMPILE_PIPELINE
    if fusion in replacements:
        pipeline = tuple(replacements[fusion] if p is FUSE_TERMINALS else p for p in pipeline)
    return run_pipeline(ir, pipeline, verify=False).verify()


# The leaves fallback keeps the lexemes of a run apart and leaves its counted repetitions to
# the parser. Nested in one another they multiply into as many parser items per position as
# the automaton had states (`(("a"~0..100)~0..100)~0..100`: fills of seconds), so a run whose
# nested counts multiply past this keeps its automaton's size error instead.
LEAVES_FALLBACK_COUNT_PRODUCT = 256


def _flatten_with_fallbacks(ir: GrammarIR, vocab: Any, ends: list[int]) -> FlatGrammar:
    """``flatten_grammar`` of ``ir`` lowered with terminal runs fused whole, or, where one of
    their automata passes the limits, lowered again with less fused: counted repetitions past
    ``BLOCKS_FALLBACK_COUNT`` in blocks (when there are such counts), then every lexeme
    boundary of ordinary rules kept, unless a fused run nests counted repetitions (see
    ``LEAVES_FALLBACK_COUNT_PRODUCT``). The language is the same each way."""
    lowered = lower_for_runtime(ir)
    try:
        return flatten_grammar(lowered, vocab, ends, source=ir)
    except AutomatonSizeError as exc:
        error = exc
    if _has_count_past(lowered, BLOCKS_FALLBACK_COUNT):
        # A counted repetition fused whole (up to MAX_FUSED_COUNT) whose one DFA passes the
        # limits: split such counts into blocks, as every count past them always is.
        try:
            return flatten_grammar(lower_for_runtime(ir, fusion="blocks"), vocab, ends, source=ir)
        except AutomatonSizeError as exc:
            error = exc
    if _largest_fused_count_product(lowered) > LEAVES_FALLBACK_COUNT_PRODUCT:
        raise error
    # Its error names the single terminal past the limits, where there is one.
    return flatten_grammar(lower_for_runtime(ir, fusion="leaves"), vocab, ends, source=ir)


def _largest_fused_count_product(ir: GrammarIR) -> int:
    """The largest product of nested repetition counts (a bound, or the minimum of an
    unbounded one) in the terminals ``fuse_terminals`` made of ``ir``'s runs."""
    largest = 1
    for rule in ir.rules:
        if rule.terminal and rule.name.startswith(FUSED_PREFIX):
            largest = max(largest, _count_product(rule.body))
    return largest


def _count_product(root: Expr) -> int:
    """The largest product of counts along a chain of nested repetitions in ``root``
    (capped just past ``LEAVES_FALLBACK_COUNT_PRODUCT``); without recursion, for deep trees."""
    cap = LEAVES_FALLBACK_COUNT_PRODUCT + 1
    products: dict[int, int] = {}
    pending: list[tuple[Expr, bool]] = [(root, False)]
    while pending:
        node, children_done = pending.pop()
        if id(node) in products:
            continue
        children: tuple[Expr, ...] = ()
        if isinstance(node, (Seq, Choice)):
            children = node.items if isinstance(node, Seq) else node.alternatives
        elif isinstance(node, Repeat):
            children = (node.item,)
        if children and not children_done:
            pending.append((node, True))
            pending.extend((child, False) for child in children if id(child) not in products)
            continue
        inner = max((products[id(child)] for child in children), default=1)
        if isinstance(node, Repeat):
            count = node.max if node.max is not None else node.min
            inner = min(cap, inner * max(count, 1))
        products[id(node)] = inner
    return products[id(root)]


def _has_count_past(ir: GrammarIR, count: int) -> bool:
    """Whether a terminal of ``ir`` repeats something more than ``count`` times."""
    return any(expr_facts(rule.body).largest_count > count for rule in ir.rules if rule.terminal)


def _located(span: Any) -> str:
    """`` (line L, column C)`` for a source span, or nothing without one."""
    return f" (line {span.line}, column {span.column})" if span is not None else ""


def _shortened(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, for error messages."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _build_dfa(expr: Expr, terminals: Mapping[str, Expr], lazy: bool) -> Any:
    return build_dfa(expr, terminals, lazy=lazy, max_states=MAX_DFA_STATES)


@dataclass
class FlatGrammar:
    """Productions over numbered symbols, ready for the C++ builder.

    Symbols: nonterminals ``[0, N)``, lexemes ``[N, N+L)``, token sets ``[N+L, N+L+S)``.
    """

    nonterminal_names: list[str] = field(default_factory=list)
    productions: list[tuple[int, tuple[tuple[str, int], ...]]] = field(default_factory=list)
    lexeme_names: list[str] = field(default_factory=list)
    lexeme_dfas: list[Any] = field(default_factory=list)
    tokensets: list[tuple[int, ...]] = field(default_factory=list)
    # Token-set elements that named only end tokens: (description, ids); see flatten_grammar.
    end_only_elements: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    start: int = 0
    # Lexemes of rules with max_tokens / max_chars / temperature (see runtime/rule_limits.py).
    lexeme_limits: dict[int, LexemeLimits] = field(default_factory=dict)
    # The body DFAs of suffix / stop rules with a budget (which may end them without their
    # marker; see rule_limits.with_body_ends).
    lexeme_body_dfas: dict[int, Any] = field(default_factory=dict)
    # Symbols of rules with the `capture` option (nonterminals, or lexemes of lazy-like and
    # limited rules); the runtime records their completions.
    captures: list[CapturedSymbol] = field(default_factory=list)
    # The lexeme of the grammar's ignored text, (ignore)+, when it has captures and %ignore.
    capture_ignore_lexeme: int | None = None


class _Flattener:
    """Turns rule bodies into productions; memoises lexemes, token sets and helper rules."""

    def __init__(
        self,
        ir: GrammarIR,
        vocab: Any,
        end_ids: Iterable[int] = (),
        source: GrammarIR | None = None,
    ) -> None:
        # The grammar before lowering: the suffix / stop options of captured rules, %ignore.
        self.source = source or ir
        self.source_rules = self.source.rule_map()
        if ir.subgrammars:
            raise CompileError("sub-grammars must be inlined before compilation")
        self.ir = ir
        self.vocab = vocab
        # End tokens only end the input (where it is accepted); no grammar element matches one.
        self.end_ids = frozenset(end_ids)
        # Token-set elements that named end tokens only, so never match: (description, ids).
        self.end_only_elements: list[tuple[str, tuple[int, ...]]] = []
        self.rules = ir.rule_map()
        self.terminal_bodies = {r.name: r.body for r in ir.rules if r.terminal}
        self.flat = FlatGrammar()
        self.nonterminal_ids: dict[str, int] = {}
        self.lexeme_ids: dict[str, int] = {}
        self.tokenset_ids: dict[tuple[int, ...], int] = {}
        self.helper_ids: dict[str, int] = {}
        self.ignore_star: tuple[str, int] | None = None
        self.wrapped: dict[tuple[str, int], tuple[str, int]] = {}
        # Rules referenced but not flattened yet, in order: (nonterminal key, rule, scope).
        self.pending_rules: list[tuple[str, str, float | None]] = []
        # Symbols of each rule reference (the same rules are referenced thousands of times
        # in big JSON Schema grammars; the answer never changes once given), per scope.
        self.references: dict[tuple[str, float | None], tuple[tuple[str, int], ...]] = {}
        # The temperature scope being flattened: inside a non-regular rule with a
        # `temperature`, every rule and lexeme is a copy of its own whose lexemes carry it.
        self.scope: float | None = None
        self.rule_of_key: dict[str, str] = {}  # nonterminal key -> its rule
        self.lexeme_rule: dict[int, str] = {}  # lexemes of lazy-like and limited rules

    # -- symbols ----------------------------------------------------------------------------
    def nonterminal(self, name: str, scope: float | None = None) -> tuple[str, int]:
        """The symbol of nonterminal `name` (its copy for a temperature scope), numbered on
        first use."""
        key = name if scope is None else f"{name}@temperature={scope!r}"
        if key not in self.nonterminal_ids:
            self.nonterminal_ids[key] = len(self.flat.nonterminal_names)
            self.flat.nonterminal_names.append(key)
            if name in self.rules:
                self.pending_rules.append((key, name, scope))
                self.rule_of_key[key] = name
        return ("N", self.nonterminal_ids[key])

    def lexeme(self, key: str, expr: Expr, lazy: bool = False) -> tuple[str, int]:
        """The lexeme symbol for `key`, compiling `expr` to a byte DFA on first use (a copy of
        its own inside a temperature scope, which carries the scope's temperature)."""
        if self.scope is not None:
            key = f"{key}@temperature={self.scope!r}"
            if key not in self.lexeme_ids:
                symbol = self.lexeme_unscoped(key, expr, lazy)
                self.flat.lexeme_limits[symbol[1]] = LexemeLimits(temperature=self.scope)
            return ("L", self.lexeme_ids[key])
        return self.lexeme_unscoped(key, expr, lazy)

    def lexeme_unscoped(self, key: str, expr: Expr, lazy: bool) -> tuple[str, int]:
        """`lexeme` without the scope."""
        if key not in self.lexeme_ids:
            try:
                dfa = _build_dfa(expr, self.terminal_bodies, lazy)
            except CompileError as exc:
                # The same class (a size error stays one: compile_grammar falls back on it).
                raise type(exc)(f"{self.describe_lexeme(key, expr)}: {exc}") from None
            self.lexeme_ids[key] = len(self.flat.lexeme_names)
            self.flat.lexeme_names.append(key)
            self.flat.lexeme_dfas.append(dfa)
        return ("L", self.lexeme_ids[key])

    def describe_lexeme(self, key: str, expr: Expr) -> str:
        """Which terminal, rule or text a lexeme comes from, with its source line."""
        kind, _, name = key.partition(":")
        name = name.split("@temperature=")[0]
        if kind in ("term", "lazy", "limited") and name in self.rules:
            rule = self.rules[name]
            if name.startswith("__"):  # made by a pass (fused text): show the text itself
                return f"{_shortened(print_expr(rule.body))}{_located(rule.span)}"
            what = "terminal" if kind == "term" else "rule"
            return f"{what} {name}{_located(rule.span)}"
        if kind == "lit":
            return f"{_shortened(name)}{_located(getattr(expr, 'span', None))}"
        return "%ignore" if key == "$ignore" else key

    def tokenset(self, ids: Iterable[int], element: str = "") -> tuple[str, int]:
        """The token-set symbol matching exactly `ids` less the end tokens (deduplicated by
        content); `element` describes the source element for the warning when only end
        tokens were named."""
        named = set(ids)
        key = tuple(sorted(named - self.end_ids))
        if named and not key:
            self.end_only_elements.append((element, tuple(sorted(named))))
        if key not in self.tokenset_ids:
            self.tokenset_ids[key] = len(self.flat.tokensets)
            self.flat.tokensets.append(key)
        return ("S", self.tokenset_ids[key])

    def add(self, lhs: tuple[str, int], rhs: Sequence[tuple[str, int]]) -> None:
        """Record the production `lhs -> rhs`."""
        self.flat.productions.append((lhs[1], tuple(rhs)))

    def helper(self, key: str) -> tuple[tuple[str, int], bool]:
        """A helper nonterminal for `key`; the flag says whether it still needs productions."""
        if self.scope is not None:
            key = f"{key}@temperature={self.scope!r}"
        if key in self.helper_ids:
            return ("N", self.helper_ids[key]), False
        symbol = self.nonterminal(f"$h{len(self.helper_ids)}")
        self.helper_ids[key] = symbol[1]
        return symbol, True

    # -- %ignore (only when the pipeline left it in place) ------------------------------------
    def after_lexeme(self, symbol: tuple[str, int]) -> list[tuple[str, int]]:
        """`symbol` followed by `(ignore)*` when the grammar still has an ignore set."""
        if not self.ir.ignore:
            return [symbol]
        return [symbol, self.ignore_repeat()]

    def ignore_repeat(self) -> tuple[str, int]:
        """The nonterminal for `(ignore)*` (left-recursive), created on first use."""
        if self.ignore_star is None:
            scope, self.scope = self.scope, None  # one ignore lexeme, outside every scope
            try:
                ignore = self.lexeme("$ignore", Choice(alternatives=tuple(self.ir.ignore)))
            finally:
                self.scope = scope
            star = self.nonterminal("$ignore*")
            self.ignore_star = star
            self.add(star, [])
            self.add(star, [star, ignore])
        return self.ignore_star

    # -- expressions ------------------------------------------------------------------------
    def symbols(self, expr: Expr) -> list[tuple[str, int]]:
        """The symbol sequence matching `expr` inside a nonterminal body."""
        if isinstance(expr, Empty):
            return []
        if isinstance(expr, Seq):
            out: list[tuple[str, int]] = []
            for item in expr.items:
                out.extend(self.reference(item.name) if type(item) is Ref else self.symbols(item))
            return out
        if isinstance(expr, Choice):
            symbol, fresh = self.helper("choice:" + _key(expr))
            if fresh:
                for alternative in expr.alternatives:
                    self.add(symbol, self.symbols(alternative))
            return [symbol]
        if isinstance(expr, Repeat):
            return self.repeat(expr)
        if isinstance(expr, (Literal, Bytes)):
            if (isinstance(expr, Literal) and not expr.text) or (
                isinstance(expr, Bytes) and not expr.data
            ):
                return []
            return self.after_lexeme(self.lexeme("lit:" + print_expr(expr), expr))
        if isinstance(expr, CharClass):
            return self.after_lexeme(self.lexeme("lit:" + print_expr(expr), expr))
        if isinstance(expr, Ref):
            return list(self.reference(expr.name))
        if isinstance(expr, TokenSet):
            element = f"{print_expr(expr)}{_located(getattr(expr, 'span', None))}"
            return self.after_lexeme(self.tokenset(self.token_ids(expr), element))
        if isinstance(expr, SpecialToken):
            ids = self.special_ids(expr.text)
            if not ids:
                # Dropping the branch silently would change the language without a word.
                raise CompileError(
                    f"special token {expr.text} is not in the vocabulary{_located(expr.span)}: "
                    "compile against a vocabulary that has it, or write the text as a string "
                    "literal"
                )
            return self.after_lexeme(self.tokenset(ids, f"{expr.text}{_located(expr.span)}"))
        if isinstance(expr, Embed):
            raise CompileError(f"embedded grammar @{expr.name} was not inlined")
        raise CompileError(f"cannot compile expression of kind {expr.kind}")

    def reference(self, name: str) -> tuple[tuple[str, int], ...]:
        """Symbols for a reference: a lexeme for terminals and lazy-like rules."""
        known = self.references.get((name, self.scope))
        if known is None:
            known = self.references[(name, self.scope)] = tuple(self._reference(name))
        return known

    def _reference(self, name: str) -> list[tuple[str, int]]:
        rule = self.rules.get(name)
        if rule is None:
            raise CompileError(f"reference to undefined rule {name}")
        if rule.terminal:
            return self.after_lexeme(self.lexeme("term:" + name, Ref(name=name)))
        options = rule.options
        marker = options.suffix if options.suffix is not None else options.stop
        lazy = options.lazy or marker is not None
        limits = LexemeLimits(options.max_tokens, options.max_chars, options.temperature)
        if limits != LexemeLimits():
            if limits.temperature is None and self.scope is not None:
                limits = LexemeLimits(limits.max_tokens, limits.max_chars, self.scope)
            if limits == LexemeLimits(temperature=options.temperature) and not (
                self.is_regular(rule) and not self.reaches_limits(rule, marker)
            ):
                # A temperature alone on a rule that is not one lexeme (or that holds rules
                # with limits of their own): its rules and lexemes are copied into the rule's
                # scope, each lexeme carrying the temperature unless it has its own.
                return [self.nonterminal(name, options.temperature)]
            return self.after_lexeme(self.limited_lexeme(rule, marker, lazy, limits))
        if lazy:
            body = rule.body if marker is None else Seq(items=(rule.body, marker))
            symbol = self.lexeme("lazy:" + name, body, lazy=True)
            self.lexeme_rule[symbol[1]] = name
            return self.after_lexeme(symbol)
        return [self.nonterminal(name, self.scope)]

    def is_regular(self, rule: Any) -> bool:
        """Whether a (not lazy-like) rule's body is one lexeme once the ordinary rules it
        names are inlined."""
        if rule.options.lazy or rule.options.suffix is not None or rule.options.stop is not None:
            return True
        body = inline_plain_rules(rule.body, self.rules, (rule.name,))
        return all(
            not isinstance(node, Ref) or node.name in self.terminal_bodies for node in walk(body)
        ) and not any(isinstance(node, (Embed, TokenSet, SpecialToken)) for node in walk(body))

    def reaches_limits(self, rule: Any, marker: Expr | None) -> bool:
        """Whether `rule`'s body reaches another rule with limits (see refuse_nested_limits)."""
        body = rule.body if marker is None else Seq(items=(rule.body, marker))
        try:
            self.refuse_nested_limits(rule, body)
        except CompileError:
            return True
        return False

    def limited_lexeme(
        self, rule: Any, marker: Expr | None, lazy: bool, limits: LexemeLimits
    ) -> tuple[str, int]:
        """The lexeme of a rule with max_tokens / max_chars / temperature: its body (ordinary
        rules it references inlined) as one automaton, so that the runtime can count and
        report per occurrence (runtime/rule_limits.py)."""
        body = rule.body if marker is None else Seq(items=(rule.body, marker))
        self.refuse_nested_limits(rule, body)
        body = inline_plain_rules(body, self.rules, (rule.name,))
        for node in walk(body):
            if isinstance(node, Ref) and node.name not in self.terminal_bodies:
                options = ", ".join(
                    label
                    for label, value in (
                        ("max_tokens", limits.max_tokens),
                        ("max_chars", limits.max_chars),
                        ("temperature", limits.temperature),
                    )
                    if value is not None
                )
                raise CompileError(
                    f"rule {rule.name}{_located(rule.span)}: {options} needs a body that "
                    f"compiles to one terminal (a regular language), and {rule.name} refers to "
                    f"rule {node.name}, which is recursive or lazy"
                )
        key = ("lazy:" if lazy else "limited:") + rule.name
        if limits.temperature is not None and limits.temperature != rule.options.temperature:
            key += f"@temperature={limits.temperature!r}"  # inherited from the scope
        scope, self.scope = self.scope, None
        try:
            symbol = self.lexeme(key, body, lazy=lazy)
        finally:
            self.scope = scope
        self.flat.lexeme_limits[symbol[1]] = limits
        self.lexeme_rule[symbol[1]] = rule.name
        budgeted = limits.max_chars is not None or limits.max_tokens is not None
        parts = self.split_marker(rule) if budgeted else None
        if parts is not None:
            body_part = inline_plain_rules(parts[0], self.rules, (rule.name,))
            self.flat.lexeme_body_dfas[symbol[1]] = _build_dfa(
                body_part, self.terminal_bodies, False
            )
        return symbol

    def refuse_nested_limits(self, rule: Any, body: Expr) -> None:
        """Raise when a rule with limits reaches another one inside its own lexeme (each
        would need its own count; the runtime keeps one per lexeme)."""
        seen: set[str] = {rule.name}  # a recursive rule is refused as not regular instead
        pending = [node.name for node in walk(body) if isinstance(node, Ref)]
        while pending:
            name = pending.pop()
            inner = self.rules.get(name)
            if name in seen or inner is None or inner.terminal:
                continue
            seen.add(name)
            inner_options = inner.options
            if (
                inner_options.max_tokens is not None
                or inner_options.max_chars is not None
                or inner_options.temperature is not None
            ):
                raise CompileError(
                    f"rule {rule.name}{_located(rule.span)}: rule {name} inside it has its own "
                    "max_tokens / max_chars / temperature; nested limits are not supported"
                )
            pending.extend(node.name for node in walk(inner.body) if isinstance(node, Ref))

    def repeat(self, expr: Repeat) -> list[tuple[str, int]]:
        """Symbols for `item{min,max}`: min copies, then a star or an optional chain."""
        bound = expr.max if expr.max is not None else expr.min
        if bound > MAX_REPEAT_EXPANSION:
            raise CompileError(f"repetition bound {bound} exceeds {MAX_REPEAT_EXPANSION}")
        item = self.symbols(expr.item)
        out: list[tuple[str, int]] = []
        for _ in range(expr.min):
            out.extend(item)
        if expr.max is None:
            symbol, fresh = self.helper("star:" + _key(expr.item))
            if fresh:  # left recursion: Earley handles it without growing the item count
                self.add(symbol, [])
                self.add(symbol, [symbol, *item])
            out.append(symbol)
        elif expr.max > expr.min:
            # optional chain: O_k = () | item O_{k-1}
            previous: tuple[str, int] | None = None
            item_key = _key(expr.item)
            for level in range(1, expr.max - expr.min + 1):
                symbol, fresh = self.helper(f"upto{level}:" + item_key)
                if fresh:
                    self.add(symbol, [])
                    self.add(symbol, [*item] + ([previous] if previous else []))
                previous = symbol
            assert previous is not None
            out.append(previous)
        return out

    def token_ids(self, expr: TokenSet) -> list[int]:
        """The vocabulary ids a TokenSet matches (padding ids never)."""
        count = len(self.vocab.tokens)
        if expr.wildcard:
            return list(range(count))
        chosen: set[int] = set()
        for lo, hi in expr.ranges:
            chosen.update(range(lo, min(hi, count - 1) + 1))
        if expr.negated:
            return [i for i in range(count) if i not in chosen]
        return sorted(chosen)

    def special_ids(self, text: str) -> list[int]:
        """The ids whose token bytes equal `text` (SpecialToken resolution)."""
        return list(self.vocab.ids_for_text(text))

    # -- whole grammar ----------------------------------------------------------------------
    def run(self) -> FlatGrammar:
        """Flatten the start rule and every rule reachable from it."""
        start = self.nonterminal("$start")
        self.flat.start = start[1]
        prefix = []
        if self.ir.ignore and self.ir.options.allow_initial_skip:
            prefix = [self.ignore_repeat()]
        self.add(start, [*prefix, *self.reference(self.ir.start)])
        # First-use order, breadth first: the numbering (and so the artifact) is deterministic.
        position = 0
        while position < len(self.pending_rules):
            key, name, self.scope = self.pending_rules[position]
            position += 1
            self.add(("N", self.nonterminal_ids[key]), self.symbols(self.rules[name].body))
        self.scope = None
        self.find_captures()
        self.add_capture_ignore()
        return self.flat

    def find_captures(self) -> None:
        """The symbols of captured rules that the flattened grammar uses (a captured rule
        inlined into a lexeme-like body is part of that lexeme and is not recorded)."""
        for key, index in self.nonterminal_ids.items():
            rule = self.rules.get(self.rule_of_key.get(key, ""))
            if rule is not None and rule.options.capture is not None:
                self.flat.captures.append(CapturedSymbol(("N", index), rule.options.capture))
        for index, name in list(self.lexeme_rule.items()):
            rule = self.rules[name]
            source = self.source_rules.get(name, rule).options
            if rule.options.capture is None and source.stop_capture is None:
                continue
            parts = self.body_and_marker(rule)
            if rule.options.capture is None and parts is None:
                continue
            body, marker = parts if parts is not None else (None, None)
            self.flat.captures.append(
                CapturedSymbol(
                    ("L", index),
                    rule.options.capture,
                    marker_name=source.stop_capture if parts is not None else None,
                    body_lexeme=body,
                    marker_lexeme=marker,
                    stop=parts is not None and source.stop is not None,
                )
            )

    def add_capture_ignore(self) -> None:
        """The lexeme `(ignore)+` of the grammar's %ignore (before lowering), by which a
        capture's longest completion leaves out trailing ignored text."""
        ignore = self.source.ignore
        if not self.flat.captures or not ignore:
            return
        pieces = Choice(alternatives=tuple(ignore)) if len(ignore) > 1 else ignore[0]
        self.flat.capture_ignore_lexeme = self.lexeme(
            "capture-ignore", Repeat(item=pieces, min=1, max=None)
        )[1]

    @staticmethod
    def split_marker(rule: Any) -> tuple[Expr, Expr] | None:
        """The body and the marker of a (lowered) suffix / stop rule, else None."""
        body = rule.body
        if not isinstance(body, Seq) or len(body.items) < 2:
            return None
        marker = body.items[-1]
        if not (
            isinstance(marker, Ref)
            and marker.name.startswith((SUFFIX_MARKER_PREFIX, STOP_MARKER_PREFIX))
        ):
            return None
        rest = body.items[:-1]
        return (rest[0] if len(rest) == 1 else Seq(items=rest)), marker

    def body_and_marker(self, rule: Any) -> tuple[int, int] | None:
        """For the lexeme of a (lowered) suffix / stop rule, lexemes of its body and of its
        marker alone, which split a completion into the two; None for other rules."""
        split = self.split_marker(rule)
        if split is None:
            return None
        parts = []
        for kind, expr in (("body", split[0]), ("marker", split[1])):
            expr = inline_plain_rules(expr, self.rules, (rule.name,))
            parts.append(self.lexeme(f"capture-{kind}:{rule.name}", expr)[1])
        return parts[0], parts[1]


@dataclass(frozen=True)
class CapturedSymbol:
    """A symbol whose completions are captures: the rule's capture name (None when only its
    marker is captured) and, for a suffix / stop rule, lexemes of its body and of its marker
    alone (a completion is split where the marker begins: the marker is left out of the
    rule's capture, and out of every capture around it for `stop`) and the marker's own
    capture name (`stop_capture`)."""

    symbol: tuple[str, int]
    name: str | None
    marker_name: str | None = None
    body_lexeme: int | None = None
    marker_lexeme: int | None = None
    stop: bool = False


def _key(expr: Expr) -> str:
    """A compact structural key for helper nonterminals (printing big expressions is slow)."""
    return structural_key(expr).hex()


def flatten_grammar(
    ir: GrammarIR, vocab: Any, end_ids: Iterable[int] = (), *, source: GrammarIR | None = None
) -> FlatGrammar:
    """Productions over nonterminals, lexemes (byte DFAs) and token sets, with every
    unproductive production removed (so a live parse can always be completed).

    Token sets never hold an id of `end_ids`: an end token only ends the input, where it is
    accepted. Elements that named nothing but end tokens are listed in
    `flat.end_only_elements` (and derive nothing)."""
    flattener = _Flattener(ir, vocab, end_ids, source)
    flat = flattener.run()
    flat.end_only_elements = flattener.end_only_elements
    productive_lexeme = [dfa.start >= 0 and len(dfa.accepting) > 0 for dfa in flat.lexeme_dfas]
    productive_set = [len(ids) > 0 for ids in flat.tokensets]
    productive_nt = [False] * len(flat.nonterminal_names)

    def ok(symbol: tuple[str, int]) -> bool:
        kind, index = symbol
        if kind == "N":
            return productive_nt[index]
        if kind == "L":
            return productive_lexeme[index]
        return productive_set[index]

    # Worklist: a production fires when its last unproductive nonterminal becomes productive.
    missing = []
    users: list[list[int]] = [[] for _ in productive_nt]
    ready: list[int] = []
    for index, (_, rhs) in enumerate(flat.productions):
        waiting = 0
        for kind, symbol in rhs:
            if kind == "N":
                waiting += 1
                users[symbol].append(index)
            elif not ok((kind, symbol)):
                waiting = -1
                break
        missing.append(waiting)
        if waiting == 0:
            ready.append(index)
    while ready:
        lhs = flat.productions[ready.pop()][0]
        if productive_nt[lhs]:
            continue
        productive_nt[lhs] = True
        for user in users[lhs]:
            if missing[user] > 0:
                missing[user] -= 1
                if missing[user] == 0:
                    ready.append(user)
    # Usually every symbol is productive and there is nothing to remove.
    if not (all(productive_nt) and all(productive_lexeme) and all(productive_set)):
        flat.productions = [(lhs, rhs) for lhs, rhs in flat.productions if all(ok(s) for s in rhs)]
    return flat


_DEAD_ROW = np.full((1, 256), -1, dtype=np.int32)


def build_tables(flat: FlatGrammar, vocab: Any, end_tokens: Sequence[int]) -> bytes:
    """Run the C++ builder; returns the runtime blob.

    The vocabulary's trie and token tables come from `vocab.core_index()`, built once per
    vocabulary; this call only converts the flattened grammar. The blob is validated when a
    `CompiledGrammar` is made from it.
    """
    from gramkiln.runtime import _core

    n = len(flat.nonterminal_names)
    lexeme_count = len(flat.lexeme_dfas)
    first_id = {"N": 0, "L": n, "S": n + lexeme_count}  # symbol numbering by kind

    prod_lhs: list[int] = []
    prod_offsets: list[int] = [0]
    prod_rhs: list[int] = []
    for lhs, rhs in flat.productions:
        prod_lhs.append(lhs)
        prod_rhs.extend([first_id[kind] + index for kind, index in rhs])
        prod_offsets.append(len(prod_rhs))
    # All DFA tables in one array, each lexeme's state ids shifted by its first global id in
    # one vectorised pass. A lexeme with the empty language gets one dead state, which keeps
    # the numbering simple.
    dfas: list[Any] = list(flat.lexeme_dfas)
    limits = flat.lexeme_limits
    char_window = 0
    budgeted: dict[int, Any] = {}
    # Per lexeme with a token budget and a marker: which of its states end its body (where a
    # spent token budget ends it without the marker).
    body_end_states: dict[int, np.ndarray] = {}
    if any(limit.max_chars is not None for limit in limits.values()):
        char_window = codepoints_per_token(vocab.tokens, vocab.special_ids)
    for index, limit in limits.items():
        dfa = dfas[index]
        if dfa.start < 0 or not len(dfa.accepting):
            continue
        body = flat.lexeme_body_dfas.get(index)
        ends = None
        if body is not None and body.start >= 0:
            dfa = dfas[index] = with_body_ends(dfa, body)
            ends = dfa.tags
        if limit.max_chars is not None:
            automaton = char_budget_automaton(dfa, limit.max_chars, char_window, ends)
            if len(automaton.accepting) > MAX_DFA_STATES:
                raise AutomatonSizeError(
                    f"{flat.lexeme_names[index]}: max_chars={limit.max_chars} needs "
                    f"{len(automaton.accepting):,} automaton states (limit {MAX_DFA_STATES:,})"
                )
            dfas[index] = budgeted[index] = automaton
            if ends is not None:
                ends = ends[automaton.source_state]
        if ends is not None and limit.max_tokens is not None:
            body_end_states[index] = ends & ~np.asarray(dfas[index].accepting, dtype=bool)
    counts = [len(dfa.accepting) or 1 for dfa in dfas]
    bases = np.cumsum([0, *counts[:-1]], dtype=np.int64).tolist() if dfas else []
    if dfas:
        table = np.concatenate(
            [
                np.asarray(dfa.table, dtype=np.int32) if len(dfa.accepting) else _DEAD_ROW
                for dfa in dfas
            ],
            dtype=np.int32,
        )
        shift = np.repeat(np.asarray(bases, dtype=np.int32), counts)[:, None]
        # Dead entries (-1) stay: `table >> 31` is all ones exactly there, masking the shift
        # (plain arithmetic, several times faster than a masked add).
        table += shift & ~(table >> 31)
        table_bytes = table.astype("<i4", copy=False).tobytes()
    else:
        table_bytes = b""
    accepting = b"".join(
        bytes(map(bool, dfa.accepting)) if len(dfa.accepting) else b"\0" for dfa in dfas
    )
    owner = np.repeat(np.arange(len(dfas), dtype=np.uint32), counts).tolist()
    starts = [
        base + (int(dfa.start) if len(dfa.accepting) else 0)
        for base, dfa in zip(bases, dfas, strict=True)
    ]
    limit_arrays = _limit_arrays(flat, dfas, bases, counts, budgeted, char_window)
    body_ends: list[int] = []
    if body_end_states:
        flags = np.zeros(int(sum(counts)), dtype=np.uint8)
        for index, ends in body_end_states.items():
            flags[bases[index] : bases[index] + counts[index]] = ends
        body_ends = flags.tolist()
    tokenset_offsets: list[int] = [0]
    tokenset_ids: list[int] = []
    for ids in flat.tokensets:
        tokenset_ids.extend(ids)
        tokenset_offsets.append(len(tokenset_ids))
    return _core.build_runtime_blob(
        n,
        flat.start,
        prod_lhs,
        prod_offsets,
        prod_rhs,
        starts,
        table_bytes,
        accepting,
        owner,
        tokenset_offsets,
        tokenset_ids,
        vocab.core_index(),
        list(end_tokens),
        *limit_arrays,
        *_capture_arrays(flat, first_id),
        _lexeme_exit_bytes(flat, dfas),
        body_ends,
    )


def _lexeme_exit_bytes(flat: FlatGrammar, dfas: Sequence[Any]) -> list[int]:
    """Per lexeme, 8 words of the bytes that a lexeme able to follow it may start with.

    From the flattened grammar's FOLLOW sets (lexemes only; nullable symbols stepped over;
    token sets never follow mid-token). The builder keeps only exit children of those bytes:
    a token that ends a lexeme mid-token goes on into a lexeme that follows it, so other
    exits are never entered. A text lexeme such as `(.|\n)*` before `"</think>"` would
    otherwise store an exit at every trie node for every byte."""
    n = len(flat.nonterminal_names)
    lexemes = len(dfas)
    if not lexemes:
        return []
    # Symbols as ints: nonterminals [0, n), lexemes [n, n + L); token sets are left out.
    nullable = [False] * n
    lexeme_nullable = [
        bool(d.start >= 0 and len(d.accepting) and d.accepting[d.start]) for d in dfas
    ]
    rules = flat.productions  # read only here

    def symbol_nullable(kind: str, index: int) -> bool:
        if kind == "N":
            return nullable[index]
        if kind == "L":
            return lexeme_nullable[index]
        return False

    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not nullable[lhs] and all(symbol_nullable(k, i) for k, i in rhs):
                nullable[lhs] = changed = True
    # FIRST: lexemes that can begin each nonterminal (bitsets over lexemes).
    first = [0] * n

    def first_of(rhs: Sequence[tuple[str, int]]) -> int:
        bits = 0
        for kind, index in rhs:
            if kind == "N":
                bits |= first[index]
            elif kind == "L":
                bits |= 1 << index
            if not symbol_nullable(kind, index):
                break
        return bits

    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            bits = first_of(rhs)
            if bits | first[lhs] != first[lhs]:
                first[lhs] |= bits
                changed = True
    # FOLLOW: what FIRST contributes at each occurrence is fixed now, so each production is
    # scanned once, right to left (the rest of a production after each position: its FIRST
    # and whether it is nullable); then follow(lhs) is passed on to the symbols that end a
    # production of lhs up to a nullable rest, through a worklist. Rescanning every suffix
    # of every production until nothing changed was quadratic in a production's length and
    # took ~15 s of a 587-property object's compile (Kubernetes kb_1161).
    follow_nt = [0] * n
    follow_lexeme = [0] * lexemes
    passes_on: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    for lhs, rhs in rules:
        rest = 0
        rest_nullable = True
        for kind, index in reversed(rhs):
            if kind != "S":
                target = follow_nt if kind == "N" else follow_lexeme
                target[index] |= rest
                if rest_nullable:
                    passes_on[lhs].append((kind, index))
            own = first[index] if kind == "N" else (1 << index if kind == "L" else 0)
            if symbol_nullable(kind, index):
                rest |= own
            else:
                rest, rest_nullable = own, False
    pending = list(range(n))
    queued = [True] * n
    while pending:
        lhs = pending.pop()
        queued[lhs] = False
        bits = follow_nt[lhs]
        for kind, index in passes_on[lhs]:
            target = follow_nt if kind == "N" else follow_lexeme
            if bits | target[index] != target[index]:
                target[index] |= bits
                if kind == "N" and not queued[index]:
                    queued[index] = True
                    pending.append(index)
    first_bytes = []
    for dfa in dfas:
        mask = 0
        if dfa.start >= 0 and len(dfa.accepting):
            row = np.asarray(dfa.table[dfa.start])
            for byte in np.nonzero(row >= 0)[0]:
                mask |= 1 << int(byte)
        first_bytes.append(mask)
    words: list[int] = []
    for index in range(lexemes):
        mask = 0
        bits = follow_lexeme[index]
        while bits:
            low = bits & -bits
            mask |= first_bytes[low.bit_length() - 1]
            bits ^= low
        words.extend((mask >> (32 * w)) & 0xFFFFFFFF for w in range(8))
    return words


def _capture_arrays(
    flat: FlatGrammar, first_id: Mapping[str, int]
) -> tuple[list[int], list[str], list[int], list[int], list[int], list[int], list[int], list[int]]:
    """The runtime's capture tables: per captured symbol its global id, the index of its
    capture name and of its marker's (NO_NAME: none), its body and marker lexemes (NO_NAME:
    none) and the stop flag; the distinct names; the ignore lexeme (or nothing)."""
    names: list[str] = []

    def name_index(name: str | None) -> int:
        if name is None:
            return NO_NAME
        if name not in names:
            names.append(name)
        return names.index(name)

    symbols, rule_names, marker_names, bodies, markers, stops = [], [], [], [], [], []
    for captured in flat.captures:
        kind, index = captured.symbol
        symbols.append(first_id[kind] + index)
        rule_names.append(name_index(captured.name))
        marker_names.append(name_index(captured.marker_name))
        bodies.append(NO_NAME if captured.body_lexeme is None else captured.body_lexeme)
        markers.append(NO_NAME if captured.marker_lexeme is None else captured.marker_lexeme)
        stops.append(int(captured.stop))
    ignore = [] if flat.capture_ignore_lexeme is None else [flat.capture_ignore_lexeme]
    return symbols, names, rule_names, marker_names, bodies, markers, stops, ignore


def _limit_arrays(
    flat: FlatGrammar,
    dfas: Sequence[Any],
    bases: Sequence[int],
    counts: Sequence[int],
    budgeted: Mapping[int, Any],
    char_window: int,
) -> tuple[list[int], list[int], list[int], int, list[int], list[int]]:
    """The runtime's per-lexeme limits and per-state budget tables (empty when the grammar
    has none): max tokens (0: none), max chars (NO_CHAR_BUDGET: none), temperatures (two
    words of a float64 each),
    the character window, and per global state the far-to-near switch and the near copy's
    remaining budget (-1: none); see runtime/rule_limits.py."""
    if not flat.lexeme_limits:
        return [], [], [], 0, [], []
    lexemes = len(dfas)
    max_tokens = [0] * lexemes
    max_chars = [NO_CHAR_BUDGET] * lexemes
    temperatures = [temperature_words(None)] * lexemes
    for index, limit in flat.lexeme_limits.items():
        max_tokens[index] = limit.max_tokens or 0
        if index in budgeted and limit.max_chars is not None:
            max_chars[index] = limit.max_chars
        temperatures[index] = temperature_words(limit.temperature)
    temperature_list = [word for pair in temperatures for word in pair]
    if not budgeted:
        return max_tokens, max_chars, temperature_list, 0, [], []
    total = int(sum(counts))
    switch = np.full(total, -1, dtype=np.int64)
    remaining = np.full(total, -1, dtype=np.int64)
    for index, automaton in budgeted.items():
        base, count = bases[index], counts[index]
        shifted = automaton.switch.astype(np.int64)
        switch[base : base + count] = np.where(shifted >= 0, shifted + base, -1)
        remaining[base : base + count] = automaton.remaining
    return (
        max_tokens,
        max_chars,
        temperature_list,
        char_window,
        switch.tolist(),
        remaining.tolist(),
    )


@operation()
def compile_grammar(
    ir: GrammarIR,
    vocab: Any = None,
    end_tokens: Sequence[int] | None = None,
    **options: Any,
) -> Any:
    """Compile `ir` against `vocab` (default: the built-in byte vocabulary).

    `end_tokens` defaults to the vocabulary's EOS ids; they are allowed exactly where the
    input so far is accepted. Raises CompileError for constructs the runtime cannot handle.
    """
    from gramkiln.runtime.compiled import CompiledGrammar
    from gramkiln.runtime.vocab import Vocab

    if options:
        raise CompileError(f"unknown compile options: {', '.join(sorted(options))}")
    if vocab is None:
        vocab = Vocab.byte_level()
    if end_tokens is not None and (
        isinstance(end_tokens, (str, bytes)) or not isinstance(end_tokens, Iterable)
    ):
        raise CompileError(f"end_tokens must be a list of token ids, not {end_tokens!r}")
    ends: list[int] = []
    for token_id in vocab.eos_ids if end_tokens is None else end_tokens:
        # numpy and torch integer scalars are ids too (operator.index takes them).
        if isinstance(token_id, bool) or not hasattr(token_id, "__index__"):
            raise CompileError(f"end token {token_id!r} is not an int")
        token_id = operator.index(token_id)
        if not 0 <= token_id < len(vocab.tokens):
            raise CompileError(f"end token {token_id} is outside the vocabulary")
        if token_id not in ends:  # the artifact lists each once
            ends.append(token_id)
    ir = ir.verify()
    flat = _flatten_with_fallbacks(ir, vocab, ends)
    for element, ids in dict(flat.end_only_elements).items():
        # Before the empty-language warning, which such an element often causes: it says why.
        shown = ", ".join(str(i) for i in ids[:8]) + (", ..." if len(ids) > 8 else "")
        warnings.warn(
            EndTokenWarning(
                f"{element} names only end tokens (id {shown}), which no grammar element "
                "matches: an end token ends the input, and is allowed exactly where the input "
                "is accepted. Leave it out of the grammar (the end token is allowed once the "
                "grammar is complete), or compile with other end_tokens"
            ),
            stacklevel=3,
        )
    if not any(lhs == flat.start for lhs, _ in flat.productions):
        # Unproductive productions are gone, so a start symbol without any derives nothing.
        warnings.warn(
            EmptyLanguageWarning(
                f"grammar {ir.start!r} accepts no string over this vocabulary: every mask is "
                "empty (no token, not even an end token, is ever allowed)"
            ),
            stacklevel=3,
        )
    blob = build_tables(flat, vocab, ends)
    return CompiledGrammar.from_parts(ir, vocab, blob, {"end_tokens": ends})
