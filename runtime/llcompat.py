"""A compatibility layer for code written against llguidance's Python API.

Code that uses ``llguidance`` (``LLTokenizer``, ``LLMatcher``, ``LLExecutor``,
``LLInterpreter`` and the numpy/torch helpers) runs on gramkiln by changing the import::

    from gramkiln.runtime.llcompat import LLMatcher, LLTokenizer, LLExecutor

Everything here is built on gramkiln's own API (``Grammar``, ``Vocab``, compiled grammars
and their matchers); no llguidance code is used or needed. Masks follow gramkiln's exact
semantics (a token is allowed iff the text so far plus the token is a prefix of an accepted
string), which can differ from llguidance's lexer for grammars whose terminals overlap.
What is supported, accepted without effect or refused is listed in
``docs/llguidance-compat.md``.
"""

from __future__ import annotations

import ctypes
import json
import operator
import os
import re
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np
from gramkiln.runtime.compiled import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    fill_next_token_bitmask_batch,
    usable_cpus,
)
from gramkiln.runtime.vocab import PACKAGED_VOCABULARIES, Vocab, load_vocab

from gramkiln._grammar import Grammar

__all__ = [
    "JsonCompileOptions",
    "JsonCompiler",
    "LLExecutor",
    "LLInterpreter",
    "LLMatcher",
    "LLParserLimits",
    "LLTokenizer",
    "LarkCompiler",
    "RegexCompiler",
    "StopReason",
    "TokenId",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "fill_next_token_bitmask",
    "fill_next_token_bitmask_par",
    "regex_to_lark",
]

TokenId = int

StopReason = Literal[
    "NotStopped",
    "MaxTokensTotal",
    "MaxTokensParser",
    "ParserTooComplex",
    "LexerTooComplex",
    "NoExtension",
    "NoExtensionBias",
    "EndOfSentence",
    "InternalError",
]

# Compiled grammars kept per tokenizer: constructing many matchers for the same grammar (one
# per request) must not recompile it.
_CACHE_SIZE = 256

# dbg_tokens shows the most recent tokens of a long list, as llguidance does.
_MAX_DBG_TOKENS = 200


# ---------------------------------------------------------------------------------------------
# Options and limits
# ---------------------------------------------------------------------------------------------
class JsonCompileOptions(TypedDict, total=False):
    """Layout options of the JSON Schema compiler (llguidance's ``x-guidance`` object).

    ``item_separator`` (default ``","``), ``key_separator`` (default ``":"``),
    ``whitespace_flexible`` (default True: JSON whitespace allowed between tokens),
    ``whitespace_pattern`` (only JSON whitespace runs are expressible), ``coerce_one_of`` and
    ``lenient`` (both default False).
    """

    item_separator: str | None
    key_separator: str | None
    whitespace_pattern: str | None
    whitespace_flexible: bool | None
    coerce_one_of: bool | None
    lenient: bool | None


_JSON_OPTION_KEYS = frozenset(JsonCompileOptions.__annotations__)


class LLParserLimits:
    """llguidance's parser resource limits, accepted and reported back.

    gramkiln compiles grammars ahead of time into automata and tables with their own size
    limits (CompileError / AutomatonSizeError), so none of these values changes what gramkiln
    does; they are kept so that code passing them runs unchanged.
    """

    __slots__ = ("_values",)

    _DEFAULTS: dict[str, int | bool] = {
        "max_items_in_row": 2000,
        "initial_lexer_fuel": 1_000_000,
        "step_lexer_fuel": 200_000,
        "step_max_items": 50_000,
        "max_lexer_states": 250_000,
        "max_grammar_size": 500_000,
        "precompute_large_lexemes": True,
        "verbose_errors": True,
    }

    def __init__(
        self,
        max_items_in_row: int | None = None,
        initial_lexer_fuel: int | None = None,
        step_lexer_fuel: int | None = None,
        step_max_items: int | None = None,
        max_lexer_states: int | None = None,
        max_grammar_size: int | None = None,
        precompute_large_lexemes: bool | None = None,
        verbose_errors: bool | None = None,
    ) -> None:
        """Record the limits; an argument left as None takes llguidance's default."""
        given = {
            "max_items_in_row": max_items_in_row,
            "initial_lexer_fuel": initial_lexer_fuel,
            "step_lexer_fuel": step_lexer_fuel,
            "step_max_items": step_max_items,
            "max_lexer_states": max_lexer_states,
            "max_grammar_size": max_grammar_size,
            "precompute_large_lexemes": precompute_large_lexemes,
            "verbose_errors": verbose_errors,
        }
        values: dict[str, int | bool] = {}
        for name, value in given.items():
            default = self._DEFAULTS[name]
            if value is None:
                values[name] = default
            elif isinstance(default, bool):
                values[name] = bool(value)
            else:
                number = operator.index(value)
                if number < 0:
                    raise ValueError(f"{name} must not be negative, got {number}")
                values[name] = number
        self._values = values

    @property
    def max_items_in_row(self) -> int:
        """Maximum branching factor of a grammar row (no effect in gramkiln). Default 2000."""
        return int(self._values["max_items_in_row"])

    @property
    def initial_lexer_fuel(self) -> int:
        """Fuel for building the lexer (no effect in gramkiln). Default 1_000_000."""
        return int(self._values["initial_lexer_fuel"])

    @property
    def step_lexer_fuel(self) -> int:
        """Lexer fuel per mask step (no effect in gramkiln). Default 200_000."""
        return int(self._values["step_lexer_fuel"])

    @property
    def step_max_items(self) -> int:
        """Earley items per mask step (no effect in gramkiln). Default 50_000."""
        return int(self._values["step_max_items"])

    @property
    def max_lexer_states(self) -> int:
        """Maximum lexer states (no effect in gramkiln). Default 250_000."""
        return int(self._values["max_lexer_states"])

    @property
    def max_grammar_size(self) -> int:
        """Maximum grammar size in symbols (no effect in gramkiln). Default 500_000."""
        return int(self._values["max_grammar_size"])

    @property
    def precompute_large_lexemes(self) -> bool:
        """Whether large lexemes are precomputed (no effect in gramkiln). Default True."""
        return bool(self._values["precompute_large_lexemes"])

    @property
    def verbose_errors(self) -> bool:
        """Whether errors carry parser details (no effect in gramkiln). Default True."""
        return bool(self._values["verbose_errors"])

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"LLParserLimits({inner})"


# ---------------------------------------------------------------------------------------------
# regex_to_lark
# ---------------------------------------------------------------------------------------------
_ASCII_SETS: dict[str, str] = {
    "d": "0123456789",
    "w": "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_",
    "s": " \t\n\r\f\v",
}
_CLASS_BODY: dict[str, str] = {"d": "0-9", "w": "0-9a-zA-Z_", "s": r" \t\n\r\f\v"}
_LINE_BREAKS = {"\n": "\\n", "\r": "\\r"}


def _class_char(ch: str) -> str:
    """One character written safely inside a Lark /.../ character class."""
    if ch in "\\]^-[/":
        return "\\" + ch
    code = ord(ch)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    return ch


def _split_class(regex: str, start: int) -> tuple[list[str], bool, int]:
    """The items of the character class opening at `start` (the '['), its negation, its end.

    Items are single characters, escapes (two characters, or longer for \\x.. \\u.. \\p{..})
    and the '-' between range ends, in source order; the returned index is just past ']'.
    """
    i = start + 1
    negated = False
    if i < len(regex) and regex[i] == "^":
        negated = True
        i += 1
    items: list[str] = []
    first = True
    while i < len(regex):
        ch = regex[i]
        if ch == "]" and not first:
            return items, negated, i + 1
        first = False
        if ch == "\\" and i + 1 < len(regex):
            items.append(regex[i : i + 2])
            i += 2
        elif ch == "[" and regex.startswith("[:", i):
            end = regex.find(":]", i + 2)
            if end < 0:
                items.append(ch)
                i += 1
            else:
                items.append(regex[i : end + 2])
                i = end + 2
        else:
            items.append(ch)
            i += 1
    raise ValueError(f"unterminated character class in regex {regex!r}")


