"""JSON Schema front end: behaviour pinned down while comparing with a peer engine's tests.

Each test states a fact that the comparison with XGrammar's JSON Schema test cases showed
we got wrong (or only loosely right), with our own schemas and instances.
"""

from __future__ import annotations

import json
import re
import warnings
from decimal import Decimal

import pytest
from gramkiln.frontend.json_schema import JsonSchemaOptions
from gramkiln.frontend.json_schema import exprs as json_schema_exprs
from gramkiln.runtime.vocab import Vocab

from gramkiln import EmptyLanguageWarning, Grammar
from gramkiln.errors import GrammarError


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


@pytest.mark.filterwarnings("ignore::gramkiln.EmptyLanguageWarning")  # unsatisfiable on purpose
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


# -- formats follow their RFC grammars -------------------------------------------------------


def _format_accepts(name: str, value: str, **schema: object) -> bool:
    grammar = Grammar.from_json_schema({"type": "string", "format": name, **schema})
    return grammar.accepts(json.dumps(value))


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("P3Y6M4DT12H30M5S", True),
        ("P2M10D", True),
        ("P7Y", True),
        ("PT45M20S", True),
        ("P3W", True),
        ("P3Y10D", False),  # a year may only be followed by months
        ("PT2H15S", False),  # an hour may only be followed by minutes
        ("P1W2D", False),
        ("PT", False),
    ],
)
def test_duration_units_follow_rfc3339_order(value: str, valid: bool) -> None:
    assert _format_accepts("duration", value) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [("docs.example.org", True), ("x", True), ("docs.example.org.", False), ("a..b", False)],
)
def test_hostname_has_no_trailing_dot(value: str, valid: bool) -> None:
    assert _format_accepts("hostname", value) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ('"jane doe"@mail.test', True),
        ('"odd@sign"@mail.test', True),
        ('"back\\\\slash\\"quote"@mail.test', True),
        ("plain.name@[10.1.2.3]", True),
        ("plain.name@[IPv6:fe80::1]", True),
        ('"unterminated@mail.test', False),
        ("plain.name@[10.1.2.999]", False),
        ("plain.name@[anything]", False),
        ("jane doe@mail.test", False),
        ("a..b@mail.test", False),
    ],
)
def test_email_quoted_local_parts_and_address_literals(value: str, valid: bool) -> None:
    assert _format_accepts("email", value) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("https://user:pw@example.test:8443/a/b?x=1&y=%2F#top", True),
        ("urn:isbn:0451450523", True),
        ("ftp://[2001:db8::2]/pub", True),
        ("svc://[v7.token]/", True),
        ("https://example.test:port/", False),  # a port is digits
        ("https://example.test/%4", False),  # incomplete percent-encoding
        ("https://example.test/a b", False),
        ("https://ex[ample].test/", False),
        ("https://a@b@example.test/", False),
        ("no-scheme/path", False),
    ],
)
def test_uri_follows_rfc3986(value: str, valid: bool) -> None:
    assert _format_accepts("uri", value) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("../up/one?q", True),
        ("#section-2", True),
        ("", True),
        ("//host.test", True),
        ("9seg:colon/first", False),  # not a scheme, and no colon in a first segment
        ("/p%zz", False),
        ("/[x]", False),
    ],
)
def test_uri_reference_follows_rfc3986(value: str, valid: bool) -> None:
    assert _format_accepts("uri-reference", value) is valid


def test_iri_admits_non_ascii_where_uris_do_not() -> None:
    assert _format_accepts("iri", "https://bücher.test/straße?q=ü")
    assert not _format_accepts("uri", "https://bücher.test/straße")
    assert not _format_accepts("iri", "https://bücher.test:8a/")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("/users/{id}/posts{?page,size}", True),
        ("{+base}{/path*}{#frag}", True),
        ("{name:12}", True),
        ("lit%2Aeral", True),
        ("{}", False),
        ("{a,}", False),
        ("{x:0}", False),
        ("{x:12345}", False),
        ("{a..b}", False),
        ("50%", False),
        ("open{brace", False),
    ],
)
def test_uri_template_expressions_follow_rfc6570(value: str, valid: bool) -> None:
    assert _format_accepts("uri-template", value) is valid


