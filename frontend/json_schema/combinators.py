"""allOf merging, negation (``not``, the else-branch of ``if``) and oneOf disjointness.

A *flat* schema is a normalized schema object whose ``allOf`` and ``$ref`` have been merged
into it. Merging collects what cannot be merged keyword-by-keyword into internal list
keywords, each consumed by a later stage:

- ``__patterns`` / ``__formats``: every ``pattern`` / ``format`` that applies (intersected);
- ``__not``: schemas the value must not match;
- ``__exclude``: fixed values the value must differ from (the negation of ``enum``);
- ``__false``: nothing matches (a ``false`` schema or a contradiction);
- ``__groups``: ``("anyOf" | "oneOf", alternatives, location)`` to distribute over;
- ``__conds``: ``(if, then, else, location)`` triples.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any


class Unmergeable(Exception):
    """Two schemas combine a keyword in a way the front end cannot express exactly."""

    def __init__(self, keyword: str, reason: str) -> None:
        super().__init__(reason)
        self.keyword = keyword
        self.reason = reason


def canonical(value: Any) -> str:
    """A canonical text for comparing JSON values: equal texts iff equal values (1 and 1.0 are
    equal, True is not 1, key order does not count).

    Linear in the number of distinct objects, not in the size of the tree they unfold to:
    merged schemas share sub-schemas by reference, and a schema reaching one sub-schema along
    two paths at each of n levels unfolds to 2^n copies (a fuzzed schema with 180 distinct
    objects unfolded to 700,000 nodes, and its keys took minutes). Each object's text is built
    once per call, and a member whose text is long stands in its parent as a 128-bit digest of
    that text, so that equal values still give equal texts.
    """
    return _canonical_text(value, {})


# Members with longer texts are written as digests (see canonical).
_DIGEST_ABOVE = 80


def _canonical_text(value: Any, memo: dict[int, str]) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and value.is_integer():
            return "n" + str(int(value))
        return "n" + (repr(value) if isinstance(value, float) else str(value))
    if not isinstance(value, (list, dict)):
        return "?" + json.dumps(repr(value))
    text = memo.get(id(value))
    if text is None:
        if isinstance(value, list):
            text = "[" + ",".join(compact_text(_canonical_text(v, memo)) for v in value) + "]"
        else:
            text = (
                "{"
                + ",".join(
                    f"{json.dumps(str(k))}:{compact_text(_canonical_text(value[k], memo))}"
                    for k in sorted(value, key=str)
                )
                + "}"
            )
        memo[id(value)] = text
    return text


def _conjunction(first: Any, second: Any) -> list[Any]:
    """The constraints of two internal list keywords together, each once.

    Every such list is a conjunction, so a repeated entry adds nothing; kept twice, an entry
    shared by both sides doubled with each level of merging (a fuzzed schema whose ``format``
    reached itself through ``$ref`` and ``allOf`` had 4 million copies of two formats).
    Entries are told apart by their text where they are hashable (by ``repr``: ``True`` and
    ``1`` are different JSON values, though equal in Python), else by identity.
    """
    out: list[Any] = []
    seen: set[Any] = set()
    for entry in itertools.chain(first, second):
        try:
            hash(entry)
            key: Any = ("value", repr(entry))
        except TypeError:
            key = ("identity", id(entry))
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def compact_text(text: str) -> str:
    """``text`` as it stands inside a larger canonical text: itself when short, else a
    128-bit digest of it (equal texts, equal digests), so that a text shared by reference
    many times over is not copied into its parents (see canonical)."""
    if len(text) <= _DIGEST_ABOVE:
        return text
    return "#" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def json_type_of(value: Any) -> str:
    """The JSON Schema type name of a Python JSON value ("integer" for integral numbers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def type_set(schema: dict[str, Any]) -> set[str] | None:
    """The allowed types (with "integer" implied by "number"), or None when unrestricted."""
    declared = schema.get("type")
    if declared is None:
        return None
    names = [declared] if isinstance(declared, str) else list(declared)
    result = set(names)
    if "number" in result:
        result.add("integer")
    return result


def _merge_types(a: dict[str, Any], b: dict[str, Any]) -> list[str] | None:
    ta, tb = type_set(a), type_set(b)
    if ta is None and tb is None:
        return None
    if ta is None or tb is None:
        both = ta if ta is not None else tb
    else:
        both = ta & tb
    assert both is not None
    if "number" in both:
        both.discard("integer")
    return sorted(both)


def _values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    return None


def merge_beside(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """merge for two schemas that apply side by side (the parts of one schema: its own
    keywords, its ``$ref`` targets, its ``allOf`` members), where neither one's closed
    unevaluated* keywords may see what the other evaluates (see close_unevaluated)."""
    for sealed, other in ((a, b), (b, a)):
        if "__sealed" in sealed:
            keyword = _evaluates_beyond_sealed(sealed, other)
            if keyword is not None:
                raise Unmergeable(
                    keyword,
                    f"{keyword} of a schema whose branches evaluate, beside a schema that"
                    " evaluates more",
                )
    return merge(a, b)


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The conjunction of two flat schemas, as one flat schema (raises Unmergeable)."""
    if a.get("__false") or b.get("__false"):
        return {"__false": True}
    out: dict[str, Any] = {}
    types = _merge_types(a, b)
    if types is not None:
        out["type"] = types
    va, vb = _values(a), _values(b)
    if va is not None or vb is not None:
        if va is None or vb is None:
            out["enum"] = va if va is not None else vb
        else:
            keys_b = {canonical(v) for v in vb}
            out["enum"] = [v for v in va if canonical(v) in keys_b]
    for keyword in (
        "minimum",
        "exclusiveMinimum",
        "minLength",
        "minItems",
        "minProperties",
        "minContains",
    ):
        values = [s[keyword] for s in (a, b) if keyword in s]
        if values:
            out[keyword] = max(values)
    for keyword in (
        "maximum",
        "exclusiveMaximum",
        "maxLength",
        "maxItems",
        "maxProperties",
        "maxContains",
    ):
        values = [s[keyword] for s in (a, b) if keyword in s]
        if values:
            out[keyword] = min(values)
    if "multipleOf" in a and "multipleOf" in b:
        out["multipleOf"] = _lcm(a["multipleOf"], b["multipleOf"])
    elif "multipleOf" in a or "multipleOf" in b:
        out["multipleOf"] = a.get("multipleOf", b.get("multipleOf"))
    if a.get("__non_integer") or b.get("__non_integer"):
        out["__non_integer"] = True
    if a.get("uniqueItems") or b.get("uniqueItems"):
        out["uniqueItems"] = True
    for keyword in (
        "__patterns",
        "__formats",
        "__not",
        "__groups",
        "__conds",
        "__exclude",
        "__shadow",
        "__not_multiples",
        "__witnesses",
        "__anti_patterns",
        "__anti_formats",
        "__sealed",
    ):
        combined = _conjunction(a.get(keyword, ()), b.get(keyword, ()))
        if combined:
            out[keyword] = combined
    required = list(dict.fromkeys(list(a.get("required", ())) + list(b.get("required", ()))))
    if required:
        out["required"] = required
    _merge_objects(a, b, out)
    _merge_arrays(a, b, out)
    _merge_dependencies(a, b, out)
    for keyword in ("unevaluatedProperties", "unevaluatedItems"):
        if keyword in a or keyword in b:
            out[keyword] = _all_of(a.get(keyword, True), b.get(keyword, True))
    if "__pattern_branches" in out and (
        "unevaluatedProperties" in out or "__shadow" in a or "__shadow" in b
    ):
        # Which keys a side evaluates is what unevaluatedProperties reads; per-side pattern
        # pairs do not record it (measured: the suite's "dynamic evaluation inside nested
        # refs" was accepted with two oneOf branches matching).
        raise Unmergeable(
            "patternProperties",
            "allOf combines patternProperties with another branch's additionalProperties "
            "under unevaluatedProperties",
        )
    if "propertyNames" in a and "propertyNames" in b:
        out["propertyNames"] = {"allOf": [a["propertyNames"], b["propertyNames"]]}
    elif "propertyNames" in a or "propertyNames" in b:
        out["propertyNames"] = a.get("propertyNames", b.get("propertyNames"))
    if "contains" in a and "contains" in b and canonical(a["contains"]) != canonical(b["contains"]):
        # Two different counts on one array: a's stays in "contains"/"minContains"/
        # "maxContains", b's joins the extra constraints (each item is counted for each).
        for keyword in ("minContains", "maxContains"):
            out.pop(keyword, None)
            if keyword in a:
                out[keyword] = a[keyword]
        out["contains"] = a["contains"]
        out["__more_contains"] = [
            *a.get("__more_contains", ()),
            contains_constraint(b),
            *b.get("__more_contains", ()),
        ]
        return out
    for keyword in ("contains",):
        if keyword in a or keyword in b:
            out[keyword] = a.get(keyword, b.get(keyword))
    if "contains" in a and "contains" in b:
        # One count of equal schemas: both bounds hold, and an absent minContains is 1 (the
        # larger of one side's 0 and the other's default is 1, not 0).
        out["minContains"] = max(int(s.get("minContains", 1)) for s in (a, b))
    more = _conjunction(a.get("__more_contains", ()), b.get("__more_contains", ()))
    if more:
        out["__more_contains"] = more
    return out


def _evaluates_conditionally(flat: dict[str, Any]) -> bool:
    """Whether ``flat`` evaluates properties or items only where some branch or condition
    matches (an unevaluated* keyword beside such keywords cannot be rewritten)."""
    return any(
        key in flat
        for key in ("__groups", "__conds", "__shadow", "__pattern_branches", "dependentSchemas")
    )


def close_unevaluated(flat: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``flat`` (a schema merged with its in-place applicators) with the unevaluated* keywords
    that the schema ``own`` wrote itself closed over what it evaluates.

    Merged beside other schemas (``allOf: [{properties: {a: {}}}, S]``), S's own
    ``unevaluatedProperties: false`` must still reject ``a``: it sees only S's evaluations.
    Where S evaluates unconditionally, the keyword becomes ``additionalProperties`` /
    ``items`` (exact: after the merge nothing else of S evaluates). Where S evaluates under
    a branch or a condition, the keyword stays, and ``__sealed`` names it, so that a merge
    with schemas that evaluate more is refused (see merge_beside) rather than let through.
    """
    if flat.get("__false"):
        return flat
    out = dict(flat)
    conditional = _evaluates_conditionally(out)
    sealed = set(out.get("__sealed", ()))
    if "unevaluatedProperties" in own and "unevaluatedProperties" in out:
        if not conditional:
            value = out.pop("unevaluatedProperties")
            out.setdefault("additionalProperties", value)
        else:
            sealed.add("properties")
    if "unevaluatedItems" in own and "unevaluatedItems" in out:
        if not conditional and "contains" not in out and "__more_contains" not in out:
            value = out.pop("unevaluatedItems")
            out.setdefault("items", value)
        else:
            sealed.add("items")
    if sealed:
        out["__sealed"] = sorted(sealed)
    return out


def _evaluates_beyond_sealed(sealed: dict[str, Any], other: dict[str, Any]) -> str | None:
    """The keyword by which ``other`` would evaluate properties or items that the sealed
    unevaluated* keywords of ``sealed`` cannot see, or None."""
    kinds = sealed.get("__sealed", ())
    conditional = _evaluates_conditionally(other)
    if "properties" in kinds:
        names = set(sealed.get("properties") or {})
        patterns = set(sealed.get("patternProperties") or {})
        if (
            conditional
            or "additionalProperties" in other
            or not set(other.get("properties") or {}) <= names
            or not set(other.get("patternProperties") or {}) <= patterns
        ):
            return "unevaluatedProperties"
    if "items" in kinds:
        longer_prefix = len(other.get("prefixItems") or ()) > len(sealed.get("prefixItems") or ())
        if (
            conditional
            or longer_prefix
            or ("items" in other and "items" not in sealed)
            or "contains" in other
            and canonical(other["contains"]) != canonical(sealed.get("contains"))
            or "__more_contains" in other
        ):
            return "unevaluatedItems"
    return None


def contains_constraint(schema: dict[str, Any]) -> tuple[Any, int, int | None]:
    """``(contains schema, minContains, maxContains)`` of a schema that has "contains"."""
    return (schema["contains"], int(schema.get("minContains", 1)), schema.get("maxContains"))


def contains_constraints(flat: dict[str, Any]) -> list[tuple[Any, int, int | None]]:
    """Every count constraint on an array's items: "contains" and the merged extra ones."""
    if "contains" not in flat:
        return []
    return [contains_constraint(flat), *flat.get("__more_contains", ())]


def _all_of(*schemas: Any) -> Any:
    present = [s for s in schemas if s is not True and s != {}]
    if not present:
        return True
    if any(s is False for s in present):
        return False
    if len(present) == 1:
        return present[0]
    return {"allOf": present}


def _pattern_matches(pattern: str, key: str) -> bool:
    """Whether a JSON Schema pattern matches a fixed key (exact, via the regex front end)."""
    from gramkiln.frontend.json_schema.keys import pattern_matches

    return pattern_matches(pattern, key)


def _constraint_for_key(side: dict[str, Any], key: str) -> list[Any]:
    """What ``side`` requires of property ``key`` when ``key`` is not among its properties."""
    patterns = side.get("patternProperties") or {}
    matched = {pattern for pattern in patterns if _pattern_matches(pattern, key)}
    own = [schema for pattern, schema in patterns.items() if pattern in matched]
    return own + [s for s in undeclared_key_schemas(side, matched) if s is not True]


def _value_schemas_of_key(side: dict[str, Any], key: str) -> list[Any]:
    """Every schema ``side`` applies to the value of property ``key`` when it is present."""
    properties = side.get("properties") or {}
    if key not in properties:
        return _constraint_for_key(side, key)
    patterns = side.get("patternProperties") or {}
    return [properties[key]] + [
        schema for pattern, schema in patterns.items() if _pattern_matches(pattern, key)
    ]


def pattern_branches(flat: dict[str, Any]) -> list[list[Any]]:
    """The ``[patternProperties, additionalProperties]`` pairs that all apply to a flat
    schema's undeclared keys: one pair, unless allOf merged sides whose additional schemas
    see different patterns."""
    if "__pattern_branches" in flat:
        return [list(branch) for branch in flat["__pattern_branches"]]
    return [[dict(flat.get("patternProperties") or {}), flat.get("additionalProperties", True)]]


def undeclared_key_schemas(flat: dict[str, Any], matched: set[str]) -> list[Any]:
    """What a key outside the declared properties must satisfy beyond the schemas of the
    patterns it matches (``matched``): the additional schema of every pattern branch none of
    whose patterns it matches."""
    return [
        additional for patterns, additional in pattern_branches(flat) if not matched & set(patterns)
    ]


def _merge_objects(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> None:
    props_a = a.get("properties") or {}
    props_b = b.get("properties") or {}
    if props_a or props_b:
        merged: dict[str, Any] = {}
        for key in list(props_a) + [k for k in props_b if k not in props_a]:
            parts = []
            for side, props in ((a, props_a), (b, props_b)):
                parts.extend([props[key]] if key in props else _constraint_for_key(side, key))
            merged[key] = _all_of(*parts)
        out["properties"] = merged
    patterns_a = a.get("patternProperties") or {}
    patterns_b = b.get("patternProperties") or {}
    if patterns_a or patterns_b:
        if (
            "__pattern_branches" in a
            or "__pattern_branches" in b
            or ("additionalProperties" in a and patterns_b and set(patterns_b) - set(patterns_a))
            or ("additionalProperties" in b and patterns_a and set(patterns_a) - set(patterns_b))
        ):
            # Each side's additionalProperties covers the keys *its own* patterns miss, so no
            # single (patterns, additional) pair says it: keep every side's pair. A key
            # outside all declared properties must then satisfy, for each pair, its matching
            # patterns' schemas or, matching none, its additional schema (see
            # pattern_branches; the object builder enumerates the pattern combinations).
            out["__pattern_branches"] = pattern_branches(a) + pattern_branches(b)
        merged_patterns = dict(patterns_a)
        for pattern, schema in patterns_b.items():
            merged_patterns[pattern] = (
                _all_of(merged_patterns[pattern], schema) if pattern in merged_patterns else schema
            )
        out["patternProperties"] = merged_patterns
    if "additionalProperties" in a or "additionalProperties" in b:
        out["additionalProperties"] = _all_of(
            a.get("additionalProperties", True), b.get("additionalProperties", True)
        )


def _merge_arrays(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> None:
    prefix_a = list(a.get("prefixItems") or [])
    prefix_b = list(b.get("prefixItems") or [])
    if prefix_a or prefix_b:
        length = max(len(prefix_a), len(prefix_b))
        merged = []
        for index in range(length):
            part_a = prefix_a[index] if index < len(prefix_a) else a.get("items", True)
            part_b = prefix_b[index] if index < len(prefix_b) else b.get("items", True)
            merged.append(_all_of(part_a, part_b))
        out["prefixItems"] = merged
    if "items" in a or "items" in b:
        out["items"] = _all_of(a.get("items", True), b.get("items", True))


def _merge_dependencies(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> None:
    required: dict[str, list[str]] = {}
    for side in (a, b):
        for key, names in (side.get("dependentRequired") or {}).items():
            required[key] = list(dict.fromkeys(required.get(key, []) + list(names)))
    if required:
        out["dependentRequired"] = required
    schemas: dict[str, Any] = {}
    for side in (a, b):
        for key, schema in (side.get("dependentSchemas") or {}).items():
            schemas[key] = _all_of(schemas[key], schema) if key in schemas else schema
    if schemas:
        out["dependentSchemas"] = schemas


def _lcm(x: Any, y: Any) -> Any:
    dx, dy = (
        Decimal(repr(x)) if isinstance(x, float) else Decimal(x),
        Decimal(repr(y)) if isinstance(y, float) else Decimal(y),
    )
    scale = max(-dx.as_tuple().exponent, -dy.as_tuple().exponent, 0)  # type: ignore[operator]
    ix, iy = int(dx.scaleb(scale)), int(dy.scaleb(scale))
    value = Decimal(math.lcm(ix, iy)).scaleb(-scale)
    return int(value) if value == value.to_integral_value() else float(value)


# ---------------------------------------------------------------------------------------------
# negation


class NotNegatable(Exception):
    """A ``not`` (or ``if`` without ``else`` coverage) whose complement is not expressible."""


ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")
MAX_NEGATION_BRANCHES = 64


def negate(
    schema: Any,
    prepare: Callable[[Any], Any] | None = None,
    active: set[int] | None = None,
) -> list[Any]:
    """Schemas whose union is exactly the complement of ``schema`` (raises NotNegatable).

    Supported: booleans, ``type``, ``const``/``enum`` (as ``__not`` value exclusions),
    ``required``, ``properties`` with ``required`` (presence tests and negatable
    sub-schemas), ``dependentRequired`` and ``dependentSchemas`` (a trigger present and the
    rule broken), numeric and length bounds, and conjunctions of these.
    ``prepare`` turns a raw nested sub-schema into a negatable flat one (resolving ``$ref``).
    ``active``: the raw sub-schemas being negated further up (by identity), see ``inner``.
    """
    if active is None:
        active = set()

    def inner(sub: Any) -> list[Any]:
        if not isinstance(sub, dict):
            return negate(sub, prepare, active)
        if id(sub) in active:
            # A recursive schema (a tree whose nodes hold lists of nodes) would be negated
            # forever: below its first recurrence the negation stays a `not` of the raw
            # sub-schema, which the compiler builds as a rule of its own, shared by every
            # recurrence. The same set of values, built lazily.
            return [{"not": sub}]
        active.add(id(sub))
        try:
            return negate(prepare(sub) if prepare is not None else sub, prepare, active)
        finally:
            active.discard(id(sub))

    if schema is True or schema == {}:
        return [False]
    if schema is False:
        return [True]
    if not isinstance(schema, dict):
        raise NotNegatable("not a schema object")
    keys = {k for k in schema if k not in ANNOTATION_KEYS}
    if not keys:
        return [False]
    pieces: list[list[Any]] = []
    types = type_set(schema)
    if types is not None:
        # "number" is excluded only when integers are excluded too (a non-integral number
        # is covered by the "__non_integer" alternative below).
        excluded = [
            t for t in ALL_TYPES if t not in types and not (t == "number" and "integer" in types)
        ]
        alternatives: list[Any] = []
        if excluded:
            alternatives.append({"type": excluded})
        if "integer" in types and "number" not in types:
            alternatives.append({"type": ["number"], "__non_integer": True})
        pieces.append(alternatives)
    values = _values(schema)
    if values is not None:
        pieces.append([{"__exclude": values}])
    handled = {"type", "const", "enum"}
    bound_keys = {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
    }
    flipped = {
        "minimum": "exclusiveMaximum",
        "maximum": "exclusiveMinimum",
        "exclusiveMinimum": "maximum",
        "exclusiveMaximum": "minimum",
    }
    type_for = {
        "minLength": "string",
        "maxLength": "string",
        "minItems": "array",
        "maxItems": "array",
        "minProperties": "object",
        "maxProperties": "object",
    }
    for key in sorted(keys & bound_keys):
        value = schema[key]
        if key in flipped:
            # Values of other types satisfy a numeric bound: only numbers violate it.
            pieces.append([{"type": ["number"], flipped[key]: value}])
        else:
            if key.startswith("min"):
                if value == 0:
                    # Always satisfied: nothing violates it.
                    pieces.append([False])
                    handled.add(key)
                    continue
                tight = {"type": [type_for[key]], "max" + key[3:]: value - 1}
            else:
                tight = {"type": [type_for[key]], "min" + key[3:]: value + 1}
            pieces.append([tight])
        handled.add(key)
    required = list(schema.get("required", ()))
    properties = schema.get("properties") or {}
    if required or properties:
        alternatives = []
        for name in required:
            alternatives.append({"type": ["object"], "properties": {name: False}})
        for name, sub in properties.items():
            for negated in inner(sub):
                if negated is False:
                    continue
                # The failed sub-schema evaluates nothing: "__shadow" keeps the name visible to
                # unevaluatedProperties.
                alternatives.append(
                    {
                        "type": ["object"],
                        "required": [name],
                        "properties": {name: negated},
                        "__shadow": [name],
                    }
                )
        # Non-objects satisfy required/properties: only objects can violate them.
        pieces.append(alternatives)
        handled |= {"required", "properties"}
    dependent = schema.get("dependentRequired")
    if isinstance(dependent, dict):
        # Violated by an object that has a trigger and lacks one of the names it requires.
        pieces.append(
            [
                {"type": ["object"], "required": [trigger], "properties": {name: False}}
                for trigger, names in dependent.items()
                for name in dict.fromkeys(names)
                if name != trigger
            ]
        )
        handled.add("dependentRequired")
    dependent_schemas = schema.get("dependentSchemas")
    if isinstance(dependent_schemas, dict):
        # Violated by an object that has a trigger and fails the trigger's schema. The failed
        # schema evaluates nothing: "__shadow" keeps its property names visible to
        # unevaluatedProperties, as for a negated property.
        alternatives = []
        for trigger, sub in dependent_schemas.items():
            for negated in inner(sub):
                if negated is False:
                    continue
                present = {"type": ["object"], "required": [trigger]}
                try:
                    merged = merge(present, negated if negated is not True else {})
                except Unmergeable as exc:
                    raise NotNegatable(exc.reason) from None
                if merged.get("__false"):
                    continue
                shadow = list(merged.get("properties") or {})
                alternatives.append({**merged, "__shadow": shadow} if shadow else merged)
        pieces.append(alternatives or [False])
        handled.add("dependentSchemas")
    member_keys = {"propertyNames", "patternProperties", "additionalProperties"} & keys
    if member_keys:
        # Some member breaks a member rule: a "witness" the object builder must find.
        witnesses: list[dict[str, Any]] = []
        if "propertyNames" in schema and schema["propertyNames"] is not True:
            witnesses.append({"key": {"names_schema_neg": schema["propertyNames"]}, "value": True})
        patterns = schema.get("patternProperties") or {}
        for pattern, sub in patterns.items():
            for negated in inner(sub):
                if negated is not False:
                    witnesses.append({"key": {"in_patterns": [pattern]}, "value": negated})
        if "additionalProperties" in schema:
            key = {"out_patterns": list(patterns), "out_names": list(properties)}
            for negated in inner(schema["additionalProperties"]):
                if negated is not False:
                    witnesses.append({"key": key, "value": negated})
        pieces.append([{"type": ["object"], "__witnesses": [w]} for w in witnesses])
        handled |= member_keys
    if "__patterns" in schema or "__formats" in schema:
        # A string violating one pattern or format (other types satisfy them).
        pieces.append(
            [{"type": ["string"], "__anti_patterns": [p]} for p, _ in schema.get("__patterns", ())]
            + [{"type": ["string"], "__anti_formats": [f]} for f, _ in schema.get("__formats", ())]
        )
        handled |= {"__patterns", "__formats"}
    if "__anti_patterns" in schema or "__anti_formats" in schema:
        # A string not matching a pattern (a format) is negated by a string that matches it.
        pieces.append(
            [
                {"type": ["string"], "__patterns": [(p, "#")]}
                for p in schema.get("__anti_patterns", ())
            ]
            + [
                {"type": ["string"], "__formats": [(f, "#")]}
                for f in schema.get("__anti_formats", ())
            ]
        )
        handled |= {"__anti_patterns", "__anti_formats"}
    if "__exclude" in schema:
        pieces.append([{"enum": list(schema["__exclude"])}])
    if schema.get("__non_integer"):
        pieces.append([{"type": [t for t in ALL_TYPES if t != "number"]}, {"type": ["integer"]}])
    if "multipleOf" in schema:
        pieces.append([{"type": ["number"], "__not_multiples": [schema["multipleOf"]]}])
        handled.add("multipleOf")
    if "__not_multiples" in schema:
        # A number that is a multiple of one of them (other values have no multiples).
        pieces.append([{"type": ["number"], "multipleOf": m} for m in schema["__not_multiples"]])
        handled.add("__not_multiples")
    prefix = schema.get("prefixItems")
    if prefix and schema.get("items", True) in (True, False):
        # Some item of the prefix violates its schema (the array reaching it), or, under
        # "items": false, the array goes on past the prefix.
        alternatives = [
            {"type": ["array"], "minItems": index + 1, "prefixItems": [True] * index + [alt]}
            for index, sub in enumerate(prefix)
            for alt in inner(sub)
            if alt is not False
        ]
        if schema.get("items", True) is False:
            alternatives.append({"type": ["array"], "minItems": len(prefix) + 1})
        pieces.append(alternatives or [False])
        handled |= {"prefixItems", "items"}
    if "items" in schema and not schema.get("prefixItems"):
        # Some item violates the item schema: contains(not items).
        pieces.append(
            [
                {"type": ["array"], "contains": alt}
                for alt in inner(schema["items"])
                if alt is not False
            ]
        )
        handled.add("items")
    for matching, low, high in contains_constraints(schema):
        # The number of matching items falls outside [minContains, maxContains]. Arrays only
        # (other values satisfy "contains"); minContains 0 is always met below.
        alternatives = []
        if low == 1:
            alternatives.append({"type": ["array"], "items": {"not": matching}})
        elif low > 1:
            alternatives.append(
                {"type": ["array"], "contains": matching, "minContains": 0, "maxContains": low - 1}
            )
        if high is not None:
            alternatives.append({"type": ["array"], "contains": matching, "minContains": high + 1})
        pieces.append(alternatives or [False])
    # Without "contains" the two bounds assert nothing.
    handled |= {"contains", "minContains", "maxContains", "__more_contains"}
    for group in schema.get("__negated_anyof", ()):
        # not(A or B) = not A and not B: every combination of the alternatives' negations.
        combined: list[Any] = [{}]
        for alternative in group:
            negations = [n for n in negate(alternative, prepare, active) if n is not False]
            try:
                combined = [
                    merged
                    for partial in combined
                    for n in negations
                    if not (merged := merge(partial, n if n is not True else {})).get("__false")
                ]
            except Unmergeable as exc:
                raise NotNegatable(exc.reason) from None
            if len(combined) > MAX_NEGATION_BRANCHES:
                raise NotNegatable(
                    f"negating anyOf needs more than {MAX_NEGATION_BRANCHES} branches"
                )
        pieces.append(combined or [False])
    for group in schema.get("__negated_oneof", ()):
        # not(exactly one) = none matches, or some two match.
        none: list[Any] = [{}]
        try:
            for alternative in group:
                negations = [n for n in negate(alternative, prepare, active) if n is not False]
                none = [
                    m
                    for p in none
                    for n in negations
                    if not (m := merge(p, n if n is not True else {})).get("__false")
                ]
                if len(none) > MAX_NEGATION_BRANCHES:
                    raise NotNegatable(
                        f"negating oneOf needs more than {MAX_NEGATION_BRANCHES} branches"
                    )
            pairs = [
                m
                for i in range(len(group))
                for j in range(i + 1, len(group))
                if group[i] is not False
                and group[j] is not False
                and not (m := merge(_flat(group[i]), _flat(group[j]))).get("__false")
            ]
        except Unmergeable as exc:
            raise NotNegatable(exc.reason) from None
        pieces.append(none + pairs or [False])
    for flat_inner in schema.get("__negated_nots", ()):
        # not(not B) = B, except that B's properties are not "evaluated" (annotations do
        # not pass through "not"), which "__shadow" tells unevaluatedProperties.
        shadow = list(flat_inner.get("properties") or {}) if isinstance(flat_inner, dict) else []
        pieces.append([{**flat_inner, "__shadow": shadow} if shadow else flat_inner])
    handled |= {
        "__negated_nots",
        "__negated_anyof",
        "__negated_oneof",
        "__exclude",
        "__non_integer",
        # A negation form keeps its positive `not`s and groups for merges (see
        # Compiler.negation_form); their negations are the three "__negated_" keys above.
        "__not",
        "__groups",
    }
    rest = keys - handled
    if rest:
        raise NotNegatable("cannot negate keywords: " + ", ".join(sorted(rest)))
    # not(A and B and ...) = not A or not B or ...
    union: list[Any] = []
    for alternatives in pieces:
        for alternative in alternatives:
            if alternative is False:
                continue
            if canonical(alternative) not in {canonical(u) for u in union}:
                union.append(alternative)
    return union or [False]


ANNOTATION_KEYS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "$id",
        "$schema",
        "$anchor",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$defs",
        "definitions",
    }
)


def _flat(schema: Any) -> dict[str, Any]:
    return {} if schema is True else schema


# ---------------------------------------------------------------------------------------------
# oneOf disjointness


def provably_disjoint(a: Any, b: Any) -> bool:
    """True when no JSON value can satisfy both flat schemas (a sound, incomplete test)."""
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    ta, tb = _effective_types(a), _effective_types(b)
    if ta is not None and tb is not None and not (ta & tb):
        return True
    va, vb = _values(a), _values(b)
    if (
        va is not None
        and vb is not None
        and not ({canonical(v) for v in va} & {canonical(v) for v in vb})
    ):
        return True
    for values, other in ((va, b), (vb, a)):
        if values is not None and not any(_value_may_match(v, other) for v in values):
            return True
    # Objects told apart by a required property whose values cannot coincide.
    if _only_objects(a) or _only_objects(b) or True:
        props_a, props_b = a.get("properties") or {}, b.get("properties") or {}
        required_a, required_b = set(a.get("required", ())), set(b.get("required", ()))
        objects_only = _only_objects(a) and _only_objects(b)
        for name in set(props_a) & set(props_b):
            if name in required_a and name in required_b and objects_only:
                sa, sb = props_a[name], props_b[name]
                if isinstance(sa, dict) and isinstance(sb, dict) and provably_disjoint(sa, sb):
                    return True
        if objects_only:
            # A property required by one side is forbidden by the other.
            for required, other in ((required_a, b), (required_b, a)):
                for name in required:
                    if (other.get("properties") or {}).get(name) is False:
                        return True
                    if (
                        name not in (other.get("properties") or {})
                        and other.get("additionalProperties") is False
                        and not any(
                            _pattern_matches(pattern, name)
                            for pattern in other.get("patternProperties") or {}
                        )
                    ):
                        return True
            # A property required by one side whose value the two sides constrain apart,
            # through properties, patternProperties or additionalProperties: e.g. xAPI's
            # identifier, where each branch requires its own key and makes the others null.
            for required, this, other in ((required_a, a, b), (required_b, b, a)):
                for name in required:
                    mine = _value_schemas_of_key(this, name)
                    theirs = _value_schemas_of_key(other, name)
                    if any(
                        isinstance(x, dict) and isinstance(y, dict) and provably_disjoint(x, y)
                        for x in mine
                        for y in theirs
                    ):
                        return True
    # Numeric ranges that do not overlap.
    if _only_numbers(a) and _only_numbers(b) and _ranges_disjoint(a, b):
        return True
    return False


def overlapping_pairs(schemas: list[Any]) -> set[tuple[int, int]]:
    """The ordered pairs (i, j), i != j, of flat schemas not provably disjoint.

    Asking ``provably_disjoint`` of every pair made a oneOf of 1,000 branches take 16 s. When
    every branch admits a fixed set of values, or every branch is an object with a required
    property of fixed values under the same name (a discriminated union), two branches whose
    sets share no value are disjoint by the same rules ``provably_disjoint`` applies, so only
    pairs that share a value are asked.
    """
    candidates = _pairs_sharing_a_value(schemas)
    if candidates is None:
        candidates = {(i, j) for i in range(len(schemas)) for j in range(i + 1, len(schemas))}
    out: set[tuple[int, int]] = set()
    for i, j in candidates:
        if not provably_disjoint(schemas[i], schemas[j]):
            out.add((i, j))
        if not provably_disjoint(schemas[j], schemas[i]):
            out.add((j, i))
    return out


def _pairs_sharing_a_value(schemas: list[Any]) -> set[tuple[int, int]] | None:
    """Pairs (i < j) whose fixed value sets intersect (see overlapping_pairs), or None when
    the schemas are not all fixed-valued nor all told apart by one discriminator."""
    if len(schemas) < 2 or not all(isinstance(s, dict) for s in schemas):
        return None
    value_sets = [_values(s) for s in schemas]
    if any(values is None for values in value_sets):
        discriminated = _discriminator_value_sets(schemas)
        if discriminated is None:
            return None
        value_sets = discriminated
    by_value: dict[str, list[int]] = {}
    for index, values in enumerate(value_sets):
        for key in {canonical(v) for v in values or ()}:
            by_value.setdefault(key, []).append(index)
    pairs: set[tuple[int, int]] = set()
    for members in by_value.values():
        pairs.update(itertools.combinations(members, 2))
    return pairs


def _discriminator_value_sets(schemas: list[dict[str, Any]]) -> list[list[Any] | None] | None:
    """Per schema, the values of a property every schema (objects only) requires with fixed
    values, or None when there is no such property."""
    if not all(_only_objects(s) for s in schemas):
        return None
    names: set[str] | None = None
    for schema in schemas:
        properties = schema.get("properties") or {}
        fixed = {
            name
            for name in schema.get("required", ())
            if isinstance(properties.get(name), dict) and _values(properties[name]) is not None
        }
        names = fixed if names is None else names & fixed
        if not names:
            return None
    assert names
    name = min(names)
    return [_values(schema["properties"][name]) for schema in schemas]


def _effective_types(schema: dict[str, Any]) -> set[str] | None:
    types = type_set(schema)
    values = _values(schema)
    if values is not None:
        value_types = {json_type_of(v) for v in values}
        if "integer" in value_types:
            value_types.add("number")
        return (
            value_types
            if types is None
            else value_types & (types | ({"number"} if "integer" in types else set()))
        )
    if types is not None and "integer" in types:
        types = set(types) | {"number"} if "number" in types else set(types)
    return types


def _only_objects(schema: dict[str, Any]) -> bool:
    types = type_set(schema)
    return types is not None and types <= {"object"}


def _only_numbers(schema: dict[str, Any]) -> bool:
    types = type_set(schema)
    return types is not None and types <= {"number", "integer"}


def _ranges_disjoint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def bounds(s: dict[str, Any]) -> tuple[tuple[float, bool], tuple[float, bool]]:
        low = (-math.inf, False)
        high = (math.inf, False)
        if "minimum" in s:
            low = (s["minimum"], False)
        if "exclusiveMinimum" in s and s["exclusiveMinimum"] >= low[0]:
            low = (s["exclusiveMinimum"], True)
        if "maximum" in s:
            high = (s["maximum"], False)
        if "exclusiveMaximum" in s and s["exclusiveMaximum"] <= high[0]:
            high = (s["exclusiveMaximum"], True)
        return low, high

    (la, xa), (ha, ya) = bounds(a)
    (lb, xb), (hb, yb) = bounds(b)
    if ha < lb or (ha == lb and (ya or xb)):
        return True
    if hb < la or (hb == la and (yb or xa)):
        return True
    return False


def _value_may_match(value: Any, schema: dict[str, Any]) -> bool:
    """A conservative test: False only when ``value`` certainly fails ``schema``."""
    types = type_set(schema)
    kind = json_type_of(value)
    if types is not None:
        if kind == "integer" and not ({"integer", "number"} & types):
            return False
        if kind == "number" and "number" not in types:
            return False
        if kind not in ("integer", "number") and kind not in types:
            return False
    values = _values(schema)
    if values is not None and canonical(value) not in {canonical(v) for v in values}:
        return False
    if kind == "array" and not _array_may_match(value, schema):
        return False
    if kind == "object" and not _object_may_match(value, schema):
        return False
    if kind == "string" and not _string_may_match(value, schema):
        return False
    return True


def _within_count(count: int, schema: dict[str, Any], low: str, high: str) -> bool:
    """False only when a well-formed count bound certainly excludes ``count``."""
    lower, upper = schema.get(low), schema.get(high)
    if isinstance(lower, int) and not isinstance(lower, bool) and count < lower:
        return False
    return not (isinstance(upper, int) and not isinstance(upper, bool) and count > upper)


def _sub_may_match(value: Any, sub: Any) -> bool:
    if sub is False:
        return False
    return not isinstance(sub, dict) or _value_may_match(value, sub)


def _array_may_match(value: list[Any], schema: dict[str, Any]) -> bool:
    if not _within_count(len(value), schema, "minItems", "maxItems"):
        return False
    prefix = schema.get("prefixItems") or []
    if not isinstance(prefix, list):
        return True
    for index, item in enumerate(value):
        sub = prefix[index] if index < len(prefix) else schema.get("items", True)
        if not _sub_may_match(item, sub):
            return False
    return True


def _object_may_match(value: dict[str, Any], schema: dict[str, Any]) -> bool:
    required = schema.get("required")
    if isinstance(required, list) and any(
        isinstance(name, str) and name not in value for name in required
    ):
        return False
    properties = schema.get("properties") or {}
    patterns = schema.get("patternProperties") or {}
    for name, item in value.items():
        if name in properties:
            if not _sub_may_match(item, properties[name]):
                return False
        elif not patterns and "__pattern_branches" not in schema:
            if not _sub_may_match(item, schema.get("additionalProperties", True)):
                return False
    return True


def _string_may_match(value: str, schema: dict[str, Any]) -> bool:
    if not _within_count(len(value), schema, "minLength", "maxLength"):
        return False
    patterns = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
    patterns += [entry[0] for entry in schema.get("__patterns", ()) if isinstance(entry[0], str)]
    for pattern in patterns:
        try:
            if not _pattern_matches(pattern, value):
                return False
        except Exception:  # noqa: BLE001 - an unreadable pattern proves nothing here
            continue
    return True