def _rewrite_class(items: list[str], negated: bool, flags: str) -> str:
    """A character class with ASCII shorthands (per `flags`) replaced."""
    positives: list[str] = []
    negatives: list[str] = []  # shorthand letters whose complement the class contains
    rest: list[str] = []
    for item in items:
        if len(item) == 2 and item[0] == "\\" and item[1].lower() in flags and item[1] in "dwsDWS":
            letter = item[1]
            if letter.islower():
                positives.append(_CLASS_BODY[letter])
            else:
                negatives.append(letter.lower())
        elif item == "/":
            rest.append("\\/")
        elif item in _LINE_BREAKS:
            rest.append(_LINE_BREAKS[item])
        else:
            rest.append(item)
    body = "".join(positives) + "".join(rest)
    if not negatives:
        return ("[^" if negated else "[") + body + "]"
    if not negated:
        # [\Da] is "not a digit, or a": an alternation keeps both parts exact.
        parts = [f"[^{_CLASS_BODY[letter]}]" for letter in negatives]
        if body:
            parts.append("[" + body + "]")
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
    # [^\Dx] is "a digit and not x": the intersection of ASCII sets, less what the rest of
    # the class (tested with Python's own regex engine) matches.
    allowed = set(_ASCII_SETS[negatives[0]])
    for letter in negatives[1:]:
        allowed &= set(_ASCII_SETS[letter])
    if body:
        other = re.compile("[" + body.replace("\\/", "/") + "]")
        allowed = {ch for ch in allowed if not other.fullmatch(ch)}
    if not allowed:
        raise ValueError("character class matches no character after rewriting")
    return "[" + "".join(_class_char(ch) for ch in sorted(allowed)) + "]"


def regex_to_lark(regex: str, use_ascii: str = "d") -> str:
    r"""Make `regex` usable inside a Lark ``/.../`` literal.

    Every unescaped ``/`` is escaped. With ``"d"`` in `use_ascii`, ``\d`` becomes ``[0-9]``
    and ``\D`` ``[^0-9]``; ``"w"`` does the same for ``\w``/``\W`` (``[0-9a-zA-Z_]``) and
    ``"s"`` for ``\s``/``\S`` (``[ \t\n\r\f\v]``), inside character classes as well as outside
    (a negated shorthand inside a class becomes an alternation or an explicit ASCII set).
    Escaped backslashes and other escapes are left as they are. ``""`` keeps Unicode
    semantics (Python 3 / Rust), ``"dw"`` is JavaScript / JSON Schema, ``"dws"`` Python 2.
    """
    if not isinstance(regex, str):
        raise TypeError(f"regex must be a str, got {type(regex).__name__}")
    flags = "".join(ch for ch in use_ascii if ch in "dws")
    out: list[str] = []
    i = 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\" and i + 1 < len(regex):
            nxt = regex[i + 1]
            if nxt in "dwsDWS" and nxt.lower() in flags:
                body = _CLASS_BODY[nxt.lower()]
                out.append(f"[{body}]" if nxt.islower() else f"[^{body}]")
            else:
                out.append(regex[i : i + 2])
            i += 2
        elif ch == "[":
            items, negated, i = _split_class(regex, i)
            out.append(_rewrite_class(items, negated, flags))
        elif ch == "/":
            out.append("\\/")
            i += 1
        else:
            # A raw line break would end the Lark literal; its escape means the same.
            out.append(_LINE_BREAKS.get(ch, ch))
            i += 1
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------
class _Entry:
    """A compiled grammar (or the reason there is none) and the warnings it produced."""

    __slots__ = ("compiled", "error", "warnings")

    def __init__(self, compiled: Any, error: str, warnings_: list[str]) -> None:
        self.compiled = compiled
        self.error = error
        self.warnings = warnings_


class _Shared:
    """What every LLTokenizer made from one source shares: vocabulary, indexes, cache."""

    def __init__(
        self,
        vocab: Vocab,
        eos: int,
        encode: Callable[[str], list[int]] | None,
        canonical: bool,
    ) -> None:
        self.vocab = vocab
        self.eos = eos
        self.encode = encode
        self.canonical = canonical
        self.lock = threading.Lock()
        self.cache: OrderedDict[str, _Entry] = OrderedDict()
        self.text_ids: dict[bytes, int] | None = None
        self.prefixes: set[bytes] | None = None
        self.max_len = 0
        self.special_re: re.Pattern[str] | None = None
        self.special_ids_by_text: dict[str, int] = {}

    def text_index(self) -> tuple[dict[bytes, int], set[bytes]]:
        """Text tokens by their bytes (lowest id first) and every proper prefix of them."""
        if self.text_ids is None or self.prefixes is None:
            ids: dict[bytes, int] = {}
            prefixes: set[bytes] = set()
            longest = 0
            for token_id, token in enumerate(self.vocab.tokens):
                if not token or token_id in self.vocab.special_ids:
                    continue
                ids.setdefault(token, token_id)
                longest = max(longest, len(token))
                for end in range(1, len(token)):
                    prefixes.add(token[:end])
            self.max_len = longest
            self.prefixes = prefixes
            self.text_ids = ids
        return self.text_ids, self.prefixes


_FILE_SUFFIXES = frozenset({".json", ".tiktoken", ".vocab", ".model"})


def _resolve_tokenizer(
    source: Any, eos_token: int | None
) -> tuple[Vocab, Callable[[str], list[int]] | None, int | None]:
    """The vocabulary, a text encoder (None: greedy only) and an EOS hint for `source`."""
    if isinstance(source, Vocab):
        return source, None, None
    if isinstance(source, (str, os.PathLike)):
        spec = os.fspath(source)
        path = Path(spec)
        if path.is_file():
            if path.suffix.lower() == ".json":
                vocab = load_vocab(spec)
                return vocab, _hf_encoder_from_file(path), None
            return load_vocab(spec), None, None
        if spec == "byte" or spec in PACKAGED_VOCABULARIES:
            return load_vocab(spec), _packaged_encoder(spec), None
        if path.suffix.lower() in _FILE_SUFFIXES or spec.startswith(("/", ".", "~")):
            # Clearly a path: asking the hub for it would only add a slow, confusing failure.
            raise ValueError(f"tokenizer {spec!r} is not a file")
        try:
            import tokenizers

            hf = tokenizers.Tokenizer.from_pretrained(spec)
        except Exception as exc:  # noqa: BLE001 - any failure means the name is unusable here
            raise ValueError(
                f"tokenizer {spec!r} is not a file, not one of gramkiln's packaged "
                f"vocabularies (byte, {', '.join(PACKAGED_VOCABULARIES)}), and could not be "
                f"loaded by name ({exc})"
            ) from exc
        return Vocab.from_huggingface(hf), _hf_encoder(hf), None
    if hasattr(source, "backend_tokenizer") or hasattr(source, "to_str"):
        vocab = Vocab.from_huggingface(source)
        backend = getattr(source, "backend_tokenizer", source)
        return vocab, _hf_encoder(backend), None
    tokens = getattr(source, "tokens", None)
    if tokens is not None and callable(source):
        eos = getattr(source, "eos_token_id", None)
        specials = [int(i) for i in (getattr(source, "special_token_ids", None) or [])]
        eos_ids = [int(eos)] if eos is not None else []
        vocab = Vocab([bytes(t) for t in tokens], eos_ids=eos_ids, special_ids=specials)

        def encode(text: str) -> list[int]:
            return [int(t) for t in source(text)]

        return vocab, encode, eos
    raise TypeError(
        "tokenizer must be a gramkiln Vocab, a path to tokenizer.json, a tokenizers.Tokenizer "
        "or transformers fast tokenizer, or a TokenizerWrapper-like object (tokens, "
        f"eos_token_id, special_token_ids, callable); got {type(source).__name__}"
    )


def _packaged_encoder(name: str) -> Callable[[str], list[int]] | None:
    """The real BPE of a packaged vocabulary where its package ships one (Llama 3 through
    quicktok), so that tokenizing is canonical; None otherwise (greedy tokenizing)."""
    if name != "llama3":
        return None
    try:
        import quicktok

        encoding = quicktok.get_encoding("llama3")
    except Exception:  # noqa: BLE001 - without the encoder, greedy tokenizing still works
        return None

    def encode(text: str) -> list[int]:
        return [int(t) for t in encoding.encode_ordinary(text)]

    return encode


def _hf_encoder_from_file(path: Path) -> Callable[[str], list[int]] | None:
    try:
        import tokenizers
    except ImportError:
        return None
    try:
        return _hf_encoder(tokenizers.Tokenizer.from_file(str(path)))
    except Exception:  # noqa: BLE001 - not every tokenizer.json loads; greedy still works
        return None


