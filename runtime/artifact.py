"""The artifact envelope: a deterministic, self-checking msgpack container.

An artifact is one msgpack array ``["gramkiln", FORMAT_VERSION, header, sections]``:

- ``header`` is a map with string keys (sorted) holding the producer version, the IR hash,
  the vocabulary fingerprint, the compile options and a checksum of everything else;
- ``sections`` is a map from section name (sorted) to a ``bin`` blob; the compiler's tables
  are little-endian blobs the C++ runtime reads in place, and for now the IR travels as the
  ``ir`` section (`gramkiln.ir.ir_to_msgpack`).

Reading validates everything and raises `ArtifactError` with a reason: wrong magic, unknown
version (naming both), truncation, trailing bytes, non-canonical encoding, wrong types,
hostile sizes, checksum mismatch. Because the reader insists on the canonical encoding and
the checksum covers every value, any corruption of a valid file is reported rather than
silently loaded. The full layout is documented in docs/artifact-format.md.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from gramkiln.errors import ArtifactError, IRError, VocabError

if TYPE_CHECKING:
    from gramkiln.ir import GrammarIR
    from gramkiln.runtime.vocab import Vocab

__all__ = [
    "DEFAULT_MAX_SIZE",
    "FORMAT_VERSION",
    "MAGIC",
    "REQUIRED_HEADER_KEYS",
    "check_vocab",
    "ir_from_artifact",
    "ir_hash",
    "load_artifact",
    "make_header",
    "read_artifact",
    "save_artifact",
    "write_artifact",
]

MAGIC = "gramkiln"
FORMAT_VERSION = 1
DEFAULT_MAX_SIZE = 512 * 1024 * 1024
# The header is metadata; a big one is a sign of a hostile or broken file.
MAX_HEADER_BYTES = 1024 * 1024
MAX_HEADER_DEPTH = 32
MAX_SECTIONS = 4096
REQUIRED_HEADER_KEYS = ("producer", "ir_hash", "vocab", "options")
CHECKSUM_KEY = "checksum"
SECTION_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_INT_RANGE = (-(1 << 63), (1 << 64) - 1)


# --------------------------------------------------------------------------------------------
# helpers for producers


def ir_hash(ir: GrammarIR) -> str:
    """SHA-256 hex of the IR's canonical msgpack form with source spans removed.

    Spans only say where text came from, so reformatting a grammar file keeps its hash.
    """
    from gramkiln.ir import ir_to_msgpack, strip_spans

    return hashlib.sha256(ir_to_msgpack(strip_spans(ir))).hexdigest()


def make_header(
    ir: GrammarIR, vocab: Vocab, options: Mapping[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """The standard header: producer version, IR hash, vocabulary fingerprint, options.

    `extra` adds producer-specific keys (e.g. table layout versions); values must be
    msgpack-encodable without floats that vary (see `write_artifact`).
    """
    from gramkiln import __version__

    header: dict[str, Any] = {
        "producer": f"gramkiln {__version__}",
        "ir_hash": ir_hash(ir),
        "vocab": vocab.fingerprint_info(),
        "options": dict(options or {}),
    }
    for key, value in extra.items():
        if key in header or key == CHECKSUM_KEY:
            raise ArtifactError(f"header key {key!r} is reserved")
        header[key] = value
    return header


def check_vocab(header: Mapping[str, Any], vocab: Vocab) -> None:
    """Raise VocabError unless `vocab` is the vocabulary the artifact was compiled for."""
    expected = header.get("vocab")
    if not isinstance(expected, Mapping):
        raise ArtifactError("artifact header has no vocabulary fingerprint")
    actual = vocab.fingerprint_info()
    if (
        expected.get("sha256") != actual["sha256"]
        or expected.get("vocab_size") != actual["vocab_size"]
    ):
        raise VocabError(
            "the artifact was compiled for a different vocabulary: artifact has "
            f"size {expected.get('vocab_size')} / {str(expected.get('sha256'))[:12]}, "
            f"given vocabulary has size {actual['vocab_size']} / {actual['sha256'][:12]}"
        )


def ir_from_artifact(header: Mapping[str, Any], sections: Mapping[str, bytes]) -> GrammarIR:
    """Decode the `ir` section and check it against the header's IR hash."""
    from gramkiln.ir import ir_from_msgpack

    if "ir" not in sections:
        raise ArtifactError("artifact has no 'ir' section")
    try:
        ir = ir_from_msgpack(sections["ir"])
    except IRError as exc:
        raise ArtifactError(f"the 'ir' section is not valid IR: {exc}") from exc
    if ir_hash(ir) != header.get("ir_hash"):
        raise ArtifactError("the 'ir' section does not match the header's ir_hash")
    return ir