def test_length_bounded_uri_falls_back_to_the_superset_with_a_warning() -> None:
    # Short bounds keep the exact format; long ones would need ~180 states per character.
    assert not _format_accepts("uri", "https://a.test:x/", maxLength=20)
    assert _format_accepts("uri", "https://a.test/", maxLength=20)
    with pytest.warns(UserWarning, match="coarser superset"):
        grammar = Grammar.from_json_schema({"type": "string", "format": "uri", "maxLength": 300})
    assert grammar.accepts(json.dumps("https://a.test/" + "p" * 285))
    assert not grammar.accepts(json.dumps("https://a.test/" + "p" * 286))
    assert not grammar.accepts(json.dumps("no scheme"))


def test_length_bounded_email_loosens_only_the_address_literal() -> None:
    with pytest.warns(UserWarning, match="e-mail: any address literal"):
        grammar = Grammar.from_json_schema({"type": "string", "format": "email", "maxLength": 90})
    assert grammar.accepts(json.dumps('"quoted name"@mail.test'))
    assert grammar.accepts(json.dumps("x@[not-an-address]"))  # the documented superset
    assert not grammar.accepts(json.dumps("a..b@mail.test"))
    assert not grammar.accepts(json.dumps("x@mail.test." + "a" * 80))


def test_a_format_with_a_long_bound_keeps_the_format_and_leaves_out_the_bound() -> None:
    # `maxLength: 254` (the SMTP limit, common in real schemas) with `format: email` failed to
    # compile: the address language, and even its superset, times the bound passed the product
    # budget. The format says more than a generous bound, so the format stays exact.
    with pytest.warns(UserWarning, match="maxLength 254 is not enforced; the format is"):
        grammar = Grammar.from_json_schema({"type": "string", "format": "email", "maxLength": 254})
    assert grammar.accepts(json.dumps("john.doe@example.com"))
    assert not grammar.accepts(json.dumps("x" * 254))  # not an address
    assert grammar.accepts(json.dumps("x" * 300 + "@mail.test"))  # the bound is left out
    with pytest.warns(UserWarning, match="maxLength 300 is not enforced; the format is"):
        both = Grammar.from_json_schema(
            {"type": "string", "format": "email", "pattern": "^[^A-Z]*$", "maxLength": 300}
        )
    # The pattern stays exact with the format.
    assert both.accepts(json.dumps("a@b.c")) and not both.accepts(json.dumps("A@b.c"))
    # A format without a coarser superset (hostname, its usual bound 253) likewise.
    with pytest.warns(UserWarning, match="maxLength 253 is not enforced; the format is"):
        host = Grammar.from_json_schema({"type": "string", "format": "hostname", "maxLength": 253})
    assert host.accepts(json.dumps("a.example.com")) and not host.accepts(json.dumps("a..b"))
    # Where the format is too large even times the lower bound alone, the length stays.
    with pytest.warns(UserWarning, match="the format is not enforced; the length is"):
        long = Grammar.from_json_schema(
            {"type": "string", "format": "email", "minLength": 2000, "maxLength": 3000}
        )
    assert long.accepts(json.dumps("x" * 2000)) and not long.accepts(json.dumps("x" * 1999))
    assert not long.accepts(json.dumps("x" * 3001))


# -- exponents under non-zero bounds (llguidance expects 1e-5 in (0, 1.5)) ----------------------