def _hf_encoder(tokenizer: Any) -> Callable[[str], list[int]] | None:
    """An encoder that treats special-token text as plain text (a private copy is changed)."""
    try:
        import tokenizers

        private = tokenizers.Tokenizer.from_str(tokenizer.to_str())
        private.encode_special_tokens = True
    except Exception:  # noqa: BLE001 - without a usable copy, fall back to greedy
        return None
    lock = threading.Lock()

    def encode(text: str) -> list[int]:
        with lock:
            return list(private.encode(text, add_special_tokens=False).ids)

    return encode


class LLTokenizer:
    """A tokenizer vocabulary plus the tokenizer functions of llguidance's ``LLTokenizer``.

    `tokenizer` may be a gramkiln ``Vocab``, a path to a Hugging Face ``tokenizer.json`` (or
    any file or packaged vocabulary name ``gramkiln.runtime.vocab.load_vocab`` reads), a
    ``tokenizers.Tokenizer`` or transformers fast tokenizer, or an object shaped like
    llguidance's ``TokenizerWrapper`` (``tokens: list[bytes]``, ``eos_token_id``,
    ``special_token_ids``, and calling it tokenizes a string). `n_vocab` overrides the
    vocabulary size (padding ids are never allowed); `eos_token` overrides the end token.
    `slices` are an llguidance mask optimisation: kept and returned, they never change masks.
    """

    _shared: _Shared
    _slices: list[str]

    def __init__(
        self,
        tokenizer: Any,
        n_vocab: int | None = None,
        eos_token: int | None = None,
        slices: list[str] | None = None,
    ) -> None:
        """Build the tokenizer; raises ValueError/TypeError for an unusable source."""
        if isinstance(tokenizer, LLTokenizer):
            shared = tokenizer._shared
            if n_vocab is None and eos_token is None:
                self._shared = shared
                self._slices = list(slices) if slices is not None else tokenizer._slices
                return
            vocab, encode = shared.vocab, shared.encode
            hint: int | None = shared.eos
        else:
            vocab, encode, hint = _resolve_tokenizer(tokenizer, eos_token)
        eos = eos_token if eos_token is not None else hint
        if eos is None:
            if not vocab.eos_ids:
                raise ValueError("the vocabulary names no end-of-sequence token: pass eos_token")
            eos = vocab.eos_ids[0]
        eos = operator.index(eos)
        if not 0 <= eos < len(vocab.tokens):
            raise ValueError(f"eos_token {eos} is outside the vocabulary's {len(vocab.tokens)} ids")
        if n_vocab is not None:
            n_vocab = operator.index(n_vocab)
            if n_vocab < len(vocab.tokens):
                raise ValueError(
                    f"n_vocab {n_vocab} is smaller than the {len(vocab.tokens)} tokens of the "
                    "vocabulary"
                )
        if (n_vocab is not None and n_vocab != vocab.vocab_size) or tuple(vocab.eos_ids) != (eos,):
            vocab = Vocab(
                vocab.tokens,
                eos_ids=[eos],
                special_ids=vocab.special_ids,
                vocab_size=n_vocab if n_vocab is not None else vocab.vocab_size,
            )
        canonical = encode is not None or _is_single_byte_vocab(vocab)
        self._shared = _Shared(vocab, eos, encode, canonical)
        self._slices = list(slices) if slices is not None else self.general_slices()

    # -- attributes ----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of token ids (mask width in bits)."""
        return int(self._shared.vocab.vocab_size)

    @property
    def eos_token(self) -> TokenId:
        """The end-of-sequence token id."""
        return self._shared.eos

    @property
    def is_canonical(self) -> bool:
        """Whether tokenize_bytes gives the model's own tokenization.

        True with a real tokenizer attached, or when the only text tokens are single bytes
        (then there is one tokenization); greedy longest-match is otherwise an approximation,
        and compute_ff_tokens returns [] as llguidance does for non-canonical tokenizers.
        """
        return self._shared.canonical

    @property
    def vocab(self) -> Vocab:
        """The gramkiln vocabulary grammars are compiled against (gramkiln extension)."""
        return self._shared.vocab

    @property
    def slices(self) -> list[str]:
        """The slices this tokenizer was given (gramkiln extension; they have no effect)."""
        return list(self._slices)

    # -- slices ------------------------------------------------------------------------------
    def with_slices(self, slices: list[str]) -> LLTokenizer:
        """The same tokenizer with other slices (shares the vocabulary and compile cache)."""
        return LLTokenizer(self, slices=list(slices))

    @staticmethod
    def general_slices() -> list[str]:
        """Default slices (accepted for compatibility; gramkiln's masks do not use them)."""
        return [
            r"[^\x00-\x1F\x7F\"\\]+",
            r"[a-zA-Z0-9_]+",
            r"[ \t\r\n]+",
        ]

    @staticmethod
    def json_slices() -> list[str]:
        """Slices for JSON grammars (accepted for compatibility; masks do not use them)."""
        return [
            r"[^\x00-\x1F\x7F\"\\]{1,32}",
            r"[^\x00-\x1F\x7F\"\\]+",
            r"[0-9]+",
            r"[ \t\r\n]+",
        ]

    # -- tokenization --------------------------------------------------------------------------
    def greedy_tokenize(self, text: str) -> list[int]:
        """Longest-match tokenization over the vocabulary's text tokens (not BPE's)."""
        return self._greedy(text.encode("utf-8"))

    def _greedy(self, data: bytes) -> list[int]:
        ids, prefixes = self._shared.text_index()
        out: list[int] = []
        i = 0
        n = len(data)
        while i < n:
            best_end = -1
            best_id = -1
            j = i + 1
            while j <= n:
                piece = data[i:j]
                found = ids.get(piece)
                if found is not None:
                    best_end, best_id = j, found
                if piece not in prefixes:
                    break
                j += 1
            if best_end < 0:
                raise ValueError(f"byte 0x{data[i]:02x} at offset {i} has no token")
            out.append(best_id)
            i = best_end
        return out

    def _encode_text(self, data: bytes) -> list[int]:
        encode = self._shared.encode
        if encode is None or not data:
            return self._greedy(data)
        try:
            text = data.decode("utf-8")
            tail = b""
        except UnicodeDecodeError as exc:
            text = data[: exc.start].decode("utf-8")
            tail = data[exc.start :]
        head = text.encode("utf-8")
        tokens = encode(text) if text else []
        # Some tokenizers add a prefix space or normalise text; the bytes must round-trip for
        # the tokenize_partial invariants, so such a result is replaced by the greedy one.
        if self._decode(tokens) != head:
            tokens = self._greedy(head)
        return tokens + self._greedy(tail)

    def _special_pattern(self) -> re.Pattern[str]:
        shared = self._shared
        if shared.special_re is None:
            by_text: dict[str, int] = {}
            vocab = shared.vocab
            for token_id in sorted(vocab.special_ids):
                if token_id < len(vocab.tokens) and vocab.tokens[token_id]:
                    name = vocab.tokens[token_id].decode("utf-8", errors="replace")
                    by_text.setdefault(name, token_id)
            names = sorted(by_text, key=len, reverse=True)
            alternatives = [re.escape(name) for name in names] + [r"<\[\d+\]>"]
            shared.special_ids_by_text = by_text
            shared.special_re = re.compile("|".join(alternatives))
        return shared.special_re

    def tokenize_bytes(self, utf8bytes: bytes, *, parse_special: bool = False) -> list[int]:
        """Tokenize bytes: the real tokenizer on the valid UTF-8 prefix, greedy for the rest.

        With `parse_special`, special-token names (``<|eot_id|>``) and ``<[id]>`` in the text
        become those tokens; otherwise they are tokenized as text.
        """
        data = bytes(utf8bytes)
        if not parse_special:
            return self._encode_text(data)
        text = data.decode("utf-8", errors="surrogateescape")
        pattern = self._special_pattern()
        out: list[int] = []
        pos = 0
        for match in pattern.finditer(text):
            out += self._encode_text(text[pos : match.start()].encode("utf-8", "surrogateescape"))
            name = match.group(0)
            if name.startswith("<[") and name not in self._shared.special_ids_by_text:
                token_id = int(name[2:-2])
                if not 0 <= token_id < self.vocab_size:
                    raise ValueError(f"{name} names no token of this vocabulary")
                out.append(token_id)
            else:
                out.append(self._shared.special_ids_by_text[name])
            pos = match.end()
        out += self._encode_text(text[pos:].encode("utf-8", "surrogateescape"))
        return out

    def tokenize_str(self, text: str, *, parse_special: bool = False) -> list[int]:
        """Tokenize a string (see tokenize_bytes)."""
        return self.tokenize_bytes(text.encode("utf-8"), parse_special=parse_special)

    def tokenize_partial(
        self, new_bytes: bytes, recent_tokens: list[int] | None = None
    ) -> tuple[list[int], bytes]:
        """Tokenize the prefix of `new_bytes` that later bytes cannot re-tokenize.

        Returns ``(tokens, rest)`` with ``decode_bytes(tokens) + rest == new_bytes``. The
        trailing tokens whose concatenation is a proper prefix of some token (so that more
        bytes could merge them) are left in `rest`. For single-byte vocabularies this is exact;
        for BPE it is the same heuristic llguidance documents (pre-tokenizer splits far back
        are not modelled). `recent_tokens` is accepted as a hint and not used.
        """
        data = bytes(new_bytes)
        if not data:
            return [], b""
        tokens = self.tokenize_bytes(data)
        _, prefixes = self._shared.text_index()
        tail = b""
        cut = len(tokens)
        for k in range(len(tokens) - 1, -1, -1):
            tail = self._token_bytes(tokens[k]) + tail
            if len(tail) > self._shared.max_len:
                break
            if tail in prefixes:
                cut = k
        rest = b"".join(self._token_bytes(t) for t in tokens[cut:])
        return tokens[:cut], rest

    # -- decoding ------------------------------------------------------------------------------
    def _token_bytes(self, token_id: int) -> bytes:
        vocab = self._shared.vocab
        if not 0 <= token_id < vocab.vocab_size:
            raise ValueError(f"token id {token_id} is outside [0, {vocab.vocab_size})")
        if token_id >= len(vocab.tokens):
            return b""  # padding decodes to nothing
        return vocab.tokens[token_id]

    def _decode(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self._token_bytes(operator.index(t)) for t in tokens)

    def decode_bytes(self, tokens: list[int]) -> bytes:
        """The bytes of `tokens` (special tokens contribute their names, padding nothing)."""
        return self._decode(tokens)

    def decode_str(self, tokens: list[int]) -> str:
        """The text of `tokens`; invalid UTF-8 becomes U+FFFD."""
        return self._decode(tokens).decode("utf-8", errors="replace")

    def is_special_token(self, token: int) -> bool:
        """Whether `token` never matches text (special, hole or padding id)."""
        token = operator.index(token)
        if not 0 <= token < self.vocab_size:
            return False
        return self._shared.vocab.is_special(token)

    def _token_dbg(self, token_id: int, escape_newlines: bool) -> str:
        vocab = self._shared.vocab
        if not 0 <= token_id < vocab.vocab_size:
            return f"<[{token_id}]?>"
        if token_id >= len(vocab.tokens) or not vocab.tokens[token_id]:
            return f"<[{token_id}]>"
        data = vocab.tokens[token_id]
        if token_id in vocab.special_ids:
            return data.decode("utf-8", errors="replace")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(
                chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in data
            )
        out: list[str] = []
        for ch in text:
            if ch == "\\":
                out.append("\\\\")
            elif ch == '"':
                out.append('\\"')
            elif ch == "\n":
                out.append("\\n" if escape_newlines else "\n")
            elif ch == "\r":
                out.append("\\r")
            elif ch == "\t":
                out.append("\\t")
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\x{ord(ch):02x}")
            else:
                out.append(ch)
        return "".join(out)

    def _tokens_dbg(self, tokens: list[int], quote: bool) -> str:
        shown = [operator.index(t) for t in tokens]
        prefix = ""
        if len(shown) > _MAX_DBG_TOKENS:
            prefix = "…"
            shown = shown[-_MAX_DBG_TOKENS:]
        joined = "‧".join(self._token_dbg(t, escape_newlines=quote) for t in shown)
        return f'"{prefix}{joined}"' if quote else prefix + joined

    def dbg_tokens(self, tokens: list[int]) -> str:
        """A debug form: double-quoted, tokens separated by '‧', escapes for control bytes.

        Only the last 200 tokens of a longer list are shown, after '…'.
        """
        return self._tokens_dbg(tokens, quote=True)

    def test_trace_tokens(self, tokens: list[int]) -> str:
        """The debug form for test traces: as dbg_tokens, unquoted, newlines kept."""
        return self._tokens_dbg(tokens, quote=False)

    # -- grammar cache ---------------------------------------------------------------------------
    def _entry(self, grammar: Any, log_level: int = 0) -> _Entry:
        """The compiled grammar for `grammar` against this vocabulary, from the cache."""
        key = _grammar_key(grammar)
        shared = self._shared
        with shared.lock:
            entry = shared.cache.get(key)
            if entry is not None:
                shared.cache.move_to_end(key)
                return entry
        entry = _compile_entry(grammar, shared.vocab, shared.eos)
        if log_level >= 1:
            for message in entry.warnings:
                warnings.warn(message, UserWarning, stacklevel=3)
        with shared.lock:
            shared.cache[key] = entry
            while len(shared.cache) > _CACHE_SIZE:
                shared.cache.popitem(last=False)
        return entry

    def __repr__(self) -> str:
        return f"<LLTokenizer vocab_size={self.vocab_size} eos_token={self.eos_token}>"