# --------------------------------------------------------------------------------------------
# writing


def write_artifact(header: Mapping[str, Any], sections: Mapping[str, bytes]) -> bytes:
    """Encode the envelope deterministically (sorted keys, canonical msgpack, checksum).

    `header` must hold `REQUIRED_HEADER_KEYS` (see `make_header`); the checksum key is added
    here. Header values may be None, bool, int, finite float, str, bytes, lists/tuples and
    maps with string keys. Section values are bytes-like.
    """
    if not isinstance(header, Mapping):
        raise ArtifactError(f"header must be a mapping, got {type(header).__name__}")
    if CHECKSUM_KEY in header:
        raise ArtifactError(f"header key {CHECKSUM_KEY!r} is reserved (write_artifact sets it)")
    canonical_header = _canonical(dict(header), "header", 0)
    _check_header_fields(canonical_header, with_checksum=False)
    canonical_sections = _canonical_sections(sections)
    canonical_header[CHECKSUM_KEY] = _checksum(canonical_header, canonical_sections)
    canonical_header = dict(sorted(canonical_header.items()))
    packed_header = _pack(canonical_header)
    if len(packed_header) > MAX_HEADER_BYTES:
        raise ArtifactError(f"header is {len(packed_header)} bytes (limit {MAX_HEADER_BYTES})")
    return _pack([MAGIC, FORMAT_VERSION, canonical_header, canonical_sections])


def save_artifact(
    path: str | os.PathLike[str], header: Mapping[str, Any], sections: Mapping[str, bytes]
) -> None:
    """`write_artifact` to a file (written whole, then renamed, so readers never see half)."""
    target = Path(path)
    data = write_artifact(header, sections)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, target)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, use_single_float=False, strict_types=False)


