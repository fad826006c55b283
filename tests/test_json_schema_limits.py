"""Adversarially deep JSON Schemas end in a located GrammarError, never a RecursionError."""

from __future__ import annotations

import json

import pytest

from gramkiln import CompiledGrammar, Grammar, Vocab
from gramkiln.errors import GrammarError


def nested_properties(levels: int) -> dict:
    root: dict = {"type": "object", "properties": {}, "required": ["a"]}
    node = root
    for _ in range(levels):
        child: dict = {"type": "object", "properties": {}, "required": ["a"]}
        node["properties"]["a"] = child
        node = child
    node["properties"]["a"] = {"type": "integer"}
    return root


def nested_items(levels: int) -> dict:
    root: dict = {}
    node = root
    for _ in range(levels):
        node["items"] = {}
        node = node["items"]
    return root


def accepts(compiled: CompiledGrammar, text: str) -> bool:
    """Whether the compiled grammar accepts the whole of `text`."""
    matcher = compiled.matcher()
    return matcher.accept_string(text) and matcher.is_accepting()


@pytest.mark.parametrize("schema", [nested_properties(5000), nested_items(5000)])
def test_schemas_deeper_than_the_recursion_limit_are_grammar_errors(schema: dict) -> None:
    with pytest.raises(GrammarError, match="nested too deep"):
        Grammar.from_json_schema(schema)


def test_schema_text_too_deep_for_the_json_parser_is_a_grammar_error() -> None:
    text = '{"anyOf": [' * 5000 + '{"type": "null"}' + "]}" * 5000
    with pytest.raises(GrammarError, match="nested too deeply to parse"):
        Grammar.from_json_schema(text)


def test_moderately_deep_schemas_still_compile_and_match() -> None:
    compiled = Grammar.from_json_schema(nested_properties(40)).compile(Vocab.byte_level())
    value: object = 7
    for _ in range(41):
        value = {"a": value}
    matcher = compiled.matcher()
    assert matcher.accept_string(json.dumps(value))
    assert matcher.is_accepting()


def test_huge_item_counts_compile_small_and_stay_exact() -> None:
    # minItems / maxItems of 10**9 used to expand into a billion copies (out of memory) and
    # maxItems 100000 into a 100,000-link chain (14 s); counts past the linear limit are now
    # blocks of 2**i items.
    vocab = Vocab.byte_level()
    at_least = Grammar.from_json_schema({"type": "array", "minItems": 10**9}).compile(vocab)
    matcher = at_least.matcher()
    assert matcher.accept_string("[1, " + ", ".join(["[]"] * 3000))
    assert not matcher.accept_string("]")
    assert not matcher.is_accepting()

    bounded = Grammar.from_json_schema(
        {"type": "array", "items": {"type": "integer"}, "minItems": 1030, "maxItems": 2100}
    ).compile(vocab)
    for count, expected in [(1029, False), (1030, True), (1500, True), (2100, True), (2101, False)]:
        text = "[" + ", ".join(str(i % 7) for i in range(count)) + "]"
        assert accepts(bounded, text) == expected, count


def test_large_enums_are_checked_in_linear_time_and_stay_exact() -> None:
    # Each enum value is checked against the schema's other keywords; the enum's own set of
    # canonical values was rebuilt for every value (a 5,000-value enum took 36 s).
    values: list[object] = [f"v{i}" for i in range(5000)] + list(range(100)) + [None]
    compiled = Grammar.from_json_schema({"type": ["string", "null"], "enum": values}).compile(
        Vocab.byte_level()
    )
    for text, expected in [('"v4999"', True), ("null", True), ('"v5000"', False), ("7", False)]:
        assert accepts(compiled, text) == expected, text


def test_deep_schemas_say_they_are_too_deep() -> None:
    # (They used to say only that the expansion "does not terminate".) About 95 levels of
    # nesting fit under Python's default recursion limit.
    Grammar.from_json_schema(nested_items(90))
    with pytest.raises(GrammarError, match="nested too deeply to expand"):
        Grammar.from_json_schema(nested_items(400))


def test_objects_with_hundreds_of_required_keys_build_small_and_stay_exact() -> None:
    # Past the tracked budget, required keys are counted; each counted key used to be its own
    # alternative in every state (300 keys: ~150,000 IR members, seconds to build).
    keys = [f"k{i}" for i in range(300)]
    schema = {
        "type": "object",
        "properties": {key: {"type": "integer"} for key in keys},
        "required": keys,
    }
    with pytest.warns(UserWarning, match="300 are counted"):
        grammar = Grammar.from_json_schema(schema, {"property_order": "any"})
    assert len(grammar.ir.rules) < 5000
    compiled = grammar.compile(Vocab.byte_level())
    cases = [
        ({key: 1 for key in reversed(keys)}, True),
        ({key: 1 for key in keys[:-1]}, False),
        ({**{key: 1 for key in keys}, "extra": 2}, True),
        ({key: "x" for key in keys}, False),
    ]
    for value, expected in cases:
        assert accepts(compiled, json.dumps(value)) == expected


