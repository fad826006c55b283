"""The reference matcher: exact membership and viable-prefix tests straight from the IR.

It is the oracle for the front ends, the passes and the C++ runtime, so it is written to be
obviously correct rather than fast, and it depends on nothing it is used to check (no
``gramkiln.passes``, no ``gramkiln.ir.automata``). See docs/design/oracle.md.

How it works, in one paragraph: the IR is translated into a plain context-free grammar over
*lexemes*. A lexeme is anything the architecture calls one (a literal, class or bytes written
in a rule, a terminal reference, a lazy/suffix/stop rule, a special-token element) and is
recognised by its own automaton (gramkiln.testing._nfa); an embedded sub-grammar becomes a
nonterminal for its own entry rule. ``%ignore`` is woven while translating: every lexeme is
followed by the scope's ignore lexeme ``(ignore)*``, and the entry rule starts with it only
under ``allow_initial_skip``. An Earley parser (with the Aycock-Horspool nullable fix) then
runs over the input units, treating each lexeme like a nonterminal whose completions are
found by stepping its automaton; one automaton run is shared by all items that wait for the
same lexeme at the same position (automata are built the first time an input reaches them).
Unproductive symbols are removed first, so every item in a chart can still be completed: the
input is a viable prefix exactly when the last position holds an item or a running automaton.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gramkiln.errors import CompileError, IRError
from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    Seq,
    SpecialToken,
    TokenSet,
    print_expr,
)
from gramkiln.ir.nodes import Node
from gramkiln.testing._nfa import DEAD, ExpressionResolver, LexemeAutomaton, token_symbol

DEFAULT_MAX_NFA_STATES = 1_000_000


@dataclass(frozen=True)
class TokenUnit:
    """One vocabulary token as an input unit.

    ``text`` is the token's bytes, or None for special / added tokens, which never match text.
    A token with text matches either a special-token element (by id) or its bytes as text.
    """

    id: int
    text: bytes | None = None


Unit = int | TokenUnit


def _is_lexeme_like(rule: Rule) -> bool:
    """Rules whose every occurrence is one committed-shortest lexeme."""
    options = rule.options
    return options.lazy or options.suffix is not None or options.stop is not None


def _refuse_unmodelled_options(rule: Rule) -> None:
    """Raise for rule options that change membership in ways this matcher does not model
    (whatever else the rule is: a lazy / suffix / stop rule's budget decides where it ends)."""
    if rule.options.max_chars is not None:
        raise CompileError(
            f"rule {rule.name}: max_chars changes membership and is not modelled by the "
            "reference matcher yet"
        )


@dataclass
class _Scope:
    """One grammar namespace (the root or a sub-grammar) while translating."""

    grammar: GrammarIR
    parent: _Scope | None
    rules: dict[str, Rule]
    ignore_symbol: int | None = None
    entry_symbol: int | None = None
    terminal_resolver: ExpressionResolver | None = None
    lexeme_like_resolver: ExpressionResolver | None = None

    def find_subgrammar(self, name: str) -> GrammarIR:
        """The sub-grammar ``name`` seen from this scope (innermost definition wins)."""
        scope: _Scope | None = self
        while scope is not None:
            for sub in scope.grammar.subgrammars:
                if sub.name == name:
                    return sub.grammar
            scope = scope.parent
        raise IRError(f"unknown sub-grammar {name!r}")


@dataclass
class _ContextFreeGrammar:
    """The translated grammar. Symbols: nonterminals are >= 0, lexeme k is ``~k`` (< 0)."""

    productions: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    nonterminal_names: list[str] = field(default_factory=list)
    lexemes: list[LexemeAutomaton] = field(default_factory=list)
    lexeme_names: list[str] = field(default_factory=list)
    start: int = 0
    by_lhs: list[list[int]] = field(default_factory=list)
    nullable_nonterminals: list[bool] = field(default_factory=list)
    nullable_symbols: frozenset[int] = frozenset()
    empty_language: bool = False


class _Translator:
    """Builds a :class:`_ContextFreeGrammar` from a GrammarIR (see the module docstring)."""

    def __init__(
        self, root: GrammarIR, special_texts: Mapping[int, str], max_nfa_states: int
    ) -> None:
        self.cfg = _ContextFreeGrammar()
        self.special_texts = special_texts
        self.max_nfa_states = max_nfa_states
        self._scopes: dict[int, _Scope] = {}
        self._rule_symbols: dict[tuple[int, str], int] = {}
        self._lexeme_keys: dict[object, int] = {}
        self._memo: dict[object, int] = {}
        self._pending: list[tuple[int, _Scope, Rule]] = []
        root_scope = self._scope(root, None)
        self.cfg.start = self._entry(root_scope)
        while self._pending:
            symbol, scope, rule = self._pending.pop()
            self._define_rule(symbol, scope, rule)

    # -- scopes and entry points ------------------------------------------------------------
    def _scope(self, grammar: GrammarIR, parent: _Scope | None) -> _Scope:
        scope = self._scopes.get(id(grammar))
        if scope is not None:
            return scope
        scope = _Scope(grammar, parent, grammar.rule_map())
        self._scopes[id(grammar)] = scope
        if grammar.start not in scope.rules:
            raise IRError(f"start rule {grammar.start!r} is not defined")
        if grammar.ignore:
            ignored = Repeat(item=Choice(alternatives=grammar.ignore), min=0, max=None)
            scope.ignore_symbol = self._lexeme(
                ("ignore", id(grammar)), "%ignore", ignored, self._terminal_resolver(scope), False
            )
        return scope

    def _entry(self, scope: _Scope) -> int:
        """The nonterminal for a whole (sub-)grammar: optional initial skip, then start."""
        if scope.entry_symbol is None:
            scope.entry_symbol = self._nonterminal(f"<entry {scope.grammar.start}>")
            body = self._symbols(Ref(name=scope.grammar.start), scope)
            if scope.grammar.options.allow_initial_skip and scope.ignore_symbol is not None:
                body = (scope.ignore_symbol,) + body
            self._production(scope.entry_symbol, body)
        return scope.entry_symbol

    # -- symbols ------------------------------------------------------------------------------
    def _nonterminal(self, name: str) -> int:
        self.cfg.nonterminal_names.append(name)
        return len(self.cfg.nonterminal_names) - 1

    def _production(self, lhs: int, rhs: tuple[int, ...]) -> None:
        self.cfg.productions.append((lhs, rhs))

    def _lexeme(
        self,
        key: object,
        name: str,
        expr: Node,
        resolver: ExpressionResolver,
        lazy: bool,
        owner: str | None = None,
    ) -> int:
        index = self._lexeme_keys.get(key)
        if index is None:
            index = len(self.cfg.lexemes)
            self.cfg.lexemes.append(
                LexemeAutomaton(expr, resolver, lazy, self.max_nfa_states, owner=owner)
            )
            self.cfg.lexeme_names.append(name)
            self._lexeme_keys[key] = index
        return ~index

    def _terminal_resolver(self, scope: _Scope) -> ExpressionResolver:
        if scope.terminal_resolver is None:
            bodies = {name: rule.body for name, rule in scope.rules.items() if rule.terminal}
            scope.terminal_resolver = ExpressionResolver(bodies, self.special_texts)
        return scope.terminal_resolver

    def _lexeme_like_resolver(self, scope: _Scope) -> ExpressionResolver:
        # Inside a lazy body every plain rule is inlined without %ignore (the body is one
        # lexeme); nested lexeme-like rules would need their own commit and are refused.
        if scope.lexeme_like_resolver is None:
            bodies = {
                name: rule.body
                for name, rule in scope.rules.items()
                if rule.terminal or not _is_lexeme_like(rule)
            }
            scope.lexeme_like_resolver = ExpressionResolver(bodies, self.special_texts)
        return scope.lexeme_like_resolver

    def _with_ignore(self, symbol: int, scope: _Scope) -> tuple[int, ...]:
        """A lexeme occurrence followed by the scope's ignore content."""
        if scope.ignore_symbol is None:
            return (symbol,)
        return (symbol, scope.ignore_symbol)

    def _rule_symbol(self, scope: _Scope, rule: Rule) -> int:
        key = (id(scope.grammar), rule.name)
        symbol = self._rule_symbols.get(key)
        if symbol is None:
            symbol = self._nonterminal(rule.name)
            self._rule_symbols[key] = symbol
            self._pending.append((symbol, scope, rule))
        return symbol

    def _define_rule(self, symbol: int, scope: _Scope, rule: Rule) -> None:
        _refuse_unmodelled_options(rule)
        body = rule.body
        alternatives = body.alternatives if isinstance(body, Choice) else (body,)
        for alternative in alternatives:
            self._production(symbol, self._symbols(alternative, scope))

    def _symbols(self, expr: Node, scope: _Scope) -> tuple[int, ...]:
        """The right-hand-side symbols for ``expr`` written in a (non-terminal) rule body."""
        if isinstance(expr, Empty):
            return ()
        if isinstance(expr, (Literal, Bytes)) and not (
            expr.data if isinstance(expr, Bytes) else expr.text
        ):
            return ()  # an empty literal is the empty string, not a lexeme
        if isinstance(expr, (Literal, Bytes, CharClass, TokenSet, SpecialToken)):
            key = ("expr", id(scope.grammar), expr)
            lexeme = self._lexeme(key, _describe(expr), expr, self._terminal_resolver(scope), False)
            return self._with_ignore(lexeme, scope)
        if isinstance(expr, Seq):
            return tuple(symbol for item in expr.items for symbol in self._symbols(item, scope))
        if isinstance(expr, Choice):
            if len(expr.alternatives) == 1:
                return self._symbols(expr.alternatives[0], scope)
            group = self._nonterminal("<choice>")
            for alternative in expr.alternatives:
                self._production(group, self._symbols(alternative, scope))
            return (group,)
        if isinstance(expr, Repeat):
            return self._repeat(self._symbols(expr.item, scope), expr.min, expr.max)
        if isinstance(expr, Ref):
            return self._reference(expr.name, scope)
        if isinstance(expr, Embed):
            sub_scope = self._scope(scope.find_subgrammar(expr.name), scope)
            return self._with_ignore(self._entry(sub_scope), scope)
        raise IRError(f"unsupported expression {type(expr).__name__}")

    def _reference(self, name: str, scope: _Scope) -> tuple[int, ...]:
        rule = scope.rules.get(name)
        if rule is None:
            raise IRError(f"reference to undefined {name}")
        if rule.terminal:
            key = ("terminal", id(scope.grammar), name)
            lexeme = self._lexeme(key, name, Ref(name=name), self._terminal_resolver(scope), False)
            return self._with_ignore(lexeme, scope)
        if _is_lexeme_like(rule):
            _refuse_unmodelled_options(rule)
            marker = rule.options.suffix if rule.options.suffix is not None else rule.options.stop
            body = rule.body if marker is None else Seq(items=(rule.body, marker))
            key = ("lexeme-like", id(scope.grammar), name)
            resolver = self._lexeme_like_resolver(scope)
            lexeme = self._lexeme(key, f"{name}[lazy]", body, resolver, True, owner=name)
            return self._with_ignore(lexeme, scope)
        return (self._rule_symbol(scope, rule),)

    # -- repetition without unrolling large bounds ------------------------------------------
    def _group(self, symbols: tuple[int, ...]) -> int:
        """One symbol standing for the sequence ``symbols``."""
        if len(symbols) == 1:
            return symbols[0]
        key = ("group", symbols)
        if key not in self._memo:
            self._memo[key] = self._nonterminal("<group>")
            self._production(self._memo[key], symbols)
        return self._memo[key]

    def _repeat(self, item: tuple[int, ...], lo: int, hi: int | None) -> tuple[int, ...]:
        if not item or hi == 0:
            return ()
        unit = self._group(item)
        parts: list[int] = []
        if lo:
            parts.append(self._exactly(unit, lo))
        if hi is None:
            parts.append(self._star(unit))
        elif hi > lo:
            parts.append(self._at_most(unit, hi - lo))
        return tuple(parts)

    def _exactly(self, unit: int, count: int) -> int:
        """``unit{count}`` by halving: O(log count) helper rules."""
        if count == 1:
            return unit
        key = ("exactly", unit, count)
        if key not in self._memo:
            symbol = self._memo[key] = self._nonterminal(f"<{{{count}}}>")
            half = count // 2
            self._production(symbol, (self._exactly(unit, half), self._exactly(unit, count - half)))
        return self._memo[key]

    def _at_most(self, unit: int, count: int) -> int:
        """``unit{0,count}`` split by length, so that the helpers stay unambiguous.

        Either fewer than h = ceil(count/2) copies (``unit{0,h-1}``) or exactly h copies
        followed by ``unit{0,count-h}``. Both halves are about count/2, so only O(log count)
        distinct helpers exist.
        """
        key = ("at_most", unit, count)
        if key not in self._memo:
            symbol = self._memo[key] = self._nonterminal(f"<{{0,{count}}}>")
            if count == 1:
                self._production(symbol, ())
                self._production(symbol, (unit,))
            else:
                half = (count + 1) // 2
                shorter = self._at_most(unit, half - 1) if half > 1 else None
                self._production(symbol, (shorter,) if shorter is not None else ())
                self._production(
                    symbol, (self._exactly(unit, half), self._at_most(unit, count - half))
                )
        return self._memo[key]

    def _star(self, unit: int) -> int:
        key = ("star", unit)
        if key not in self._memo:
            symbol = self._memo[key] = self._nonterminal("<*>")
            self._production(symbol, ())
            self._production(symbol, (symbol, unit))
        return self._memo[key]


def _describe(expr: Node) -> str:
    """A readable name for an inline lexeme (for debugging)."""
    return print_expr(expr)  # type: ignore[arg-type]


def _finish(cfg: _ContextFreeGrammar) -> _ContextFreeGrammar:
    """Compute nullability, drop unproductive productions and index productions by lhs."""
    count = len(cfg.nonterminal_names)
    lexeme_productive = [lexeme.productive for lexeme in cfg.lexemes]
    productive = [False] * count
    nullable = [False] * count
    changed = True
    while changed:
        changed = False
        for lhs, rhs in cfg.productions:
            if not productive[lhs] and all(
                productive[s] if s >= 0 else lexeme_productive[~s] for s in rhs
            ):
                productive[lhs] = changed = True
            if not nullable[lhs] and all(
                nullable[s] if s >= 0 else cfg.lexemes[~s].nullable for s in rhs
            ):
                nullable[lhs] = changed = True
    cfg.nullable_nonterminals = nullable
    cfg.nullable_symbols = frozenset(
        [n for n in range(count) if nullable[n]]
        + [~k for k, lexeme in enumerate(cfg.lexemes) if lexeme.nullable]
    )
    cfg.by_lhs = [[] for _ in range(count)]
    kept: list[tuple[int, tuple[int, ...]]] = []
    for lhs, rhs in cfg.productions:
        if all(productive[s] if s >= 0 else lexeme_productive[~s] for s in rhs):
            cfg.by_lhs[lhs].append(len(kept))
            kept.append((lhs, rhs))
    cfg.productions = kept
    cfg.empty_language = not productive[cfg.start]
    return cfg


Item = tuple[int, int, int]  # (production, dot, origin)


class _Chart:
    """The Earley set of one input position, plus the lexeme automata running through it."""

    __slots__ = ("items", "waiting", "predicted", "scans", "finished", "accepting")

    def __init__(self) -> None:
        self.items: set[Item] = set()
        self.waiting: dict[int, list[Item]] = {}
        self.predicted: set[int] = set()
        # (lexeme, origin) -> automaton states reached here; several when the input is a
        # lattice (a token read as text or as a token) and a lazy commit differs per path.
        self.scans: dict[tuple[int, int], set[int]] = {}
        self.finished: set[tuple[int, int]] = set()
        self.accepting = False

    def is_live(self) -> bool:
        """Whether this position is on a path to an accepted input."""
        return bool(self.items) or bool(self.scans)


class _EarleyRun:
    """Charts for one input; positions can be pushed and popped (used by the mask search)."""

    def __init__(self, cfg: _ContextFreeGrammar) -> None:
        self.cfg = cfg
        self.charts: list[_Chart] = []
        first = _Chart()
        self.charts.append(first)
        if not cfg.empty_language:
            for production in cfg.by_lhs[cfg.start]:
                first.items.add((production, 0, 0))
            first.predicted.add(cfg.start)
            self._close(0, list(first.items))

    @property
    def frontier(self) -> _Chart:
        """The chart of the last position pushed."""
        return self.charts[-1]

    def feed(self, unit: Unit) -> bool:
        """Read one unit; return whether the input is still a viable prefix."""
        if isinstance(unit, TokenUnit):
            self._feed_token(unit)
        else:
            self.push_byte(unit)
        return self.frontier.is_live()

    def push_byte(self, byte: int) -> _Chart:
        """Append the position after ``byte`` (read from the frontier) and close it."""
        target = _Chart()
        self.step(self.frontier, byte, target)
        return self.push(target)

    def pop(self, count: int = 1) -> None:
        """Forget the last ``count`` positions."""
        del self.charts[len(self.charts) - count :]

    def _feed_token(self, unit: TokenUnit) -> None:
        # The token is an edge of a lattice: one step for the whole token, and a path of
        # fresh intermediate positions for its text. Both lead to the same final position.
        source = self.frontier
        text = unit.text or b""
        for byte in text[:-1]:
            self.push_byte(byte)
        target = _Chart()
        if text:
            self.step(self.frontier, text[-1], target)
        self.step(source, token_symbol(unit.id), target)
        self.push(target)

    def push(self, chart: _Chart) -> _Chart:
        """Append ``chart`` (already stepped into) as the next position and close it."""
        self.charts.append(chart)
        position = len(self.charts) - 1
        agenda: list[Item] = []
        for lexeme, origin in chart.finished:
            for production, dot, item_origin in self.charts[origin].waiting.get(~lexeme, ()):
                advanced = (production, dot + 1, item_origin)
                if advanced not in chart.items:
                    chart.items.add(advanced)
                    agenda.append(advanced)
        self._close(position, agenda)
        return chart

    def step(self, source: _Chart, symbol: int, target: _Chart) -> None:
        """Advance every lexeme automaton running at ``source`` over one input symbol."""
        lexemes = self.cfg.lexemes
        for key, states in source.scans.items():
            dfa = lexemes[key[0]].dfa
            if symbol < 0 and not dfa.has_token_edges:
                continue
            for state in states:
                nxt = dfa.step(state, symbol)
                if nxt == DEAD:
                    continue
                if dfa.accepting[nxt]:
                    target.finished.add(key)
                    if dfa.lazy:
                        continue  # committed: this occurrence can never read more
                target.scans.setdefault(key, set()).add(nxt)

    def _close(self, position: int, agenda: list[Item]) -> None:
        """Earley prediction and completion at ``position`` until nothing changes."""
        cfg, charts = self.cfg, self.charts
        chart = charts[position]
        productions, by_lhs, nullable = cfg.productions, cfg.by_lhs, cfg.nullable_symbols
        items, waiting, predicted, scans = chart.items, chart.waiting, chart.predicted, chart.scans
        # Local aliases: this loop is where the oracle spends its time.
        remember, push, pop = items.add, agenda.append, agenda.pop
        while agenda:
            item = pop()
            production, dot, origin = item
            lhs, rhs = productions[production]
            if dot == len(rhs):
                if origin == 0 and lhs == cfg.start:
                    chart.accepting = True
                # Completions with origin == position are empty derivations; the nullable
                # advance below already covered every item that waits for them.
                if origin != position:
                    for waiter, waiter_dot, waiter_origin in charts[origin].waiting.get(lhs, ()):
                        advanced = (waiter, waiter_dot + 1, waiter_origin)
                        if advanced not in items:
                            remember(advanced)
                            push(advanced)
                continue
            symbol = rhs[dot]
            waiters = waiting.get(symbol)
            if waiters is None:
                waiting[symbol] = [item]
            else:
                waiters.append(item)
            if symbol >= 0:
                if symbol not in predicted:
                    predicted.add(symbol)
                    for candidate in by_lhs[symbol]:
                        new = (candidate, 0, position)
                        if new not in items:
                            remember(new)
                            push(new)
            else:
                key = (~symbol, position)
                if key not in scans:
                    dfa = cfg.lexemes[~symbol].dfa
                    if not (dfa.lazy and dfa.accepting[dfa.start]):
                        scans[key] = {dfa.start}
            if symbol in nullable:
                advanced = (production, dot + 1, origin)
                if advanced not in items:
                    remember(advanced)
                    push(advanced)


def _as_units(text: str | bytes | bytearray | Iterable[Unit]) -> list[Unit]:
    """Normalise an input: text is UTF-8 encoded; units are checked."""
    if isinstance(text, str):
        try:
            return list(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ValueError(f"text is not valid Unicode (lone surrogate): {exc}") from exc
    if isinstance(text, (bytes, bytearray, memoryview)):
        return list(bytes(text))
    units: list[Unit] = []
    for unit in text:
        if isinstance(unit, TokenUnit):
            if not isinstance(unit.id, int) or unit.id < 0:
                raise ValueError(f"token id must be a non-negative int, got {unit.id!r}")
            if unit.text is not None and not isinstance(unit.text, (bytes, bytearray)):
                raise TypeError(f"token text must be bytes or None, got {type(unit.text)}")
        elif isinstance(unit, int) and not isinstance(unit, bool):
            if not 0 <= unit <= 255:
                raise ValueError(f"byte unit out of range: {unit}")
        else:
            raise TypeError(f"a unit is an int byte or a TokenUnit, got {unit!r}")
        units.append(unit)
    return units


class ReferenceMatcher:
    """Exact context-free membership and viable-prefix tests for a GrammarIR.

    ``special_texts`` maps token ids to their decoded text; it is what ``SpecialToken``
    elements (``<"<|tool|>">``) are resolved against. A special token absent from it matches
    nothing. ``max_nfa_states`` bounds the size of one lexeme's automaton (CompileError).
    """

    def __init__(
        self,
        ir: GrammarIR,
        special_texts: Mapping[int, str] | None = None,
        *,
        max_nfa_states: int = DEFAULT_MAX_NFA_STATES,
    ) -> None:
        if not isinstance(ir, GrammarIR):
            raise TypeError(f"ReferenceMatcher needs a GrammarIR, got {type(ir).__name__}")
        self.ir = ir.verify()
        self.special_texts = dict(special_texts or {})
        try:
            translator = _Translator(ir, self.special_texts, max_nfa_states)
        except RecursionError as exc:
            raise CompileError("expression nesting is too deep for the reference matcher") from exc
        self._cfg = _finish(translator.cfg)
        # The last live parse, kept so that a query extending (or sharing a prefix with) the
        # one before reads only the units past their common prefix: a test that asks about
        # every prefix of a string in turn costs one parse, not one per prefix, which on
        # ambiguous grammars (cubic charts) was minutes for a string of a few dozen bytes.
        self._last_run: _EarleyRun | None = None
        self._last_units: list[Unit] = []
        self._last_sizes: list[int] = []  # charts after each prefix of _last_units

    def describe(self) -> str:
        """The translated grammar as text, one production per line (for debugging a test).

        Nonterminals print as their rule names (helpers in angle brackets), lexemes as
        ``'<expression>'`` or the terminal's name; ``%ignore`` lexemes as ``'%ignore'``.
        """
        cfg = self._cfg

        def name(symbol: int) -> str:
            if symbol >= 0:
                return f"{cfg.nonterminal_names[symbol]}#{symbol}"
            return f"'{cfg.lexeme_names[~symbol]}'"

        lines = [f"start: {name(cfg.start)}" + (" (empty language)" * cfg.empty_language)]
        for lhs, rhs in cfg.productions:
            lines.append(f"{name(lhs)} -> {' '.join(name(s) for s in rhs) or '()'}")
        return "\n".join(lines)

    # -- text -----------------------------------------------------------------------------
    def accepts(self, text: str | bytes) -> bool:
        """Whether the whole of ``text`` (UTF-8 bytes) is in the language."""
        run = self._run(_as_units(text))
        return run is not None and run.frontier.accepting

    def is_prefix(self, text: str | bytes) -> bool:
        """Whether ``text`` can be extended to an accepted string (``accepts`` implies it)."""
        return self._run(_as_units(text)) is not None

    # -- units ----------------------------------------------------------------------------
    def accepts_units(self, units: Iterable[Unit]) -> bool:
        """Like :meth:`accepts` for a sequence of bytes and :class:`TokenUnit` s."""
        run = self._run(_as_units(units))
        return run is not None and run.frontier.accepting

    def is_prefix_units(self, units: Iterable[Unit]) -> bool:
        """Like :meth:`is_prefix` for a sequence of bytes and :class:`TokenUnit` s."""
        return self._run(_as_units(units)) is not None

    def allowed_tokens(
        self,
        prefix_units: Iterable[Unit] | str | bytes,
        vocab_tokens: Sequence[bytes],
        special_ids: Iterable[int] = frozenset(),
        eos_ids: Iterable[int] = (),
    ) -> list[bool]:
        """The exact next-token mask after ``prefix_units``, by brute force.

        Token ``i`` (bytes ``vocab_tokens[i]``) is allowed iff prefix + token is a viable
        prefix: as text, or as a whole token through a special-token element. Ids in
        ``special_ids`` have no text; tokens with empty bytes are only allowed through a
        token element; ids in ``eos_ids`` are allowed iff the prefix itself is accepted.
        """
        vocabulary = _prepared_vocabulary(vocab_tokens, special_ids, eos_ids)
        run = self._run(_as_units(prefix_units))
        if run is None:
            return [False] * len(vocab_tokens)
        return self._mask(run, vocabulary)

    def masks_along(
        self,
        units: Iterable[Unit] | str | bytes,
        vocab_tokens: Sequence[bytes],
        special_ids: Iterable[int] = frozenset(),
        eos_ids: Iterable[int] = (),
    ) -> list[list[bool]]:
        """``allowed_tokens`` before every unit and after the last (``len(units) + 1`` masks).

        One parse serves all positions, so checking a runtime matcher step by step costs
        about as much as one brute-force mask per step. Once the input stops being a viable
        prefix, the remaining masks allow nothing.
        """
        vocabulary = _prepared_vocabulary(vocab_tokens, special_ids, eos_ids)
        sequence = _as_units(units)
        nothing = [False] * len(vocab_tokens)
        if self._cfg.empty_language:
            return [list(nothing) for _ in range(len(sequence) + 1)]
        run = _EarleyRun(self._cfg)
        masks = [self._mask(run, vocabulary)]
        for index, unit in enumerate(sequence):
            if not run.feed(unit):
                masks.extend(list(nothing) for _ in range(len(sequence) - index))
                break
            masks.append(self._mask(run, vocabulary))
        return masks

    # -- internals ------------------------------------------------------------------------
    def _run(self, units: list[Unit]) -> _EarleyRun | None:
        """Parse ``units``; None as soon as the input stops being a viable prefix.

        The run returned is the matcher's kept parse: valid until the next query, which may
        pop or extend it. Charts are never changed once closed, so popping back to a common
        prefix and feeding the rest gives the charts a fresh parse would.
        """
        if self._cfg.empty_language:
            return None
        run = self._last_run
        if run is None:
            run = self._last_run = _EarleyRun(self._cfg)
            self._last_units, self._last_sizes = [], [len(run.charts)]
        fed, sizes = self._last_units, self._last_sizes
        common = 0
        limit = min(len(fed), len(units))
        while common < limit and fed[common] == units[common]:
            common += 1
        if common < len(fed):
            run.pop(len(run.charts) - sizes[common])
            del fed[common:]
            del sizes[common + 1 :]
        for unit in units[common:]:
            if not run.feed(unit):
                run.pop(len(run.charts) - sizes[-1])  # back to the last live prefix
                return None
            fed.append(unit)
            sizes.append(len(run.charts))
        return run

    def _mask(self, run: _EarleyRun, vocabulary: _MaskVocabulary) -> list[bool]:
        """The brute-force mask at the frontier of a live run (the run is left unchanged)."""
        allowed = [False] * vocabulary.size
        base = run.frontier
        for token_id in vocabulary.eos:
            if 0 <= token_id < vocabulary.size:
                allowed[token_id] = base.accepting
        if any(self._cfg.lexemes[lexeme].dfa.has_token_edges for lexeme, _ in base.scans):
            for token_id in range(vocabulary.size):
                if token_id not in vocabulary.eos:
                    probe = _Chart()
                    run.step(base, token_symbol(token_id), probe)
                    allowed[token_id] = bool(probe.scans or probe.finished)
        self._walk_trie(run, vocabulary.trie, allowed)
        return allowed

    def _walk_trie(self, run: _EarleyRun, node: _TokenTrie, allowed: list[bool]) -> None:
        source = run.frontier
        for byte, child in node.children.items():
            probe = _Chart()
            run.step(source, byte, probe)
            if not (probe.scans or probe.finished):
                continue  # no token starting with these bytes can be allowed
            run.push(probe)
            for token_id in child.token_ids:
                allowed[token_id] = True
            self._walk_trie(run, child, allowed)
            run.pop()


class _MaskVocabulary:
    """A vocabulary prepared for brute-force masks: a byte trie of the text tokens."""

    def __init__(
        self, vocab_tokens: Sequence[bytes], special_ids: Iterable[int], eos_ids: Iterable[int]
    ) -> None:
        self.size = len(vocab_tokens)
        self.eos = frozenset(eos_ids)
        specials = frozenset(special_ids)
        self.trie = _TokenTrie()
        for token_id, data in enumerate(vocab_tokens):
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError(f"vocabulary token {token_id} is not bytes: {data!r}")
            if token_id not in specials and token_id not in self.eos and data:
                self.trie.insert(bytes(data), token_id)


def _prepared_vocabulary(
    vocab_tokens: Sequence[bytes], special_ids: Iterable[int], eos_ids: Iterable[int]
) -> _MaskVocabulary:
    """The prepared form of a vocabulary, shared by calls with equal tokens and ids.

    Building the trie of a real vocabulary (128K tokens) takes over a second, while a mask from
    it takes milliseconds; tests ask for masks of many prefixes with one vocabulary.
    """
    tokens, specials, eos = tuple(vocab_tokens), frozenset(special_ids), frozenset(eos_ids)
    try:
        return _cached_vocabulary(tokens, specials, eos)
    except TypeError:  # an unhashable token: prepared without the cache (and rejected there)
        return _MaskVocabulary(tokens, specials, eos)


# Two at most: a prepared 128K-token vocabulary holds ~60 MB.
@functools.lru_cache(maxsize=2)
def _cached_vocabulary(
    tokens: tuple[bytes, ...], special_ids: frozenset[int], eos_ids: frozenset[int]
) -> _MaskVocabulary:
    return _MaskVocabulary(tokens, special_ids, eos_ids)


class _TokenTrie:
    """A byte trie of vocabulary tokens, so that shared prefixes are parsed once."""

    __slots__ = ("children", "token_ids")

    def __init__(self) -> None:
        self.children: dict[int, _TokenTrie] = {}
        self.token_ids: list[int] = []

    def insert(self, data: bytes, token_id: int) -> None:
        """Add a token's bytes."""
        node = self
        for byte in data:
            node = node.children.setdefault(byte, _TokenTrie())
        node.token_ids.append(token_id)


def brute_force_mask(
    ir: GrammarIR,
    prefix_units: Iterable[Unit] | str | bytes,
    vocab_tokens: Sequence[bytes],
    special_ids: Iterable[int] = frozenset(),
    eos_ids: Iterable[int] = (),
    special_texts: Mapping[int, str] | None = None,
) -> list[bool]:
    """One-shot :meth:`ReferenceMatcher.allowed_tokens` for ``ir``."""
    matcher = ReferenceMatcher(ir, special_texts)
    return matcher.allowed_tokens(prefix_units, vocab_tokens, special_ids, eos_ids)