def _canonical(value: Any, where: str, depth: int) -> Any:
    """A copy with maps sorted by key and only the allowed types (or ArtifactError)."""
    if depth > MAX_HEADER_DEPTH:
        raise ArtifactError(f"{where}: nested deeper than {MAX_HEADER_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise ArtifactError(f"{where}: integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        # NaN never equals itself, so a header holding it could not be compared or
        # checksummed reliably; infinities are rejected with it for symmetry.
        if not math.isfinite(value):
            raise ArtifactError(f"{where}: non-finite float {value!r}")
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [_canonical(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in sorted(value, key=lambda k: (not isinstance(k, str), str(k))):
            if not isinstance(key, str):
                raise ArtifactError(f"{where}: map key {key!r} is not a string")
            out[key] = _canonical(value[key], f"{where}.{key}", depth + 1)
        return out
    raise ArtifactError(f"{where}: values of type {type(value).__name__} cannot be stored")


def _canonical_sections(sections: Any) -> dict[str, bytes]:
    if not isinstance(sections, Mapping):
        raise ArtifactError(f"sections must be a mapping, got {type(sections).__name__}")
    if len(sections) > MAX_SECTIONS:
        raise ArtifactError(f"{len(sections)} sections (limit {MAX_SECTIONS})")
    out: dict[str, bytes] = {}
    for name in sorted(sections, key=str):
        if not isinstance(name, str) or not SECTION_NAME.match(name):
            raise ArtifactError(
                f"section name {name!r} must be 1-128 characters of letters, digits, _ . - /"
            )
        blob = sections[name]
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise ArtifactError(f"section {name!r} must be bytes, got {type(blob).__name__}")
        out[name] = bytes(blob)
    return out


def _checksum(header_without_checksum: dict[str, Any], sections: dict[str, bytes]) -> str:
    """SHA-256 over the canonical header (minus the checksum) and every section."""
    digest = hashlib.sha256(b"gramkiln-artifact\0")
    digest.update(_pack(header_without_checksum))
    for name, blob in sections.items():
        digest.update(_pack(name))
        digest.update(len(blob).to_bytes(8, "little"))
        digest.update(blob)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# reading


def read_artifact(
    data: bytes, *, max_size: int = DEFAULT_MAX_SIZE
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Decode and fully validate an envelope; return `(header, sections)`.

    Raises ArtifactError (with the reason) on anything but a canonical, intact artifact of
    `FORMAT_VERSION` no larger than `max_size` bytes.
    """
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise ArtifactError(f"artifact data must be bytes, got {type(data).__name__}")
    if len(data) > max_size:
        raise ArtifactError(f"artifact is {len(data)} bytes, over the limit of {max_size}")
    if not data:
        raise ArtifactError("artifact is empty")
    reader = _Reader(data)
    try:
        if reader.array_header() != 4:
            raise ArtifactError("not a gramkiln artifact (the envelope is not a 4-element array)")
        magic = reader.value()
        if magic != MAGIC:
            raise ArtifactError(f"not a gramkiln artifact (magic {magic!r}, expected {MAGIC!r})")
        version = reader.value()
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArtifactError(f"format version must be an integer, got {version!r}")
        if version != FORMAT_VERSION:
            raise ArtifactError(
                f"artifact format version {version} cannot be read by this build of gramkiln, "
                f"which reads version {FORMAT_VERSION}"
            )
        header_start = reader.offset
        header = reader.value()
        if not isinstance(header, dict):
            raise ArtifactError(f"header must be a map, got {type(header).__name__}")
        header_end = reader.offset
        if header_end - header_start > MAX_HEADER_BYTES:
            raise ArtifactError(f"header is over {MAX_HEADER_BYTES} bytes")
        sections = _read_sections(reader)
        _check_header_fields(header, with_checksum=True)
        if _pack(_canonical(header, "header", 0)) != data[header_start:header_end]:
            raise ArtifactError("header is not canonically encoded (corrupted or hand-edited)")
    except ArtifactError:
        raise
    except msgpack.OutOfData as exc:
        raise ArtifactError(
            f"artifact is truncated (ends inside the envelope at byte {len(data)})"
        ) from exc
    except (ValueError, TypeError, msgpack.StackError, msgpack.FormatError) as exc:
        raise ArtifactError(f"artifact is not valid msgpack: {exc or type(exc).__name__}") from exc
    if reader.offset != len(data):
        raise ArtifactError(f"{len(data) - reader.offset} trailing bytes after the envelope")
    body = {k: v for k, v in header.items() if k != CHECKSUM_KEY}
    if _checksum(body, sections) != header[CHECKSUM_KEY]:
        raise ArtifactError("checksum mismatch: the artifact is corrupted")
    return header, sections


def load_artifact(
    path: str | os.PathLike[str], *, max_size: int = DEFAULT_MAX_SIZE
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Read a file with `read_artifact`; the size limit is checked before reading."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > max_size:
            raise ArtifactError(f"{file}: {size} bytes, over the limit of {max_size}")
        data = file.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"{file}: cannot read artifact: {exc}") from exc
    try:
        return read_artifact(data, max_size=max_size)
    except ArtifactError as exc:
        raise ArtifactError(f"{file}: {exc}") from exc


class _Reader:
    """Step-by-step msgpack decoding that knows the byte offset of every value."""

    def __init__(self, data: bytes) -> None:
        # Container lengths are capped by the input size so a hostile length prefix cannot
        # trigger a huge allocation before the data runs out.
        limit = max(len(data), 16)
        self._unpacker = msgpack.Unpacker(
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_buffer_size=limit,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit,
            max_ext_len=0,
        )
        self._unpacker.feed(data)
        self.data = data

    @property
    def offset(self) -> int:
        return int(self._unpacker.tell())

    def array_header(self) -> int:
        start = self.offset
        if self.data[start] >> 4 != 0x9 and self.data[start] not in (0xDC, 0xDD):
            raise ArtifactError("not a gramkiln artifact (does not start with a msgpack array)")
        return int(self._unpacker.read_array_header())

    def map_header(self) -> int:
        start = self.offset
        if start >= len(self.data):
            raise msgpack.OutOfData()
        first = self.data[start]
        if first >> 4 != 0x8 and first not in (0xDE, 0xDF):
            raise ArtifactError("sections must be a map")
        return int(self._unpacker.read_map_header())

    def value(self) -> Any:
        return self._unpacker.unpack()


def _read_sections(reader: _Reader) -> dict[str, bytes]:
    start = reader.offset
    count = reader.map_header()
    if count > MAX_SECTIONS:
        raise ArtifactError(f"{count} sections (limit {MAX_SECTIONS})")
    expected_header = _pack_map_header(count)
    if reader.data[start : reader.offset] != expected_header:
        raise ArtifactError("sections map is not canonically encoded")
    sections: dict[str, bytes] = {}
    previous: str | None = None
    for index in range(count):
        key_start = reader.offset
        name = reader.value()
        if not isinstance(name, str) or not SECTION_NAME.match(name):
            raise ArtifactError(f"section {index} has a bad name {name!r}")
        if previous is not None and name <= previous:
            raise ArtifactError(f"section names are not sorted/unique at {name!r}")
        if reader.data[key_start : reader.offset] != _pack(name):
            raise ArtifactError(f"section name {name!r} is not canonically encoded")
        blob_start = reader.offset
        blob = reader.value()
        if not isinstance(blob, bytes):
            raise ArtifactError(f"section {name!r} must be a bin blob, got {type(blob).__name__}")
        if reader.offset - blob_start != _bin_encoded_size(len(blob)):
            raise ArtifactError(f"section {name!r} is not canonically encoded")
        sections[name] = blob
        previous = name
    return sections


def _pack_map_header(count: int) -> bytes:
    packer = msgpack.Packer(use_bin_type=True)
    return packer.pack_map_header(count)


def _bin_encoded_size(length: int) -> int:
    if length < 1 << 8:
        return 2 + length
    if length < 1 << 16:
        return 3 + length
    return 5 + length


def _check_header_fields(header: dict[str, Any], *, with_checksum: bool) -> None:
    """The standard header keys exist and have the documented types."""
    missing = [key for key in REQUIRED_HEADER_KEYS if key not in header]
    if with_checksum and CHECKSUM_KEY not in header:
        missing.append(CHECKSUM_KEY)
    if missing:
        raise ArtifactError(f"header is missing {', '.join(missing)}")
    if not isinstance(header["producer"], str):
        raise ArtifactError("header.producer must be a string")
    if not isinstance(header["ir_hash"], str) or not _HEX64.match(header["ir_hash"]):
        raise ArtifactError("header.ir_hash must be a 64-digit lowercase hex string")
    vocab = header["vocab"]
    if not (
        isinstance(vocab, dict)
        and isinstance(vocab.get("vocab_size"), int)
        and not isinstance(vocab.get("vocab_size"), bool)
        and vocab["vocab_size"] > 0
        and isinstance(vocab.get("sha256"), str)
        and _HEX64.match(vocab["sha256"])
    ):
        raise ArtifactError(
            "header.vocab must be {vocab_size: positive int, sha256: 64 hex digits}"
        )
    if not isinstance(header["options"], dict):
        raise ArtifactError("header.options must be a map")
    if with_checksum and (
        not isinstance(header[CHECKSUM_KEY], str) or not _HEX64.match(header[CHECKSUM_KEY])
    ):
        raise ArtifactError("header.checksum must be a 64-digit lowercase hex string")
