"""``$dynamicRef`` (2020-12) and ``$recursiveRef`` (2019-09) resolved in their dynamic scope.

The same sub-schema means different things depending on the resources evaluation passed through
(an "extensible" list or tree), so the front end builds one rule per (sub-schema, scope); see
``frontend/json_schema/scope.py``. Each case lists instances with the verdict the
specification gives, and where the ``jsonschema`` package is installed its verdict is checked
to agree (it is the suite's reference implementation).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gramkiln.frontend.json_schema.scope import (
    EMPTY_SCOPE,
    Scope,
    ScopedBase,
    in_scope,
    scope_of,
    unwrap,
)

from gramkiln import Grammar

DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_2019 = "https://json-schema.org/draft/2019-09/schema"
BASE = "https://schemas.example.test/"


def _list_of(element_type: str, **siblings: Any) -> dict[str, Any]:
    """A resource that reuses the generic list below with its own element type."""
    return {
        "$id": f"{element_type}-list",
        "$ref": "list",
        **siblings,
        "$defs": {"element": {"$dynamicAnchor": "element", "type": element_type}},
    }


GENERIC_LIST = {
    "$id": "list",
    "type": "array",
    "items": {"$dynamicRef": "#element"},
    "$defs": {"element": {"$dynamicAnchor": "element"}},
}


def _tree(anchor: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """A permissive tree resource whose children are reached through ``reference``."""
    return {
        "$id": "tree",
        **anchor,
        "type": "object",
        "properties": {"data": True, "children": {"type": "array", "items": reference}},
    }


def _outer_string_inner_integer(reference: dict[str, Any], inner_anchor: str) -> dict[str, Any]:
    """A root whose dynamic anchor "element" is a string, and a list resource whose items go
    through ``reference`` to its own "element" (an integer, named by ``inner_anchor``): the
    items are integers when the reference stays static, strings when it goes to the root."""
    return {
        "$schema": DRAFT_2020,
        "$id": BASE + "outer",
        "$ref": "list",
        "$defs": {
            "outer": {"$dynamicAnchor": "element", "type": "string"},
            "list": {
                "$id": "list",
                "type": "array",
                "items": reference,
                "$defs": {"element": {inner_anchor: "element", "type": "integer"}},
            },
        },
    }


CASES: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    (
        # One generic list, used by two resources with different element types: the list's
        # items rule exists once per scope.
        "one list in two scopes",
        {
            "$schema": DRAFT_2020,
            "$id": BASE + "two-lists",
            "type": "object",
            "properties": {"ints": {"$ref": "integer-list"}, "strs": {"$ref": "string-list"}},
            "$defs": {
                "list": GENERIC_LIST,
                "ints": _list_of("integer"),
                "strs": _list_of("string"),
            },
        },
        [{"ints": [1, 2], "strs": ["a"]}, {"ints": [], "strs": []}, {}],
        [{"ints": ["a"]}, {"strs": [1]}, {"ints": [1, "b"]}],
    ),
    (
        # The same with keywords next to the reference: the generic list's keywords are merged
        # into the referring schema, and its items keep the scope the reference led to.
        "references with sibling keywords keep their target's scope",
        {
            "$schema": DRAFT_2020,
            "$id": BASE + "two-bounded-lists",
            "type": "object",
            "properties": {"ints": {"$ref": "integer-list"}, "strs": {"$ref": "string-list"}},
            "$defs": {
                "list": GENERIC_LIST,
                "ints": _list_of("integer", maxItems=2),
                "strs": _list_of("string", minItems=1),
            },
        },
        [{"ints": [1, 2], "strs": ["a"]}, {"strs": ["x", "y", "z"]}],
        [{"ints": [1, 2, 3]}, {"ints": ["a"]}, {"strs": []}, {"strs": [1]}],
    ),
    (
        # An extension that forbids unknown members, all the way down the tree.
        "strict tree through $dynamicRef",
        {
            "$schema": DRAFT_2020,
            "$id": BASE + "strict-tree",
            "$dynamicAnchor": "node",
            "$ref": "tree",
            "unevaluatedProperties": False,
            "$defs": {"tree": _tree({"$dynamicAnchor": "node"}, {"$dynamicRef": "#node"})},
        },
        [{"data": 1, "children": [{"data": 2}]}, {"children": [{"children": []}]}],
        [{"children": [{"dta": 2}]}, {"children": [{"children": [{"x": 1}]}]}, {"x": 1}],
    ),
    (
        "strict tree through $recursiveRef",
        {
            "$schema": DRAFT_2019,
            "$id": BASE + "strict-tree",
            "$recursiveAnchor": True,
            "$ref": "tree",
            "unevaluatedProperties": False,
            "$defs": {"tree": _tree({"$recursiveAnchor": True}, {"$recursiveRef": "#"})},
        },
        [{"data": 1, "children": [{"data": 2}]}, {"children": [{"children": []}]}],
        [{"children": [{"dta": 2}]}, {"children": [{"children": [{"x": 1}]}]}, {"x": 1}],
    ),
    (
        # Without "$recursiveAnchor": true at the outer resource the reference stays in the
        # tree: only the root object is strict.
        "$recursiveRef without an outer anchor is static",
        {
            "$schema": DRAFT_2019,
            "$id": BASE + "strict-root",
            "$ref": "tree",
            "unevaluatedProperties": False,
            "$defs": {"tree": _tree({"$recursiveAnchor": True}, {"$recursiveRef": "#"})},
        },
        [{"data": 1, "children": [{"data": 2}]}, {"children": [{"dta": 2}]}],
        [{"x": 1}],
    ),
    (
        # The anchor a $dynamicRef lands on first must itself be dynamic ("bookending").
        "$dynamicRef to a plain $anchor is static",
        _outer_string_inner_integer({"$dynamicRef": "#element"}, "$anchor"),
        [[1, 2], []],
        [["a"]],
    ),
    (
        # $recursiveRef is not a 2020-12 keyword: an annotation there.
        "$recursiveRef in a 2020-12 document is an annotation",
        {"$schema": DRAFT_2020, "type": "array", "items": {"$recursiveRef": "#"}},
        [[1, "a", None]],
        [{}],
    ),
]


@pytest.mark.parametrize("name, schema, valid, invalid", CASES, ids=[c[0] for c in CASES])
def test_dynamic_references(name: str, schema: Any, valid: list[Any], invalid: list[Any]) -> None:
    grammar = Grammar.from_json_schema(schema)
    for instance in valid:
        assert grammar.accepts(json.dumps(instance)), f"{name}: should accept {instance!r}"
    for instance in invalid:
        assert not grammar.accepts(json.dumps(instance)), f"{name}: should reject {instance!r}"


@pytest.mark.parametrize("name, schema, valid, invalid", CASES, ids=[c[0] for c in CASES])
def test_dynamic_reference_cases_agree_with_jsonschema(
    name: str, schema: Any, valid: list[Any], invalid: list[Any]
) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema validator checks")
    validator = jsonschema.validators.validator_for(schema)(schema)
    for instance in valid:
        assert validator.is_valid(instance), f"{name}: the case itself is wrong for {instance!r}"
    for instance in invalid:
        assert not validator.is_valid(instance), f"{name}: the case is wrong for {instance!r}"


def test_static_ref_to_a_dynamic_anchor_is_static() -> None:
    """2020-12 §8.2.3.1: ``$ref`` resolves on load; only ``$dynamicRef`` reads the scope.

    (The ``jsonschema`` package resolves a ``$ref`` that lands on a ``$dynamicAnchor``
    dynamically too; the specification and the test suite do not.)"""
    schema = _outer_string_inner_integer({"$ref": "#element"}, "$dynamicAnchor")
    grammar = Grammar.from_json_schema(schema)
    assert grammar.accepts("[1, 2]")
    assert not grammar.accepts('["a"]')


def test_schemas_without_dynamic_references_build_no_scopes() -> None:
    """Dynamic anchors nobody refers to dynamically leave base URIs plain strings, so rules
    are shared exactly as before."""
    schema = {
        "$schema": DRAFT_2020,
        "$id": BASE + "unused",
        "$ref": "a",
        "$defs": {
            "a": {"$id": "a", "$dynamicAnchor": "x", "type": "array", "items": {"$ref": "b"}},
            "b": {"$id": "b", "$dynamicAnchor": "x", "type": "integer"},
        },
    }
    from gramkiln.frontend.json_schema.compiler import Compiler
    from gramkiln.frontend.json_schema.options import JsonSchemaOptions

    compiler = Compiler(schema, JsonSchemaOptions())
    assert not compiler.scopes.active
    assert Grammar.from_json_schema(schema).accepts("[1, 2]")


def test_scoped_bases_compare_by_scope() -> None:
    inner = Scope(started=True, anchors=(("element", BASE + "ints"),))
    plain = BASE + "list"
    scoped = ScopedBase(plain, inner)
    assert scoped != plain and scoped != ScopedBase(plain, EMPTY_SCOPE)
    assert scoped == ScopedBase(plain, inner)
    assert len({scoped, ScopedBase(plain, inner), ScopedBase(plain, EMPTY_SCOPE)}) == 2
    assert scope_of(scoped) == inner and scope_of(plain) == EMPTY_SCOPE
    assert repr(scoped) != repr(ScopedBase(plain, EMPTY_SCOPE))
    schema = {"type": "integer"}
    wrapped = in_scope(schema, scoped)
    assert in_scope(wrapped, plain) is wrapped and in_scope(False, scoped) is False
    assert unwrap(wrapped, plain) == (schema, scoped)
    assert unwrap(schema, plain) == (schema, plain)


@pytest.mark.parametrize("keyword", ["$dynamicRef", "$recursiveRef"])
def test_a_reference_that_is_not_a_string_is_a_located_error(keyword: str) -> None:
    """(A number here used to crash the front end with an AttributeError.)"""
    from gramkiln.errors import GrammarError

    schema = {"$schema": DRAFT_2019 if keyword == "$recursiveRef" else DRAFT_2020}
    schema["items"] = {keyword: 3}
    with pytest.raises(GrammarError, match=rf"at #/items: \{keyword} must be a string"):
        Grammar.from_json_schema(schema)