_BOUND_SETS = [
    {"exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
    {"minimum": 1},
    {"minimum": -2.5, "maximum": 0.001},
    {"minimum": 0.001, "maximum": 1000000},
    {"exclusiveMaximum": -3e10},
    {"minimum": 12.5, "not": {"const": 100}},
]
_MANTISSAS = ["0", "0.0", "1", "1.0", "1.5", "2.25", "9.99", "5"]
_EXPONENTS = ["e0", "e1", "e-1", "e-3", "e-05", "E+7", "e+22", "e6", "e10", "e-10", "e-007"]


def _within(value: Decimal, schema: dict) -> bool:
    checks = {
        "minimum": value >= Decimal(repr(schema.get("minimum", 0))),
        "maximum": value <= Decimal(repr(schema.get("maximum", 0))),
        "exclusiveMinimum": value > Decimal(repr(schema.get("exclusiveMinimum", 0))),
        "exclusiveMaximum": value < Decimal(repr(schema.get("exclusiveMaximum", 0))),
    }
    if "not" in schema and value == Decimal(repr(schema["not"]["const"])):
        return False
    return all(ok for key, ok in checks.items() if key in schema)


@pytest.mark.parametrize("bounds", _BOUND_SETS, ids=lambda b: json.dumps(b))
def test_scientific_notation_is_exact_under_bounds(bounds: dict) -> None:
    schema = {"type": "number", **bounds}
    grammar = _grammar(schema)
    matcher_factory = grammar.compile().matcher
    spellings = [s + m + e for s in ("", "-") for m in _MANTISSAS for e in _EXPONENTS]
    # What json.dumps writes for floats of every magnitude.
    spellings += [json.dumps(x) for x in (1e-05, 1.5e-07, 3e22, 1e16, -3e10, -3.0000001e10, 0.001)]
    for text in spellings:
        expected = _within(Decimal(text), bounds)
        assert grammar.accepts(text) == expected, text
        matcher = matcher_factory()
        assert (matcher.accept_string(text) and matcher.is_accepting()) == expected, text


@pytest.mark.parametrize("text", ["12e3", "0.5e1", "10e-1", "100E-2"])
def test_other_exponent_spellings_stay_rejected_under_non_zero_bounds(text: str) -> None:
    # Deciding them needs the exponent compared with the mantissa's length (not regular).
    assert not _grammar({"type": "number", "minimum": 1}).accepts(text)
    assert _grammar({"type": "number", "minimum": 0}).accepts(text)  # zero bounds: any spelling


def test_an_llguidance_grammar_request_is_not_read_as_a_schema() -> None:
    # Read as a schema it has one unknown keyword and would accept any JSON value.
    request = {"grammars": [{"json_schema": {"type": "integer"}}]}
    with pytest.raises(GrammarError, match="llguidance grammar request"):
        _grammar(request)
    # A schema that merely has a property called "grammars" is a schema.
    assert _grammar({"properties": {"grammars": {"type": "array"}}}).accepts('{"grammars": []}')


def test_x_guidance_options_are_ignored_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="x-guidance"):
        grammar = _grammar({"type": "integer", "x-guidance": {"whitespace_flexible": True}})
    assert grammar.accepts("1")


# == Facts from comparing with llguidance's JSON Schema test cases (2026-11-30) ================
# llguidance refuses unsatisfiable schemas with an error naming the contradiction. A schema
# that admits nothing is legal JSON Schema, so we still compile the exact (empty) language,
# but the front end now says why, with the JSON pointer, instead of leaving only the
# compile-time "accepts no string" warning.


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "number", "exclusiveMinimum": 2.5, "maximum": 2.5},
            "at #: no number satisfies exclusiveMinimum 2.5, maximum 2.5",
        ),
        # No integer between the bounds, though the interval is not empty.
        ({"type": "integer", "minimum": 0.2, "maximum": 0.8}, "at #: no integer satisfies"),
        (
            {
                "type": "object",
                "properties": {"tag": {"type": "string", "minLength": 4, "maxLength": 2}},
                "required": ["tag"],
            },
            "at #/properties/tag: minLength 4 is above maxLength 2",
        ),
        (
            {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 2},
            "at #: minItems 3 is above maxItems 2",
        ),
        (
            {"type": "array", "prefixItems": [{"type": "null"}], "items": False, "minItems": 2},
            "minItems 2 is above the 1 items prefixItems allows",
        ),
        (
            {"type": "object", "minProperties": 3, "maxProperties": 1},
            "at #: minProperties 3 is above maxProperties 1",
        ),
        (
            {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id", "name"],
                "additionalProperties": False,
            },
            "at #: required property 'name' cannot be present",
        ),
        ({"allOf": [{"type": "string"}, {"type": "array"}]}, "have no type in common"),
        (
            {"$defs": {"never": False}, "allOf": [{"$ref": "#/$defs/never"}]},
            "at #: a false schema applies",
        ),
        ({"enum": ["red", "green"], "maxLength": 2}, "no enum/const value satisfies"),
        (
            {"type": "string", "pattern": "^[0-9]+$", "format": "date"},
            "no string satisfies its pattern, format and length keywords together",
        ),
        (False, "at #: the schema is false"),
    ],
)
def test_a_schema_admitting_nothing_warns_with_the_reason(schema: object, message: str) -> None:
    with pytest.warns(EmptyLanguageWarning, match=re.escape(message)):
        grammar = _grammar(schema)
    assert not grammar.is_prefix("")  # still the exact, empty language: nothing starts it


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        # One branch admits nothing; the other still does.
        (
            {"anyOf": [{"type": "integer", "minimum": 9, "maximum": 3}, {"type": "null"}]},
            ["null"],
            ["5", "9"],
        ),
        # An optional property that admits nothing only means the key cannot appear.
        (
            {
                "type": "object",
                "properties": {"xs": {"type": "array", "minItems": 2, "maxItems": 0}},
            },
            ["{}", '{"y": 1}'],
            ['{"xs": []}'],
        ),
        # Without "type", the contradictory bounds rule out numbers only.
        ({"minimum": 4, "maximum": 1}, ['"text"', "[]"], ["2", "4"]),
    ],
)
def test_no_warning_while_some_document_is_valid(
    schema: dict, valid: list[str], invalid: list[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyLanguageWarning)
        grammar = _grammar(schema)
    assert all(grammar.accepts(text) for text in valid)
    assert not any(grammar.accepts(text) for text in invalid)


def test_the_full_walk_agrees_with_the_quick_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # With no budget the quick search gives up at once and every rule is walked.
    monkeypatch.setattr(json_schema_exprs, "QUICK_SEARCH_STEPS", 0)
    recursive = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                "required": ["next"],
            }
        },
        "$ref": "#/$defs/node",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyLanguageWarning)
        assert _grammar(recursive).accepts('{"next": {"next": null}}')
    recursive["$defs"]["node"]["properties"]["tag"] = {"const": 1, "type": "string"}
    recursive["$defs"]["node"]["required"] = ["next", "tag"]
    with pytest.warns(EmptyLanguageWarning, match="no enum/const value satisfies"):
        _grammar(recursive)


