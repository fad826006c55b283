"""The `Grammar` facade: construct from any front end, inspect, test membership, compile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gramkiln.errors import CompileError, GrammarError
from gramkiln.ir import GrammarIR, ir_from_msgpack, ir_to_msgpack, parse_grammar, print_grammar
from gramkiln.ir.memo import operation

if TYPE_CHECKING:
    from gramkiln.runtime.compiled import CompiledGrammar
    from gramkiln.runtime.linking import UnlinkedGrammar
    from gramkiln.runtime.vocab import Vocab


class Grammar:
    """An immutable source grammar: the verified IR plus the constructors and tools around it."""

    __slots__ = ("_ir", "_oracle", "_externs")

    def __init__(self, ir: GrammarIR) -> None:
        self._ir = ir.verify()
        self._oracle: Any = None
        # GLRM externs not bound yet (name -> "grammar" or "token"); their places in the IR
        # hold placeholders, so the grammar can be inspected but not compiled or run.
        self._externs: dict[str, str] = {}

    # -- constructors ----------------------------------------------------------------------
    @classmethod
    @operation()
    def from_lark(
        cls,
        source: str,
        named_grammars: Mapping[str, Grammar | str] | None = None,
        vocab: Vocab | None = None,
    ) -> Grammar:
        """Parse a grammar in the Lark dialect (raises GrammarError with line/column/caret)."""
        from gramkiln.frontend.lark import parse_lark

        named: Any = named_grammars  # anything but a mapping: parse_lark raises a TypeError
        if isinstance(named_grammars, Mapping):
            named = {k: (v.ir if isinstance(v, Grammar) else v) for k, v in named_grammars.items()}
        return cls(parse_lark(source, named_grammars=named, vocab=vocab))

    @classmethod
    @operation()
    def from_regex(cls, pattern: str, flags: str = "") -> Grammar:
        """A grammar whose language is the full match of a regular expression."""
        from gramkiln.frontend.regex import regex_grammar

        return cls(regex_grammar(pattern, flags))

    @classmethod
    @operation()
    def from_ebnf(cls, source: str, root: str = "root") -> Grammar:
        """Parse a `::=` EBNF/GBNF grammar whose entry rule is `root`."""
        from gramkiln.frontend.ebnf import parse_ebnf

        return cls(parse_ebnf(source, root=root))

    @classmethod
    @operation()
    def from_json_schema(cls, schema: Any, options: Any = None) -> Grammar:
        """A grammar for JSON documents valid against a JSON Schema (dict or JSON text)."""
        from gramkiln.frontend.json_schema import json_schema_grammar

        return cls(json_schema_grammar(schema, options))

    @classmethod
    @operation()
    def from_glrm(cls, source: str) -> Grammar:
        """Parse a grammar in GLRM, GLRMask's native format (``glrm 1; start NAME; ...``).

        ``extern grammar`` and ``extern token`` declarations are bound with :meth:`bind`
        (or, for compiled children, ``compile_unlinked(vocab).bind(...).link()``) before the
        grammar is compiled. Raises GrammarError with line, column and a caret.
        """
        from gramkiln.frontend.glrm import parse_glrm

        parsed = parse_glrm(source)
        grammar = cls(parsed.ir)
        grammar._externs = dict(parsed.externs)
        return grammar

    @classmethod
    @operation()
    def from_ir_text(cls, text: str) -> Grammar:
        """Read the canonical IR text form (what `str(grammar)` prints)."""
        return cls(parse_grammar(text))

    @classmethod
    @operation()
    def from_msgpack(cls, data: bytes) -> Grammar:
        """Read the msgpack IR form written by `to_msgpack`."""
        return cls(ir_from_msgpack(data))

    # -- inspection -------------------------------------------------------------------------
    @property
    def ir(self) -> GrammarIR:
        """The pydantic IR (frozen)."""
        return self._ir

    @property
    def externs(self) -> dict[str, str]:
        """The externs still to bind, by name: ``"grammar"`` or ``"token"`` (GLRM)."""
        return dict(self._externs)

    @operation()
    def bind(self, name: str | None = None, value: Any = None, /, **bindings: Any) -> Grammar:
        """A copy with externs bound: ``bind("payload", child)`` or ``bind(payload=child)``.

        An ``extern grammar`` takes a :class:`Grammar` (embedded with its own start, rules
        and ignore set, like an inline ``g NAME = {...}``); an ``extern token`` takes a token
        id, ``vocab.token(id)`` or a special token's text such as ``"<|tool|>"``. This
        grammar is unchanged (grammars are immutable).
        """
        from gramkiln.frontend.glrm import bind_externs

        pairs = _binding_pairs(name, value, bindings)
        ir, remaining = bind_externs(self._ir, self._externs, pairs)
        bound = Grammar(ir)
        bound._externs = remaining
        return bound

    def _require_bound(self, action: str, error: type[Exception]) -> None:
        if self._externs:
            names = ", ".join(f"{kind} {name}" for name, kind in sorted(self._externs.items()))
            raise error(
                f"cannot {action}: extern {names} not bound (use grammar.bind(name, value))"
            )

    def __str__(self) -> str:
        return print_grammar(self._ir)

    def __repr__(self) -> str:
        return f"<Grammar start={self._ir.start!r} rules={len(self._ir.rules)}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grammar) and other._ir == self._ir

    def __hash__(self) -> int:
        return hash(self._ir)

    def to_msgpack(self) -> bytes:
        """Lossless msgpack encoding of the IR."""
        return ir_to_msgpack(self._ir)

    # -- membership (reference matcher) -------------------------------------------------------
    def _reference(self) -> Any:
        if self._oracle is None:
            if _has_char_budget(self._ir):
                # A character budget changes membership, and only the runtime models it: the
                # grammar compiled for the byte vocabulary answers instead.
                self._oracle = _ByteRuntimeMembership(self._ir)
            else:
                from gramkiln.testing import ReferenceMatcher

                self._oracle = ReferenceMatcher(self._ir)
        return self._oracle

    def accepts(self, text: str | bytes) -> bool:
        """Whether the whole of `text` is in the language (exact: by the reference matcher,
        or, for a grammar with `max_chars`, by the runtime over the byte vocabulary)."""
        self._require_bound("test membership", GrammarError)
        return bool(self._reference().accepts(text))

    def is_prefix(self, text: str | bytes) -> bool:
        """Whether `text` can be extended to a string of the language."""
        self._require_bound("test membership", GrammarError)
        return bool(self._reference().is_prefix(text))

    # -- compilation ------------------------------------------------------------------------
    @operation()
    def compile(
        self, vocab: Vocab | None = None, end_tokens: list[int] | None = None, **options: Any
    ) -> CompiledGrammar:
        """Compile against a vocabulary (default: the built-in byte vocabulary)."""
        from gramkiln.runtime.compile import compile_grammar

        self._require_bound("compile", CompileError)
        return compile_grammar(self._ir, vocab, end_tokens=end_tokens, **options)

    @operation()
    def compile_unlinked(
        self, vocab: Vocab | None = None, end_tokens: list[int] | None = None
    ) -> UnlinkedGrammar:
        """An open parent for compiled children: ``.bind(name, compiled_child).link()``.

        Children are bound as ``CompiledGrammar`` values compiled for the same vocabulary;
        ``end_tokens`` belong to this root and are not taken from the children.
        """
        from gramkiln.runtime.linking import UnlinkedGrammar

        return UnlinkedGrammar(self, vocab, end_tokens)


def _binding_pairs(name: Any, value: Any, bindings: dict[str, Any]) -> list[tuple[str, Any]]:
    """``bind``'s arguments as (name, value) pairs: one positional pair and/or keywords."""
    pairs: list[tuple[str, Any]] = []
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"an extern's name must be a str, not {type(name).__name__}")
        pairs.append((name, value))
    elif value is not None:
        raise TypeError("bind(name, value): the name is missing")
    pairs.extend(bindings.items())
    if not pairs:
        raise TypeError("bind() needs a name and a value, or name=value keywords")
    return pairs


def _has_char_budget(ir: GrammarIR) -> bool:
    """Whether a rule of `ir` or of its sub-grammars has `max_chars`."""
    if any(rule.options.max_chars is not None for rule in ir.rules):
        return True
    return any(_has_char_budget(sub.grammar) for sub in ir.subgrammars)


class _ByteRuntimeMembership:
    """Membership by the grammar compiled for the byte vocabulary (without end tokens)."""

    def __init__(self, ir: GrammarIR) -> None:
        from gramkiln.runtime.compile import compile_grammar

        self._compiled = compile_grammar(ir, end_tokens=[])

    def _run(self, text: str | bytes) -> Any:
        """A matcher that has taken `text`, or None when it is not a viable prefix."""
        matcher = self._compiled.matcher()
        return matcher if matcher.accept_string(text) else None

    def accepts(self, text: str | bytes) -> bool:
        """Whether the whole of `text` is in the language."""
        matcher = self._run(text)
        return matcher is not None and bool(matcher.is_accepting())

    def is_prefix(self, text: str | bytes) -> bool:
        """Whether `text` can be extended to a string of the language."""
        return self._run(text) is not None