def test_oneof_of_hundreds_of_consts_compiles_and_stays_exact() -> None:
    # Enums are often spelled as a oneOf of `const` branches with descriptions; they used to
    # be refused past 128 branches, and every pair of branches was compared (1,000: 16 s).
    branches: list[dict] = [{"const": f"c{i}", "description": "one value"} for i in range(600)]
    branches.append({"enum": ["c7", "extra"]})  # overlaps branch 7
    compiled = Grammar.from_json_schema({"oneOf": branches}).compile(Vocab.byte_level())
    for value, expected in [("c0", True), ("c599", True), ("extra", True), ("c7", False)]:
        assert accepts(compiled, json.dumps(value)) == expected


def test_discriminated_oneof_compiles_and_stays_exact() -> None:
    def branch(kind: str, value_type: str) -> dict:
        return {
            "type": "object",
            "properties": {"kind": {"const": kind}, "v": {"type": value_type}},
            "required": ["kind", "v"],
            "additionalProperties": False,
        }

    branches = [branch(f"k{i}", "integer") for i in range(300)] + [branch("k3", "number")]
    compiled = Grammar.from_json_schema({"oneOf": branches}).compile(Vocab.byte_level())
    cases = [
        ({"kind": "k299", "v": 1}, True),
        ({"kind": "k3", "v": 1.5}, True),
        ({"kind": "k3", "v": 1}, False),  # both k3 branches match
        ({"kind": "k300", "v": 1}, False),
    ]
    for value, expected in cases:
        assert accepts(compiled, json.dumps(value)) == expected


def test_overlapping_pairs_agrees_with_asking_every_pair() -> None:
    from gramkiln.frontend.json_schema.combinators import overlapping_pairs, provably_disjoint

    def obj(kind: object, extra: dict | None = None) -> dict:
        return {
            "type": "object",
            "properties": {"kind": {"const": kind}, **(extra or {})},
            "required": ["kind", *(extra or {})],
        }

    lists: list[list] = [
        [{"const": 1}, {"const": 1.0}, {"enum": [2, "a"]}, {"const": "a"}, {"enum": [None]}],
        [obj("a"), obj("b"), obj("a", {"x": {"type": "integer"}}), obj(1), obj(1.0)],
        [obj("a"), {"type": "object"}, {"const": "a"}, {"type": "string"}],
        [{"type": "integer", "minimum": 3}, {"type": "integer", "maximum": 2}, {"const": 3}],
        [obj("a"), {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}}}],
        [False, {"const": 1}, {"const": 1}],
    ]
    for schemas in lists:
        everything = {
            (i, j)
            for i in range(len(schemas))
            for j in range(len(schemas))
            if i != j and not provably_disjoint(schemas[i], schemas[j])
        }
        assert overlapping_pairs(schemas) == everything, schemas


def test_many_pattern_properties_split_keys_by_the_patterns_they_match() -> None:
    # Keys were split over all 2**k combinations of patterns, which capped k at 4; only the
    # non-empty combinations are built now.
    patterns: dict = {f"^p{i}_": {"type": "integer", "minimum": i} for i in range(12)}
    patterns["x$"] = {"type": "integer", "maximum": 5}  # overlaps every prefix pattern
    schema = {"type": "object", "patternProperties": patterns, "additionalProperties": False}
    compiled = Grammar.from_json_schema(schema).compile(Vocab.byte_level())
    cases = [
        ({"p3_a": 3, "p11_b": 11}, True),
        ({"p3_a": 2}, False),  # below p3's minimum
        ({"p7_x": 7}, False),  # matches ^p7_ and x$: 7 > 5
        ({"p4_x": 5}, True),
        ({"zx": 1}, True),
        ({"other": 1}, False),  # no pattern: additionalProperties false
    ]
    for value, expected in cases:
        assert accepts(compiled, json.dumps(value)) == expected


