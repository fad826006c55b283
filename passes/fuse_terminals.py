"""Pass ``fuse_terminals``: terminal-only pieces of rule bodies become synthetic terminals."""

from __future__ import annotations

from collections.abc import Callable

from gramkiln.ir import (
    Bytes,
    Choice,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    Seq,
    copy_with,
    expr_facts,
    strip_spans,
    structural_key,
    walk,
)
from gramkiln.passes._common import (
    MARKER_PREFIXES,
    TEXT_LEAVES,
    NameAllocator,
    children_changed,
    is_lexeme_like,
    is_terminal_only,
    map_expr,
    with_subgrammars,
)

LITERAL_PREFIX = "__lit_"
FUSED_PREFIX = "__t_"

# A fused terminal becomes one byte DFA, whose size grows with every counted repetition in
# it (a JSON string of at most n characters needs ~25n states). Counts above this stay in
# the grammar, split into blocks (see _Fuser.split_counted_repeat). The split keeps compile
# time and DFA size bounded but costs mask time and size: every block position is a distinct
# parser state, so nearly every fill is computed (`maxLength: 3000` under Llama 3: 32 MB and
# mask p50 / p99 7.7 / 62 us as blocks, 6.7 MB and 1.3 / 16 us as one DFA, compiled in 0.4
# against 1.6 s). So counts are fused whole up to MAX_FUSED_COUNT, and where one DFA then
# passes the automaton limits (a repeated item of many states), the compiler lowers again
# with fuse_terminals_in_blocks, which splits every count past BLOCKS_FALLBACK_COUNT.
MAX_FUSED_COUNT = 4096
BLOCKS_FALLBACK_COUNT = 1024
COUNT_BLOCK = 32


def fuse_terminals(grammar: GrammarIR) -> GrammarIR:
    """Replace terminal-only subexpressions of non-terminal rules by synthetic terminals.

    Every maximal terminal-only subexpression of a rule body (a whole body, a run of
    consecutive ``Seq`` items, the terminal-only alternatives of a ``Choice`` taken together,
    a ``Repeat``), and every lone ``Literal``/``Bytes``/``CharClass`` leaf, becomes a ``Ref``
    to a terminal; the runtime compiler then builds one byte-level DFA per terminal. Lone
    terminal references and ``Empty`` stay as they are. Terminals are deduplicated by
    structure (spans ignored) and named deterministically in order of first use:
    ``__lit_<n>`` for a single literal or bytes, ``__t_<n>`` for anything else.

    Fusing ``"a" "b"`` into one terminal removes the lexeme boundary between them, where
    ``%ignore`` content was allowed. So whole runs are fused only where no ignore applies:
    lexeme-like (lazy) rule bodies always, and ordinary rules of a grammar whose ignore set
    is empty (run ``weave_ignore`` first, as COMPILE_PIPELINE does). Where an ignore set is
    still present, only single leaves are fused, which keeps every lexeme boundary. A
    suffix/stop marker reference (``__suffix_*``/``__stop_*``, see ``lower_suffix_stop``) is
    never absorbed into a larger terminal, so captures can still find it.

    A lexeme-like rule's body is one lexeme, compiled as one lazy automaton, so ordinary
    rules it references (``__raw_*`` copies, the ``stop_capture`` wrapper of
    ``lower_suffix_stop``, user rules) are inlined into it first, leaving a body of terminal
    references only. The capture name of a ``stop_capture`` wrapper is lost at this point;
    capture support would have to read it before this pass. Recursive rules and nested
    lexeme-like rules are left as references (they are not regular; the oracle refuses them
    as well).

    Preserves: the language, lexeme boundaries wherever ignore applies, existing rule names,
    options and spans (the replacing ``Ref`` carries the span of what it replaced).
    """
    return _fuse_terminals(grammar, MAX_FUSED_COUNT, fuse_terminals)


