"""Arrays: prefixItems/items, item counts, contains counts and (finite-domain) uniqueItems.

The plain case (one item schema, optional bounds) is a bounded ``Repeat``. Otherwise the
items form a chain of rules whose state is (items so far, matches of ``contains`` so far,
values used so far for ``uniqueItems``), each component capped where further counting
cannot change the answer, so that the grammar is exact and finite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gramkiln.frontend.json_schema.combinators import (
    NotNegatable,
    Unmergeable,
    canonical,
    contains_constraints,
    merge,
    type_set,
)
from gramkiln.frontend.json_schema.exprs import NEVER, choice, is_never, lit, repeat, seq
from gramkiln.frontend.json_schema.validate import flat_is_valid, is_valid
from gramkiln.frontend.json_schema.values import value_expr
from gramkiln.ir import Expr

if TYPE_CHECKING:
    from gramkiln.frontend.json_schema.compiler import Compiler

MAX_UNIQUE_DOMAIN = 8
# Distinct contains schemas counted on one array, and the item kinds they split items into.
MAX_CONTAINS_CONSTRAINTS = 4
MAX_CONTAINS_VARIANTS = 64


def array_expr(
    compiler: Compiler, flat: dict[str, Any], pointer: str, base: str, depth: int
) -> Expr:
    """The expression for arrays valid against a flat schema."""
    from gramkiln.frontend.json_schema.compiler import Unsupported

    layout = compiler.layout
    prefix = list(flat.get("prefixItems") or [])
    items = flat.get("items", True)
    if "unevaluatedItems" in flat and "items" not in flat:
        # Every merged part's prefixItems/items were merged into this schema, so the items
        # nobody evaluated are those after the prefix that no "contains" matched (a valid
        # array passed every contains, so each one's matches count as evaluated): each such
        # item matches one of the contains schemas or unevaluatedItems.
        items = flat["unevaluatedItems"]
        matched = [schema for schema, _, _ in contains_constraints(flat) if schema is not False]
        if matched and items is not True:
            items = {"anyOf": [*matched, items]}
    min_items = int(flat.get("minItems", 0))
    max_items = flat.get("maxItems")
    max_items = int(max_items) if max_items is not None else None
    if items is False:
        max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
    if max_items is not None and max_items < min_items:
        declared = flat.get("maxItems")
        limit = (
            f"maxItems {max_items}"
            if declared is not None and int(declared) == max_items
            else f"the {max_items} items prefixItems allows (items: false)"
        )
        return compiler.unsatisfiable(pointer, f"minItems {min_items} is above {limit}")
    # Count constraints (one per distinct "contains" merged into this schema); those that
    # assert nothing (minContains 0, no maximum) are dropped.
    counts = [
        (schema, low, None if high is None else int(high))
        for schema, low, high in contains_constraints(flat)
        if low > 0 or high is not None
    ]
    if len(counts) > MAX_CONTAINS_CONSTRAINTS:
        compiler.unsupported(
            pointer, ["contains"], f"more than {MAX_CONTAINS_CONSTRAINTS} contains schemas"
        )
        counts = counts[:MAX_CONTAINS_CONSTRAINTS]
    unique = bool(flat.get("uniqueItems")) and (max_items is None or max_items > 1)

    domains: dict[int, list[Any]] = {}
    if unique:
        for index in range(len(prefix) + 1):
            schema = prefix[index] if index < len(prefix) else items
            domain = finite_domain(compiler, schema, pointer, base)
            if domain is None:
                compiler.unsupported(
                    pointer,
                    ["uniqueItems"],
                    f"exact only for items drawn from at most {MAX_UNIQUE_DOMAIN} fixed scalar values",
                )
                unique = False
                break
            domains[index] = domain

    def position_schema(index: int) -> Any:
        return prefix[index] if index < len(prefix) else items

    def ref(schema: Any, index: int) -> Expr:
        where = f"{pointer}/prefixItems/{index}" if index < len(prefix) else f"{pointer}/items"
        return compiler.value_ref(schema, where, base, depth + 1)

    if not counts and not unique and not prefix:
        item = ref(items, len(prefix))
        empty = layout.close_empty("]", depth) if min_items == 0 else NEVER
        if is_never(item):
            return seq(lit("["), empty)
        if max_items == 0:
            return seq(lit("["), empty)
        rest = repeat(
            seq(layout.item_separator(depth), item),
            max(min_items - 1, 0),
            None if max_items is None else max_items - 1,
        )
        nonempty = seq(layout.open_first(depth), item, rest, layout.close_nonempty("]", depth))
        return seq(lit("["), choice(empty, nonempty))

    # Item variants per position: (expression, which count constraints the item meets, fixed
    # value or None). With count constraints an item is split by which contains schemas it
    # matches: each constraint's schema or one alternative of its negation, merged.
    variants_cache: dict[int, list[tuple[Expr, tuple[bool, ...], str | None]]] = {}

    # Per count constraint: its schema (the item matches) and each alternative of its
    # negation (it does not); built once, shared by every item position.
    count_options: list[list[tuple[dict[str, Any], bool]]] = []
    for matching, _, _ in counts:
        where = f"{pointer}/contains"
        try:
            negated = compiler.negation(matching, where, base)
        except NotNegatable as exc:
            compiler.unsupported(pointer, ["contains"], str(exc))
            negated = [True]
        count_options.append(
            [(compiler.flatten(matching, where, base, 0), True)]
            + [(_as_flat(alt), False) for alt in negated if alt is not False]
        )

    def split_by_counts(schema_flat: Any) -> list[tuple[dict[str, Any], tuple[bool, ...]]]:
        combos: list[tuple[dict[str, Any], tuple[bool, ...]]] = [(_as_flat(schema_flat), ())]
        for options in count_options:
            grown = []
            for partial, flags in combos:
                for option, matches in options:
                    try:
                        merged = merge(partial, option) if option else partial
                    except Unmergeable as exc:
                        compiler.unsupported(pointer, [exc.keyword], exc.reason)
                        continue
                    if not merged.get("__false"):
                        grown.append((merged, (*flags, matches)))
            combos = grown
            if len(combos) > MAX_CONTAINS_VARIANTS:
                reason = f"contains constraints need more than {MAX_CONTAINS_VARIANTS} item kinds"
                compiler.unsupported(pointer, ["contains"], reason)
                # No sound way to drop a count constraint, so a limit even when lenient.
                raise compiler.error(pointer, reason)
        return combos

    def variants(index: int) -> list[tuple[Expr, tuple[bool, ...], str | None]]:
        key = min(index, len(prefix))
        if key in variants_cache:
            return variants_cache[key]
        schema = position_schema(index)
        out: list[tuple[Expr, tuple[bool, ...], str | None]] = []
        if unique:
            for value in domains[key]:
                flags = tuple(
                    _value_matches(compiler, value, matching, pointer, base)
                    for matching, _, _ in counts
                )
                out.append((value_expr(value, layout, depth + 1), flags, canonical(value)))
        elif not counts:
            out.append((ref(schema, index), (), None))
        else:
            schema_flat = (
                schema if isinstance(schema, bool) else compiler.flatten(schema, pointer, base, 0)
            )
            for merged, flags in split_by_counts(schema_flat):
                where = f"{pointer}/contains" if any(flags) else f"{pointer}/items"
                out.append((compiler.branch(merged, where, base, depth + 1), flags, None))
        variants_cache[key] = out
        return out

    count_cap = max_items if max_items is not None else max(min_items, len(prefix), 1)
    caps = tuple((high + 1) if high is not None else max(low, 0) for _, low, high in counts)

    def moves(state: Any) -> list[tuple[Expr, Any]]:
        count, matched, used = state
        if max_items is not None and count >= max_items:
            return []
        separator = layout.open_first(depth) if count == 0 else layout.item_separator(depth)
        out = []
        for expr, flags, value_key in variants(count):
            if value_key is not None and value_key in used:
                continue
            new_matched = tuple(
                min(seen + 1, cap) if hit else seen
                for seen, hit, cap in zip(matched, flags, caps, strict=True)
            )
            new_used = used | {value_key} if value_key is not None else used
            out.append((seq(separator, expr), (min(count + 1, count_cap), new_matched, new_used)))
        return out

    def end(state: Any) -> Expr | None:
        count, matched, _ = state
        if count < min_items:
            return None
        for seen, (_, low, high) in zip(matched, counts, strict=True):
            if seen < low or (high is not None and seen > high):
                return None
        return layout.close_nonempty("]", depth) if count else layout.close_empty("]", depth)

    try:
        body = compiler.chain(f"{pointer}/array", (0, (0,) * len(counts), frozenset()), moves, end)
    except Unsupported as exc:
        raise compiler.error(pointer, exc.reason) from None
    return seq(lit("["), body)


def _as_flat(schema: Any) -> dict[str, Any]:
    if schema is True:
        return {}
    if schema is False:
        return {"__false": True}
    return schema


def _value_matches(compiler: Compiler, value: Any, schema: Any, pointer: str, base: str) -> bool:
    return is_valid(compiler, value, schema, pointer, base)


def finite_domain(compiler: Compiler, schema: Any, pointer: str, base: str) -> list[Any] | None:
    """The values an item schema allows when they are few (for exact uniqueItems), else None."""
    if schema is False:
        return []
    flat = {} if schema is True else compiler.flatten(schema, f"{pointer}/items", base, 0)
    if flat.get("__false"):
        return []
    if any(k in flat for k in ("__groups", "__not", "__conds")):
        return None
    if "enum" in flat:
        values = [v for v in flat["enum"] if flat_is_valid(compiler, v, flat, pointer, base)]
        if any(isinstance(v, (dict, list)) for v in values):
            return None
    else:
        types = type_set(flat)
        if types is None or not types <= {"boolean", "null"}:
            return None
        values = ([True, False] if "boolean" in types else []) + ([None] if "null" in types else [])
    deduplicated: dict[str, Any] = {}
    for value in values:
        deduplicated.setdefault(canonical(value), value)
    if len(deduplicated) > MAX_UNIQUE_DOMAIN:
        return None
    return list(deduplicated.values())
