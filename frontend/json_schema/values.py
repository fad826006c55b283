"""Fixed JSON values (``const``, ``enum``): their spellings, and a shallow validity check used
to drop enum members that sibling keywords rule out."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from itertools import permutations
from typing import Any

from gramkiln.frontend.json_schema.combinators import canonical, json_type_of, type_set
from gramkiln.frontend.json_schema.exprs import NEVER, choice, lit, seq
from gramkiln.frontend.json_schema.strings import json_string_literal
from gramkiln.ir import Expr

# With property_order="any", fixed objects are spelled in every key order up to this size.
MAX_PERMUTED_KEYS = 5


def number_spellings(value: int | float) -> list[str]:
    """``json.dumps`` spelling of a number, plus the integral/zero-fraction twin (1 and 1.0)."""
    text = json.dumps(value)
    spellings = [text]
    if isinstance(value, int) and not isinstance(value, bool):
        spellings.append(f"{value}.0")
    elif isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        spellings.append(str(int(value)))
    return spellings


def value_expr(value: Any, layout: Any, depth: int) -> Expr:
    """Every spelling of a fixed JSON value under the output layout."""
    if value is None:
        return lit("null")
    if value is True:
        return lit("true")
    if value is False:
        return lit("false")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return NEVER
        return choice(*(lit(s) for s in number_spellings(value)))
    if isinstance(value, str):
        return json_string_literal(value)
    if isinstance(value, list):
        if not value:
            return seq(lit("["), layout.close_empty("]", depth))
        parts: list[Expr] = [lit("["), layout.open_first(depth)]
        for index, item in enumerate(value):
            if index:
                parts.append(layout.item_separator(depth))
            parts.append(value_expr(item, layout, depth + 1))
        parts.append(layout.close_nonempty("]", depth))
        return seq(*parts)
    if isinstance(value, dict):
        if not value:
            return seq(lit("{"), layout.close_empty("}", depth))
        orders: list[tuple[str, ...]] = [tuple(value)]
        if layout.options.property_order == "any" and len(value) <= MAX_PERMUTED_KEYS:
            orders = list(permutations(value))
        alternatives = []
        for order in orders:
            parts = [lit("{"), layout.open_first(depth)]
            for index, key in enumerate(order):
                if index:
                    parts.append(layout.item_separator(depth))
                item = value_expr(value[key], layout, depth + 1)
                parts.extend([json_string_literal(key), layout.key_separator(), item])
            parts.append(layout.close_nonempty("}", depth))
            alternatives.append(seq(*parts))
        return choice(*alternatives)
    return NEVER


def _decimal(value: Any) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def value_may_satisfy(value: Any, flat: dict[str, Any]) -> bool:
    """False when ``value`` certainly violates one of the flat schema's own keywords.

    Checks the keywords that apply to the value itself (type, numeric bounds, multipleOf,
    lengths, patterns, required, item/property counts); nested sub-schemas are not visited,
    so the answer errs towards keeping a value.
    """
    from gramkiln.frontend.json_schema.keys import pattern_matches

    kind = json_type_of(value)
    types = type_set(flat)
    if types is not None:
        if kind == "integer" and not ({"integer", "number"} & types):
            return False
        if kind not in ("integer",) and kind not in types:
            return False
    if kind in ("integer", "number"):
        number = _decimal(value)
        if "minimum" in flat and number < _decimal(flat["minimum"]):
            return False
        if "maximum" in flat and number > _decimal(flat["maximum"]):
            return False
        if "exclusiveMinimum" in flat and number <= _decimal(flat["exclusiveMinimum"]):
            return False
        if "exclusiveMaximum" in flat and number >= _decimal(flat["exclusiveMaximum"]):
            return False
        if "multipleOf" in flat and number % _decimal(flat["multipleOf"]) != 0:
            return False
    if kind == "string":
        length = len(value)
        if length < flat.get("minLength", 0) or length > flat.get("maxLength", math.inf):
            return False
        for pattern, _ in flat.get("__patterns", ()):
            try:
                if not pattern_matches(pattern, value):
                    return False
            except Exception:  # an unusable pattern is reported where strings are built
                continue
    if kind == "array":
        if not flat.get("minItems", 0) <= len(value) <= flat.get("maxItems", math.inf):
            return False
        if flat.get("uniqueItems") and len({canonical(v) for v in value}) != len(value):
            return False
    if kind == "object":
        if any(name not in value for name in flat.get("required", ())):
            return False
        if not flat.get("minProperties", 0) <= len(value) <= flat.get("maxProperties", math.inf):
            return False
        properties = flat.get("properties") or {}
        if any(properties.get(name) is False for name in value):
            return False
    excluded = {canonical(v) for v in flat.get("__exclude", ())}
    return canonical(value) not in excluded
