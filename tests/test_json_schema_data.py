"""JSON Schema front end on a small fixed sample of the shared conformance data.

The data lives next to the repository (``../shared/data``); without it these tests skip.
A compiled schema must accept every valid instance (no false negatives); a schema may
instead be reported unsupported with a GrammarError, never crash.
"""

from __future__ import annotations

import gzip
import itertools
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from gramkiln.frontend.json_schema import JsonSchemaOptions

from gramkiln import Grammar
from gramkiln.errors import GrammarError

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
SUITE_FILES = (
    "type",
    "enum",
    "required",
    "properties",
    "items",
    "minimum",
    "oneOf",
    "ref",
    "unevaluatedProperties",
    "unevaluatedItems",
    "if-then-else",
    "not",
    "patternProperties",
    "allOf",
    "anyOf",
    "dynamicRef",
)
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data folder not found at {DATA}")


def _maskbench(split: str, count: int) -> list[tuple[str, Any, list[tuple[Any, bool]]]]:
    cases = []
    with gzip.open(DATA / "maskbench" / f"{split}.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in itertools.islice(handle, count):
            record = json.loads(line)
            tests = [(t["data"], bool(t["valid"])) for t in record["tests"]]
            cases.append((record["id"], record["schema"], tests))
    return cases


def _check(
    schema: Any, tests: list[tuple[Any, bool]], options: JsonSchemaOptions
) -> tuple[int, int]:
    """(false negatives, false positives) for one schema; unsupported counts as none."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = Grammar.from_json_schema(schema, options)
    except GrammarError:
        return 0, 0
    false_negatives = false_positives = 0
    for data, valid in tests:
        text = json.dumps(data)
        if len(text) > 400:  # keep the reference matcher's share of the run small
            continue
        accepted = grammar.accepts(text)
        false_negatives += valid and not accepted
        false_positives += (not valid) and accepted
    return false_negatives, false_positives


@needs_data
@pytest.mark.parametrize(
    "split, count", [("Github_trivial", 12), ("Glaiveai2K", 8), ("Kubernetes", 4)]
)
def test_maskbench_sample_has_no_false_negatives(split: str, count: int) -> None:
    for name, schema, tests in _maskbench(split, count):
        false_negatives, _ = _check(schema, tests, JsonSchemaOptions())
        assert false_negatives == 0, name


@needs_data
@pytest.mark.parametrize("stem", SUITE_FILES)
def test_suite_sample_is_exact(stem: str) -> None:
    groups = json.loads(
        (DATA / "json-schema-test-suite" / "tests" / "draft2020-12" / f"{stem}.json").read_text()
    )
    options = JsonSchemaOptions(property_order="any", formats="annotate")
    for group in groups:
        tests = [(t["data"], bool(t["valid"])) for t in group["tests"]]
        false_negatives, false_positives = _check(group["schema"], tests, options)
        assert (false_negatives, false_positives) == (0, 0), group["description"]


def _suite_remotes() -> dict[str, Any]:
    """The suite's remote documents by the URI its harness serves them at."""
    root = DATA / "json-schema-test-suite" / "remotes"
    return {
        f"http://localhost:1234/{path.relative_to(root).as_posix()}": json.loads(path.read_text())
        for path in sorted(root.rglob("*.json"))
    }


@needs_data
def test_suite_dynamic_references_all_compile_and_are_exact() -> None:
    """Every $dynamicRef group of the suite (remote documents included) compiles: none is
    reported unsupported, and each is exact on its instances."""
    groups = json.loads(
        (DATA / "json-schema-test-suite" / "tests" / "draft2020-12" / "dynamicRef.json").read_text()
    )
    options = JsonSchemaOptions(
        property_order="any", formats="annotate", remote_documents=_suite_remotes()
    )
    for group in groups:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = Grammar.from_json_schema(group["schema"], options)
        for test in group["tests"]:
            accepted = grammar.accepts(json.dumps(test["data"]))
            assert accepted == test["valid"], (group["description"], test["description"])


@needs_data
def test_format_regex_accepts_the_patterns_real_schemas_use() -> None:
    """Every `pattern` / `patternProperties` regex of a MaskBench sample that Python's `re`
    compiles is accepted by `format: regex` (which must never refuse a valid regex)."""
    import re

    patterns: set[str] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    patterns.add(value)
                if key == "patternProperties" and isinstance(value, dict):
                    patterns.update(value)
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for split in ("Github_easy", "Github_medium", "Kubernetes"):
        for _, schema, _ in _maskbench(split, 400):
            collect(schema)
    valid = []
    for pattern in sorted(patterns):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "possible nested set" and the like
                re.compile(pattern)
        except re.error:
            continue
        valid.append(pattern)
    assert len(valid) > 100
    grammar = Grammar.from_json_schema({"type": "string", "format": "regex"})
    rejected = [p for p in valid if not grammar.accepts(json.dumps(p))]
    assert rejected == []
