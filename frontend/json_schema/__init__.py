"""JSON Schema front end: ``json_schema_grammar(schema, options) -> GrammarIR``.

Modules by concern: :mod:`.options` (JsonSchemaOptions), :mod:`.drafts` (draft detection,
keyword tables), :mod:`.refs` ($ref resolution), :mod:`.combinators` (allOf merge, not,
oneOf disjointness), :mod:`.compiler` (driver and per-type dispatch), :mod:`.objects`,
:mod:`.arrays`, :mod:`.strings`, :mod:`.formats`, :mod:`.numbers`, :mod:`.values`,
:mod:`.validate` (fixed values against a schema), :mod:`.layout` (separators), with
:mod:`.automaton` and :mod:`.keys` for exact language operations.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from gramkiln.frontend.json_schema.compiler import LANGUAGE, Compiler
from gramkiln.frontend.json_schema.options import JsonSchemaOptions
from gramkiln.ir import GrammarIR
from gramkiln.ir.memo import operation

from gramkiln.errors import GrammarError

__all__ = ["JsonSchemaOptions", "json_schema_grammar"]


def _refuse_llguidance_wrapper(schema: Any) -> None:
    """An llguidance grammar request ({"grammars": [{"json_schema": ...}]}) read as a schema
    has only an unknown keyword, so it would accept every JSON value without a word."""
    if not isinstance(schema, dict) or set(schema) - {"grammars", "max_tokens"}:
        return
    grammars = schema.get("grammars")
    if isinstance(grammars, list) and all(
        isinstance(g, dict) and ("json_schema" in g or "lark_grammar" in g) for g in grammars
    ):
        raise GrammarError(
            'at #: this is an llguidance grammar request ({"grammars": [...]}), not a JSON '
            'Schema: pass its "json_schema" to from_json_schema, or its "lark_grammar" to '
            "from_lark",
            language=LANGUAGE,
        )


def _pointer_piece(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _as_json_value(schema: Any) -> Any:
    """A schema given as Python objects must be a JSON value: the compiler reads it as one, and
    a non-string key would otherwise be misread in silence (`{1: 2}` as `{}`). Tuples are
    arrays, as `json.dumps` writes them (returned as lists)."""
    has_tuples = False
    stack: list[tuple[Any, str]] = [(schema, "#")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise GrammarError(
                        f"at {where}: object keys must be strings, got {key!r} "
                        f"({type(key).__name__})",
                        language=LANGUAGE,
                    )
                stack.append((item, f"{where}/{_pointer_piece(key)}"))
        elif isinstance(value, (list, tuple)):
            has_tuples = has_tuples or isinstance(value, tuple)
            stack.extend((item, f"{where}/{index}") for index, item in enumerate(value))
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise GrammarError(f"at {where}: {value!r} is not a JSON number", language=LANGUAGE)
        elif value is not None and not isinstance(value, (str, int)):
            raise GrammarError(
                f"at {where}: a {type(value).__name__} is not a JSON value (expected a dict, "
                "list, str, int, float, bool or None)",
                language=LANGUAGE,
            )
    if not has_tuples:
        return schema
    try:
        return json.loads(json.dumps(schema))
    except RecursionError:
        raise GrammarError(
            "at #: the schema is nested too deeply (deeper than Python's recursion limit)",
            language=LANGUAGE,
        ) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@operation()
def json_schema_grammar(
    schema: dict[str, Any] | bool | str, options: JsonSchemaOptions | dict[str, Any] | None = None
) -> GrammarIR:
    """The grammar of JSON documents valid against ``schema`` (a dict, bool or JSON text).

    Raises GrammarError (language "JSON Schema", message led by the JSON pointer of the
    location) for malformed schemas and for constraint keywords that are not enforced; with
    ``options.lenient`` the latter become Python warnings instead.
    """
    if isinstance(schema, str):
        try:
            # Python's reader takes NaN and Infinity, which JSON has no spelling for.
            schema = json.loads(schema, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            raise GrammarError.at(LANGUAGE, f"invalid JSON: {exc.msg}", exc.doc, exc.pos) from None
        except ValueError as exc:
            raise GrammarError(f"invalid JSON: {exc}", language=LANGUAGE) from None
        except RecursionError:
            raise GrammarError(
                "the schema text is nested too deeply to parse", language=LANGUAGE
            ) from None
    else:
        schema = _as_json_value(schema)
    if options is None:
        options = JsonSchemaOptions()
    elif isinstance(options, dict):
        try:
            options = JsonSchemaOptions(**options)
        except ValueError as exc:
            raise GrammarError(f"invalid options: {exc}", language=LANGUAGE) from None
    elif not isinstance(options, JsonSchemaOptions):
        raise GrammarError("options must be JsonSchemaOptions, a dict or None", language=LANGUAGE)
    _refuse_llguidance_wrapper(schema)
    if isinstance(schema, dict) and "x-guidance" in schema:
        warnings.warn(
            "JSON Schema: 'x-guidance' (llguidance's layout options) is ignored; set the layout "
            "with JsonSchemaOptions (whitespace, item_separator, key_separator, max_whitespace)",
            UserWarning,
            stacklevel=2,
        )
    try:
        compiler = Compiler(schema, options)
    except RecursionError:
        # Indexing $id / $anchor walks the document recursively; the compiler itself bounds
        # its nesting (MAX_NESTING) far below this.
        raise GrammarError(
            "at #: the schema is nested too deeply (deeper than Python's recursion limit)",
            language=LANGUAGE,
        ) from None
    return compiler.grammar()
