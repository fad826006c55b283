"""Differential test: the grammar accepts ``json.dumps(v)`` iff a validator accepts ``v``.

The independent validator is the ``jsonschema`` package (skipped when it is not installed).
Values come from a hypothesis strategy biased towards the schemas' own constants, so that
both valid and invalid values are common. ``property_order="any"`` makes object key order
irrelevant, as it is for a validator.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gramkiln.frontend.json_schema import JsonSchemaOptions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gramkiln import Grammar

jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema validator is the oracle here")

SCHEMAS: list[dict[str, Any]] = [
    {"type": "integer", "minimum": -3, "exclusiveMaximum": 12, "multipleOf": 3},
    {"type": "number", "minimum": -1.25, "maximum": 2.5},
    {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[ab]"},
    {"enum": ["a", 1, None, True, [1]]},
    {"not": {"enum": ["a", "b"]}, "type": "string", "maxLength": 2},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    {"type": "array", "contains": {"type": "string"}, "maxContains": 1},
    {"type": "array", "items": {"enum": ["a", "b", 1]}, "uniqueItems": True},
    {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": {"type": "boolean"},
    },
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}}, "maxProperties": 2},
    {"oneOf": [{"type": "integer"}, {"minimum": 1}]},
    {"anyOf": [{"type": "string"}, {"type": "array", "maxItems": 1}]},
    {"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}},
    {"type": "object", "dependentRequired": {"a": ["b"]}},
    {
        "$defs": {"t": {"type": ["array", "integer"], "items": {"$ref": "#/$defs/t"}}},
        "$ref": "#/$defs/t",
    },
    # A tree under an overlapping oneOf: negating a branch meets the recursion.
    {
        "$defs": {
            "n": {
                "type": "object",
                "oneOf": [
                    {"properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/n"}}}},
                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
                ],
            }
        },
        "$ref": "#/$defs/n",
    },
    # Nested negations of items and tuples, read in older drafts too.
    *(
        {
            "$schema": draft,
            "properties": {
                "a": {"not": {"properties": {"b": {"items": {"type": "integer"}}}}},
                "c": {"not": {"items": [{"type": "string"}], "additionalItems": False}},
            },
        }
        for draft in (
            "http://json-schema.org/draft-04/schema#",
            "http://json-schema.org/draft-07/schema#",
        )
    ),
    # Items a contains matched are evaluated.
    {"contains": {"type": "string"}, "unevaluatedItems": {"type": "integer"}},
    # Dynamic references: a strict extension of a tree ("b" holds the children), through
    # $dynamicRef and through $recursiveRef, and one list resource in two scopes.
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://schemas.example.test/strict",
        "$dynamicAnchor": "node",
        "$ref": "tree",
        "unevaluatedProperties": False,
        "$defs": {
            "tree": {
                "$id": "tree",
                "$dynamicAnchor": "node",
                "type": "object",
                "properties": {
                    "a": True,
                    "b": {"type": "array", "items": {"$dynamicRef": "#node"}},
                },
            }
        },
    },
    {
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "$id": "https://schemas.example.test/strict",
        "$recursiveAnchor": True,
        "$ref": "tree",
        "unevaluatedProperties": False,
        "$defs": {
            "tree": {
                "$id": "tree",
                "$recursiveAnchor": True,
                "type": "object",
                "properties": {"a": True, "b": {"type": "array", "items": {"$recursiveRef": "#"}}},
            }
        },
    },
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://schemas.example.test/lists",
        "properties": {"a": {"$ref": "ints"}, "b": {"$ref": "strs", "maxItems": 2}},
        "$defs": {
            "list": {
                "$id": "list",
                "type": "array",
                "items": {"$dynamicRef": "#e"},
                "$defs": {"e": {"$dynamicAnchor": "e"}},
            },
            "ints": {
                "$id": "ints",
                "$ref": "list",
                "$defs": {"e": {"$dynamicAnchor": "e", "type": "integer"}},
            },
            "strs": {
                "$id": "strs",
                "$ref": "list",
                "$defs": {"e": {"$dynamicAnchor": "e", "type": "string"}},
            },
        },
    },
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-20, max_value=20),
    st.sampled_from([-1.25, -1.5, 0.5, 2.5, 2.75, 1.0, 3.0]),
    st.sampled_from(["", "a", "b", "ab", "ba", "abc", "abcd", "x"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(["a", "b", "ab", "c"]), children, max_size=3),
    ),
    max_leaves=8,
)


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:48] for s in SCHEMAS])
def test_grammar_agrees_with_validator(schema: dict[str, Any]) -> None:
    grammar = Grammar.from_json_schema(schema, JsonSchemaOptions(property_order="any"))
    validator = jsonschema.validators.validator_for(schema)(schema)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(values)
    def agree(value: Any) -> None:
        expected = validator.is_valid(value)
        assert grammar.accepts(json.dumps(value)) == expected, value

    agree()
