"""Pass ``normalise_expressions``: put every expression into a small canonical shape."""

from __future__ import annotations

from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Repeat,
    Rule,
    Seq,
    Span,
    copy_with,
    structural_key,
)
from gramkiln.ir.memo import register as register_memo
from gramkiln.passes._common import (
    children_changed,
    is_empty_language,
    is_lexeme_like,
    with_subgrammars,
)


def normalise_expressions(grammar: GrammarIR) -> GrammarIR:
    """Simplify expressions without changing the language or the lexeme boundaries.

    Rewrites, applied bottom-up in every rule body, suffix/stop marker and ``%ignore``
    expression, recursively in sub-grammars:

    - nested ``Seq`` / ``Choice`` are flattened, ``Empty`` items leave a ``Seq``, a ``Seq``
      containing the empty language (``Choice`` of nothing) becomes the empty language;
    - single-member ``Seq`` / ``Choice`` are unwrapped, an empty ``Seq`` becomes ``Empty``;
    - a repeat of a repeat whose reachable counts form one interval is one repeat:
      ``(x{a,}){m,n}`` is ``x{a*m,}`` (for m >= 1, or a <= 1), ``(x?){m,n}`` is ``x{0,n}``;
    - ``Repeat(x, 1, 1)`` becomes ``x``, ``Repeat(x, 0, 0)`` and repeats of ``Empty`` become
      ``Empty``; an empty ``Literal``/``Bytes`` becomes ``Empty`` (the architecture's oracle
      reads ``""`` as the empty string, not as a lexeme that ignore content could follow);
    - identical ``Choice`` alternatives (compared without spans) are kept once, and all
      ``CharClass`` alternatives of a ``Choice`` are merged into one class;
    - adjacent plain ``Literal`` (same case flag) or ``Bytes`` items of a ``Seq`` are merged,
      and empty literals become ``Empty`` -- but only where no ``%ignore`` content can sit
      between them: inside terminals, markers, ``%ignore`` expressions, lexeme-like
      (lazy/suffix/stop) rule bodies, and in every rule of a grammar whose own ignore set is
      empty (for example after ``weave_ignore``). Elsewhere each literal is its own lexeme,
      and ``"a" "b"`` admits ignored text between the two while ``"ab"`` does not.

    Preserves: the language of every rule (so of the grammar), rule names, rule options,
    ignore semantics, and the spans of every node that survives (a merged literal spans its
    parts).
    """
    merge_everywhere = not grammar.ignore
    rules = tuple(_normalise_rule(rule, merge_everywhere) for rule in grammar.rules)
    ignore = tuple(normalise_expr(expr, merge_literals=True) for expr in grammar.ignore)
    return grammar.model_copy(
        update={
            "rules": rules,
            "ignore": ignore,
            "subgrammars": with_subgrammars(grammar, normalise_expressions),
        }
    )


def _normalise_rule(rule: Rule, merge_everywhere: bool) -> Rule:
    merge = merge_everywhere or is_lexeme_like(rule)
    update: dict[str, object] = {}
    body = normalise_expr(rule.body, merge_literals=merge)
    if body is not rule.body:
        update["body"] = body
    marker_updates: dict[str, Expr] = {}
    for key, marker in (("suffix", rule.options.suffix), ("stop", rule.options.stop)):
        if marker is not None:
            normalised = normalise_expr(marker, merge_literals=True)
            if normalised is not marker:
                marker_updates[key] = normalised
    if marker_updates:
        update["options"] = copy_with(rule.options, marker_updates)
    # An unchanged rule is kept as it is: identity lets the memos of later passes (normal
    # forms, structural keys, verify facts) recognise it.
    return copy_with(rule, update) if update else rule


def normalise_expr(expr: Expr, *, merge_literals: bool) -> Expr:
    """Normalise one expression; ``merge_literals`` allows merging text across items."""
    return _normalise_node(expr, merge_literals)


# Normal forms by input node identity, one table per merge flag: node -> (node, normal form).
# A normal node maps to itself (the rewrite is idempotent). The compile pipeline normalises
# three times and most subtrees survive the passes between untouched, so later runs skip them;
# and front ends share subtrees (hash-consing), so a shared subtree is normalised once.
_NORMAL_FORMS: dict[bool, dict[int, tuple[Expr, Expr]]] = {
    False: register_memo({}),
    True: register_memo({}),
}
_NORMAL_FORM_LIMIT = 1 << 19


def _normalise_node(node: Expr, merge_literals: bool) -> Expr:
    kind = type(node)
    if kind is not Seq and kind is not Choice and kind is not Repeat:
        # Leaves: only empty text changes; not worth a memo entry.
        if (kind is Literal and not node.text) or (kind is Bytes and not node.data):  # type: ignore[union-attr]
            return Empty(span=node.span)  # type: ignore[union-attr]
        return node
    forms = _NORMAL_FORMS[merge_literals]
    known = forms.get(id(node))
    if known is not None and known[0] is node:
        return known[1]
    original = node
    if kind is Seq:
        items = tuple([_normalise_node(item, merge_literals) for item in node.items])  # type: ignore[union-attr]
        if children_changed(items, node.items):  # type: ignore[union-attr]
            node = copy_with(node, {"items": items})
        result = _normalise_seq(node, merge_literals)  # type: ignore[arg-type]
    elif kind is Choice:
        alternatives = tuple([_normalise_node(alt, merge_literals) for alt in node.alternatives])  # type: ignore[union-attr]
        if children_changed(alternatives, node.alternatives):  # type: ignore[union-attr]
            node = copy_with(node, {"alternatives": alternatives})
        result = _normalise_choice(node)  # type: ignore[arg-type]
    else:
        item = _normalise_node(node.item, merge_literals)  # type: ignore[union-attr]
        if item is not node.item:  # type: ignore[union-attr]
            node = copy_with(node, {"item": item})
        result = _normalise_repeat(node)  # type: ignore[arg-type]
    if len(forms) >= _NORMAL_FORM_LIMIT:
        forms.clear()
    # Entries keep their nodes alive, so that their ids cannot be reused while they live.
    forms[id(original)] = (original, result)
    if result is not original:
        forms[id(result)] = (result, result)
    return result