def fuse_terminals_in_blocks(grammar: GrammarIR) -> GrammarIR:
    """``fuse_terminals`` with every counted repetition past ``BLOCKS_FALLBACK_COUNT`` split
    into blocks: the compiler's second lowering when a repetition fused whole needs more
    automaton states than the limits allow. Preserves what ``fuse_terminals`` preserves."""
    return _fuse_terminals(grammar, BLOCKS_FALLBACK_COUNT, fuse_terminals_in_blocks)


def fuse_terminal_leaves(grammar: GrammarIR) -> GrammarIR:
    """``fuse_terminals`` that keeps every lexeme boundary of ordinary rules: only single
    leaves become terminals there, as where an ignore set applies (lexeme-like rules are still
    fused whole: their body is one lexeme). The compiler's last lowering when a run fused whole
    gives an automaton past the limits, although each of its pieces is small (a run that
    repeats an ambiguous ignored terminal between its items: ``(a ign? a ign?){3,}`` with
    ``ign: ("a" | "aa,"){3,}``). Preserves what ``fuse_terminals`` preserves."""
    return _fuse_terminals(grammar, MAX_FUSED_COUNT, fuse_terminal_leaves, whole_runs=False)


def _fuse_terminals(
    grammar: GrammarIR,
    max_count: int,
    same_pass: Callable[[GrammarIR], GrammarIR],
    whole_runs: bool = True,
) -> GrammarIR:
    fuser = _Fuser(grammar, max_count, whole_runs)
    by_name = grammar.rule_map()
    rules = []
    for rule in grammar.rules:
        if rule.terminal:
            rules.append(rule)
            continue
        body = rule.body
        if is_lexeme_like(rule):
            body = inline_plain_rules(body, by_name, (rule.name,))
        body = fuser.fuse(body, whole_runs=fuser.whole_runs(rule))
        rules.append(rule if body is rule.body else copy_with(rule, {"body": body}))
    return grammar.model_copy(
        update={
            "rules": (*rules, *fuser.new_terminals),
            "subgrammars": with_subgrammars(grammar, same_pass),
        }
    )


def inline_plain_rules(expr: Expr, rules: dict[str, Rule], active: tuple[str, ...]) -> Expr:
    """``expr`` with references to ordinary (non-lexeme, non-recursive) rules replaced by
    their bodies, recursively."""

    def inline(node: Expr) -> Expr:
        if not isinstance(node, Ref) or node.name in active:
            return node
        target = rules.get(node.name)
        if target is None or is_lexeme_like(target):
            return node
        reachable = _reachable_rules(target, rules)
        if node.name in reachable or any(name in active for name in reachable):
            return node  # recursive: not a regular language, keep the reference
        return inline_plain_rules(target.body, rules, (*active, node.name))

    return map_expr(expr, inline)


def _reachable_rules(rule: Rule, rules: dict[str, Rule]) -> set[str]:
    """Ordinary rules reachable from ``rule``'s body, ``rule`` included when recursive."""
    seen: set[str] = set()
    pending = [n.name for n in walk(rule.body) if isinstance(n, Ref)]
    while pending:
        name = pending.pop()
        target = rules.get(name)
        if name in seen or target is None or is_lexeme_like(target):
            continue
        seen.add(name)
        pending.extend(n.name for n in walk(target.body) if isinstance(n, Ref))
    return seen


