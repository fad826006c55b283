"""Fixed JSON values (``const``, ``enum``): every spelling of a value under the layout."""

from __future__ import annotations

import json
import math
from itertools import permutations
from typing import Any

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