def _is_single_byte_vocab(vocab: Vocab) -> bool:
    return all(
        len(token) <= 1
        for token_id, token in enumerate(vocab.tokens)
        if token_id not in vocab.special_ids
    )


# ---------------------------------------------------------------------------------------------
# Grammar specifications
# ---------------------------------------------------------------------------------------------
class _SpecError(ValueError):
    """A grammar specification gramkiln cannot build (bad JSON, unsupported option...)."""


def _grammar_key(grammar: Any) -> str:
    if isinstance(grammar, str):
        return grammar
    if isinstance(grammar, Mapping):
        return "\0json:" + json.dumps(grammar, sort_keys=True, default=repr)
    raise TypeError(f"grammar must be a str (Lark or JSON) or a dict, got {type(grammar).__name__}")


def _parse_spec(grammar: Any) -> Any:
    """A Lark source string, or the decoded JSON grammar list."""
    if isinstance(grammar, str):
        if grammar.lstrip().startswith("{"):
            try:
                return json.loads(grammar)
            except json.JSONDecodeError as exc:
                raise _SpecError(f"grammar starts with '{{' but is not valid JSON: {exc}") from exc
        return grammar
    if isinstance(grammar, Mapping):
        return dict(grammar)
    raise TypeError(f"grammar must be a str (Lark or JSON) or a dict, got {type(grammar).__name__}")


_WS_CLASS = re.compile(r"^(?:\[(?P<cls>[^\]]+)\]|(?P<one>\\x20|\\s| ))(?P<q>[*+]|\{(\d*),(\d*)\})$")
_JSON_WS = frozenset(" \t\n\r")


def _whitespace_limit(pattern: str) -> int | None:
    """The longest whitespace run `pattern` allows, if it is expressible in gramkiln.

    gramkiln's flexible JSON layout allows runs of JSON whitespace (space, tab, CR, LF) up to
    a maximum length between tokens; a pattern over exactly those characters with ``*``,
    ``+`` or ``{m,n}`` maps onto it. Anything else raises _SpecError.
    """
    match = _WS_CLASS.match(pattern)
    chars: set[str] = set()
    if match and match.group("cls"):
        try:
            compiled = re.compile("[" + match.group("cls") + "]")
        except re.error as exc:
            raise _SpecError(f"whitespace_pattern {pattern!r} is not a valid regex: {exc}") from exc
        chars = {chr(c) for c in range(0x80) if compiled.fullmatch(chr(c))}
    if not match or chars != _JSON_WS:
        raise _SpecError(
            f"whitespace_pattern {pattern!r} cannot be expressed in gramkiln: only runs of JSON "
            r"whitespace are supported, written like [\x20\x0A\x0D\x09]+ or [ \t\n\r]{0,N}"
        )
    quantifier = match.group("q")
    if quantifier in ("*", "+"):
        return None
    upper = quantifier[1:-1].split(",")[1]
    return int(upper) if upper else None


