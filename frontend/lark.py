"""The Lark front end: parse the gramkiln/XGrammar/llguidance dialect of Lark into the IR.

``parse_lark`` turns a grammar source into a ``GrammarIR`` and nothing more: rules and
terminals become ``Rule`` s with source spans, ``%ignore`` expressions go to
``GrammarIR.ignore`` unwoven, ``%grammar_options`` to ``GrammarOptions``, rule options to
``RuleOptions``, and ``%json`` / ``%lark`` / ``@name`` become sub-grammars referenced by
``Embed`` nodes. Lowering (ignore weaving, inlining, lazy rules) is the passes' job.

The reference for the dialect is the seed text (docs/lark.md lists what is supported). Every
problem in a source is reported as a ``GrammarError`` located at the offending character,
rendered as ``Lark error at line L, column C: message`` plus the line and a caret.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gramkiln.frontend._lark_scan import LANGUAGE, NAME_RE, Source, Token, read_token, skip_blank
from gramkiln.frontend._regular_ops import compute_operations
from gramkiln.frontend.json_schema.layout import JSON_WHITESPACE
from gramkiln.frontend.json_schema.options import JsonSchemaOptions
from gramkiln.frontend.lark_common import common_terminal
from gramkiln.frontend.lark_dispatch import apply_dispatch
from gramkiln.frontend.regex import MAX_REPEAT
from gramkiln.ir import (
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    GrammarIR,
    GrammarOptions,
    Literal,
    Ref,
    Repeat,
    Rule,
    RuleOptions,
    Seq,
    Span,
    SpecialToken,
    Subgrammar,
    TokenSet,
    strip_spans,
)
from gramkiln.ir.grammar import (
    CAPTURE_NAME,
    MAX_CHARS_LIMIT,
    MAX_TOKENS_LIMIT,
    reference_cycles,
)
from gramkiln.ir.memo import operation
from gramkiln.ir.nodes import MAX_TOKEN_ID
from pydantic import ValidationError

from gramkiln.errors import GramkilnError, GrammarError

__all__ = ["parse_lark"]

START_RULE = "start"
# Groups and %lark blocks nest by recursion; this bound keeps far below Python's stack limit.
MAX_NESTING = 100
MAX_TOKEN_RANGE_SPAN = 1_000_000
GRAMMAR_OPTION_NAMES = frozenset(GrammarOptions.model_fields)
# %json values follow the peers' JSON Schema converters (XGrammar's any_whitespace, llguidance's
# flexible whitespace): JSON whitespace between tokens, "," and ":" as separators, so both
# '{"x":1}' and '{ "x" : 1 }' are accepted. The run length keeps the converter's own bound.
EMBEDDED_JSON_OPTIONS = JsonSchemaOptions(
    whitespace="flexible", item_separator=",", key_separator=":"
)
# llguidance's other grammar options: grammars written for it may spell out their default
# (false), which changes nothing; true would change the language or the forcing behaviour.
DEFAULT_ONLY_GRAMMAR_OPTIONS = frozenset({"no_forcing", "allow_invalid_utf8"})
RULE_OPTION_NAMES = (
    "lazy",
    "suffix",
    "stop",
    "stop_capture",
    "max_tokens",
    "max_chars",
    "capture",
    "temperature",
)
# The value of a '|' token that starts a continuation line.
CONTINUATION = "continuation"
# Tokens that can begin an element of a sequence.
_ATOM_KINDS = frozenset({"string", "regex", "name", "special", "at"})
_ATOM_OPS = frozenset({"(", "["})
_EMBED_DIRECTIVES = frozenset({"%json", "%lark"})
# llguidance syntax outside the seed's dialect: a clear error that names the feature.
_LLGUIDANCE_ONLY_DIRECTIVES = {
    "%regex": "structured %regex (llguidance substring lexemes) is not supported",
    "%if": "parametric %if conditions (an llguidance extension) are not supported",
}


@operation()
def parse_lark(
    source: str,
    named_grammars: Mapping[str, GrammarIR | str] | None = None,
    vocab: Any = None,
) -> GrammarIR:
    """Parse a Lark-dialect grammar into a ``GrammarIR`` whose start rule is ``start``.

    ``named_grammars`` supplies the grammars referenced as ``@name`` (values are IR or Lark
    source strings, which may reference each other). ``vocab`` (a ``Vocab`` or a list of
    token strings) is only used to check that named special tokens such as ``<|tool|>``
    exist; without it they are resolved at compile time. Raises ``GrammarError``.
    """
    if not isinstance(source, str):
        raise GrammarError(
            f"grammar source must be a str, not {type(source).__name__}", language=LANGUAGE
        )
    if named_grammars is not None and not isinstance(named_grammars, Mapping):
        raise TypeError(
            f"named_grammars must be a mapping of names to grammars, not {type(named_grammars).__name__}"
        )
    if vocab is not None and not (
        callable(getattr(vocab, "ids_for_text", None)) or isinstance(vocab, (list, tuple))
    ):
        raise TypeError(
            f"vocab must be a gramkiln Vocab or a list of token strings, not {type(vocab).__name__}"
        )
    resolver = _NamedGrammars(named_grammars, vocab)
    try:
        return _Parser(Source(source), 0, resolver, vocab).parse_grammar()
    except RecursionError:
        # A very long chain of named grammars referencing each other; groups and %lark
        # blocks are bounded by MAX_NESTING before this can happen.
        raise GrammarError("grammar is nested too deeply", language=LANGUAGE) from None


# ---------------------------------------------------------------------------------------------
# named grammars


class _NamedGrammars:
    """Resolves ``@name`` references: parses string entries once, detects cycles."""

    def __init__(self, named: Mapping[str, GrammarIR | str] | None, vocab: Any) -> None:
        self._entries: dict[str, GrammarIR | str] = {}
        for name, value in (named or {}).items():
            # A gramkiln.Grammar stands for its IR (the facade converts too; this keeps
            # direct callers of parse_lark working).
            value = getattr(value, "ir", value)
            if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
                raise GrammarError(
                    f"invalid named grammar key {name!r}: use letters, digits, '_' and '-'"
                    " (without the leading '@')",
                    language=LANGUAGE,
                )
            if not isinstance(value, (GrammarIR, str)):
                raise GrammarError(
                    f"named grammar {name!r} must be a Grammar, GrammarIR or Lark source string,"
                    f" not {type(value).__name__}",
                    language=LANGUAGE,
                )
            self._entries[name] = value
        self._vocab = vocab
        self._resolved: dict[str, GrammarIR] = {}
        self._in_progress: list[str] = []

    def resolve(self, name: str, source: Source, offset: int) -> GrammarIR:
        """The IR of named grammar ``name``, referenced at ``offset`` of ``source``."""
        if name in self._resolved:
            return self._resolved[name]
        if name in self._in_progress:
            chain = self._in_progress[self._in_progress.index(name) :] + [name]
            raise source.error(
                f"circular named grammar reference: {' -> '.join('@' + link for link in chain)}",
                offset,
            )
        if name not in self._entries:
            raise source.error(f"unknown named grammar @{name}", offset)
        value = self._entries[name]
        if isinstance(value, GrammarIR):
            grammar = value
        else:
            self._in_progress.append(name)
            try:
                grammar = _Parser(Source(value), 0, self, self._vocab).parse_grammar()
            except GrammarError as error:
                raise _in_named_grammar(error, name) from None
            finally:
                self._in_progress.pop()
        self._resolved[name] = grammar
        return grammar


class _NamedGrammarError(GrammarError):
    """A GrammarError inside a named grammar's source (prefixed with the grammar's name once)."""


def _in_named_grammar(error: GrammarError, name: str) -> GrammarError:
    if isinstance(error, _NamedGrammarError):
        return error
    return _NamedGrammarError(
        f"in named grammar '{name}': {error.message}",
        language=LANGUAGE,
        line=error.line,
        column=error.column,
        source_line=error.source_line,
    )


# ---------------------------------------------------------------------------------------------
# the parser


@dataclass
class _Definition:
    """A rule or terminal (or import) being collected, before the IR Rule is built."""

    name: str
    terminal: bool
    body: Expr
    options: RuleOptions
    start: int
    end: int
    name_offset: int
    # (name, offset) of each Ref in the body, in source order, for located checks.
    refs: list[tuple[str, int]] = field(default_factory=list)


class _Parser:
    """Recursive-descent parser for one grammar (the top level, a %lark block or a named one).

    ``pos`` walks the shared ``Source``; a ``%lark`` block is parsed by a child parser that
    starts after its ``{`` and stops at the matching ``}``, so every error is located in the
    text the user wrote.
    """

    def __init__(
        self,
        source: Source,
        pos: int,
        resolver: _NamedGrammars,
        vocab: Any,
        nested_at: int | None = None,
        nesting: int = 0,
    ) -> None:
        self.src = source
        self.text = source.text
        self.pos = pos
        self.resolver = resolver
        self.vocab = vocab
        # Offset of the '%lark' keyword when this parser reads a nested block.
        self.nested_at = nested_at
        # How many groups and %lark blocks enclose the current position.
        self.nesting = nesting
        self.definitions: dict[str, _Definition] = {}
        self.ignore: list[Expr] = []
        self.ignore_refs: list[tuple[str, int]] = []
        self.options: dict[str, Any] = {}
        self.subgrammars: dict[str, GrammarIR] = {}
        self.embed_counters = {"json": 0, "lark": 0}
        # State of the expression being parsed.
        self.in_terminal = False
        self.in_lexeme_rule = False
        self.in_ignore = False
        self.current_refs: list[tuple[str, int]] = []
        # llguidance's '&' and '~' on terminals: (helper terminal, operator, left, right,
        # offset), computed as automata in finish() once every terminal is known.
        self.set_operations: list[tuple[str, str, Expr | None, Expr, int]] = []
        # Terminal names used as suffix/stop markers of the definition being parsed.
        self.marker_refs: list[tuple[str, int]] = []
        # The token that peek() found at a position (a one-entry cache).
        self.peeked: tuple[int, Token | None] = (-1, None)

    # -- token access ---------------------------------------------------------------------
    def peek(self) -> Token:
        """The next token; a newline whose next non-blank line starts with '|' reads as '|'."""
        cached_pos, cached = self.peeked
        if cached_pos == self.pos and cached is not None:
            # The parser peeks at the same position several times per element.
            return cached
        pos = skip_blank(self.text, self.pos, newlines=False)
        token = read_token(self.src, pos)
        if token.kind == "newline":
            after = skip_blank(self.text, pos, newlines=True)
            if self.text.startswith("|", after):
                token = Token("op", "|", after, after + 1, CONTINUATION)
        self.peeked = (self.pos, token)
        return token

    def advance(self) -> Token:
        """Consume and return the next token."""
        token = self.peek()
        self.pos = token.end
        return token

    def at_op(self, *ops: str) -> bool:
        """Whether the next token is one of the punctuation operators ``ops``."""
        token = self.peek()
        return token.kind == "op" and token.text in ops

    def expect_op(self, op: str, message: str) -> Token:
        """Consume operator ``op`` or fail with ``message`` at the token found instead."""
        token = self.peek()
        if token.kind != "op" or token.text != op:
            raise self.src.error(message, token.start)
        return self.advance()

    def unexpected(self, token: Token) -> GrammarError:
        """The error for a token that cannot appear where it was found."""
        if token.kind == "op" and token.text in ")]}":
            return self.src.error(f"unmatched '{token.text}'", token.start)
        if token.kind == "op" and token.text == "~":
            return self.src.error(
                "complement '~' (an llguidance extension) applies to terminal definitions "
                "only; in rules '~' may only follow an element as a repetition count",
                token.start,
            )
        if token.kind == "op" and token.text == "&":
            return self.src.error(
                "intersection '&' (an llguidance extension) applies to terminal definitions only",
                token.start,
            )
        if token.kind == "directive" and token.text in _LLGUIDANCE_ONLY_DIRECTIVES:
            return self.src.error(_LLGUIDANCE_ONLY_DIRECTIVES[token.text], token.start)
        return self.src.error(f"unexpected {token.describe()}", token.start)

    # -- grammar ----------------------------------------------------------------------------
    def parse_grammar(self) -> GrammarIR:
        """Parse items until the end of input (or the closing '}' of a %lark block)."""
        while True:
            self.pos = skip_blank(self.text, self.pos, newlines=True)
            token = read_token(self.src, self.pos)
            if token.kind == "eof":
                if self.nested_at is not None:
                    raise self.src.error("unclosed %lark block: expected '}'", self.nested_at)
                break
            if token.kind == "op" and token.text == "}" and self.nested_at is not None:
                self.pos = token.end
                break
            self.parse_item(token)
            end = self.peek()
            if end.kind == "newline":
                self.pos = end.end
            elif end.kind == "eof":
                self.pos = end.end
            elif end.value == CONTINUATION:
                raise self.src.error("a line starting with '|' must continue a rule", end.start)
            elif not (end.kind == "op" and end.text == "}" and self.nested_at is not None):
                raise self.unexpected(end)
        return self.finish()

    def parse_item(self, token: Token) -> None:
        """One rule, terminal or directive."""
        if token.kind == "directive":
            self.parse_directive()
        elif token.kind == "name" or (token.kind == "op" and token.text in "?!"):
            self.parse_definition()
        elif token.kind == "op" and token.text == "|":
            raise self.src.error("a line starting with '|' must continue a rule", token.start)
        else:
            raise self.src.error(
                f"expected a rule, a terminal or a directive, found {token.describe()}",
                token.start,
            )

    # -- definitions ------------------------------------------------------------------------
    def parse_definition(self) -> None:
        """``[?!]name[.priority][options]: expansions``."""
        start = self.peek().start
        prefixes: set[str] = set()
        while self.at_op("?", "!") and self.peek().text not in prefixes:
            # Parse-tree shaping prefixes, alone or both (`!?a`, `?!a`, as lark writes them):
            # accepted and ignored (they do not change the language).
            prefixes.add(self.advance().text)
        name_token = self.advance()
        if name_token.kind != "name":
            raise self.src.error("expected a rule name after the prefix", name_token.start)
        name = name_token.text
        self.forbid_parametric(name_token)
        terminal = self.classify(name, name_token.start)
        if self.at_op("."):
            # Lark terminal priorities (NAME.2:) only steer a lexer; exact matching has none.
            self.advance()
            priority = self.advance()
            if priority.kind != "number" or not _is_int(priority.text.removeprefix("-")):
                raise self.src.error("expected an integer priority after '.'", priority.start)
        if self.at_op("{"):
            raise self.src.error("rule templates are not supported", self.peek().start)
        options = RuleOptions()
        if self.at_op("["):
            bracket = self.peek()
            if terminal:
                raise self.src.error("terminals cannot carry rule options", bracket.start)
            options = self.parse_rule_options(name)
        self.expect_op(":", "expected ':' after rule name")
        self.in_terminal = terminal
        # A lazy, suffix or stop body compiles to one automaton, like a terminal (seed: a
        # body that needs rule references is rejected).
        self.in_lexeme_rule = (
            options.lazy or options.suffix is not None or (options.stop is not None)
        )
        self.current_refs = []
        try:
            body = self.parse_expansions()
        finally:
            self.in_terminal = False
            self.in_lexeme_rule = False
        refs = self.current_refs + self.marker_refs
        self.marker_refs = []
        self.define(
            _Definition(
                name=name,
                terminal=terminal,
                body=body,
                options=options,
                start=start,
                end=max(self.pos, name_token.end),
                name_offset=name_token.start,
                refs=refs,
            ),
            f"duplicate definition of '{name}'",
        )

    def classify(self, name: str, offset: int) -> bool:
        """True for a terminal name, False for a rule name (a leading '_' is skipped)."""
        first = name.lstrip("_")[:1]
        if first.isupper():
            return True
        if first.islower():
            return False
        raise self.src.error(
            f"name '{name}' must start with a letter (after any leading '_')", offset
        )

    def define(self, definition: _Definition, message: str) -> None:
        """Register a definition; ``message`` is the error when the name is already taken."""
        first = self.definitions.get(definition.name)
        if first is not None:
            first_line, _ = self.src.line_column(first.name_offset)
            raise self.src.error(f"{message} (first on line {first_line})", definition.name_offset)
        self.definitions[definition.name] = definition

    # -- rule options -----------------------------------------------------------------------
    def parse_rule_options(self, rule_name: str) -> RuleOptions:
        """``[lazy, suffix="x", stop=/re/, max_tokens=5, capture="n", ...]``."""
        bracket = self.advance()
        values: dict[str, Any] = {}
        self.marker_refs = []
        while True:
            key = self.advance()
            if key.kind != "name":
                raise self.src.error("expected a rule option name", key.start)
            if key.text not in RULE_OPTION_NAMES:
                raise self.src.error(f"unknown rule option '{key.text}'", key.start)
            if key.text in values:
                raise self.src.error(f"duplicate rule option '{key.text}'", key.start)
            values[key.text] = self.parse_rule_option_value(key, rule_name)
            separator = self.advance()
            if separator.kind == "op" and separator.text == "]":
                break
            if not (separator.kind == "op" and separator.text == ","):
                raise self.src.error("expected ',' or ']' in rule options", separator.start)
        if "stop_capture" in values and "suffix" not in values and "stop" not in values:
            raise self.src.error("stop_capture requires suffix or stop", bracket.start)
        if "suffix" in values and "stop" in values:
            raise self.src.error("suffix and stop cannot be used together", bracket.start)
        try:
            return RuleOptions(**values)
        except ValidationError as error:
            raise self.src.error(_validation_message(error), bracket.start) from None

    def parse_rule_option_value(self, key: Token, rule_name: str) -> Any:
        """The value of one option (after its name); flags take no '='."""
        option = key.text
        if option == "lazy":
            if self.at_op("="):
                raise self.src.error("lazy takes no value", self.peek().start)
            return True
        if option == "capture" and not self.at_op("="):
            if CAPTURE_NAME.match(rule_name) is None:
                raise self.src.error(
                    f"rule name '{rule_name}' is not a valid capture name", key.start
                )
            return rule_name
        self.expect_op("=", f"expected '=' after '{option}'")
        value = self.advance()
        if option in ("suffix", "stop"):
            return self.parse_marker(value, option)
        if option in ("capture", "stop_capture"):
            text = self.string_value(value, f"{option} expects a string name")
            if CAPTURE_NAME.match(text) is None:
                raise self.src.error(
                    f"{option} name {text!r} may contain only letters, digits, '_', '-' and '.'",
                    value.start,
                )
            return text
        if option in ("max_tokens", "max_chars"):
            if value.kind != "number" or not _is_int(value.text.removeprefix("-")):
                raise self.src.error(f"{option} expects an integer", value.start)
            number = int(value.text)
            low, high = (1, MAX_TOKENS_LIMIT) if option == "max_tokens" else (0, MAX_CHARS_LIMIT)
            if not low <= number <= high:
                raise self.src.error(f"{option} must be between {low} and {high:,}", value.start)
            return number
        # temperature
        if value.kind != "number":
            raise self.src.error("temperature expects a number", value.start)
        temperature = float(value.text)
        if not math.isfinite(temperature) or temperature < 0:
            raise self.src.error("temperature must be a finite non-negative number", value.start)
        return temperature

    def parse_marker(self, token: Token, option: str) -> Expr:
        """A suffix/stop marker: a string literal, a regex or a terminal name."""
        if token.kind == "string":
            text, insensitive = token.value  # type: ignore[misc]
            if text == "":
                raise self.src.error(
                    f"an empty string {option} marker is not accepted", token.start
                )
            return self.make_literal(token, text, insensitive)
        if token.kind == "regex":
            return self.make_regex(token)
        if token.kind == "name" and self.classify(token.text, token.start):
            self.marker_refs.append((token.text, token.start))
            return Ref(name=token.text, span=self.src.span(token.start, token.end))
        raise self.src.error(
            f"{option} marker must be a string, a regex or a terminal name", token.start
        )

    def string_value(self, token: Token, message: str) -> str:
        if token.kind != "string":
            raise self.src.error(message, token.start)
        text, insensitive = token.value  # type: ignore[misc]
        if insensitive:
            raise self.src.error("the i flag is not allowed here", token.end - 1)
        return text

    # -- directives -------------------------------------------------------------------------
    def parse_directive(self) -> None:
        token = self.advance()
        directive = token.text
        if directive == "%import":
            self.parse_import(token)
        elif directive == "%ignore":
            self.parse_ignore()
        elif directive in ("%grammar_options", "%llguidance"):
            # %llguidance is llguidance's name for the same JSON object of grammar options.
            self.parse_grammar_options(token)
        elif directive in _EMBED_DIRECTIVES:
            raise self.src.error(f"{directive} can only be used inside a rule", token.start)
        elif directive in ("%declare", "%override", "%extend"):
            raise self.src.error(f"directive {directive} is not supported", token.start)
        else:
            raise self.src.error(f"unknown directive '{directive}'", token.start)

    def parse_import(self, directive: Token) -> None:
        """``%import common.NAME [-> ALIAS]`` or ``%import common (A, B, ...)``."""
        module = self.advance()
        if module.kind != "name" or module.text != "common":
            raise self.src.error("only the common library can be imported", module.start)
        if self.at_op("."):
            self.advance()
            name = self.advance()
            if name.kind != "name":
                raise self.src.error("expected a terminal name after 'common.'", name.start)
            alias = name
            if self.at_op("->"):
                self.advance()
                alias = self.advance()
                if alias.kind != "name":
                    raise self.src.error("expected a terminal name after '->'", alias.start)
            self.import_common(directive, name, alias)
        elif self.at_op("("):
            self.advance()
            while True:
                name = self.advance()
                if name.kind != "name":
                    raise self.src.error("expected a terminal name", name.start)
                self.import_common(directive, name, name)
                separator = self.advance()
                if separator.kind == "op" and separator.text == ")":
                    break
                if not (separator.kind == "op" and separator.text == ","):
                    raise self.src.error("expected ',' or ')' in %import list", separator.start)
        else:
            token = self.peek()
            raise self.src.error("expected '.NAME' or '(NAME, ...)' after 'common'", token.start)

    def import_common(self, directive: Token, name: Token, alias: Token) -> None:
        body = common_terminal(name.text)
        if body is None:
            raise self.src.error(f"'{name.text}' is not in the common library", name.start)
        if not self.classify(alias.text, alias.start):
            raise self.src.error(
                f"cannot import '{name.text}' as '{alias.text}': a terminal needs an uppercase name",
                alias.start,
            )
        self.define(
            _Definition(
                name=alias.text,
                terminal=True,
                body=body,
                options=RuleOptions(),
                start=directive.start,
                end=alias.end,
                name_offset=alias.start,
            ),
            f"cannot import '{alias.text}': already defined",
        )

    def parse_ignore(self) -> None:
        start = self.peek()
        if not self.starts_atom(start):
            raise self.src.error("%ignore needs an expression", start.start)
        self.in_ignore = True
        self.current_refs = []
        try:
            expr = self.parse_expansions()
        finally:
            self.in_ignore = False
        self.ignore.append(expr)
        self.ignore_refs.extend(self.current_refs)

    def parse_grammar_options(self, directive: Token) -> None:
        value, start = self.read_json(directive.text)
        if not isinstance(value, dict):
            raise self.src.error(f"{directive.text} expects a JSON object", start)
        for key, setting in value.items():
            if key not in GRAMMAR_OPTION_NAMES and key not in DEFAULT_ONLY_GRAMMAR_OPTIONS:
                raise self.src.error(f"unknown grammar option '{key}'", start)
            if not isinstance(setting, bool):
                raise self.src.error(f"grammar option '{key}' must be true or false", start)
            if key in DEFAULT_ONLY_GRAMMAR_OPTIONS:
                if setting:
                    raise self.src.error(
                        f"grammar option '{key}' is not supported (only false, its default)",
                        start,
                    )
                continue
            self.options[key] = setting

    def read_json(self, what: str) -> tuple[Any, int]:
        """Decode the JSON value that follows; returns it and its start offset."""
        start = skip_blank(self.text, self.pos, newlines=False)
        if start >= len(self.text) or self.text[start] in "\n":
            raise self.src.error(f"{what} expects a JSON value", start)
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, start)
        except json.JSONDecodeError as error:
            raise self.src.error(f"invalid JSON after {what}: {error.msg}", error.pos) from None
        except RecursionError:
            raise self.src.error(f"JSON after {what} is nested too deeply", start) from None
        self.pos = end
        return value, start

    # -- expressions ------------------------------------------------------------------------
    def parse_expansions(self) -> Expr:
        """Alternatives separated by '|' (continuation lines included)."""
        start = self.peek().start
        alternatives = [self.parse_alias()]
        while self.at_op("|"):
            self.advance()
            alternatives.append(self.parse_alias())
        if len(alternatives) == 1:
            return alternatives[0]
        return Choice(alternatives=tuple(alternatives), span=self.src.span(start, self.pos))

    def parse_alias(self) -> Expr:
        """A sequence with an optional ``-> alias`` (accepted and ignored: tree shaping only)."""
        expr = self.parse_sequence()
        while self.at_op("&"):
            operator = self.peek()
            if not self.in_regular_context():
                raise self.unexpected(operator)
            self.advance()
            expr = self.regular_operation("&", expr, self.parse_sequence(), operator)
        if self.at_op("->"):
            self.advance()
            alias = self.advance()
            if alias.kind != "name":
                raise self.src.error("expected an alias name after '->'", alias.start)
        return expr

    def parse_sequence(self) -> Expr:
        start = self.peek().start
        items: list[Expr] = []
        while self.starts_atom(self.peek()) or self.at_complement():
            items.append(self.parse_repetition())
        if not items:
            return Empty(span=self.src.span(start, start))
        if len(items) == 1:
            return items[0]
        return Seq(items=tuple(items), span=self.src.span(start, self.pos))

    def in_regular_context(self) -> bool:
        """Whether the expression being read is a terminal expression (a terminal, a lazy,
        suffix or stop rule's body, or %ignore), where '&' and '~' may combine terminals."""
        return self.in_terminal or self.in_lexeme_rule or self.in_ignore

    def at_complement(self) -> bool:
        """A '~' that starts an element: llguidance's complement, not a repetition count."""
        token = self.peek()
        if token.kind != "op" or token.text != "~" or not self.in_regular_context():
            return False
        following = read_token(self.src, skip_blank(self.text, token.end, newlines=False))
        return following.kind != "number"

    def regular_operation(
        self, operator: str, left: Expr | None, right: Expr, token: Token
    ) -> Expr:
        """A helper terminal standing for ``left & right`` or ``~right`` (built in finish)."""
        name = f"op.{len(self.set_operations)}"
        self.set_operations.append((name, operator, left, right, token.start))
        return Ref(name=name, span=self.src.span(token.start, self.pos))

    @staticmethod
    def starts_atom(token: Token) -> bool:
        if token.kind in _ATOM_KINDS:
            return True
        if token.kind == "op":
            return token.text in _ATOM_OPS
        return token.kind == "directive" and token.text in _EMBED_DIRECTIVES

    def parse_repetition(self) -> Expr:
        """An atom with at most one repetition operator."""
        start = self.peek().start
        atom = self.parse_atom()
        token = self.peek()
        if token.kind != "op" or token.text not in ("?", "*", "+", "~", "{"):
            return atom
        if self.at_complement():
            return atom
        self.advance()
        if token.text == "?":
            low, high = 0, 1
        elif token.text == "*":
            low, high = 0, None
        elif token.text == "+":
            low, high = 1, None
        elif token.text == "~":
            low = high = self.read_count()
            if self.at_op(".."):
                self.advance()
                high = self.read_count()
        else:
            low, high = self.parse_braces(token)
        if high is not None and high < low:
            raise self.src.error(
                f"repetition upper bound {high} is below lower bound {low}", token.start
            )
        following = self.peek()
        if (
            following.kind == "op"
            and following.text in ("?", "*", "+", "~", "{")
            and not self.at_complement()
        ):
            raise self.src.error(
                "repetition operators cannot be stacked; use parentheses", following.start
            )
        return Repeat(item=atom, min=low, max=high, span=self.src.span(start, self.pos))

    def parse_braces(self, brace: Token) -> tuple[int, int | None]:
        """``{n}``, ``{m,n}``, ``{m,}``, ``{,n}`` (after the '{')."""
        low: int | None = None
        high: int | None = None
        if self.peek().kind == "name":
            raise self.src.error("rule templates are not supported", brace.start)
        if self.peek().kind == "number":
            low = self.read_count()
        if self.at_op(","):
            self.advance()
            if self.peek().kind == "number":
                high = self.read_count()
            if low is None and high is None:
                raise self.src.error("expected a repetition count in '{}'", brace.start)
            low = 0 if low is None else low
        elif low is None:
            raise self.src.error("expected a repetition count in '{}'", brace.start)
        else:
            high = low
        self.expect_op("}", "expected '}' after the repetition count")
        return low, high

    def read_count(self) -> int:
        token = self.advance()
        if token.kind != "number" or not _is_int(token.text):
            raise self.src.error("expected a non-negative integer count", token.start)
        count = int(token.text)
        if count > MAX_REPEAT:
            # Same bound as the regex and EBNF front ends: larger counts cannot be compiled.
            raise self.src.error(
                f"repetition count {count} exceeds the limit of {MAX_REPEAT:,}", token.start
            )
        return count

    def parse_atom(self) -> Expr:
        if self.at_complement():
            # '~' binds tighter than repetition: ~A+ is (~A)+, as in llguidance.
            tilde = self.advance()
            operand = self.parse_atom()
            return self.regular_operation("~", None, operand, tilde)
        token = self.advance()
        if token.kind == "op" and token.text in "([":
            closer = ")" if token.text == "(" else "]"
            self.enter_nesting(token)
            inner = self.parse_expansions()
            self.nesting -= 1
            if not self.at_op(closer):
                found = self.peek()
                if found.kind == "op" and found.text in ")]":
                    raise self.src.error(f"expected '{closer}', found '{found.text}'", found.start)
                raise self.src.error(f"unclosed '{token.text}'", token.start)
            self.advance()
            if token.text == "(":
                return inner
            return Repeat(item=inner, min=0, max=1, span=self.src.span(token.start, self.pos))
        if token.kind == "string":
            return self.parse_string_atom(token)
        if token.kind == "regex":
            return self.make_regex(token)
        if token.kind == "name":
            return self.make_ref(token)
        if token.kind == "special":
            return self.make_special(token)
        if token.kind == "at":
            return self.make_named_embed(token)
        if token.kind == "directive" and token.text == "%json":
            return self.make_json_embed(token)
        if token.kind == "directive" and token.text == "%lark":
            return self.make_lark_embed(token)
        raise self.unexpected(token)

    def enter_nesting(self, token: Token) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.src.error(f"nested more than {MAX_NESTING} levels deep", token.start)

    def parse_string_atom(self, token: Token) -> Expr:
        text, insensitive = token.value  # type: ignore[misc]
        if not self.at_op(".."):
            return self.make_literal(token, text, insensitive)
        self.advance()
        end = self.advance()
        if end.kind != "string":
            raise self.src.error("expected a string after '..'", end.start)
        end_text, end_insensitive = end.value  # type: ignore[misc]
        if insensitive or end_insensitive:
            flagged = token if insensitive else end
            raise self.src.error("the i flag is not allowed on range endpoints", flagged.end - 1)
        for endpoint, value in ((token, text), (end, end_text)):
            if len(value) != 1:
                raise self.src.error(
                    "range endpoints must be exactly one character", endpoint.start
                )
        low, high = ord(text), ord(end_text)
        if low > high:
            raise self.src.error(f"range start {text!r} is after its end {end_text!r}", token.start)
        return CharClass.of([(low, high)], span=self.src.span(token.start, end.end))

    def make_literal(self, token: Token, text: str, insensitive: bool) -> Expr:
        span = self.src.span(token.start, token.end)
        if insensitive and not text.isascii():
            raise self.src.error(
                "case-insensitive literals support ASCII characters only", token.start
            )
        if text == "":
            return Empty(span=span)
        return Literal(text=text, case_insensitive=insensitive, span=span)

    def make_regex(self, token: Token) -> Expr:
        pattern, flags, offsets = token.value  # type: ignore[misc]
        from gramkiln.frontend.regex import RegexError, parse_regex

        try:
            expr = parse_regex(pattern, flags, lazy_as_greedy=True)
        except RegexError as error:
            offset = getattr(error, "offset", None)
            if isinstance(offset, int) and 0 <= offset < len(offsets):
                where = offsets[offset]
            else:
                where = offsets[-1] if isinstance(offset, int) and offset >= 0 else token.start
            raise self.src.error(f"invalid regex: {error.message}", where) from None
        except GrammarError as error:
            raise self.src.error(f"invalid regex: {error.message}", token.start) from None
        # Spans inside the regex are relative to the pattern; only the whole regex gets a
        # Lark-source span.
        bare = strip_spans(expr)
        return bare.model_copy(update={"span": self.src.span(token.start, token.end)})

    def forbid_parametric(self, name_token: Token) -> None:
        """llguidance's parametric rules (``name::param``) are outside the seed's dialect."""
        if self.text.startswith("::", name_token.end):
            raise self.src.error(
                "parametric rules (name::param, an llguidance extension) are not supported",
                name_token.end,
            )

    def make_ref(self, token: Token) -> Expr:
        name = token.text
        self.forbid_parametric(token)
        terminal = self.classify(name, token.start)
        if self.in_terminal and not terminal:
            raise self.src.error(f"a terminal cannot reference rule '{name}'", token.start)
        if self.in_lexeme_rule and not terminal:
            raise self.src.error(
                f"a lazy, suffix or stop rule's body must be a terminal expression: it cannot "
                f"reference rule '{name}' (write it with terminals, strings and regexes)",
                token.start,
            )
        if self.in_ignore and not terminal:
            raise self.src.error(
                f"%ignore can only use terminals, strings and regexes, not rule '{name}'",
                token.start,
            )
        self.current_refs.append((name, token.start))
        return Ref(name=name, span=self.src.span(token.start, token.end))

    def forbid_in_lexeme(self, token: Token, what: str) -> None:
        """Special tokens and embedded grammars are elements of rules only."""
        if self.in_terminal:
            raise self.src.error(f"{what} cannot appear in terminals", token.start)
        if self.in_ignore:
            raise self.src.error(f"{what} cannot appear in %ignore", token.start)

    def make_special(self, token: Token) -> Expr:
        self.forbid_in_lexeme(token, "special tokens")
        span = self.src.span(token.start, token.end)
        text = token.text
        if text.startswith("<[") and text.endswith("]>"):
            return self.parse_token_set(token, span)
        if self.vocab is not None and not _vocab_has(self.vocab, text):
            raise self.src.error(f"special token {text} is not in the vocabulary", token.start)
        return SpecialToken(text=text, span=span)

    def parse_token_set(self, token: Token, span: Any) -> Expr:
        """``<[1,3-8]>``, ``<[^1]>``, ``<[*]>``: token ids, negated sets and the wildcard."""
        body = token.text[2:-2]
        offset = token.start + 2
        negated = body.startswith("^")
        if negated:
            body, offset = body[1:], offset + 1
        if body.strip() == "*":
            if negated:
                raise self.src.error("the negated wildcard <[^*]> is not allowed", token.start)
            return TokenSet(wildcard=True, span=span)
        if "*" in body:
            raise self.src.error(
                "the wildcard * cannot be combined with token ids in a token set", token.start
            )
        ranges: list[tuple[int, int]] = []
        for part in body.split(","):
            where = offset + len(part) - len(part.lstrip())
            item = part.strip()
            low_text, dash, high_text = item.partition("-")
            if not _is_int(low_text) or (dash and not _is_int(high_text)):
                raise self.src.error(
                    "expected a token id or an id range like 3-8 in a token set", where
                )
            low = int(low_text)
            high = int(high_text) if dash else low
            if high < low:
                raise self.src.error(f"token id range {item} is reversed", where)
            if high > MAX_TOKEN_ID:
                raise self.src.error(
                    f"token id {high} is beyond the largest token id ({MAX_TOKEN_ID:,})", where
                )
            if high - low > MAX_TOKEN_RANGE_SPAN:
                raise self.src.error(
                    f"token id range {item} spans more than {MAX_TOKEN_RANGE_SPAN:,} ids", where
                )
            ranges.append((low, high))
            offset += len(part) + 1
        return TokenSet.model_validate(
            {"ranges": tuple(_merge(ranges)), "negated": negated, "span": span}
        )

    def make_named_embed(self, token: Token) -> Expr:
        self.forbid_in_lexeme(token, "@name references")
        name = token.value
        grammar = self.resolver.resolve(name, self.src, token.start)  # type: ignore[arg-type]
        embed_name = f"@{name}"
        self.subgrammars.setdefault(embed_name, grammar)
        return Embed(name=embed_name, span=self.src.span(token.start, token.end))

    def make_json_embed(self, token: Token) -> Expr:
        self.forbid_in_lexeme(token, "%json")
        schema, schema_start = self.read_json("%json")
        if not isinstance(schema, (dict, bool)):
            raise self.src.error("%json expects a JSON Schema object", schema_start)
        from gramkiln.frontend.json_schema import json_schema_grammar

        try:
            grammar = _without_document_whitespace(
                json_schema_grammar(schema, EMBEDDED_JSON_OPTIONS)
            )
        except (GramkilnError, ValueError, TypeError) as error:
            detail = error.message if isinstance(error, GrammarError) else str(error)
            raise self.src.error(f"invalid %json schema: {detail}", schema_start) from None
        self.embed_counters["json"] += 1
        name = f"json.{self.embed_counters['json']}"
        self.subgrammars[name] = grammar
        return Embed(name=name, span=self.src.span(token.start, self.pos))

    def make_lark_embed(self, token: Token) -> Expr:
        self.forbid_in_lexeme(token, "%lark")
        brace = self.peek()
        if not (brace.kind == "op" and brace.text == "{"):
            raise self.src.error("expected '{' after %lark", brace.start)
        self.enter_nesting(token)
        child = _Parser(
            self.src,
            brace.end,
            self.resolver,
            self.vocab,
            nested_at=token.start,
            nesting=self.nesting,
        )
        grammar = child.parse_grammar()
        self.nesting -= 1
        self.pos = child.pos
        self.embed_counters["lark"] += 1
        name = f"lark.{self.embed_counters['lark']}"
        self.subgrammars[name] = grammar
        return Embed(name=name, span=self.src.span(token.start, self.pos))

    # -- whole-grammar checks ---------------------------------------------------------------
    def finish(self) -> GrammarIR:
        """Check names, terminal cycles and the start rule; build the IR."""
        for definition in self.definitions.values():
            for name, offset in definition.refs:
                self.check_defined(name, offset)
        for name, offset in self.ignore_refs:
            self.check_defined(name, offset)
        self.check_terminal_cycles()
        operation_rules = self.operation_rules()
        if START_RULE not in self.definitions:
            message = "grammar has no 'start' rule"
            if self.nested_at is not None:
                raise self.src.error(f"%lark {message}", self.nested_at)
            # Located like every other error (line 1, column 1): callers rely on the
            # "Lark error at line L, column C" form.
            raise self.src.error(message, 0)
        rules = tuple(
            Rule(
                name=d.name,
                body=d.body,
                terminal=d.terminal,
                options=d.options,
                span=self.src.span(d.start, d.end),
            )
            for d in self.definitions.values()
        ) + tuple(operation_rules)
        grammar = GrammarIR(
            start=START_RULE,
            rules=rules,
            ignore=tuple(self.ignore),
            options=GrammarOptions(**self.options),
            subgrammars=tuple(
                Subgrammar(name=name, grammar=sub) for name, sub in self.subgrammars.items()
            ),
        )
        grammar = apply_dispatch(grammar, self.error_at_span)
        problems = list(grammar.problems())
        if problems:
            # Every invariant is checked above with a location; this is a safety net.
            raise GrammarError(problems[0], language=LANGUAGE)
        return grammar

    def error_at_span(self, message: str, span: Span | None) -> GrammarError:
        """A located error at the start of ``span`` (the grammar's start when None)."""
        if span is None:
            return self.src.error(message, 0)
        line_start = 0
        for _ in range(span.line - 1):
            line_start = self.src.text.index("\n", line_start) + 1
        return self.src.error(message, line_start + span.column - 1)

    def check_defined(self, name: str, offset: int) -> None:
        if name not in self.definitions:
            kind = "terminal" if self.classify(name, offset) else "rule"
            raise self.src.error(f"undefined {kind} '{name}'", offset)

    def operation_rules(self) -> list[Rule]:
        """One terminal per '&' / '~': the product automaton of its operands as an expression
        (complement over all byte strings, as llguidance's, so it may match invalid UTF-8)."""
        if not self.set_operations:
            return []
        terminals = {name: d.body for name, d in self.definitions.items() if d.terminal}
        operations = {
            name: (operator, left, right, offset)
            for name, operator, left, right, offset in self.set_operations
        }
        bodies = compute_operations(operations, terminals, self.src.error)
        return [Rule(name=name, body=body, terminal=True) for name, body in bodies.items()]

    def check_terminal_cycles(self) -> None:
        """A terminal may not reference itself, directly or through other terminals."""
        terminals = {n: d for n, d in self.definitions.items() if d.terminal}
        edges = {name: [t for t, _ in d.refs if t in terminals] for name, d in terminals.items()}
        for cycle in reference_cycles(edges):
            target = cycle[-1]
            offset = next(o for t, o in terminals[cycle[-2]].refs if t == target)
            raise self.src.error(f"terminal '{target}' is recursive: {' -> '.join(cycle)}", offset)


# ---------------------------------------------------------------------------------------------
# helpers


def _is_int(text: str) -> bool:
    # str.isdigit() also accepts non-ASCII digits such as '²', which int() rejects.
    return text.isascii() and text.isdigit()


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return merged


def _validation_message(error: ValidationError) -> str:
    """The first pydantic error's message without pydantic's 'Value error, ' prefix."""
    message = str(error.errors()[0].get("msg", "invalid rule options"))
    return message.removeprefix("Value error, ")


def _without_document_whitespace(grammar: GrammarIR) -> GrammarIR:
    """Drop the whitespace the JSON Schema converter allows around the whole document.

    The seed: "Whitespace outside the JSON value is controlled by the surrounding Lark
    grammar" (``"<t>" %json {...}`` rejects ``<t> {...}`` unless the Lark grammar allows it).
    """
    around = Repeat(item=JSON_WHITESPACE, min=0, max=EMBEDDED_JSON_OPTIONS.max_whitespace)
    rules = list(grammar.rules)
    for index, rule in enumerate(rules):
        if rule.name != grammar.start or not isinstance(rule.body, Seq):
            continue
        items = list(rule.body.items)
        if len(items) >= 2 and items[0] == around and items[-1] == around:
            body = items[1] if len(items) == 3 else Seq(items=tuple(items[1:-1]))
            rules[index] = rule.model_copy(update={"body": body})
            return grammar.model_copy(update={"rules": tuple(rules)})
    # No document at all (the schema `false`): there is no whitespace to drop.
    return grammar


def _vocab_has(vocab: Any, text: str) -> bool:
    """Whether some vocabulary token decodes exactly to ``text``.

    Accepts a ``gramkiln.Vocab`` (``ids_for_text``) or a plain sequence of token strings or
    bytes (the seed's ``TokenizerInfo(["a", "<|tool|>", "b"])`` form).
    """
    lookup = getattr(vocab, "ids_for_text", None)
    if callable(lookup):
        return bool(lookup(text))
    encoded = text.encode("utf-8")
    for token in vocab:
        if token == text or token == encoded:
            return True
    return False
