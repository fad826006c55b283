"""Draft detection and rewriting of older drafts' keywords into 2020-12 vocabulary.

After :func:`normalize`, every later stage reads only 2020-12 spellings: ``prefixItems`` for
tuple ``items``, numeric ``exclusiveMinimum``, ``dependentRequired``/``dependentSchemas`` for
``dependencies``, and the internal list keywords described in :mod:`.combinators`.
"""

from __future__ import annotations

from typing import Any

DRAFT_URIS = {
    "draft-03": 3,
    "draft-04": 4,
    "draft-06": 6,
    "draft-07": 7,
    "2019-09": 2019,
    "2020-12": 2020,
}
DEFAULT_DRAFT = 2020

# Keywords that only annotate: ignored without comment.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "example",
        "$comment",
        "$schema",
        "$id",
        "id",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "$defs",
        "definitions",
        "readOnly",
        "writeOnly",
        "deprecated",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "$vocabulary",
        "nullable",
        "discriminator",
        "xml",
        "externalDocs",
    }
)

# Every assertion/applicator keyword of drafts 4 to 2020-12. A keyword from this set that the
# front end does not enforce is reported, never silently dropped.
CONSTRAINTS = frozenset(
    {
        "type",
        "enum",
        "const",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)

# In-place applicators: when one is present, "unevaluated*" keywords see more than the
# schema's own properties/items, so they cannot be rewritten into additional*.
IN_PLACE_APPLICATORS = (
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "dependentSchemas",
    "dependencies",
)


def detect_draft(schema: Any) -> int:
    """The draft named by the root's ``$schema`` (2020-12 when absent or unknown)."""
    if isinstance(schema, dict):
        uri = schema.get("$schema")
        if isinstance(uri, str):
            for marker, draft in DRAFT_URIS.items():
                if marker in uri:
                    return draft
    return DEFAULT_DRAFT


# Keywords introduced by a draft: in earlier drafts they are unknown words (annotations), and
# validators of those drafts ignore them, so the grammar must too.
INTRODUCED_IN = {
    "const": 6,
    "contains": 6,
    "propertyNames": 6,
    "if": 7,
    "then": 7,
    "else": 7,
    "dependentRequired": 2019,
    "dependentSchemas": 2019,
    "minContains": 2019,
    "maxContains": 2019,
    "unevaluatedProperties": 2019,
    "unevaluatedItems": 2019,
    "$anchor": 2019,
    "$recursiveRef": 2019,
    "prefixItems": 2020,
    "$dynamicRef": 2020,
}

# Keywords a later draft dropped: unknown words (annotations) from that draft on.
REMOVED_IN = {"$recursiveRef": 2020}


def normalize(schema: dict[str, Any], draft: int) -> dict[str, Any]:
    """A shallow copy of one schema object rewritten into 2020-12 keywords."""
    out = {
        k: v
        for k, v in schema.items()
        if INTRODUCED_IN.get(k, 0) <= draft < REMOVED_IN.get(k, 10_000)
    }
    if draft <= 4:
        for exclusive, inclusive in (
            ("exclusiveMinimum", "minimum"),
            ("exclusiveMaximum", "maximum"),
        ):
            flag = out.get(exclusive)
            if isinstance(flag, bool):
                del out[exclusive]
                if flag and inclusive in out:
                    out[exclusive] = out.pop(inclusive)
    if draft <= 7 and "$ref" in out:
        # Before 2019-09, keywords next to $ref are ignored.
        out = {"$ref": out["$ref"]}
    if "contains" not in out:
        # Counts of a "contains" in another schema object: no effect here, and merged beside
        # that "contains" they would count its items.
        out.pop("minContains", None)
        out.pop("maxContains", None)
    items = out.get("items")
    if isinstance(items, list):
        out["prefixItems"] = items
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
        else:
            del out["items"]
    else:
        out.pop("additionalItems", None)
    dependencies = out.pop("dependencies", None)
    if isinstance(dependencies, dict):
        required = dict(out.get("dependentRequired") or {})
        schemas = dict(out.get("dependentSchemas") or {})
        for name, value in dependencies.items():
            if isinstance(value, list):
                required[name] = value
            else:
                schemas[name] = value
        if required:
            out["dependentRequired"] = required
        if schemas:
            out["dependentSchemas"] = schemas
    if not any(key in out for key in IN_PLACE_APPLICATORS):
        _rewrite_unevaluated(out)
    return out


def _rewrite_unevaluated(out: dict[str, Any]) -> None:
    """Without in-place applicators, unevaluated* means exactly additional*/items.

    A value that is not a schema is left where it is, so that its error names the keyword
    the schema wrote."""
    for name in ("unevaluatedProperties", "unevaluatedItems"):
        if not isinstance(out.get(name, True), (bool, dict)):
            return
    if "unevaluatedProperties" in out:
        value = out.pop("unevaluatedProperties")
        out.setdefault("additionalProperties", value)
    if "unevaluatedItems" in out and "contains" not in out:
        value = out.pop("unevaluatedItems")
        out.setdefault("items", value)
