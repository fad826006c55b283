"""Helpers that build tidy IR expressions (flattened sequences and choices)."""

from __future__ import annotations

from gramkiln.ir import CharClass, Choice, Empty, Expr, Literal, Repeat, Seq, structural_key

# A character class with no members: the expression that matches nothing. Used where a
# schema admits no value at all (``false``, contradictory ``allOf``), so that the grammar stays
# well formed while the branch can never be taken.
NEVER = CharClass(ranges=())


def is_never(expr: Expr) -> bool:
    """Whether ``expr`` is the canonical empty-language expression."""
    return isinstance(expr, CharClass) and not expr.ranges and not expr.negated


def seq(*items: Expr) -> Expr:
    """A sequence that drops Empty items, merges adjacent literals and unwraps single items."""
    flat: list[Expr] = []
    for item in items:
        members = item.items if isinstance(item, Seq) else (item,)
        for member in members:
            if isinstance(member, Empty):
                continue
            if is_never(member):
                return NEVER
            if (
                flat
                and isinstance(member, Literal)
                and isinstance(flat[-1], Literal)
                and not member.case_insensitive
                and not flat[-1].case_insensitive
            ):
                flat[-1] = Literal(text=flat[-1].text + member.text)
            else:
                flat.append(member)
    if not flat:
        return Empty()
    if len(flat) == 1:
        return flat[0]
    return Seq(items=tuple(flat))


def choice(*alternatives: Expr) -> Expr:
    """A choice that flattens nested choices, drops never-matching and duplicate members."""
    flat: list[Expr] = []
    seen: set[bytes] = set()
    for alternative in alternatives:
        members = alternative.alternatives if isinstance(alternative, Choice) else (alternative,)
        for member in members:
            if is_never(member):
                continue
            key = structural_key(member)
            if key in seen:
                continue
            seen.add(key)
            flat.append(member)
    if not flat:
        return NEVER
    if len(flat) == 1:
        return flat[0]
    return Choice(alternatives=tuple(flat))


def repeat(item: Expr, low: int = 0, high: int | None = None) -> Expr:
    """``item{low,high}`` with the trivial cases simplified."""
    if high == 0:
        return Empty()
    if is_never(item):
        return Empty() if low == 0 else NEVER
    if low == 1 and high == 1:
        return item
    return Repeat(item=item, min=low, max=high)


def optional(item: Expr) -> Expr:
    """``item?``."""
    return repeat(item, 0, 1)


def char_class(ranges) -> Expr:  # type: ignore[no-untyped-def]
    """A normalised class over code-point ranges (NEVER when empty)."""
    ranges = list(ranges)
    if not ranges:
        return NEVER
    return CharClass.of(ranges)


def lit(text: str) -> Expr:
    """A literal, or Empty for the empty string."""
    return Literal(text=text) if text else Empty()
