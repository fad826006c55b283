"""Tests for the artifact envelope (gramkiln.runtime.artifact): format, determinism, hostility."""

from __future__ import annotations

import random
from pathlib import Path

import msgpack
import pytest
from gramkiln.ir import GrammarIR, Literal, Ref, Rule, Seq, Span, ir_to_msgpack
from gramkiln.runtime.artifact import (
    FORMAT_VERSION,
    MAGIC,
    check_vocab,
    ir_from_artifact,
    ir_hash,
    load_artifact,
    make_header,
    read_artifact,
    save_artifact,
    write_artifact,
)
from gramkiln.runtime.vocab import Vocab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gramkiln.errors import ArtifactError, VocabError


def _grammar(with_span: bool = False) -> GrammarIR:
    span = Span(line=1, column=7) if with_span else None
    return GrammarIR(
        rules=(
            Rule(name="start", body=Seq(items=(Literal(text="a", span=span), Ref(name="b")))),
            Rule(name="b", body=Literal(text="b")),
        )
    )


def _valid_artifact() -> bytes:
    ir = _grammar()
    header = make_header(ir, Vocab.byte_level(), {"lexing": "exact", "max_states": 1000})
    return write_artifact(header, {"ir": ir_to_msgpack(ir), "tables": bytes(range(256)) * 3})


def _raw_envelope(
    header: object, sections: object, magic: object = MAGIC, version: object = 1
) -> bytes:
    return msgpack.packb([magic, version, header, sections], use_bin_type=True)


# -- round trip and determinism --------------------------------------------------------------


def test_round_trip_and_layout() -> None:
    ir = _grammar()
    vocab = Vocab.byte_level()
    header = make_header(ir, vocab, {"b": 2, "a": [1, 2.5, None, True, "x", b"\x00"]}, layout=3)
    data = write_artifact(header, {"tables": b"\x01\x02", "ir": ir_to_msgpack(ir)})
    envelope = msgpack.unpackb(data, raw=False)
    assert envelope[0] == MAGIC == "gramkiln" and envelope[1] == FORMAT_VERSION == 1
    assert list(envelope[3]) == ["ir", "tables"]  # sorted section names
    read_header, sections = read_artifact(data)
    assert list(read_header) == sorted(read_header)
    assert read_header["options"] == {"a": [1, 2.5, None, True, "x", b"\x00"], "b": 2}
    assert read_header["layout"] == 3
    assert read_header["producer"].startswith("gramkiln ")
    assert read_header["vocab"] == {"vocab_size": 257, "sha256": vocab.fingerprint()}
    assert sections["tables"] == b"\x01\x02"
    assert ir_from_artifact(read_header, sections) == ir


def test_output_is_deterministic_whatever_the_insertion_order() -> None:
    ir = _grammar()
    vocab = Vocab.byte_level()
    first = write_artifact(
        make_header(ir, vocab, {"x": 1, "y": {"b": 1, "a": 2}}), {"a": b"1", "z": b"2"}
    )
    second = write_artifact(
        make_header(ir, vocab, {"y": {"a": 2, "b": 1}, "x": 1}), {"z": b"2", "a": b"1"}
    )
    assert first == second


def test_ir_hash_ignores_spans_but_not_content() -> None:
    assert ir_hash(_grammar()) == ir_hash(_grammar(with_span=True))
    other = GrammarIR(rules=(Rule(name="start", body=Literal(text="c")),))
    assert ir_hash(other) != ir_hash(_grammar())
    assert len(ir_hash(other)) == 64


def test_save_and_load_files(tmp_path: Path) -> None:
    ir = _grammar()
    path = tmp_path / "g.gkc"
    save_artifact(path, make_header(ir, Vocab.byte_level()), {"ir": ir_to_msgpack(ir)})
    header, sections = load_artifact(path)
    assert ir_from_artifact(header, sections) == ir
    with pytest.raises(ArtifactError, match="over the limit"):
        load_artifact(path, max_size=10)
    with pytest.raises(ArtifactError, match="cannot read artifact"):
        load_artifact(tmp_path / "missing.gkc")


def test_saving_names_the_target_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    ir = _grammar()
    header, sections = make_header(ir, Vocab.byte_level()), {"ir": ir_to_msgpack(ir)}
    with pytest.raises(OSError, match="cannot write artifact .*missing/g.gkc"):
        save_artifact(tmp_path / "missing" / "g.gkc", header, sections)
    target = tmp_path / "g.gkc"
    target.mkdir()  # a directory in the way: the rename fails after the write
    with pytest.raises(OSError, match="cannot write artifact"):
        save_artifact(target, header, sections)
    assert [p.name for p in tmp_path.iterdir()] == ["g.gkc"]
    target.rmdir()
    save_artifact(target, header, sections)  # and again over an existing file
    save_artifact(target, header, sections)
    assert [p.name for p in tmp_path.iterdir()] == ["g.gkc"]
    assert ir_from_artifact(*load_artifact(target)) == ir


