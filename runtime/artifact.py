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

import contextlib
import hashlib
import math
import os
import re
import secrets
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
    "make_header_without_ir_hash",
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
# How msgpack writes the map key "span" (a 4-byte fixstr); spans are omitted when None.
_SPAN_KEY = b"\xa4span"


# --------------------------------------------------------------------------------------------
# helpers for producers


def ir_hash(ir: GrammarIR, packed: bytes | None = None) -> str:
    """SHA-256 hex of the IR's canonical msgpack form with source spans removed.

    Spans only say where text came from, so reformatting a grammar file keeps its hash.
    `packed`, when given, must be `ir_to_msgpack(ir)`: if no "span" key occurs in it the IR
    has no spans, so it already is the canonical form and neither stripping (a walk over the
    whole IR) nor a second encoding is needed. A false alarm (a literal "span" somewhere) only
    takes the slow path.
    """
    from gramkiln.ir import ir_to_msgpack, strip_spans

    if packed is not None and _SPAN_KEY not in packed:
        return hashlib.sha256(packed).hexdigest()
    return hashlib.sha256(ir_to_msgpack(strip_spans(ir))).hexdigest()


def make_header(
    ir: GrammarIR,
    vocab: Vocab,
    options: Mapping[str, Any] | None = None,
    *,
    packed_ir: bytes | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The standard header: producer version, IR hash, vocabulary fingerprint, options.

    `packed_ir` (`ir_to_msgpack(ir)`, when the caller has it) lets `ir_hash` skip work.
    `extra` adds producer-specific keys (e.g. table layout versions); values must be
    msgpack-encodable without floats that vary (see `write_artifact`).
    """
    header = make_header_without_ir_hash(vocab, options, **extra)
    header["ir_hash"] = ir_hash(ir, packed_ir)
    return header


def make_header_without_ir_hash(
    vocab: Vocab, options: Mapping[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """`make_header` less the `ir_hash` key, for producers that add it later (the IR hash
    needs the IR's encoding, which `CompiledGrammar` only makes when it is asked for)."""
    from gramkiln import __version__

    header: dict[str, Any] = {
        "producer": f"gramkiln {__version__}",
        "vocab": vocab.fingerprint_info(),
        "options": dict(options or {}),
    }
    for key, value in extra.items():
        if key in header or key in ("ir_hash", CHECKSUM_KEY):
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
    # A name of its own per writer: two processes saving one path must not share a file.
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with temporary.open("xb") as handle:
            handle.write(data)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise OSError(exc.errno, f"cannot write artifact {target}: {exc.strerror}") from None


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
    data: bytes,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    verify_checksum: bool = True,
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Decode and fully validate an envelope; return `(header, sections)`.

    Raises ArtifactError (with the reason) on anything but a canonical, intact artifact of
    `FORMAT_VERSION` no larger than `max_size` bytes. `verify_checksum=False` skips only the
    SHA-256 over the contents (the slowest step, about 1.5 ms per MB here) for callers that
    verified the file before; every structural check still runs.
    """
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise ArtifactError(f"artifact data must be bytes, got {type(data).__name__}")
    if len(data) > max_size:
        raise ArtifactError(f"artifact is {len(data)} bytes, over the limit of {max_size}")
    if not data:
        raise ArtifactError("artifact is empty")
    scanner = _Scanner(data)
    try:
        first = data[0]
        if not (first >> 4 == 0x9 or first in (0xDC, 0xDD)):
            raise ArtifactError("not a gramkiln artifact (does not start with a msgpack array)")
        if scanner.container_length() != 4 or first != 0x94:
            raise ArtifactError("not a gramkiln artifact (the envelope is not a 4-element array)")
        magic = scanner.small_value("magic")
        if magic != MAGIC:
            raise ArtifactError(f"not a gramkiln artifact (magic {magic!r}, expected {MAGIC!r})")
        version = scanner.small_value("format version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArtifactError(f"format version must be an integer, got {version!r}")
        if version != FORMAT_VERSION:
            raise ArtifactError(
                f"artifact format version {version} cannot be read by this build of gramkiln, "
                f"which reads version {FORMAT_VERSION}"
            )
        if data[: scanner.offset] != _pack([MAGIC, FORMAT_VERSION, None, None])[: scanner.offset]:
            raise ArtifactError("envelope is not canonically encoded (corrupted or hand-edited)")
        header_start = scanner.offset
        header = scanner.small_value("header", limit=MAX_HEADER_BYTES)
        header_end = scanner.offset
        if not isinstance(header, dict):
            raise ArtifactError(f"header must be a map, got {type(header).__name__}")
        sections = _read_sections(scanner)
    except _Truncated as exc:
        raise ArtifactError(f"artifact is truncated ({exc})") from None
    if scanner.offset != len(data):
        raise ArtifactError(f"{len(data) - scanner.offset} trailing bytes after the envelope")
    _check_header_fields(header, with_checksum=True)
    if _pack(_canonical(header, "header", 0)) != data[header_start:header_end]:
        raise ArtifactError("header is not canonically encoded (corrupted or hand-edited)")
    if verify_checksum:
        body = {k: v for k, v in header.items() if k != CHECKSUM_KEY}
        if _checksum(body, sections) != header[CHECKSUM_KEY]:
            raise ArtifactError("checksum mismatch: the artifact is corrupted")
    return header, sections


def load_artifact(
    path: str | os.PathLike[str],
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    verify_checksum: bool = True,
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
        return read_artifact(data, max_size=max_size, verify_checksum=verify_checksum)
    except ArtifactError as exc:
        raise ArtifactError(f"{file}: {exc}") from exc


class _Truncated(Exception):
    """The data ended inside a value (internal; becomes an ArtifactError)."""


class _Scanner:
    """Walks msgpack encodings by their length prefixes without decoding big values.

    Only the small parts (magic, version, header) are handed to msgpack; section blobs are
    located by their `bin` headers and sliced once, so reading costs one copy of each blob.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def _take(self, count: int) -> int:
        """Advance over `count` bytes and return where they start."""
        start = self.offset
        if start + count > len(self.data):
            raise _Truncated(
                f"a value at byte {start} needs {count} bytes, the file has {len(self.data) - start}"
            )
        self.offset = start + count
        return start

    def _uint(self, size: int) -> int:
        start = self._take(size)
        return int.from_bytes(self.data[start : start + size], "big")

    def container_length(self) -> int:
        """Read an array or map header and return its element (or pair) count."""
        first = self.data[self._take(1)]
        if 0x90 <= first <= 0x9F or 0x80 <= first <= 0x8F:
            return first & 0x0F
        if first in (0xDC, 0xDE):
            return self._uint(2)
        if first in (0xDD, 0xDF):
            return self._uint(4)
        raise ArtifactError(f"expected an array or map at byte {self.offset - 1}")

    def skip(self, depth: int = 0) -> None:
        """Advance over one complete value of any type (bounded nesting)."""
        if depth > MAX_HEADER_DEPTH + 2:
            raise ArtifactError(f"nested deeper than {MAX_HEADER_DEPTH} levels")
        position = self._take(1)
        first = self.data[position]
        if first <= 0x7F or first >= 0xE0 or first in (0xC0, 0xC2, 0xC3):
            return  # fixint, nil, false, true
        if 0xA0 <= first <= 0xBF:
            self._take(first & 0x1F)
            return
        if 0x90 <= first <= 0x9F or 0x80 <= first <= 0x8F or first in (0xDC, 0xDD, 0xDE, 0xDF):
            self.offset = position
            count = self.container_length()
            if 0x80 <= first <= 0x8F or first in (0xDE, 0xDF):
                count *= 2
            for _ in range(count):
                self.skip(depth + 1)
            return
        fixed = {
            0xCA: 4,
            0xCB: 8,
            0xCC: 1,
            0xCD: 2,
            0xCE: 4,
            0xCF: 8,
            0xD0: 1,
            0xD1: 2,
            0xD2: 4,
            0xD3: 8,
        }
        if first in fixed:
            self._take(fixed[first])
            return
        prefixed = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
        if first in prefixed:
            self._take(self._uint(prefixed[first]))
            return
        if first == 0xC1:
            raise ArtifactError(f"byte {position}: 0xc1 is not a msgpack type")
        raise ArtifactError(f"byte {position}: msgpack ext types are not allowed in an artifact")

    def small_value(self, what: str, limit: int | None = None) -> Any:
        """Decode the next value with msgpack (for the small envelope parts only)."""
        start = self.offset
        self.skip()
        if limit is not None and self.offset - start > limit:
            raise ArtifactError(f"{what} is over {limit} bytes")
        try:
            return msgpack.unpackb(
                self.data[start : self.offset], raw=False, strict_map_key=True, max_ext_len=0
            )
        except (ValueError, TypeError, msgpack.StackError, msgpack.FormatError) as exc:
            raise ArtifactError(
                f"{what} is not valid msgpack: {exc or type(exc).__name__}"
            ) from exc

    def section_name(self) -> str:
        """Read a map key that must be a canonically encoded, valid section name."""
        start = self.offset
        first = self.data[self._take(1)]
        if 0xA0 <= first <= 0xBF:
            length = first & 0x1F
        elif first == 0xD9:
            length = self._uint(1)
        else:
            raise ArtifactError(f"section name at byte {start} is not a short string")
        raw = self.data[self._take(length) : self.offset]
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"section name at byte {start} is not UTF-8") from exc
        if not SECTION_NAME.match(name):
            raise ArtifactError(f"bad section name {name!r}")
        if self.data[start : self.offset] != _pack(name):
            raise ArtifactError(f"section name {name!r} is not canonically encoded")
        return name

    def blob(self, name: str) -> bytes:
        """Read a `bin` value in its shortest length form and return its bytes."""
        start = self.offset
        if start >= len(self.data):
            raise _Truncated(f"section {name!r} has no value")
        first = self.data[self._take(1)]
        sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4}
        if first not in sizes:
            raise ArtifactError(f"section {name!r} must be a bin blob (type byte {first:#04x})")
        length = self._uint(sizes[first])
        if self.offset - start != _bin_encoded_size(length) - length:
            raise ArtifactError(f"section {name!r} is not canonically encoded")
        payload_start = self._take(length)
        return self.data[payload_start : payload_start + length]


def _read_sections(scanner: _Scanner) -> dict[str, bytes]:
    start = scanner.offset
    if start >= len(scanner.data):
        raise _Truncated("the sections map is missing")
    first = scanner.data[start]
    if not (first >> 4 == 0x8 or first in (0xDE, 0xDF)):
        raise ArtifactError("sections must be a map")
    count = scanner.container_length()
    if count > MAX_SECTIONS:
        raise ArtifactError(f"{count} sections (limit {MAX_SECTIONS})")
    if scanner.data[start : scanner.offset] != _pack_map_header(count):
        raise ArtifactError("sections map is not canonically encoded")
    sections: dict[str, bytes] = {}
    previous: str | None = None
    for _ in range(count):
        name = scanner.section_name()
        if previous is not None and name <= previous:
            raise ArtifactError(f"section names are not sorted/unique at {name!r}")
        sections[name] = scanner.blob(name)
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
