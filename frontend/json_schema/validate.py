"""A validator for fixed values (``enum``/``const`` members, ``uniqueItems`` domains).

A fixed value is allowed only if it satisfies the rest of the schema, so enum members must be
checked against sibling keywords, including nested ones (``properties`` of an object member).
This follows exactly the semantics the grammar builders implement, on flat schemas, and
reports through the compiler what they would report.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from gramkiln.frontend.json_schema.automaton import accepts, dfa_from_expr
from gramkiln.frontend.json_schema.combinators import (
    canonical,
    contains_constraints,
    json_type_of,
    type_set,
    undeclared_key_schemas,
)
from gramkiln.frontend.json_schema.formats import format_expr
from gramkiln.frontend.json_schema.keys import pattern_matches
from gramkiln.frontend.json_schema.objects import (
    default_additional_properties,
    strict_forbids_undeclared,
)

if TYPE_CHECKING:
    from gramkiln.frontend.json_schema.compiler import Compiler

MAX_VALIDATION_DEPTH = 200


def _decimal(value: Any) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def is_valid(
    compiler: Compiler, value: Any, schema: Any, pointer: str, base: str, depth: int = 0
) -> bool:
    """Whether ``value`` satisfies ``schema`` (a raw schema, resolved with the compiler)."""
    if schema is True:
        return True
    if schema is False:
        return False
    if depth > MAX_VALIDATION_DEPTH:
        raise compiler.error(pointer, "schema nesting too deep to check a fixed value")
    base = compiler.base_in(schema, base) if isinstance(schema, dict) else base
    flat = compiler.flatten(schema, pointer, base, 0)
    return flat_is_valid(compiler, value, flat, pointer, base, depth)


def flat_is_valid(
    compiler: Compiler, value: Any, flat: dict[str, Any], pointer: str, base: str, depth: int = 0
) -> bool:
    """Whether ``value`` satisfies a flat schema (see :mod:`.combinators`)."""
    if flat.get("__false"):
        return False

    def check(sub: Any, item: Any, where: str) -> bool:
        return is_valid(compiler, item, sub, where, base, depth + 1)

    for kind, alternatives, location, group_base in flat.get("__groups", ()):
        hits = sum(
            1
            for i, alt in enumerate(alternatives)
            if is_valid(compiler, value, alt, f"{location}/{i}", group_base, depth + 1)
        )
        if (kind == "anyOf" and hits == 0) or (kind == "oneOf" and hits != 1):
            return False
    for negated, location, not_base in flat.get("__not", ()):
        if is_valid(compiler, value, negated, location, not_base, depth + 1):
            return False
    for condition, then, otherwise, location, cond_base in flat.get("__conds", ()):
        branch = (
            then
            if is_valid(compiler, value, condition, location, cond_base, depth + 1)
            else otherwise
        )
        if not is_valid(compiler, value, branch, location, cond_base, depth + 1):
            return False
    key = canonical(value)
    if "__exclude" in flat and key in compiler.canonical_set(flat["__exclude"]):
        return False
    if "enum" in flat and key not in compiler.canonical_set(flat["enum"]):
        return False
    kind = json_type_of(value)
    if kind == "integer" and isinstance(value, float) and compiler.draft <= 4:
        kind = "number"  # draft 4: 1.0 is not an integer
    types = type_set(flat)
    if types is not None:
        if kind == "integer" and not ({"integer", "number"} & types):
            return False
        if kind != "integer" and kind not in types:
            return False
    if kind in ("integer", "number"):
        return _number_ok(value, flat)
    if kind == "string":
        return _string_ok(value, flat, pointer)
    if kind == "array":
        return _array_ok(value, flat, check, pointer)
    if kind == "object":
        return _object_ok(value, flat, check, pointer, compiler)
    return True


def _is_multiple(number: Decimal, divisor: Decimal) -> bool:
    """Whether ``number`` is an integer multiple of ``divisor``, exactly: as fractions, since
    a Decimal remainder fails once the quotient outgrows the context's precision (1e308 and
    0.123456789)."""
    if divisor == 0:
        return False
    return (Fraction(number) / Fraction(divisor)).denominator == 1


def _number_ok(value: Any, flat: dict[str, Any]) -> bool:
    number = _decimal(value)
    checks = (
        ("minimum", lambda bound: number >= bound),
        ("maximum", lambda bound: number <= bound),
        ("exclusiveMinimum", lambda bound: number > bound),
        ("exclusiveMaximum", lambda bound: number < bound),
    )
    for keyword, holds in checks:
        if keyword in flat and not holds(_decimal(flat[keyword])):
            return False
    if "multipleOf" in flat and not _is_multiple(number, _decimal(flat["multipleOf"])):
        return False
    if any(_is_multiple(number, _decimal(m)) for m in flat.get("__not_multiples", ())):
        return False
    if flat.get("__non_integer") and number == number.to_integral_value():
        return False
    return True


def _string_ok(value: str, flat: dict[str, Any], pointer: str) -> bool:
    if not flat.get("minLength", 0) <= len(value) <= flat.get("maxLength", math.inf):
        return False
    for pattern, _ in flat.get("__patterns", ()):
        if not pattern_matches(pattern, value):
            return False
    for name, _ in flat.get("__formats", ()):
        expr = format_expr(name)
        if expr is not None and not accepts(dfa_from_expr(expr), value):
            return False
    for pattern in flat.get("__anti_patterns", ()):
        if pattern_matches(pattern, value):
            return False
    for name in flat.get("__anti_formats", ()):
        expr = format_expr(name)
        if expr is not None and accepts(dfa_from_expr(expr), value):
            return False
    return True


def _array_ok(value: list[Any], flat: dict[str, Any], check: Any, pointer: str) -> bool:
    if not flat.get("minItems", 0) <= len(value) <= flat.get("maxItems", math.inf):
        return False
    if flat.get("uniqueItems") and len({canonical(v) for v in value}) != len(value):
        return False
    prefix = list(flat.get("prefixItems") or [])
    contains = contains_constraints(flat)
    rest = flat.get("items", flat.get("unevaluatedItems", True))
    # Items a "contains" matched are evaluated: unevaluatedItems does not see them.
    matched_ok = "items" not in flat and "unevaluatedItems" in flat
    for index, item in enumerate(value):
        schema = prefix[index] if index < len(prefix) else rest
        if check(schema, item, f"{pointer}/items"):
            continue
        if not (
            matched_ok
            and index >= len(prefix)
            and any(check(c, item, f"{pointer}/contains") for c, _, _ in contains)
        ):
            return False
    for matching, low, high in contains:
        matches = sum(1 for item in value if check(matching, item, f"{pointer}/contains"))
        if not low <= matches <= (math.inf if high is None else high):
            return False
    return True


def _object_ok(
    value: dict[str, Any], flat: dict[str, Any], check: Any, pointer: str, compiler: Compiler
) -> bool:
    if any(name not in value for name in flat.get("required", ())):
        return False
    if not flat.get("minProperties", 0) <= len(value) <= flat.get("maxProperties", math.inf):
        return False
    properties = flat.get("properties") or {}
    patterns = flat.get("patternProperties") or {}
    strict = compiler.options.strict
    default_additional = default_additional_properties(flat, strict)
    additional = flat.get(
        "additionalProperties", flat.get("unevaluatedProperties", default_additional)
    )
    # As in object_expr: under strict mode a required name is declared (any value).
    required_any = set(flat.get("required", ())) if strict_forbids_undeclared(flat, strict) else ()
    names = flat.get("propertyNames", True)
    for name, item in value.items():
        if not check(names, name, f"{pointer}/propertyNames"):
            return False
        matched = [schema for pattern, schema in patterns.items() if pattern_matches(pattern, name)]
        if name in properties and not check(properties[name], item, f"{pointer}/properties"):
            return False
        for schema in matched:
            if not check(schema, item, f"{pointer}/patternProperties"):
                return False
        if "__pattern_branches" in flat and name not in properties:
            matched_names = {pattern for pattern in patterns if pattern_matches(pattern, name)}
            if not all(
                check(more, item, pointer) for more in undeclared_key_schemas(flat, matched_names)
            ):
                return False
        elif (
            name not in properties
            and not matched
            and name not in required_any
            and not check(additional, item, pointer)
        ):
            return False
    for witness in flat.get("__witnesses", ()):
        from gramkiln.frontend.json_schema.objects import witness_key_dfa

        keys = witness_key_dfa(compiler, witness["key"], pointer, "")
        if not any(
            accepts(keys, name) and check(witness["value"], item, f"{pointer}/not")
            for name, item in value.items()
        ):
            return False
    for trigger, needed in (flat.get("dependentRequired") or {}).items():
        if trigger in value and any(n not in value for n in needed):
            return False
    for trigger, schema in (flat.get("dependentSchemas") or {}).items():
        if trigger in value and not check(schema, value, f"{pointer}/dependentSchemas"):
            return False
    return True
