"""JSON Schema front end: options (layout, strictness, order, oneOf, lenient) and errors."""

from __future__ import annotations

import json
import warnings

import pytest
from gramkiln.frontend.json_schema import JsonSchemaOptions, json_schema_grammar

from gramkiln import Grammar
from gramkiln.errors import GrammarError

OBJECT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
    "required": ["a"],
}
VALUE = {"a": 1, "b": ["x", "y"]}


def _grammar(schema: object, **options: object) -> Grammar:
    return Grammar.from_json_schema(schema, JsonSchemaOptions(**options))


def test_default_layout_is_json_dumps() -> None:
    grammar = _grammar(OBJECT)
    assert grammar.accepts(json.dumps(VALUE))
    assert not grammar.accepts(json.dumps(VALUE, separators=(",", ":")))
    assert not grammar.accepts(json.dumps(VALUE, indent=2))
    assert not grammar.accepts(" " + json.dumps(VALUE))


def test_compact_separators() -> None:
    grammar = _grammar(OBJECT, item_separator=",", key_separator=":")
    assert grammar.accepts(json.dumps(VALUE, separators=(",", ":")))
    assert not grammar.accepts(json.dumps(VALUE))


def test_flexible_whitespace_is_bounded() -> None:
    grammar = _grammar(OBJECT, whitespace="flexible", max_whitespace=3)
    assert grammar.accepts(json.dumps(VALUE))
    assert grammar.accepts(json.dumps(VALUE, indent=1))  # runs of at most 3 blanks
    assert grammar.accepts(' {"a" :1 ,\n"b":[ "x","y" ] } ')
    assert not grammar.accepts('{"a":    1}')  # four blanks exceed the bound
    assert not grammar.accepts('{"a": 1 2}')


@pytest.mark.parametrize("indent", [2, 4, "\t"])
def test_indent_matches_json_dumps(indent: int | str) -> None:
    grammar = _grammar(OBJECT, indent=indent)
    nested = {"a": 1, "b": ["x"]}
    assert grammar.accepts(json.dumps(nested, indent=indent))
    assert grammar.accepts(json.dumps({"a": 1, "b": []}, indent=indent))
    assert not grammar.accepts(json.dumps(nested))
    assert not grammar.accepts(json.dumps(nested, indent=indent).replace("\n", "\n "))


def test_indent_with_flexible_whitespace_is_refused_not_ignored() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="indent applies to compact whitespace only"):
        JsonSchemaOptions(whitespace="flexible", indent=2)
    # Flexible alone already admits an indented document.
    assert _grammar(OBJECT, whitespace="flexible").accepts(json.dumps(VALUE, indent=2))


def test_strict_forbids_undeclared_properties() -> None:
    assert _grammar(OBJECT).accepts(json.dumps({"a": 1, "z": 0}))
    assert not _grammar(OBJECT, strict=True).accepts(json.dumps({"a": 1, "z": 0}))
    explicit = {**OBJECT, "additionalProperties": True}
    assert _grammar(explicit, strict=True).accepts(json.dumps({"a": 1, "z": 0}))


def test_property_order_any_is_exact() -> None:
    grammar = _grammar(OBJECT, property_order="any")
    assert grammar.accepts(json.dumps({"b": [], "a": 1}))
    assert grammar.accepts(json.dumps({"z": 1, "a": 1}))
    assert not grammar.accepts(json.dumps({"b": []}))  # required a missing
    assert not grammar.accepts('{"a": 1, "a": 2}')  # a declared key at most once


def test_overlapping_one_of_error_and_coercion() -> None:
    schema = {"oneOf": [{"type": "string"}, {"if": {"minLength": 1}, "then": {"maxLength": 3}}]}
    with pytest.raises(GrammarError) as error:
        json_schema_grammar(schema)
    assert error.value.language == "JSON Schema"
    assert "at #/oneOf" in str(error.value)
    assert "oneOf" in str(error.value)
    with pytest.warns(UserWarning, match="treated as anyOf"):
        grammar = Grammar(json_schema_grammar(schema, {"coerce_one_of": True}))
    assert grammar.accepts('"b"')


