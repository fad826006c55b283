"""Helpers that build tidy IR expressions (flattened sequences and choices).

The helpers hash-cons: a structure built twice (the same literal, the same sequence of the
same children...) is one shared node. JSON Schema grammars repeat the same pieces (string
characters, separators, keys) at every property, and everything downstream memoises by node
identity (structural keys, normal forms, verify facts, fusion), so a shared node is keyed,
normalised and checked once. Nodes are immutable, so sharing never changes meaning.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import cast

from gramkiln.ir import CharClass, Choice, Empty, Expr, Literal, Ref, Repeat, Seq, structural_key
from gramkiln.ir.nodes import normalise_ranges

# A character class with no members: the expression that matches nothing. Used where a
# schema admits no value at all (``false``, contradictory ``allOf``), so that the grammar stays
# well formed while the branch can never be taken.
NEVER = CharClass(ranges=())
EMPTY = Empty()

# Interned nodes by shape. Keys of composite nodes hold their children's ids: the entry keeps
# the node, and the node its children, alive, so those ids cannot be reused while the entry
# exists. Bounded like the other identity memos; clearing only costs sharing.
_INTERNED: dict[Hashable, Expr] = {}
_INTERN_LIMIT = 1 << 18


def _intern(key: Hashable, node: Expr) -> Expr:
    if len(_INTERNED) >= _INTERN_LIMIT:
        _INTERNED.clear()
    _INTERNED[key] = node
    return node


def is_never(expr: Expr) -> bool:
    """Whether ``expr`` is the canonical empty-language expression."""
    return isinstance(expr, CharClass) and not expr.ranges and not expr.negated


def seq(*items: Expr) -> Expr:
    """A sequence that drops Empty items, merges adjacent literals and unwraps single items."""
    # Exact type tests (IR node classes are never subclassed): this runs for every piece
    # of every object and array a schema describes.
    flat: list[Expr] = []
    for item in items:
        for member in item.items if type(item) is Seq else (item,):  # type: ignore[union-attr]
            kind = type(member)
            if kind is Empty:
                continue
            if kind is Literal:
                last = flat[-1] if flat else None
                if (
                    type(last) is Literal
                    and not member.case_insensitive  # type: ignore[union-attr]
                    and not last.case_insensitive  # type: ignore[union-attr]
                ):
                    flat[-1] = lit(last.text + member.text)  # type: ignore[union-attr]
                    continue
            elif kind is CharClass and not member.ranges and not member.negated:  # type: ignore[union-attr]
                return NEVER
            flat.append(member)
    if not flat:
        return EMPTY
    if len(flat) == 1:
        return flat[0]
    key = ("seq", *map(id, flat))
    return _INTERNED.get(key) or _intern(key, Seq(items=tuple(flat)))


def choice(*alternatives: Expr) -> Expr:
    """A choice that flattens nested choices, drops never-matching and duplicate members."""
    flat: list[Expr] = []
    seen: set[bytes] = set()
    for alternative in alternatives:
        members = alternative.alternatives if type(alternative) is Choice else (alternative,)  # type: ignore[union-attr]
        for member in members:
            if type(member) is CharClass and not member.ranges and not member.negated:  # type: ignore[union-attr]
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
    intern_key = ("choice", *map(id, flat))
    return _INTERNED.get(intern_key) or _intern(intern_key, Choice(alternatives=tuple(flat)))


def repeat(item: Expr, low: int = 0, high: int | None = None) -> Expr:
    """``item{low,high}`` with the trivial cases simplified."""
    if high == 0:
        return EMPTY
    if is_never(item):
        return EMPTY if low == 0 else NEVER
    if low == 1 and high == 1:
        return item
    key = ("repeat", id(item), low, high)
    return _INTERNED.get(key) or _intern(key, Repeat(item=item, min=low, max=high))


def optional(item: Expr) -> Expr:
    """``item?``."""
    return repeat(item, 0, 1)


def char_class(ranges) -> Expr:  # type: ignore[no-untyped-def]
    """A normalised class over code-point ranges (NEVER when empty)."""
    normal = tuple(normalise_ranges(ranges))
    if not normal:
        return NEVER
    key = ("class", normal)
    return _INTERNED.get(key) or _intern(key, CharClass(ranges=normal))


def lit(text: str) -> Expr:
    """A literal, or Empty for the empty string."""
    if not text:
        return EMPTY
    key = ("literal", text)
    return _INTERNED.get(key) or _intern(key, Literal(text=text))


def rule_ref(name: str) -> Ref:
    """A reference to the rule or terminal ``name``."""
    key = ("ref", name)
    return cast(Ref, _INTERNED.get(key) or _intern(key, Ref(name=name)))