def test_length_bounds_implied_by_the_pattern_are_not_intersected() -> None:
    # A fixed-length pattern under `maxLength: 100000` was refused ("length bound 100000 is
    # too large to intersect") although the pattern alone bounds the length.
    from gramkiln.frontend.json_schema.automaton import Dfa, dfa_from_expr, length_range
    from gramkiln.frontend.regex import parse_regex

    assert length_range(dfa_from_expr(parse_regex("[a-z]{3}-[0-9]{2,4}"))) == (6, 8)
    assert length_range(dfa_from_expr(parse_regex("ab+c?"))) == (2, None)
    assert length_range(Dfa(edges=[[]], accepting=set())) is None

    vocab = Vocab.byte_level()
    implied = {"type": "string", "pattern": "^[a-z]{3}-[0-9]{4}$", "maxLength": 100000}
    tighter = {"type": "string", "pattern": "^[a-z]{3}-[0-9]{2,4}$", "maxLength": 7}
    for schema, text, expected in [
        (implied, "abc-1234", True),
        (implied, "abc-12345", False),
        (tighter, "abc-123", True),
        (tighter, "abc-1234", False),  # the pattern allows it, maxLength does not
    ]:
        compiled = Grammar.from_json_schema(schema).compile(vocab)
        assert accepts(compiled, json.dumps(text)) == expected


def nested_pattern_negations() -> dict:
    """The shape of MaskBench's Handwritten allany14: `allOf` of `not` of `anyOf` of `not` of
    `anyOf` over patterns, beside a pattern and length bounds. Distributed into branches it
    made 3^6 string automata and took over a minute to compile."""

    def negated_any(*alternatives: dict) -> dict:
        return {"not": {"anyOf": list(alternatives)}}

    def patterns(*texts: str) -> list[dict]:
        return [{"pattern": text} for text in texts]

    firsts = [("ab1", "b12"), ("bc1", "c12"), ("ca1", "a12")]
    seconds = ["[a|b]", "[b|c]", "[c|a]"]
    return {
        "type": "string",
        "allOf": [
            negated_any(*(negated_any(*patterns("^....$", *pair)) for pair in firsts)),
            negated_any(*(negated_any(*patterns("^[\\w]*$", "\\d\\d", cls)) for cls in seconds)),
            {"pattern": "[aA][12].*[zZ]"},
            {"minLength": 5},
            {"maxLength": 20},
        ],
    }


def test_string_combinators_compile_as_one_automaton_and_stay_exact() -> None:
    import random

    import jsonschema

    schema = nested_pattern_negations()
    grammar = Grammar.from_json_schema(schema)
    # Distributed into branches it was 145,566 rules (over a minute to build); as one
    # automaton 1,571.
    assert len(grammar.ir.rules) < 10_000
    compiled = grammar.compile(Vocab.byte_level())
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(7)
    # Strings built from the patterns' pieces, so that both sides are common.
    pieces = ["a12", "A2", "b12", "bc1", "c12", "ab1", "ca1", "z", "Z", " ", "-", "é", "1"]
    texts = ["a12b12c12z", "A2 bc1 ab1 ca1Z", "a12b12c12", "a1zzz", "", "a12b12c12" + "z" * 12]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 7))) for _ in range(3000)]
    decided = {True: 0, False: 0}
    for text in texts:
        expected = validator.is_valid(text)
        decided[expected] += 1
        assert accepts(compiled, json.dumps(text)) == expected, text
    assert decided[True] > 20 and decided[False] > 20  # both sides exercised


@pytest.mark.parametrize(
    "schema",
    [
        # oneOf of overlapping patterns beside a nested not: exactly one matches.
        {
            "type": "string",
            "oneOf": [{"pattern": "ab"}, {"pattern": "b1"}, {"not": {"pattern": "a"}}],
            "maxLength": 6,
        },
        # if / then / else over patterns, with a $ref and allOf on the way.
        {
            "type": "string",
            "$defs": {"starts": {"pattern": "^a"}},
            "allOf": [
                {
                    "if": {"$ref": "#/$defs/starts"},
                    "then": {"not": {"anyOf": [{"pattern": "1$"}, {"maxLength": 2}]}},
                    "else": {"oneOf": [{"minLength": 3}, {"pattern": "z"}]},
                }
            ],
        },
        # enum and const under negation.
        {
            "type": "string",
            "anyOf": [
                {"enum": ["a1", "zz", "b"]},
                {"not": {"anyOf": [{"const": "a"}, {"pattern": "1"}]}},
            ],
            "not": {"pattern": "^z"},
        },
    ],
)
def test_string_combinators_as_one_automaton_agree_with_a_validator(schema: dict) -> None:
    import itertools

    import jsonschema

    compiled = Grammar.from_json_schema(schema).compile(Vocab.byte_level())
    validator = jsonschema.Draft202012Validator(schema)
    decided = {True: 0, False: 0}
    for length in range(6):
        for letters in itertools.product("ab1z", repeat=length):
            text = "".join(letters)
            expected = validator.is_valid(text)
            decided[expected] += 1
            assert accepts(compiled, json.dumps(text)) == expected, text
    assert decided[True] and decided[False]