def _json_options(options: Mapping[str, Any]) -> Any:
    """JsonSchemaOptions for llguidance's JSON compile options."""
    from gramkiln.frontend.json_schema.options import JsonSchemaOptions

    unknown = sorted(set(options) - _JSON_OPTION_KEYS)
    if unknown:
        raise _SpecError(
            f"unsupported JSON compile options: {', '.join(unknown)} (supported: "
            f"{', '.join(sorted(_JSON_OPTION_KEYS))})"
        )
    item = options.get("item_separator")
    key = options.get("key_separator")
    pattern = options.get("whitespace_pattern")
    flexible = options.get("whitespace_flexible")
    if flexible is None:
        flexible = True  # llguidance's default
    kwargs: dict[str, Any] = {
        "coerce_one_of": bool(options.get("coerce_one_of") or False),
        "lenient": bool(options.get("lenient") or False),
    }
    if pattern is not None:
        kwargs.update(whitespace="flexible", max_whitespace=_whitespace_limit(str(pattern)))
    elif flexible:
        # llguidance's flexible whitespace is unbounded ([\x20\x0A\x0D\x09]+).
        kwargs.update(whitespace="flexible", max_whitespace=None)
    else:
        kwargs.update(
            whitespace="compact",
            item_separator="," if item is None else item,
            key_separator=":" if key is None else key,
        )
    if pattern is not None or flexible:
        # Separators only matter for their punctuation in flexible mode; they must still be
        # JSON punctuation.
        for name, value, mark in (("item_separator", item, ","), ("key_separator", key, ":")):
            if value is not None and str(value).strip(" \t\n\r") != mark:
                raise _SpecError(f"{name} must be {mark!r} with optional JSON whitespace")
    try:
        return JsonSchemaOptions(**kwargs)
    except ValueError as exc:
        raise _SpecError(f"invalid JSON compile options: {exc}") from exc


def _json_schema_grammar(schema: Any) -> Grammar:
    """A gramkiln grammar for a ``json_schema`` entry (its ``x-guidance`` read as options)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise _SpecError(f"json_schema is not valid JSON: {exc}") from exc
    options: Mapping[str, Any] = {}
    if isinstance(schema, Mapping) and "x-guidance" in schema:
        raw = schema["x-guidance"]
        if raw is not None and not isinstance(raw, Mapping):
            raise _SpecError("x-guidance must be an object")
        options = raw or {}
        schema = {k: v for k, v in schema.items() if k != "x-guidance"}
    return Grammar.from_json_schema(schema, _json_options(options))


_ENTRY_KEYS = frozenset({"name", "lark_grammar", "json_schema", "allow_initial_skip"})
# llguidance grammar options that gramkiln can honour only at their default value.
_ENTRY_DEFAULTS: dict[str, Any] = {
    "no_forcing": False,
    "allow_invalid_utf8": False,
    "max_tokens": None,
}


def _check_defaults(where: str, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key, value in data.items():
        if key in allowed:
            continue
        if key in _ENTRY_DEFAULTS:
            if value != _ENTRY_DEFAULTS[key]:
                raise _SpecError(f"{where}: {key}={value!r} is not supported by gramkiln")
            continue
        raise _SpecError(f"{where}: unknown key {key!r}")


def _build_grammar(grammar: Any, vocab: Vocab | None) -> Grammar:
    """A gramkiln Grammar for a Lark string or llguidance's JSON grammar list."""
    spec = _parse_spec(grammar)
    if isinstance(spec, str):
        return Grammar.from_lark(spec, vocab=vocab)
    if not isinstance(spec, dict) or not isinstance(spec.get("grammars"), list):
        raise _SpecError('a JSON grammar must be an object with a "grammars" list')
    _check_defaults("grammar", spec, frozenset({"grammars", "test_trace"}))
    entries = spec["grammars"]
    if not entries:
        raise _SpecError('"grammars" is empty')
    named: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _SpecError(f"grammars[{index}] must be an object")
        _check_defaults(f"grammars[{index}]", entry, _ENTRY_KEYS)
        lark = entry.get("lark_grammar")
        schema = entry.get("json_schema")
        initial_skip = entry.get("allow_initial_skip", False)
        if not isinstance(initial_skip, bool):
            raise _SpecError(f"grammars[{index}]: allow_initial_skip must be true or false")
        if initial_skip and lark is None:
            raise _SpecError(
                f"grammars[{index}]: allow_initial_skip applies to lark_grammar entries "
                "(a JSON Schema's whitespace comes from its options)"
            )
        if (lark is None) == (schema is None):
            raise _SpecError(
                f"grammars[{index}] must have exactly one of lark_grammar and json_schema"
            )
        if index == 0:
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise _SpecError(f"grammars[{index}] needs a name (the first grammar uses it as @name)")
        if name in named:
            raise _SpecError(f"grammar name {name!r} is used twice")
        if lark is not None:
            named[name] = _with_initial_skip(Grammar.from_lark(lark), initial_skip)
        else:
            named[name] = _json_schema_grammar(schema)
    top = entries[0]
    if top.get("lark_grammar") is not None:
        if not isinstance(top["lark_grammar"], str):
            raise _SpecError("lark_grammar must be a string")
        return _with_initial_skip(
            Grammar.from_lark(top["lark_grammar"], named_grammars=named or None, vocab=vocab),
            bool(top.get("allow_initial_skip", False)),
        )
    return _json_schema_grammar(top["json_schema"])


def _with_initial_skip(grammar: Grammar, initial_skip: bool) -> Grammar:
    """llguidance's ``allow_initial_skip`` entry option: ignored text may precede the first
    lexeme (the IR option the Lark dialect sets with ``%llguidance``)."""
    if not initial_skip or grammar.ir.options.allow_initial_skip:
        return grammar
    options = grammar.ir.options.model_copy(update={"allow_initial_skip": True})
    return Grammar(grammar.ir.model_copy(update={"options": options}))


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, (_SpecError,)) or type(exc).__module__.startswith("gramkiln"):
        return text
    return f"{type(exc).__name__}: {text}"