# llguidance's instances are serde_json texts, whose numbers differ from json.dumps's
# (0.00001 for 1e-05, 1.23e23 for 1.23e+23, 1e-7 for 1e-07). A const/enum number is a
# value, so every usual spelling of it is valid; only json.dumps's was accepted.


@pytest.mark.parametrize(
    ("value", "valid", "invalid"),
    [
        (4e-06, ["4e-06", "4e-6", "4E-6", "4.0e-6", "0.000004", "0.0000040"], ["4e-5", "40e-7"]),
        (6.02e23, ["6.02e+23", "6.02e23", "6.020E+023", "602000000000000000000000"], ["6.2e23"]),
        (-12.5, ["-12.5", "-12.50", "-1.25e1", "-1.25E+01"], ["12.5", "-125e-1", "-12.05"]),
        (300, ["300", "300.0", "3e2", "3.00e+2"], ["3e3", "30e1", "0300", "300."]),
        (0, ["0", "-0", "0.0", "0e7", "-0.00E-2"], ["00", "0.1", "1e-400"]),
    ],
)
def test_fixed_numbers_accept_their_usual_spellings(
    value: float, valid: list[str], invalid: list[str]
) -> None:
    layouts = [
        ({"const": value}, "{}"),
        ({"enum": ["other", value]}, "{}"),
        ({"const": {"n": [value]}}, '{{"n": [{}]}}'),  # nested in a fixed object
    ]
    for schema, document in layouts:
        grammar = _grammar(schema)
        for text in valid + invalid:
            assert grammar.accepts(document.format(text)) == (text in valid), (schema, text)
    runtime = _grammar({"const": value}).compile().matcher
    for text in valid + invalid:
        matcher = runtime()
        assert (matcher.accept_string(text) and matcher.is_accepting()) == (text in valid), text


def test_draft4_integer_members_keep_their_integer_spelling() -> None:
    # Draft 4: an integer is written without fraction or exponent, so 10.0 is not one.
    draft4 = "http://json-schema.org/draft-04/schema#"
    grammar = _grammar({"$schema": draft4, "type": "integer", "enum": [10, 20]})
    assert grammar.accepts("10") and grammar.accepts("20")
    assert not any(grammar.accepts(text) for text in ("10.0", "1e1", "2.0e1"))
    # Without "type" (or from draft 6 on) the value is what counts.
    assert _grammar({"$schema": draft4, "enum": [10]}).accepts("1e1")
    assert _grammar({"type": "integer", "enum": [10]}).accepts("10.0")


def test_lone_surrogates_in_constants_are_written_escaped() -> None:
    # JSON text may hold "\ud83d" alone; Python reads it as a lone surrogate, which has no
    # UTF-8 form, so only the escaped spelling is possible (it used to fail at compile time
    # with a UnicodeEncodeError).
    grammar = _grammar({"enum": ["\ud83d", "a\u00e9"]})
    assert grammar.accepts('"\\ud83d"')
    assert grammar.accepts('"a\u00e9"') and grammar.accepts('"a\\u00e9"')
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string('"\\ud83d"') and matcher.is_accepting()