def test_canonical_text_of_shared_sub_schemas_is_linear_and_exact() -> None:
    # Merged schemas share sub-schemas by reference; 64 levels of two references to the level
    # below unfold to 2^64 leaves, which the canonical text must not visit one by one.
    from gramkiln.frontend.json_schema.combinators import canonical

    def shared(levels: int, leaf: object) -> object:
        node: object = {"const": leaf}
        for _ in range(levels):
            node = {"allOf": [node, node], "x": [node]}
        return node

    assert canonical(shared(64, 1)) == canonical(shared(64, 1.0))
    assert canonical(shared(64, 1)) != canonical(shared(64, True))
    assert canonical(shared(64, 1)) != canonical(shared(63, 1))
    # Values as before: key order does not count, types do.
    assert canonical({"a": 1, "b": [None, "x"]}) == canonical({"b": [None, "x"], "a": 1.0})
    assert canonical({"a": "1"}) != canonical({"a": 1})
    assert canonical([False]) != canonical([0])
    assert canonical({"a": [1, 2]}) != canonical({"a": [2, 1]})


def test_merged_constraint_lists_keep_each_entry_once() -> None:
    # A constraint both sides carry is kept once: kept twice, it doubled with every level of
    # merging (a fuzzed schema reached 4 million copies of two formats and never finished).
    from gramkiln.frontend.json_schema.combinators import merge

    groups = [("anyOf", [{"type": "string"}], "#/anyOf")]
    left = {"__formats": ["email"], "__exclude": [True], "__groups": groups}
    right = {"__formats": ["email", "date"], "__exclude": [1, True], "__groups": groups}
    merged = merge(left, right)
    assert merged["__formats"] == ["email", "date"]
    # True and 1 are different JSON values, both excluded.
    assert merged["__exclude"] == [True, 1]
    assert merged["__groups"] == groups
    for _ in range(64):
        merged = merge(merged, merged)
    assert merged["__formats"] == ["email", "date"]


def _doubling_references(levels: int) -> dict:
    """Each level an allOf of two references to the level below: 2^levels paths to the leaf."""
    defs: dict = {"x0": {"type": "string", "format": "email", "not": {"const": "a@b.cd"}}}
    for level in range(1, levels + 1):
        below = {"$ref": f"#/$defs/x{level - 1}"}
        defs[f"x{level}"] = {"allOf": [below, dict(below)]}
    return {"$defs": defs, "$ref": f"#/$defs/x{levels}"}


def test_exponentially_many_merge_paths_end_in_a_located_error() -> None:
    grammar = Grammar.from_json_schema(_doubling_references(6))
    assert grammar.accepts('"q@r.st"')
    assert not grammar.accepts('"a@b.cd"') and not grammar.accepts('"ab"')
    # 2^20 paths: the merges are bounded, with the place where the bound was met.
    with pytest.raises(GrammarError, match=r"at #/\$defs/x\d+: schema expansion too large"):
        Grammar.from_json_schema(_doubling_references(20))


# Found by the random-schema fuzz: anyOf / oneOf / if nested through a recursive $ref, each
# distributed into the others, kept building new branches for minutes.
DISTRIBUTION_BLOW_UP = json.loads(
    """{"$ref": "#/$defs/u", "const": false, "minLength": 0, "$defs": {"u": {"if": {"exclusiveMinimum": -2}, "then": {"anyOf": [{"if": true, "then": true, "else": {"type": "integer"}, "exclusiveMinimum": -1}], "oneOf": [{"multipleOf": 2}, {"if": {"const": "a"}, "then": {"const": "a"}, "else": false}]}, "format": "uuid", "not": {"maximum": 1}, "anyOf": [{"multipleOf": 2, "oneOf": [{"oneOf": [true, {"type": "integer"}]}, {"not": {"type": "integer"}}, {"$ref": "#/$defs/u", "oneOf": [{"type": "string"}, {"type": "null"}, {"type": "string"}], "allOf": [{}, {"type": "integer"}], "pattern": "^(ab)+$"}], "$ref": "#/$defs/t", "not": {"type": "integer"}}, {"allOf": [{"enum": [1.5], "dependentSchemas": {"c": {"const": "a"}}, "allOf": [{"const": "a"}, {"type": "integer"}, false], "oneOf": [{"type": "integer"}, {}, true]}], "type": ["number", "null"]}, {"format": "date", "pattern": "^[ab]*$"}]}, "t": {"type": "array", "enum": [null, -1]}}}"""
)


def test_branches_distributed_into_each_other_are_bounded() -> None:
    with pytest.raises(GrammarError, match="schema expansion too large: more than 25,000 branches"):
        Grammar.from_json_schema(DISTRIBUTION_BLOW_UP)
