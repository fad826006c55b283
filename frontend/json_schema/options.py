"""Options of the JSON Schema front end (output layout and how strictly keywords apply)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class JsonSchemaOptions(BaseModel):
    """How the generated JSON is laid out and how the schema's keywords are interpreted.

    The defaults reproduce ``json.dumps(value)`` exactly: ``", "`` between items, ``": "``
    between key and value, no other whitespace, declared properties in any order, and JSON
    Schema's own meaning of ``additionalProperties`` (allowed unless forbidden).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    item_separator: str = Field(", ", description="text between array items / object members")
    key_separator: str = Field(": ", description="text between a key and its value")
    whitespace: Literal["compact", "flexible"] = Field(
        "compact",
        description="compact: only the separators; flexible: JSON whitespace around tokens",
    )
    max_whitespace: int | None = Field(
        16,
        ge=0,
        description="flexible mode: longest whitespace run (None = unbounded, which lets a "
        "model emit blanks forever)",
    )
    indent: int | str | None = Field(
        None,
        description="like json.dumps(indent=...): newline plus indentation per nesting level",
    )
    max_indent_depth: int = Field(
        24, ge=1, le=200, description="indent mode: deepest nesting level that is laid out"
    )
    strict: bool = Field(
        False, description="no properties beyond those declared (additionalProperties: false)"
    )
    property_order: Literal["schema", "any"] = Field(
        "any",
        description="any: declared properties in any order (required ones beyond a bound are "
        "counted rather than tracked, with a warning); schema: declared order",
    )
    coerce_one_of: bool = Field(
        False, description="treat oneOf whose branches may overlap as anyOf (with a warning)"
    )
    lenient: bool = Field(
        False, description="unsupported constraint keywords become warnings instead of errors"
    )
    formats: Literal["assert", "annotate"] = Field(
        "assert",
        description="assert: enforce the known formats; annotate: treat format as an "
        "annotation only (the 2019-09/2020-12 default for validators)",
    )
    remote_documents: dict[str, Any] | None = Field(
        None, description="schema documents by absolute URI, for $ref outside the schema"
    )

    @model_validator(mode="after")
    def _separators_are_json(self) -> JsonSchemaOptions:
        for label, text, mark in (
            ("item_separator", self.item_separator, ","),
            ("key_separator", self.key_separator, ":"),
        ):
            if text.strip(" \t\n\r") != mark:
                raise ValueError(f"{label} must be {mark!r} with optional JSON whitespace")
        if self.indent is not None and self.whitespace == "flexible":
            # Flexible whitespace already admits every indentation; ignoring `indent` silently
            # would hide that the layout it names is not enforced.
            raise ValueError(
                "indent applies to compact whitespace only: flexible whitespace already "
                "admits any indentation (drop indent, or use whitespace='compact')"
            )
        if isinstance(self.indent, str) and self.indent.strip(" \t") != "":
            raise ValueError("indent must be a number of spaces or a string of spaces/tabs")
        if isinstance(self.indent, int) and not 0 <= self.indent <= 16:
            raise ValueError("indent must be between 0 and 16 spaces")
        return self

    @property
    def indent_unit(self) -> str | None:
        """The text of one indentation level, or None without indentation."""
        if self.indent is None:
            return None
        return " " * self.indent if isinstance(self.indent, int) else self.indent