def test_unsupported_keyword_error_lists_keywords_and_location() -> None:
    schema = {"properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(GrammarError) as error:
        json_schema_grammar(schema)
    message = str(error.value)
    assert message.startswith("JSON Schema error: at #/properties/tags:")
    assert "uniqueItems" in message


def test_lenient_turns_errors_into_warnings() -> None:
    schema = {"type": "array", "uniqueItems": True}
    with pytest.warns(UserWarning, match="uniqueItems"):
        grammar = Grammar(json_schema_grammar(schema, JsonSchemaOptions(lenient=True)))
    assert grammar.accepts("[1, 1]")  # not enforced, and the warning said so


def test_remote_reference_needs_documents() -> None:
    schema = {"$ref": "http://example.com/s.json#/$defs/n"}
    with pytest.raises(GrammarError, match=r"\$ref"):
        json_schema_grammar(schema)
    documents = {"http://example.com/s.json": {"$defs": {"n": {"type": "null"}}}}
    grammar = Grammar(json_schema_grammar(schema, {"remote_documents": documents}))
    assert grammar.accepts("null")
    assert not grammar.accepts("1")


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "definitions.json#/a"},
        {"$id": "customer", "$ref": "address.json"},
        {"$id": "/schemas/customer", "$ref": "/schemas/other"},
        # A relative name for the document's own default base is still another document.
        {"$ref": "schema"},
    ],
)
def test_relative_references_to_other_documents_are_remote(schema: dict) -> None:
    with pytest.raises(GrammarError, match="points outside this schema"):
        json_schema_grammar(schema)


def test_formats_can_be_annotations() -> None:
    schema = {"type": "string", "format": "ipv4"}
    assert not _grammar(schema).accepts('"x"')
    assert _grammar(schema, formats="annotate").accepts('"x"')


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"$ref": "#/$defs/missing"}, "JSON pointer does not resolve"),
        ({"$ref": "#nowhere"}, "no anchor named 'nowhere'"),
        ({"type": "string", "pattern": "(a"}, "pattern '(a'"),
        ({"type": "string", "minLength": -1}, "minLength must be a non-negative integer"),
        ({"multipleOf": 0}, "multipleOf must be greater than 0"),
        ({"anyOf": []}, "anyOf must be a non-empty array of schemas"),
        ({"properties": {"a": 3}}, "properties must be an object of schemas"),
        ({"required": "a"}, "required must be an array of strings"),
        ({"type": "int"}, "unknown type 'int'"),
        ({"properties": {"a": {"type": []}}}, "at #/properties/a: type must not be an empty array"),
        ({"items": {"maxItems": -1}}, "maxItems must be a non-negative integer"),
        ({"allOf": [{"$ref": "#"}]}, "does not terminate"),
        (["not", "a", "schema"], "a schema must be a JSON object or a boolean"),
        # Located at the keyword written, not at the keyword it is rewritten into.
        ({"type": "array", "unevaluatedItems": "x"}, "at #: unevaluatedItems must be a schema"),
        (
            {"properties": {"a": {"unevaluatedProperties": 3}}},
            "at #/properties/a: unevaluatedProperties must be a schema",
        ),
    ],
)
def test_bad_schemas_give_clear_errors(schema: object, message: str) -> None:
    with pytest.raises(GrammarError) as error:
        json_schema_grammar(schema)  # type: ignore[arg-type]
    assert error.value.language == "JSON Schema"
    assert message in str(error.value)


def test_invalid_json_text_is_located() -> None:
    with pytest.raises(GrammarError) as error:
        json_schema_grammar('{"type": "string",\n  oops}')
    assert error.value.line == 2
    assert "invalid JSON" in str(error.value)


@pytest.mark.parametrize(
    "options",
    [
        {"item_separator": ";"},
        {"key_separator": "="},
        {"indent": -1},
        {"nope": True},
        {"max_whitespace": -2},
    ],
)
def test_bad_options_are_errors(options: dict[str, object]) -> None:
    with pytest.raises(GrammarError, match="invalid options"):
        json_schema_grammar({}, options)


def test_no_warning_for_supported_schema() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_grammar(OBJECT, {"lenient": True})