def _compile_entry(grammar: Any, vocab: Vocab | None, eos: int | None) -> _Entry:
    """Build (and with a vocabulary compile) `grammar`, turning failures into a message."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            built = _build_grammar(grammar, vocab)
            compiled = None
            if vocab is not None:
                compiled = built.compile(vocab, end_tokens=[eos] if eos is not None else [])
        except (Exception, RecursionError) as exc:  # noqa: BLE001 - reported, never raised
            return _Entry(None, _error_text(exc), [str(w.message) for w in caught])
    return _Entry(compiled, "", [str(w.message) for w in caught])


# ---------------------------------------------------------------------------------------------
# Matcher
# ---------------------------------------------------------------------------------------------
def _check_pointer(pointer: int, size: int, expected: int) -> None:
    pointer = operator.index(pointer)
    size = operator.index(size)
    if pointer == 0:
        raise ValueError("Null pointer")
    if pointer % 4 != 0:
        raise ValueError("Pointer not aligned to 4 bytes")
    if size != expected:
        raise ValueError(f"Invalid buffer size: {size} bytes, expected {expected}")


def _words_at(pointer: int, rows: int, words: int) -> np.ndarray:
    """An int32 [rows, words] array over raw memory (the caller vouches for it)."""
    buffer = (ctypes.c_int32 * (rows * words)).from_address(pointer)
    return np.ctypeslib.as_array(buffer).reshape(rows, words)


def _token_list(tokens: Any) -> list[int]:
    if isinstance(tokens, (str, bytes)):
        raise TypeError("tokens must be a list of token ids")
    if hasattr(tokens, "tolist") and not isinstance(tokens, list):
        tokens = tokens.tolist()
    return [operator.index(t) for t in tokens]


class LLMatcher:
    """llguidance's ``LLMatcher`` on a gramkiln compiled grammar.

    `grammar` is a Lark source or llguidance's JSON form (a string or dict:
    ``{"grammars": [{"lark_grammar": ...} | {"json_schema": ...}, ...]}``, later entries
    named and used by the first as ``@name``). The constructor never raises for a bad
    grammar, and no method raises for a rejected token or an impossible rollback: the matcher
    enters an error state it never leaves (``is_error``, ``get_error``), and its masks then
    allow only the EOS token. API misuse (wrong types, bad pointers or sizes) raises.
    Compiled grammars are cached per tokenizer, so many matchers of one grammar are cheap.
    """

    def __init__(
        self,
        tokenizer: LLTokenizer,
        grammar: Any,
        *,
        log_level: int = 1,
        limits: LLParserLimits | None = None,
    ) -> None:
        """Compile (or fetch from the cache) `grammar` and start a matcher at its start."""
        if not isinstance(tokenizer, LLTokenizer):
            raise TypeError(f"tokenizer must be an LLTokenizer, got {type(tokenizer).__name__}")
        if limits is not None and not isinstance(limits, LLParserLimits):
            raise TypeError(f"limits must be LLParserLimits, got {type(limits).__name__}")
        self._tok = tokenizer
        self._log_level = int(log_level)
        self._limits = limits
        entry = tokenizer._entry(grammar, self._log_level)
        self._warnings = list(entry.warnings)
        self._error = entry.error
        self._m: Any = entry.compiled.matcher() if entry.compiled is not None else None
        self._words = (tokenizer.vocab_size + 31) // 32
        self._version = 0
        self._mask_version = -1
        self._mask = np.zeros((1, self._words), dtype=np.int32)

    # -- static helpers ----------------------------------------------------------------------------
    @staticmethod
    def validate_grammar(
        grammar: Any, tokenizer: LLTokenizer | None = None, *, limits: LLParserLimits | None = None
    ) -> str:
        """ "" when `grammar` is valid, else the error message.

        Without a tokenizer the grammar is parsed; with one it is also compiled (and cached).
        """
        is_error, messages = LLMatcher.validate_grammar_with_warnings(
            grammar, tokenizer, limits=limits
        )
        return messages[0] if is_error else ""

    @staticmethod
    def validate_grammar_with_warnings(
        grammar: Any, tokenizer: LLTokenizer | None = None, *, limits: LLParserLimits | None = None
    ) -> tuple[bool, list[str]]:
        """(is_error, messages): one error message, or the warnings (maybe none)."""
        if tokenizer is not None:
            entry = tokenizer._entry(grammar)
        else:
            _grammar_key(grammar)  # type misuse raises like the constructor
            entry = _compile_entry(grammar, None, None)
        if entry.error:
            return True, [entry.error]
        return False, list(entry.warnings)

    @staticmethod
    def grammar_from_json_schema(
        schema: str | dict[str, Any],
        defaults: JsonCompileOptions | None = None,
        overrides: JsonCompileOptions | None = None,
    ) -> str:
        """The JSON grammar for a schema; options apply as defaults -> x-guidance -> overrides.

        Raises ValueError when an argument is not valid JSON (or, with options, when the
        schema is not an object). The schema itself is checked when a matcher is built.
        """
        value = _json_value(schema, "schema")
        if defaults is not None or overrides is not None:
            if not isinstance(value, dict):
                raise ValueError("Expecting object schema to apply options")
            merged: dict[str, Any] = {}
            if defaults is not None:
                merged.update(_json_object(defaults, "defaults"))
            in_schema = value.get("x-guidance")
            if isinstance(in_schema, dict):
                merged.update(in_schema)
            if overrides is not None:
                merged.update(_json_object(overrides, "overrides"))
            value = dict(value)
            value["x-guidance"] = merged
        return json.dumps({"grammars": [{"json_schema": value}]})

    @staticmethod
    def grammar_from_lark(lark: str) -> str:
        """The grammar for a Lark source (the source itself; not checked here)."""
        return lark

    @staticmethod
    def grammar_from_regex(regex: str) -> str:
        """The JSON grammar for a regex (``start: /regex/``; not checked here)."""
        body = regex_to_lark(regex, "")
        return json.dumps({"grammars": [{"lark_grammar": f"start: /{body}/"}]})

    # -- state ------------------------------------------------------------------------------------
    def _fail(self, message: str) -> None:
        if self._m is not None:
            self._m = None
            self._error = message
            self._version += 1

    def is_error(self) -> bool:
        """Whether the matcher is in its (permanent) error state."""
        return self._m is None

    def get_error(self) -> str:
        """The error message, or "" when there is no error."""
        return self._error if self._m is None else ""

    def get_grammar_warnings(self) -> list[str]:
        """Warnings gramkiln issued while building and compiling the grammar."""
        return list(self._warnings)

    def deep_copy(self) -> LLMatcher:
        """An independent copy in the same state (history included)."""
        copy = LLMatcher.__new__(LLMatcher)
        copy._tok = self._tok
        copy._log_level = self._log_level
        copy._limits = self._limits
        copy._warnings = list(self._warnings)
        copy._error = self._error
        copy._m = self._m.fork() if self._m is not None else None
        copy._words = self._words
        copy._version = 0
        copy._mask_version = -1
        copy._mask = np.zeros((1, self._words), dtype=np.int32)
        return copy

    def _raw_mask(self) -> np.ndarray:
        """gramkiln's mask of the current state (cached until the state changes)."""
        if self._mask_version != self._version:
            self._mask[:] = 0
            self._m.fill_next_token_bitmask(self._mask, 0)
            self._mask_version = self._version
        return self._mask[0]

    def _eos_mask(self) -> np.ndarray:
        mask = np.zeros(self._words, dtype=np.int32)
        eos = self._tok.eos_token
        mask.view(np.uint32)[eos // 32] = np.uint32(1 << (eos % 32))
        return mask

    def _current_mask(self) -> np.ndarray:
        # gramkiln's own mask is already EOS-only once the grammar is complete or ended; only
        # the error state needs llguidance's EOS-only answer written in.
        if self._m is None:
            return self._eos_mask()
        return self._raw_mask().copy()

    def is_accepting(self) -> bool:
        """Whether the input so far is complete (EOS may follow, or has been consumed)."""
        if self._m is None:
            return False
        return bool(self._m.is_accepting() or self._m.is_terminated())

    def stop_reason(self) -> StopReason:
        """Why the matcher stopped: NotStopped, NoExtension, EndOfSentence or InternalError.

        NoExtension: the input is complete and no text token can follow. InternalError: the
        matcher is in its error state. The token-limit and complexity reasons never occur.
        """
        if self._m is None:
            return "InternalError"
        if self._m.is_terminated():
            return "EndOfSentence"
        if not self._m.is_accepting():
            return "NotStopped"
        mask = self._raw_mask().view(np.uint32).copy()
        eos = self._tok.eos_token
        mask[eos // 32] &= np.uint32(~(1 << (eos % 32)) & 0xFFFFFFFF)
        return "NotStopped" if mask.any() else "NoExtension"

    def is_stopped(self) -> bool:
        """Whether only EOS may follow (also true in the error state)."""
        return self.stop_reason() != "NotStopped"

    def rollback(self, num_tokens: int) -> bool:
        """Undo the last `num_tokens` consumed tokens; more than were consumed is an error."""
        count = operator.index(num_tokens)
        if self._m is None:
            return False
        if count < 0 or count > self._m.num_steps:
            self._fail(f"cannot roll back {count} tokens: only {self._m.num_steps} consumed")
            return False
        if count:
            self._m.rollback(count)
            self._version += 1
        return True

    def reset(self) -> bool:
        """Back to the start of the grammar (False in the error state)."""
        if self._m is None:
            return False
        self._m.reset()
        self._version += 1
        return True

    # -- tokens ------------------------------------------------------------------------------
    def _consume(self, token: int) -> bool:
        if self._m is None:
            return False
        if not 0 <= token < self._tok.vocab_size:
            self._fail(f"token id {token} is outside the vocabulary (size {self._tok.vocab_size})")
            return False
        if not self._m.accept_token(token):
            shown = self._tok.dbg_tokens([token])
            self._fail(f"token {token} ({shown}) is not allowed here")
            return False
        self._version += 1
        return True

    def consume_token(self, sampled_token: TokenId) -> bool:
        """Consume one token; False (and the error state) when it is not allowed.

        EOS on a stopped matcher (complete, ended, or in the error state) returns True and
        changes nothing, as llguidance does: a server may sample EOS from the EOS-only mask.
        """
        token = operator.index(sampled_token)
        if token == self._tok.eos_token and self.is_stopped():
            return True
        return self._consume(token)

    def consume_tokens(self, sampled_tokens: list[TokenId]) -> bool:
        """Consume tokens in order; False (and the error state) at the first not allowed."""
        return all(self._consume(t) for t in _token_list(sampled_tokens))

    def try_consume_tokens(self, tokens: list[TokenId]) -> int:
        """Consume the longest allowed prefix of `tokens`; return its length (no error state)."""
        count = 0
        for token in _token_list(tokens):
            if self._m is None:
                break
            if not 0 <= token < self._tok.vocab_size or not self._m.accept_token(token):
                break
            self._version += 1
            count += 1
        return count

    def validate_tokens(self, tokens: list[TokenId]) -> int:
        """How many of `tokens`, in order, could be consumed now (the state is unchanged)."""
        ids = _token_list(tokens)
        if self._m is None:
            return 1 if ids and ids[0] == self._tok.eos_token else 0
        probe = self.deep_copy()
        return probe.try_consume_tokens(ids)

    # -- masks ---------------------------------------------------------------------------------
    def compute_bitmask(self) -> bytes:
        """The mask, one bit per token, as little-endian 32-bit words."""
        return self._current_mask().astype("<i4").tobytes()

    def compute_logit_bias(self) -> bytes:
        """The mask, one byte per token: 200 where allowed, 0 elsewhere."""
        bits = np.unpackbits(self._current_mask().astype("<i4").view(np.uint8), bitorder="little")[
            : self._tok.vocab_size
        ]
        return (bits * np.uint8(200)).tobytes()

    def unsafe_compute_mask_ptr(self, trg_pointer: int, trg_byte_size: int) -> None:
        """Write the bitmask to raw memory at `trg_pointer` (exactly ceil(vocab/32)*4 bytes).

        Raises ValueError for a null or unaligned pointer or a wrong size.
        """
        _check_pointer(trg_pointer, trg_byte_size, self._words * 4)
        mask = np.ascontiguousarray(self._current_mask())
        ctypes.memmove(operator.index(trg_pointer), mask.ctypes.data, self._words * 4)

    def compute_ff_bytes(self) -> bytes:
        """The bytes every continuation starts with (whole UTF-8 characters), or b""."""
        if self._m is None or self._m.is_terminated():
            return b""
        return str(self._m.find_jump_forward_string()).encode("utf-8")

    def compute_ff_tokens(self) -> list[TokenId]:
        """Tokens for the forced bytes that later text cannot re-tokenize ([] if not canonical).

        The forced bytes are tokenized on their own (no merging with tokens already
        consumed); every returned token is allowed in sequence.
        """
        if self._m is None or not self._tok.is_canonical:
            return []
        forced = self.compute_ff_bytes()
        if not forced:
            return []
        try:
            tokens, _ = self._tok.tokenize_partial(forced)
        except ValueError:
            return []
        return tokens[: self.validate_tokens(tokens)]

    def __repr__(self) -> str:
        state = f"error={self._error!r}" if self._m is None else f"stop={self.stop_reason()}"
        return f"<LLMatcher {state}>"


def _json_value(value: Any, what: str) -> Any:
    if isinstance(value, (str, bytes, bytearray)):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{what} is not valid JSON: {exc}") from exc
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from exc
    return value


def _json_object(value: Any, what: str) -> dict[str, Any]:
    decoded = _json_value(value, what)
    if not isinstance(decoded, dict):
        raise ValueError(f"{what} must be a JSON object")
    return dict(decoded)


# ---------------------------------------------------------------------------------------------
# Deprecated compilers (kept because the stub lists them)
# ---------------------------------------------------------------------------------------------
class JsonCompiler:
    """Deprecated in llguidance: use LLMatcher.grammar_from_json_schema."""

    def __init__(
        self,
        separators: tuple[str, str] | None = None,
        whitespace_flexible: bool = False,
        coerce_one_of: bool = False,
        whitespace_pattern: str | None = None,
    ) -> None:
        """Record the options applied as overrides by compile()."""
        options: JsonCompileOptions = {
            "whitespace_flexible": whitespace_flexible,
            "coerce_one_of": coerce_one_of,
        }
        if separators is not None:
            options["item_separator"], options["key_separator"] = separators
        if whitespace_pattern is not None:
            options["whitespace_pattern"] = whitespace_pattern
        self.options = options

    def compile(self, schema: str, check: bool = True) -> str:
        """The JSON grammar for `schema`; with `check`, ValueError if it does not build."""
        grammar = LLMatcher.grammar_from_json_schema(schema, overrides=self.options)
        return _checked(grammar, check)


class LarkCompiler:
    """Deprecated in llguidance: use LLMatcher.grammar_from_lark."""

    def compile(self, lark: str, check: bool = True) -> str:
        """The grammar for `lark`; with `check`, ValueError if it does not build."""
        return _checked(LLMatcher.grammar_from_lark(lark), check)


class RegexCompiler:
    """Deprecated in llguidance: use LLMatcher.grammar_from_regex."""

    def compile(self, regex: str, check: bool = True) -> str:
        """The grammar for `regex`; with `check`, ValueError if it does not build."""
        return _checked(LLMatcher.grammar_from_regex(regex), check)


def _checked(grammar: str, check: bool) -> str:
    if check:
        error = LLMatcher.validate_grammar(grammar)
        if error:
            raise ValueError(error)
    return grammar


# ---------------------------------------------------------------------------------------------
# Executor
# ---------------------------------------------------------------------------------------------
class LLExecutor:
    """Computes the masks of many matchers at once with gramkiln's threaded batch fill."""

    def __init__(self, num_threads: int | None = None) -> None:
        """`num_threads` defaults to 80% of the CPUs, at most 32 (llguidance's default)."""
        if num_threads is None or num_threads == 0:
            num_threads = min(32, max(1, int(usable_cpus() * 0.8)))
        num_threads = operator.index(num_threads)
        if num_threads < 1:
            raise ValueError(f"num_threads must be positive, got {num_threads}")
        self.num_threads = num_threads

    @staticmethod
    def _checked_entries(
        interpreters: Any, width: int, one_mask_bytes: int, trg_batch_size: int, pointer: int
    ) -> list[tuple[Any, ...]]:
        if not isinstance(interpreters, Sequence) or isinstance(interpreters, (str, bytes)):
            raise TypeError("interpreters must be a list of tuples")
        if not interpreters:
            raise ValueError("No interpreters")
        batch = operator.index(trg_batch_size)
        if batch < 1:
            raise ValueError(f"trg_batch_size must be positive, got {batch}")
        entries: list[tuple[Any, ...]] = []
        for entry in interpreters:
            if not isinstance(entry, tuple) or len(entry) != width:
                kinds = "(LLMatcher, int)" if width == 2 else "(LLMatcher, int, list[int])"
                raise ValueError(f"Expecting {kinds} tuples, got {entry!r}")
            matcher, index = entry[0], operator.index(entry[1])
            if not isinstance(matcher, LLMatcher):
                raise TypeError(f"expected an LLMatcher, got {type(matcher).__name__}")
            extra = len(entry[2]) if width == 3 else 0
            if not 0 <= index or index + extra >= batch:
                raise ValueError(
                    f"Target index out of bounds: rows {index}..{index + extra} of a batch "
                    f"of {batch}"
                )
            _check_pointer(pointer, one_mask_bytes, matcher._words * 4)
            entries.append((matcher, index, *entry[2:]))
        return entries

    def _fill(self, jobs: list[tuple[LLMatcher, int]], view: np.ndarray) -> None:
        live = [(m, row) for m, row in jobs if m._m is not None]
        for matcher, row in jobs:
            if matcher._m is None:
                view[row] = matcher._eos_mask()
        if not live:
            return
        rows = [row for _, row in live]
        if len(set(rows)) != len(rows):
            raise ValueError("two masks would be written to the same row")
        for row in rows:
            view[row] = 0
        fill_next_token_bitmask_batch(
            [m._m for m, _ in live], view, indices=rows, threads=self.num_threads
        )

    def unsafe_compute_mask_ptr(
        self,
        interpreters: list[tuple[LLMatcher, int]],
        trg_pointer: int,
        one_mask_bytes: int,
        trg_batch_size: int,
    ) -> None:
        """Write matcher i's mask at ``trg_pointer + K_i * one_mask_bytes``.

        Every index must be below `trg_batch_size`, distinct, and `one_mask_bytes` must be
        the matchers' exact mask size; ValueError otherwise (nothing is written then).
        """
        entries = self._checked_entries(
            interpreters, 2, one_mask_bytes, trg_batch_size, trg_pointer
        )
        words = operator.index(one_mask_bytes) // 4
        view = _words_at(operator.index(trg_pointer), operator.index(trg_batch_size), words)
        self._fill([(m, k) for m, k in entries], view)

    def unsafe_compute_mask_ptr_with_draft_token(
        self,
        interpreters: list[tuple[LLMatcher, int, list[int]]],
        trg_pointer: int,
        one_mask_bytes: int,
        trg_batch_size: int,
    ) -> None:
        """Masks for the current position and after each draft token, for speculative decoding.

        For ``(matcher, K, drafts)``: the current mask at row K, and the mask after
        ``drafts[:i + 1]`` at row ``K + i + 1``, for the draft tokens consumed in order until
        one is not allowed or the matcher has stopped; the rows of the drafts after that are
        left as they were. The matchers themselves are not changed (copies are advanced).
        ``K + len(drafts)`` must be below `trg_batch_size`.
        """
        entries = self._checked_entries(
            interpreters, 3, one_mask_bytes, trg_batch_size, trg_pointer
        )
        words = operator.index(one_mask_bytes) // 4
        view = _words_at(operator.index(trg_pointer), operator.index(trg_batch_size), words)
        jobs: list[tuple[LLMatcher, int]] = []
        for matcher, index, drafts in entries:
            jobs.append((matcher, index))
            if matcher.is_error():
                continue
            probe = matcher.deep_copy()
            for offset, token in enumerate(_token_list(drafts)):
                if probe.is_stopped() or probe.try_consume_tokens([token]) != 1:
                    break
                jobs.append((probe, index + offset + 1))
                # Each row needs its own state: the next draft token advances a fresh copy.
                probe = probe.deep_copy()
        self._fill(jobs, view)


# ---------------------------------------------------------------------------------------------
# Interpreter (llguidance's older, prompt-aware interface)
# ---------------------------------------------------------------------------------------------
class LLInterpreter:
    """llguidance's ``LLInterpreter`` on top of LLMatcher.

    Unlike LLMatcher it raises ValueError for a grammar that does not build and for a
    committed token that is not allowed. It does no token healing (process_prompt returns the
    prompt unchanged) and never backtracks; with `enable_ff_tokens`, commit_token appends the
    tokens forced after the sampled one. compute_mask returns one byte per token (200 allowed,
    0 not) and a JSON object ``{"stop", "stop_reason", "is_accepting"}``.
    """

    def __init__(
        self,
        tokenizer: LLTokenizer,
        grammar: Any,
        enable_backtrack: bool = True,
        enable_ff_tokens: bool = True,
        log_level: int = 1,
        limits: LLParserLimits | None = None,
    ) -> None:
        """Build the interpreter; ValueError when the grammar does not build."""
        self._matcher = LLMatcher(tokenizer, grammar, log_level=log_level, limits=limits)
        if self._matcher.is_error():
            raise ValueError(self._matcher.get_error())
        self.enable_backtrack = bool(enable_backtrack)
        self.enable_ff_tokens = bool(enable_ff_tokens)
        self._started = False

    def deep_copy(self) -> LLInterpreter:
        """An independent copy in the same state."""
        copy = LLInterpreter.__new__(LLInterpreter)
        copy._matcher = self._matcher.deep_copy()
        copy.enable_backtrack = self.enable_backtrack
        copy.enable_ff_tokens = self.enable_ff_tokens
        copy._started = self._started
        return copy

    @property
    def matcher(self) -> LLMatcher:
        """The underlying LLMatcher (gramkiln extension)."""
        return self._matcher

    def is_accepting(self) -> bool:
        """Whether the input so far is complete."""
        return self._matcher.is_accepting()

    def stop_reason(self) -> StopReason:
        """Why the parser stopped ("NotStopped" while it has not)."""
        return self._matcher.stop_reason()

    def process_prompt(self, prompt: list[TokenId]) -> list[TokenId]:
        """Start the parser; returns the prompt unchanged (gramkiln does no token healing)."""
        self._started = True
        return _token_list(prompt)

    def start_without_prompt(self) -> None:
        """Start the parser without a prompt."""
        self._started = True

    def validate_tokens_raw(self, tokens: list[TokenId]) -> int:
        """How many of `tokens`, in order, could be committed now."""
        return self._matcher.validate_tokens(tokens)

    def has_pending_stop(self) -> bool:
        """Whether the next compute_mask will report a stop."""
        return self._matcher.is_stopped()

    def _status(self) -> str:
        matcher = self._matcher
        info: dict[str, Any] = {
            "stop": matcher.is_stopped(),
            "stop_reason": matcher.stop_reason(),
            "is_accepting": matcher.is_accepting(),
        }
        if matcher.is_error():
            info["error"] = matcher.get_error()
        return json.dumps(info)

    def compute_mask(self) -> tuple[bytes | None, str]:
        """(mask, status JSON): the mask is None once the parser has stopped."""
        self._started = True
        if self._matcher.is_stopped():
            return None, self._status()
        return self._matcher.compute_logit_bias(), self._status()

    def compute_mask_into(self, trg: bytearray) -> str:
        """Write the one-byte-per-token mask into `trg` (vocab_size bytes); the status JSON."""
        size = self._matcher._tok.vocab_size
        view = memoryview(trg)
        if view.readonly or view.nbytes != size:
            raise ValueError(f"trg must be a writable buffer of exactly {size} bytes")
        self._started = True
        view.cast("B")[:] = self._matcher.compute_logit_bias()
        return self._status()

    def unsafe_compute_mask_ptr(self, trg_pointer: int, trg_byte_size: int) -> str:
        """Write the bitmask (32-bit words) to raw memory; the status JSON."""
        self._started = True
        self._matcher.unsafe_compute_mask_ptr(trg_pointer, trg_byte_size)
        return self._status()

    def commit_token(self, sampled_token: TokenId | None) -> tuple[int, list[TokenId]]:
        """Commit a sampled token: (tokens to remove = 0, tokens to append).

        The tokens to append are the sampled token followed by any forced (fast-forward)
        tokens, which are committed too. None commits nothing. ValueError when the token is
        not allowed.
        """
        if sampled_token is None:
            return 0, []
        token = operator.index(sampled_token)
        if not self._matcher.consume_token(token):
            raise ValueError(self._matcher.get_error() or f"token {token} was not accepted")
        appended = [token]
        if self.enable_ff_tokens and not self._matcher.is_stopped():
            forced = self._matcher.compute_ff_tokens()
            count = self._matcher.try_consume_tokens(forced)
            appended += forced[:count]
        return 0, appended


# ---------------------------------------------------------------------------------------------
# numpy / torch helpers
# ---------------------------------------------------------------------------------------------
def _bitmask_pointer(bitmask: Any) -> tuple[int, int, int]:
    """(address, rows, words) of a C-contiguous 2-D int32 CPU bitmask (numpy or torch)."""
    if type(bitmask).__module__.startswith("torch"):
        import torch

        if bitmask.dtype != torch.int32:
            raise ValueError(f"bitmask dtype must be int32, got {bitmask.dtype}")
        if bitmask.device.type != "cpu":
            raise ValueError("bitmask must be on the CPU")
        if bitmask.dim() != 2 or not bitmask.is_contiguous():
            raise ValueError("bitmask must be a contiguous 2-D tensor")
        return int(bitmask.data_ptr()), int(bitmask.shape[0]), int(bitmask.shape[1])
    if not isinstance(bitmask, np.ndarray):
        raise TypeError("bitmask must be a numpy array or a torch tensor")
    if bitmask.dtype != np.int32:
        raise ValueError(f"bitmask dtype must be int32, got {bitmask.dtype}")
    if bitmask.ndim != 2 or not bitmask.flags.c_contiguous or not bitmask.flags.writeable:
        raise ValueError("bitmask must be a writable C-contiguous 2-D array")
    return int(bitmask.ctypes.data), int(bitmask.shape[0]), int(bitmask.shape[1])


def fill_next_token_bitmask(matcher: LLMatcher, bitmask: Any, index: int = 0) -> None:
    """Write `matcher`'s mask into row `index` of an int32 [batch, words] bitmask."""
    pointer, rows, words = _bitmask_pointer(bitmask)
    index = operator.index(index)
    if not 0 <= index < rows:
        raise IndexError(f"index {index} is outside the bitmask's {rows} rows")
    matcher.unsafe_compute_mask_ptr(pointer + index * words * 4, words * 4)


def fill_next_token_bitmask_par(
    executor: LLExecutor, matchers: list[tuple[LLMatcher, int]], bitmask: Any
) -> None:
    """Write each ``(matcher, row)``'s mask into its row of `bitmask`, in parallel."""
    pointer, rows, words = _bitmask_pointer(bitmask)
    executor.unsafe_compute_mask_ptr(matchers, pointer, words * 4, rows)