def _normalise_seq(seq: Seq, merge_literals: bool) -> Expr:
    # Exact type tests (IR node classes are never subclassed): this runs at every sequence.
    items: list[Expr] = []
    for item in seq.items:
        for member in item.items if type(item) is Seq else (item,):  # type: ignore[union-attr]
            kind = type(member)
            if kind is Empty:
                continue
            if kind is Choice and not member.alternatives:  # type: ignore[union-attr]
                return member  # the empty language
            if (
                merge_literals
                and (kind is Literal or kind is Bytes)
                and items
                and _mergeable(items[-1], member)
            ):
                items[-1] = _merge_text(items[-1], member)
            else:
                items.append(member)
    if not items:
        return Empty(span=seq.span)
    if len(items) == 1:
        return items[0]
    if not children_changed(tuple(items), seq.items):
        return seq  # already normal: keep the node (and every memo keyed by it)
    return copy_with(seq, {"items": tuple(items)})


def _mergeable(left: Expr, right: Expr) -> bool:
    if isinstance(left, Literal) and isinstance(right, Literal):
        return left.case_insensitive == right.case_insensitive
    return isinstance(left, Bytes) and isinstance(right, Bytes)


def _merge_text(left: Expr, right: Expr) -> Expr:
    span = _joined_span(left.span, right.span)  # type: ignore[union-attr]
    if isinstance(left, Literal) and isinstance(right, Literal):
        return Literal(
            text=left.text + right.text, case_insensitive=left.case_insensitive, span=span
        )
    assert isinstance(left, Bytes) and isinstance(right, Bytes)
    return Bytes(data=left.data + right.data, span=span)


def _joined_span(first: Span | None, last: Span | None) -> Span | None:
    if first is None or last is None:
        return None
    end_line = last.end_line if last.end_line is not None else last.line
    end_column = last.end_column if last.end_column is not None else last.column
    return Span(line=first.line, column=first.column, end_line=end_line, end_column=end_column)


def _normalise_choice(choice: Choice) -> Expr:
    alternatives: list[Expr] = []
    seen: set[bytes] = set()
    classes: list[CharClass] = []
    class_position = 0
    for alternative in choice.alternatives:
        members = alternative.alternatives if type(alternative) is Choice else (alternative,)  # type: ignore[union-attr]
        for member in members:
            key = structural_key(member)
            if key in seen:
                continue
            seen.add(key)
            if type(member) is CharClass:
                if not classes:
                    class_position = len(alternatives)
                classes.append(member)  # type: ignore[arg-type]
            alternatives.append(member)
    if len(classes) > 1:
        # One class for the union: a single lexeme either way, so ignore semantics hold.
        class_ranges = [pair for member in classes for pair in member.positive_ranges()]
        merged = CharClass.of(class_ranges, span=classes[0].span)
        alternatives = [alt for alt in alternatives if type(alt) is not CharClass]
        alternatives.insert(class_position, merged)
    if len(alternatives) == 1:
        return alternatives[0]
    if not children_changed(tuple(alternatives), choice.alternatives):
        return choice  # already normal: keep the node (and every memo keyed by it)
    return copy_with(choice, {"alternatives": tuple(alternatives)})


def _normalise_repeat(repeat: Repeat) -> Expr:
    item = repeat.item
    if repeat.max == 0 or isinstance(item, Empty):
        return Empty(span=repeat.span)
    if is_empty_language(item):
        return Empty(span=repeat.span) if repeat.min == 0 else item
    if repeat.min == 1 and repeat.max == 1:
        return item
    if isinstance(item, Repeat):
        # A counted repeat of a repeat is one repeat of the inner item whenever the counts
        # it can reach form one interval. Left nested, `([0-9]*){200,1000}` is a chart that
        # splits every span every way (cubic in the oracle) and, fused into a terminal, an
        # automaton with a copy of the inner loop per count.
        inner_min, inner_max, outer_min, outer_max = item.min, item.max, repeat.min, repeat.max
        merged: tuple[int, int | None] | None = None
        if inner_max is None and (outer_min >= 1 or inner_min <= 1):
            # k copies of x{a,} reach every count >= k*a; with k = 0 allowed, 0 as well,
            # which joins the interval when a <= 1.
            merged = (inner_min * outer_min, None)
        elif inner_min == 0 and inner_max == 1:
            # k optional copies reach every count 0..k.
            merged = (0, outer_max)
        if merged is not None:
            return Repeat(item=item.item, min=merged[0], max=merged[1], span=repeat.span)
    return repeat