class _Fuser:
    """Creates and deduplicates the synthetic terminals of one grammar."""

    def __init__(self, grammar: GrammarIR, max_count: int, whole_runs: bool = True) -> None:
        self._grammar = grammar
        self._max_count = max_count  # counted repetitions past it are split into blocks
        self._whole_runs = whole_runs  # False: ordinary rules keep every lexeme boundary
        self.terminals = frozenset(rule.name for rule in grammar.rules if rule.terminal)
        self._names = NameAllocator(rule.name for rule in grammar.rules)
        self._by_structure: dict[bytes, str] = {}
        self._fusable_memo: dict[int, tuple[Expr, bool]] = {}
        self._fused_memo: dict[tuple[int, bool], tuple[Expr, Expr]] = {}
        self.new_terminals: list[Rule] = []

    def whole_runs(self, rule: Rule) -> bool:
        """Whether lexeme boundaries inside ``rule`` may disappear (no ignore applies)."""
        if is_lexeme_like(rule):
            return True
        return self._whole_runs and not self._grammar.ignore

    def fuse(self, expr: Expr, *, whole_runs: bool) -> Expr:
        """``expr`` with its terminal-only parts replaced by terminal references."""
        # Memoised by identity: front ends share subtrees (hash-consing), and the result for
        # a subtree depends only on it (terminals are deduplicated by structure, so a second
        # occurrence would get the same names anyway). Shared input stays shared output.
        kind = type(expr)
        if kind is Ref or kind is Empty:
            return expr  # nothing to fuse (a lone reference stays as it is)
        key = (id(expr), whole_runs)
        known = self._fused_memo.get(key)
        if known is not None and known[0] is expr:
            return known[1]
        fused = self._fuse_uncached(expr, whole_runs)
        self._fused_memo[key] = (expr, fused)
        return fused

    def _fuse_uncached(self, expr: Expr, whole_runs: bool) -> Expr:
        if whole_runs and self._fusable(expr):
            return self._terminal_ref(expr)
        if isinstance(expr, TEXT_LEAVES):
            return self._terminal_ref(expr)
        # Unchanged nodes are kept (not copied) so that later passes' memos still know them.
        if isinstance(expr, Seq):
            items = self._fuse_seq(expr.items, whole_runs)
            if not children_changed(items, expr.items):
                return expr
            return copy_with(expr, {"items": items})
        if isinstance(expr, Choice):
            alternatives = self._fuse_choice(expr.alternatives, whole_runs)
            if len(alternatives) == 1:
                return alternatives[0]
            if not children_changed(alternatives, expr.alternatives):
                return expr
            return copy_with(expr, {"alternatives": alternatives})
        if isinstance(expr, Repeat):
            if whole_runs and self._large_count(expr) and self._fusable(expr.item):
                return self.split_counted_repeat(expr)
            item = self.fuse(expr.item, whole_runs=whole_runs)
            return expr if item is expr.item else copy_with(expr, {"item": item})
        return expr

    def _large_count(self, repeat: Repeat) -> bool:
        return max(repeat.min, repeat.max or 0) > self._max_count

    def split_counted_repeat(self, expr: Repeat) -> Expr:
        """``x{m,n}`` with a large count as blocks ``B = x{k}`` plus small remainders.

        ``x{m}`` becomes ``B{m div k} x{m mod k}`` and ``x{0,n}`` (q = n div k, r = n mod k)
        becomes ``B{0,q-1} x{0,k-1} | B{q} x{0,r}``; ``x{m,}`` is ``x{m} x*``. Each ``x{..}``
        piece with a count of at most k is one terminal and the block repeats stay in the
        grammar (lower_repeats turns them into helper rules), so no DFA grows with the count.
        The two alternatives cover disjoint lengths, so the split adds no ambiguity.
        """
        item, block_size = expr.item, COUNT_BLOCK
        block = self._terminal_ref(Repeat(item=item, min=block_size, max=block_size))

        def items_up_to(high: int) -> list[Expr]:
            return [self._terminal_ref(Repeat(item=item, min=0, max=high))] if high else []

        def blocks_up_to(high: int) -> list[Expr]:
            return [Repeat(item=block, min=0, max=high)] if high else []

        parts: list[Expr] = []
        blocks, extra = divmod(expr.min, block_size)
        if blocks:
            parts.append(Repeat(item=block, min=blocks, max=blocks))
        if extra:
            parts.append(self._terminal_ref(Repeat(item=item, min=extra, max=extra)))
        if expr.max is None:
            parts.append(self._terminal_ref(Repeat(item=item, min=0, max=None)))
        elif expr.max > expr.min:
            quotient, remainder = divmod(expr.max - expr.min, block_size)
            if quotient == 0:
                parts.extend(items_up_to(remainder))
            else:
                short_items = [*blocks_up_to(quotient - 1), *items_up_to(block_size - 1)]
                short = short_items[0] if len(short_items) == 1 else Seq(items=tuple(short_items))
                full = [Repeat(item=block, min=quotient, max=quotient), *items_up_to(remainder)]
                longest = full[0] if len(full) == 1 else Seq(items=tuple(full))
                parts.append(Choice(alternatives=(short, longest)))
        if not parts:
            return Empty(span=expr.span)
        if len(parts) == 1 and not isinstance(parts[0], Ref):
            return copy_with(parts[0], {"span": expr.span})
        return Seq(items=tuple(parts), span=expr.span)

    def _fusable(self, expr: Expr) -> bool:
        """Terminal-only, matching some text, not already a single terminal reference, and
        without a counted repetition too large for one DFA."""
        kind = type(expr)
        if kind is Ref or kind is Empty:
            return False
        # Asked again for every subtree on the way down: memoised so fusing stays linear.
        known = self._fusable_memo.get(id(expr))
        if known is not None and known[0] is expr:
            return known[1]
        answer = self._fusable_uncached(expr)
        self._fusable_memo[id(expr)] = (expr, answer)
        return answer

    def _fusable_uncached(self, expr: Expr) -> bool:
        if isinstance(expr, (Ref, Empty)) or not is_terminal_only(expr, self.terminals):
            return False
        facts = expr_facts(expr)
        if facts.largest_count > self._max_count:
            return False
        if any(name.startswith(MARKER_PREFIXES) for name in facts.refs):
            return False
        return facts.has_text

    def _fuse_seq(self, items: tuple[Expr, ...], whole_runs: bool) -> tuple[Expr, ...]:
        if not whole_runs:
            return tuple(self.fuse(item, whole_runs=False) for item in items)
        out: list[Expr] = []
        run: list[Expr] = []

        def flush() -> None:
            if len(run) > 1:
                out.append(self._terminal_ref(Seq(items=tuple(run))))
            elif run:
                out.append(self.fuse(run[0], whole_runs=True))
            run.clear()

        for item in items:
            if (
                self._plain_terminal(item)  # type: ignore[arg-type]
                if type(item) is Ref
                else self._fusable(item)
            ):
                run.append(item)
            else:
                flush()
                out.append(self.fuse(item, whole_runs=True))
        flush()
        return tuple(out)

    def _fuse_choice(self, alternatives: tuple[Expr, ...], whole_runs: bool) -> tuple[Expr, ...]:
        if not whole_runs:
            return tuple(self.fuse(alt, whole_runs=False) for alt in alternatives)
        textual = [alt for alt in alternatives if self._fusable(alt)]
        if len(textual) < 2:
            return tuple(self.fuse(alt, whole_runs=True) for alt in alternatives)
        out: list[Expr] = []
        for alt in alternatives:
            if alt is textual[0]:
                out.append(self._terminal_ref(Choice(alternatives=tuple(textual))))
            elif not any(alt is other for other in textual):
                out.append(self.fuse(alt, whole_runs=True))
        return tuple(out)

    def _plain_terminal(self, ref: Ref) -> bool:
        return ref.name in self.terminals and not ref.name.startswith(MARKER_PREFIXES)

    def _terminal_ref(self, expr: Expr) -> Ref:
        key = structural_key(expr)
        name = self._by_structure.get(key)
        if name is None:
            single_text = isinstance(expr, (Literal, Bytes))
            name = self._names.numbered(LITERAL_PREFIX if single_text else FUSED_PREFIX)
            self._by_structure[key] = name
            body = strip_spans(expr)
            # The first use's span: errors about the terminal (too large to compile) can
            # then point at the grammar text it came from.
            span = expr.span  # type: ignore[union-attr]
            self.new_terminals.append(Rule(name=name, body=body, terminal=True, span=span))
        return Ref(name=name, span=expr.span)  # type: ignore[union-attr]
