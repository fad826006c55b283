"""Exception types shared by every layer of gramkiln."""

from __future__ import annotations


class GramkilnError(Exception):
    """Base class of every error gramkiln raises on purpose."""


class GrammarError(GramkilnError, RuntimeError):
    """A grammar source could not be turned into IR.

    Rendered exactly like the reference dialect's messages::

        Lark error at line 3, column 6: expected ':' after rule name
        item missing
             ^
    """

    def __init__(
        self,
        message: str,
        *,
        language: str = "Grammar",
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
    ) -> None:
        self.message = message
        self.language = language
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self.render())

    def render(self) -> str:
        """The full message: header, then the source line and a caret when known."""
        if self.line is None:
            return f"{self.language} error: {self.message}"
        head = f"{self.language} error at line {self.line}, column {self.column}: {self.message}"
        if self.source_line is None:
            return head
        caret = " " * max((self.column or 1) - 1, 0) + "^"
        return f"{head}\n{self.source_line}\n{caret}"

    @classmethod
    def at(cls, language: str, message: str, source: str, offset: int) -> GrammarError:
        """Build an error located at character `offset` of `source` (0-based)."""
        offset = max(0, min(offset, len(source)))
        line_start = source.rfind("\n", 0, offset) + 1
        line_end = source.find("\n", offset)
        if line_end < 0:
            line_end = len(source)
        line = source.count("\n", 0, offset) + 1
        column = offset - line_start + 1
        return cls(
            message,
            language=language,
            line=line,
            column=column,
            source_line=source[line_start:line_end].rstrip("\r"),
        )


class IRError(GramkilnError, ValueError):
    """The IR violates an invariant (raised by `GrammarIR.verify()` or the IR text parser)."""


class ArtifactError(GramkilnError, ValueError):
    """An artifact file is truncated, corrupted, hostile or of an unreadable version."""


class VocabError(GramkilnError, ValueError):
    """A vocabulary could not be loaded or does not match what an artifact was built for."""


class CompileError(GramkilnError, ValueError):
    """A grammar is valid IR but cannot be compiled (unsupported construct or size limit)."""


class AutomatonSizeError(CompileError):
    """A terminal expression needs more automaton states than its NFA or DFA limit allows."""


class EmptyLanguageWarning(UserWarning):
    """A compiled grammar accepts no string over its vocabulary: every mask will be empty.

    Issued, not raised, because an unsatisfiable grammar (e.g. a JSON Schema such as
    ``{"minItems": 3, "maxItems": 1}``) is still an exact answer; a server should refuse the
    request rather than sample from an all-masked distribution.
    """


class EndTokenWarning(UserWarning):
    """A grammar element names only end tokens, so it never matches.

    End tokens (the vocabulary's EOS ids, or `compile(end_tokens=...)`) only end the input and
    are allowed exactly where the input is accepted; no grammar element matches one, as in the
    reference matcher. `start: "a" <|eot_id|>` with `<|eot_id|>` an end token is therefore
    written `start: "a"`.
    """
