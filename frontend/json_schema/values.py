"""Fixed JSON values (``const``, ``enum``): every spelling of a value under the layout."""

from __future__ import annotations

import math
from decimal import Decimal
from itertools import permutations
from typing import Any

from gramkiln.frontend.json_schema.exprs import (
    NEVER,
    char_class,
    choice,
    lit,
    optional,
    repeat,
    seq,
)
from gramkiln.frontend.json_schema.strings import json_string_literal
from gramkiln.ir import Expr

# With property_order="any", fixed objects are spelled in every key order up to this size.
MAX_PERMUTED_KEYS = 5


# Decimal exponents up to which a fixed number is also accepted written out in full
# (0.0000001, 10000000000000000): what JSON.stringify and serde_json write up to 1e21.
MAX_PLAIN_EXPONENT = 40

_ZEROS = repeat(lit("0"))
_EXPONENT_MARK = char_class([(ord("E"), ord("E")), (ord("e"), ord("e"))])
_SIGNS = char_class([(ord("+"), ord("+")), (ord("-"), ord("-"))])
_DIGITS = char_class([(ord("0"), ord("9"))])


def number_spellings_expr(value: int | float | Decimal, integer_only: bool = False) -> Expr:
    """Every usual spelling of a fixed number: the value, not one text, is what is fixed.

    Written out (``2.5``, ``2.50``, ``100``, ``100.0``) while the decimal exponent is within
    MAX_PLAIN_EXPONENT (integers always), and in scientific form with one integer digit
    (``2.5e0``, ``1e-7``, ``1e-07``, ``1E+22``, ``1.0e2``): what ``json.dumps``,
    ``JSON.stringify`` and serde_json write, and the spellings number bounds accept. Other
    spellings (``25e-1``) would need the exponent compared with a digit count (not
    regular). ``integer_only`` (draft 4 ``"type": "integer"``): no fraction or exponent.
    Zero is every spelling of zero (``-0``, ``0.0``, ``0e5``), all equal to it.
    """
    number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if number == 0:
        if integer_only:
            return seq(optional(lit("-")), lit("0"))
        fraction = optional(seq(lit("."), repeat(lit("0"), 1)))
        exponent = optional(seq(_EXPONENT_MARK, optional(_SIGNS), repeat(_DIGITS, 1)))
        return seq(optional(lit("-")), lit("0"), fraction, exponent)
    sign, digit_tuple, exponent_value = number.normalize().as_tuple()
    assert isinstance(exponent_value, int)
    digits = "".join(map(str, digit_tuple))
    minus = lit("-") if sign else lit("")
    if integer_only:
        return seq(minus, lit(format(abs(number.normalize()), "f")))  # 10.0 -> "10"
    power = len(digits) - 1 + exponent_value  # value = d.ddd x 10**power
    more_zeros = optional(seq(lit("."), repeat(lit("0"), 1)))  # 100 -> 100.0, 100.00
    mantissa = seq(lit(digits[0]), seq(lit("." + digits[1:]), _ZEROS) if digits[1:] else more_zeros)
    if power > 0:
        scaled = seq(optional(lit("+")), _ZEROS, lit(str(power)))
    elif power < 0:
        scaled = seq(lit("-"), _ZEROS, lit(str(-power)))
    else:
        scaled = seq(optional(_SIGNS), repeat(lit("0"), 1))
    forms = [seq(mantissa, _EXPONENT_MARK, scaled)]
    if isinstance(value, int) or abs(power) <= MAX_PLAIN_EXPONENT:
        plain = format(abs(number.normalize()), "f")
        forms.append(seq(lit(plain), _ZEROS) if "." in plain else seq(lit(plain), more_zeros))
    return seq(minus, choice(*forms))


def value_expr(value: Any, layout: Any, depth: int, integer_only: bool = False) -> Expr:
    """Every spelling of a fixed JSON value under the output layout (``integer_only``: a
    number at the top is written as an integer, see :func:`number_spellings_expr`)."""
    if value is None:
        return lit("null")
    if value is True:
        return lit("true")
    if value is False:
        return lit("false")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return NEVER
        return number_spellings_expr(value, integer_only)
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
