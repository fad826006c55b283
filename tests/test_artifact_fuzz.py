"""Hostile artifacts: random bytes, truncations and bit flips raise ArtifactError, never crash.

Two layers are attacked: the whole artifact (the envelope reader rejects nearly everything by
its checksum) and the C++ runtime tables directly (bypassing the checksum, so the C++
validator itself is exercised). Each batch runs in a subprocess so a crash fails the test
instead of killing pytest; tables that happen to pass validation are then used (masks and
random tokens) to show that whatever loads is safe to run.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap

import pytest
from gramkiln.ir import parse_grammar
from gramkiln.runtime import _core
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.vocab import Vocab

from gramkiln.errors import ArtifactError

SCRIPT = textwrap.dedent(
    """
    import random, struct, sys
    import numpy as np
    from gramkiln.errors import ArtifactError
    from gramkiln.ir import parse_grammar
    from gramkiln.runtime import _core
    from gramkiln.runtime.compile import compile_grammar
    from gramkiln.runtime.compiled import CompiledGrammar
    from gramkiln.runtime.vocab import Vocab

    mode, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rnd = random.Random(seed)
    ir = parse_grammar('''%ir 1
    %start start
    %ignore " "
    rule start = item ("," item)* <"<|e|>">?
    rule item [capture="it"] = NUM | "(" start ")" | name | word | hot | sfx
    rule name [lazy, capture="n"] = [a-z]+ ";"
    rule word [max_chars=3, max_tokens=2] = [a-z]+ "!"
    rule hot [max_chars=5, temperature=0.5] = [a-z]+ "?"
    rule sfx [suffix=("END"), max_tokens=2, capture="s", stop_capture="m"] = [a-z]*
    term NUM = [0-9]+
    ''')
    vocab = Vocab([b"1", b"23", b"(", b")", b",", b" ", b"ab", b"1,", b")(", b"<|e|>", b"</s>"],
                  eos_ids=[10], special_ids=[9, 10], vocab_size=40)
    compiled = compile_grammar(ir, vocab)
    artifact = compiled.to_bytes()
    blob = compiled._sections["runtime"]

    # The rule-limit and capture arrays (26 on) come last: "tail" mutates only those.
    tail = 8
    for _ in range(26):
        count, width = struct.unpack_from("<II", blob, tail)
        tail += 8 + count * width
        tail += -tail % 4

    def mutate(data):
        if mode == "intact":
            return data
        if mode == "tail":
            out = bytearray(data)
            for _ in range(rnd.randint(1, 3)):
                index = rnd.randrange(tail, len(out))
                out[index] = rnd.choice([0, 1, 0xFF, 0x80, rnd.randrange(256)])
            return bytes(out)
        kind = rnd.randrange(4)
        if kind == 0:
            return bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 200)))
        if kind == 1:
            return data[: rnd.randrange(len(data))]
        out = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            index = rnd.randrange(len(out))
            if kind == 2:
                out[index] ^= 1 << rnd.randrange(8)
            else:
                out[index] = rnd.choice([0, 0xFF, 0x7F, 0x80, rnd.randrange(256)])
        return bytes(out)

    def exercise(runtime):
        matcher = _core.GrammarMatcher(runtime)
        mask = np.zeros((1, (runtime.vocab_size + 31) // 32), dtype=np.int32)
        for _ in range(6):
            matcher.fill_next_token_bitmask(mask)
            matcher.find_jump_forward_string()
            token = rnd.randrange(runtime.vocab_size)
            matcher.accept_token(token)
            matcher.temperature
            matcher.get_captures(deduplicate=bool(rnd.randrange(2)))
        matcher.fork().get_captures()
        matcher.rollback(matcher.num_steps)

    loaded = 0
    for _ in range(rounds):
        if mode == "envelope":
            try:
                CompiledGrammar.load(mutate(artifact))
                loaded += 1
            except ArtifactError:
                pass
        else:
            try:
                runtime = _core.load_runtime(mutate(blob))
            except ArtifactError:
                continue
            loaded += 1
            exercise(runtime)
    print("loaded", loaded)
    """
)


@pytest.mark.parametrize(
    ("mode", "seed"), [("envelope", 1), ("tables", 2), ("tables", 3), ("tail", 4), ("tail", 5)]
)
def test_fuzzed_artifacts_never_crash(mode: str, seed: int) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(seed), "300"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("loaded")


def test_valid_tables_still_load() -> None:
    # The fuzz baseline: unmodified artifacts and tables load and run.
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, "intact", "0", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "loaded 3"


def _inside_tables(blob: bytes) -> tuple[int, int, int]:
    """(position of the inside_offsets values, number of inside sets, position of the kinds):
    found by shape, since the three arrays are written back to back (kinds u8, offsets u32,
    data u32, each with a count and a width, padded to 4 bytes)."""

    def u32(at: int) -> int:
        return struct.unpack_from("<I", blob, at)[0]

    for at in range(0, len(blob) - 16, 4):
        sets, width = u32(at), u32(at + 4)
        if width != 1 or not 2 <= sets < 100_000:
            continue
        kinds = at + 8
        if any(b > 3 for b in blob[kinds : kinds + sets]):
            continue
        offsets_head = kinds + (sets + 3) // 4 * 4
        if offsets_head + 8 + 4 * (sets + 1) + 8 > len(blob):
            continue
        if u32(offsets_head) != sets + 1 or u32(offsets_head + 4) != 4:
            continue
        offsets = [u32(offsets_head + 8 + 4 * i) for i in range(sets + 1)]
        data_head = offsets_head + 8 + 4 * (sets + 1)
        if offsets[0] == 0 and offsets == sorted(offsets) and u32(data_head) == offsets[-1]:
            return offsets_head + 8, sets, kinds
    raise AssertionError("inside set tables not found")


def test_inside_set_offsets_past_the_data_are_refused_before_any_read() -> None:
    # An id-list set whose end offset points past the data, followed by a smaller offset: the
    # loader must refuse the range before reading it (it used to check only the last offset).
    compiled = compile_grammar(
        parse_grammar('%ir 1\n%start start\nrule start = "ab" | "a" [0-9]+ | "b"\n'),
        Vocab([b"a", b"b", b"ab", b"1", b"12", b"a1", b"</s>"], eos_ids=[6], special_ids=[6]),
    )
    blob = bytearray(compiled._sections["runtime"])
    offsets_at, sets, kinds_at = _inside_tables(bytes(blob))
    id_sets = [k for k in range(sets - 1) if blob[kinds_at + k] == 1]
    assert id_sets, "no id-list inside set before the last one"
    struct.pack_into("<I", blob, offsets_at + 4 * (id_sets[0] + 1), 1 << 30)
    with pytest.raises(ArtifactError, match="bad inside set offsets"):
        _core.load_runtime(bytes(blob))


NONTERMINAL_COUNT_SCRIPT = textwrap.dedent(
    """
    import resource, struct
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from gramkiln.errors import ArtifactError
    from gramkiln.ir import parse_grammar
    from gramkiln.runtime import _core
    from gramkiln.runtime.compile import compile_grammar
    from gramkiln.runtime.vocab import Vocab

    compiled = compile_grammar(
        parse_grammar('%ir 1\\n%start start\\nrule start = ("ab")*\\n'), Vocab.byte_level()
    )
    blob = bytearray(compiled._sections["runtime"])
    assert struct.unpack_from("<I", blob, 24)[0] >= 1
    struct.pack_into("<I", blob, 24, 0x7F000002)
    try:
        _core.load_runtime(bytes(blob))
    except ArtifactError as error:
        print("refused:", error)
    """
)


def test_a_huge_nonterminal_count_is_refused_before_anything_is_sized_by_it() -> None:
    # meta[2] (the nonterminal count) is read from the tables and nothing else bounds it:
    # tables of that many entries were allocated before validation refused the artifact (tens
    # of GB for 2^31 - 2^24: an out-of-memory kill, or MemoryError under a limit). The runtime
    # section's layout is magic, version, then the meta array (count, width, values), so
    # meta[2] sits at byte 24. Run under a 2 GB address-space limit in a child process, so
    # that a regression fails the test instead of the machine.
    result = subprocess.run(
        [sys.executable, "-c", NONTERMINAL_COUNT_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "refused: implausible nonterminal count"
