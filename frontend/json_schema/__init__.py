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
from typing import Any

from gramkiln.frontend.json_schema.compiler import LANGUAGE, Compiler
from gramkiln.frontend.json_schema.options import JsonSchemaOptions
from gramkiln.ir import GrammarIR

from gramkiln.errors import GrammarError

__all__ = ["JsonSchemaOptions", "json_schema_grammar"]


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
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise GrammarError.at(LANGUAGE, f"invalid JSON: {exc.msg}", exc.doc, exc.pos) from None
        except RecursionError:
            raise GrammarError(
                "the schema text is nested too deeply to parse", language=LANGUAGE
            ) from None
    if options is None:
        options = JsonSchemaOptions()
    elif isinstance(options, dict):
        try:
            options = JsonSchemaOptions(**options)
        except ValueError as exc:
            raise GrammarError(f"invalid options: {exc}", language=LANGUAGE) from None
    elif not isinstance(options, JsonSchemaOptions):
        raise GrammarError("options must be JsonSchemaOptions, a dict or None", language=LANGUAGE)
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