def test_check_vocab() -> None:
    header, _ = read_artifact(_valid_artifact())
    check_vocab(header, Vocab.byte_level())
    with pytest.raises(VocabError, match="compiled for a different vocabulary"):
        check_vocab(header, Vocab([b"a", b"b"]))


def test_ir_section_is_checked_against_the_header() -> None:
    ir = _grammar()
    other = GrammarIR(rules=(Rule(name="start", body=Literal(text="c")),))
    data = write_artifact(make_header(ir, Vocab.byte_level()), {"ir": ir_to_msgpack(other)})
    with pytest.raises(ArtifactError, match="does not match the header's ir_hash"):
        ir_from_artifact(*read_artifact(data))
    data = write_artifact(make_header(ir, Vocab.byte_level()), {"ir": b"\xc1"})
    with pytest.raises(ArtifactError, match="not valid IR"):
        ir_from_artifact(*read_artifact(data))
    with pytest.raises(ArtifactError, match="no 'ir' section"):
        ir_from_artifact({}, {})


# -- what the writer refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"t": float("nan")}, "non-finite float"),
        ({"t": float("inf")}, "non-finite float"),
        ({1: "x"}, "map key 1 is not a string"),
        ({"s": {1, 2}}, "type set cannot be stored"),
        ({"big": 1 << 70}, "does not fit in 64 bits"),
    ],
)
def test_writer_rejects_unstable_or_unencodable_headers(options: dict, message: str) -> None:
    header = make_header(_grammar(), Vocab.byte_level())
    header["options"] = options
    with pytest.raises(ArtifactError, match=message):
        write_artifact(header, {})


def test_writer_rejects_bad_shapes() -> None:
    header = make_header(_grammar(), Vocab.byte_level())
    with pytest.raises(ArtifactError, match="missing vocab"):
        write_artifact({k: v for k, v in header.items() if k != "vocab"}, {})
    with pytest.raises(ArtifactError, match="reserved"):
        write_artifact({**header, "checksum": "0" * 64}, {})
    with pytest.raises(ArtifactError, match="reserved"):
        make_header(_grammar(), Vocab.byte_level(), ir_hash="x")
    with pytest.raises(ArtifactError, match="section name"):
        write_artifact(header, {"bad name": b""})
    with pytest.raises(ArtifactError, match="must be bytes"):
        write_artifact(header, {"ir": "text"})
    with pytest.raises(ArtifactError, match="header must be a mapping"):
        write_artifact([], {})  # type: ignore[arg-type]
    deep: dict = {}
    cursor = deep
    for _ in range(40):
        cursor["n"] = {}
        cursor = cursor["n"]
    with pytest.raises(ArtifactError, match="nested deeper"):
        write_artifact({**header, "deep": deep}, {})


# -- what the reader refuses, each with its reason -------------------------------------------


