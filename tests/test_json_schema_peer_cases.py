"""JSON Schema front end: behaviour pinned down while comparing with a peer engine's tests.

Each test states a fact that the comparison with XGrammar's JSON Schema test cases showed
we got wrong (or only loosely right), with our own schemas and instances.
"""

from __future__ import annotations

import json

import pytest
from gramkiln.frontend.json_schema import JsonSchemaOptions

from gramkiln import Grammar


def _grammar(schema: object, **options: object) -> Grammar:
    return Grammar.from_json_schema(schema, JsonSchemaOptions(**options))


# -- strict mode applies to objects that declare their members ------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "object"},
        {"type": "object", "minProperties": 1},
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
    ],
)
def test_strict_leaves_objects_without_declared_members_open(schema: dict) -> None:
    grammar = _grammar(schema, strict=True)
    assert grammar.accepts(json.dumps({"colour": "red", "size": [1, 2]}))
    assert grammar.accepts(json.dumps({"nested": {"deep": {"x": None}}}))


def test_strict_still_applies_where_the_schema_lists_properties() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    assert not _grammar(schema, strict=True).accepts(json.dumps({"id": 1, "extra": 2}))
    assert _grammar(schema, strict=True).accepts(json.dumps({"id": 1}))
    # An empty "properties" declares that there are no members.
    assert not _grammar({"properties": {}}, strict=True).accepts(json.dumps({"a": 1}))
    assert _grammar({"properties": {}}, strict=True).accepts("{}")


def test_strict_with_pattern_properties_admits_only_matching_keys() -> None:
    schema = {"type": "object", "patternProperties": {"^n_": {"type": "number"}}}
    grammar = _grammar(schema, strict=True)
    assert grammar.accepts(json.dumps({"n_a": 1.5, "n_b": 2}))
    assert not grammar.accepts(json.dumps({"n_a": "text"}))
    assert not grammar.accepts(json.dumps({"other": 1}))


def test_strict_property_names_constrain_keys_only() -> None:
    grammar = _grammar({"type": "object", "propertyNames": {"maxLength": 3}}, strict=True)
    assert grammar.accepts(json.dumps({"abc": {"any": ["value"]}}))
    assert not grammar.accepts(json.dumps({"abcd": 1}))


def test_strict_counts_required_names_as_declared() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}
    grammar = _grammar(schema, strict=True)
    assert grammar.accepts(json.dumps({"a": "x", "b": [1, {"c": 2}]}))
    assert not grammar.accepts(json.dumps({"a": "x"}))
    assert not grammar.accepts(json.dumps({"a": "x", "b": 1, "c": 2}))
    assert _grammar({"required": ["k"]}, strict=True).accepts(json.dumps({"k": 0, "j": 1}))


def test_strict_nested_open_objects_inside_closed_ones() -> None:
    schema = {
        "type": "object",
        "properties": {"meta": {"type": "object"}, "tags": {"type": "array"}},
        "required": ["meta"],
    }
    grammar = _grammar(schema, strict=True)
    assert grammar.accepts(json.dumps({"meta": {"k": "v"}, "tags": [{"t": 1}]}))
    assert not grammar.accepts(json.dumps({"meta": {}, "other": 1}))


def test_strict_enum_members_checked_with_the_same_rule() -> None:
    # Enum members are validated against the sibling keywords; a bare object type keeps
    # object members with any keys under strict mode, as the grammar does.
    schema = {"type": "object", "enum": [{"mode": "fast"}, {"mode": "slow"}, ["not", "object"]]}
    grammar = _grammar(schema, strict=True)
    assert grammar.accepts(json.dumps({"mode": "fast"}))
    assert grammar.accepts(json.dumps({"mode": "slow"}))
    assert not grammar.accepts(json.dumps(["not", "object"]))
    closed = {"type": "object", "properties": {"mode": {}}, "const": {"mode": 1, "x": 2}}
    assert not _grammar(closed, strict=True).accepts(json.dumps({"mode": 1, "x": 2}))