def _good_header() -> dict:
    header, _ = read_artifact(_valid_artifact())
    return header


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "artifact is empty"),
        (b"\x01", "does not start with a msgpack array"),
        (msgpack.packb([1, 2, 3]), "not a 4-element array"),
        (_raw_envelope({}, {}, magic="gramkilm"), "magic 'gramkilm', expected 'gramkiln'"),
        (_raw_envelope({}, {}, version=2), "version 2 cannot be read .* reads version 1"),
        (_raw_envelope({}, {}, version=0), "version 0 cannot be read .* reads version 1"),
        (_raw_envelope({}, {}, version="1"), "format version must be an integer"),
        (_raw_envelope([], {}), "header must be a map"),
        (_raw_envelope({}, {}), "header is missing producer, ir_hash, vocab, options, checksum"),
        (b"\x94\xa8gramkiln\x01\x80", "truncated"),
        (b"\x94\xa8gramkiln\x01\x80\xc6\xff\xff\xff\xff", "sections must be a map"),
        (b"\x94\xa8gramkiln\x01\x80\xdf\xff\xff\xff\xff", "sections .limit 4096."),
    ],
)
def test_reader_reasons(data: bytes, message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        read_artifact(data)


def test_reader_rejects_trailing_bytes_and_size_limit() -> None:
    data = _valid_artifact()
    with pytest.raises(ArtifactError, match="3 trailing bytes"):
        read_artifact(data + b"\x00\x00\x00")
    with pytest.raises(ArtifactError, match="over the limit of 100"):
        read_artifact(data, max_size=100)
    with pytest.raises(ArtifactError, match="must be bytes"):
        read_artifact("text")  # type: ignore[arg-type]


def test_reader_rejects_wrong_types_in_a_well_formed_envelope() -> None:
    good = _good_header()
    cases = [
        ({**good, "producer": 3}, {}, "producer must be a string"),
        ({**good, "ir_hash": "abc"}, {}, "ir_hash must be a 64-digit"),
        ({**good, "vocab": {"vocab_size": 0, "sha256": "0" * 64}}, {}, "header.vocab must be"),
        ({**good, "options": []}, {}, "options must be a map"),
        ({**good, "checksum": 5}, {}, "checksum must be"),
        (good, {"ir": "not bytes"}, "must be a bin blob .type byte 0xa9."),
        (good, {"b": b"", "a": b""}, "not sorted"),
        (good, {"bad name": b""}, "bad name"),
        (good, [], "sections must be a map"),
    ]
    for header, sections, message in cases:
        with pytest.raises(ArtifactError, match=message):
            read_artifact(_raw_envelope(dict(sorted(header.items())), sections))


def test_reader_rejects_non_canonical_encodings_and_bad_checksums() -> None:
    good = _good_header()
    unsorted = dict(reversed(list(good.items())))
    with pytest.raises(ArtifactError, match="not canonically encoded"):
        read_artifact(_raw_envelope(unsorted, {}))
    # A section blob in a wider length form than needed (bin32 for 1 byte).
    canonical = _raw_envelope(dict(sorted(good.items())), {"a": b"x"})
    widened = canonical[:-3] + b"\xc6\x00\x00\x00\x01x"
    with pytest.raises(ArtifactError, match="section 'a' is not canonically encoded"):
        read_artifact(widened)
    # Well-formed and canonical, but the content does not match its checksum.
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        read_artifact(canonical)


# -- fuzzing: nothing but ArtifactError, ever -------------------------------------------------

VALID = _valid_artifact()


def test_every_truncation_is_rejected() -> None:
    for length in range(len(VALID)):
        with pytest.raises(ArtifactError):
            read_artifact(VALID[:length])


def test_seeded_bit_flips_are_all_detected() -> None:
    rng = random.Random(20261129)
    for _ in range(1500):
        corrupted = bytearray(VALID)
        position = rng.randrange(len(corrupted))
        corrupted[position] ^= 1 << rng.randrange(8)
        with pytest.raises(ArtifactError):
            read_artifact(bytes(corrupted))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_raise_artifact_error(data: bytes) -> None:
    with pytest.raises(ArtifactError):
        read_artifact(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(min_value=0))
def test_random_splices_into_a_valid_artifact_raise_artifact_error(
    patch: bytes, where: int
) -> None:
    position = where % len(VALID)
    corrupted = VALID[:position] + patch + VALID[position + len(patch) :]
    if corrupted == VALID:
        return
    with pytest.raises(ArtifactError):
        read_artifact(corrupted)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=10,
    ),
    st.dictionaries(
        st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.binary(max_size=300), max_size=4
    ),
)
def test_any_encodable_header_and_sections_round_trip(options: object, sections: dict) -> None:
    header = make_header(_grammar(), Vocab.byte_level(), {"value": options})
    read_header, read_sections = read_artifact(write_artifact(header, sections))
    assert read_header["options"]["value"] == _lists(options)
    assert read_sections == sections


def _lists(value: object) -> object:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def test_checksum_can_be_skipped_but_structure_is_still_checked(tmp_path: Path) -> None:
    corrupted = bytearray(VALID)
    corrupted[-1] ^= 0x01  # inside the last section's bytes: only the checksum can tell
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        read_artifact(bytes(corrupted))
    header, sections = read_artifact(bytes(corrupted), verify_checksum=False)
    assert sections["tables"][-1] != VALID[-1]
    with pytest.raises(ArtifactError, match="truncated"):
        read_artifact(VALID[:-1], verify_checksum=False)
    path = tmp_path / "c.gkc"
    path.write_bytes(bytes(corrupted))
    assert load_artifact(path, verify_checksum=False)[0] == header


def test_ext_types_and_reserved_bytes_are_rejected() -> None:
    good = dict(sorted(_good_header().items()))
    with_ext = _raw_envelope({**good, "x": msgpack.ExtType(1, b"ab")}, {})
    with pytest.raises(ArtifactError, match="ext types are not allowed"):
        read_artifact(with_ext)
    with pytest.raises(ArtifactError, match="0xc1 is not a msgpack type"):
        read_artifact(b"\x94\xa8gramkiln\x01\xc1")
