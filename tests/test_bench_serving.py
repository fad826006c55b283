"""bench/batch_fill.py and bench/apply_mask.py on small inputs: what they print and check.

Timings are never asserted. The batch-fill loop must decode its staggered rows without a
refused token, and the mask applier check must accept gramkiln's applier and refuse a wrong
one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import apply_mask  # noqa: E402  (bench/ is not a package)
import batch_fill  # noqa: E402

import gramkiln  # noqa: E402

pytest.importorskip("gramkiln.runtime._core", reason="C++ runtime not built")


def test_batch_fill_decodes_staggered_rows_with_every_thread_count() -> None:
    compiled = gramkiln.Grammar.from_lark('start: "(" start ")" | "x"').compile(
        gramkiln.Vocab.byte_level()
    )
    tokenized = [list(b"((x))"), list(b"x"), list(b"(((x)))")]
    for threads in (1, 2, 3):
        times = batch_fill.time_batch(compiled, tokenized, batch=7, threads=threads, steps=25)
        assert len(times) == 25
        assert all(t > 0 for t in times)


def test_batch_fill_refuses_an_instance_the_grammar_rejects() -> None:
    compiled = gramkiln.Grammar.from_lark('start: "x"').compile(gramkiln.Vocab.byte_level())
    with pytest.raises(SystemExit, match="rejected"):
        batch_fill.time_batch(compiled, [list(b"yy")], batch=2, threads=1, steps=3)


def test_batch_fill_prints_one_line_per_setting(capsys) -> None:
    pytest.importorskip("quicktok", reason="the Llama 3 vocabulary ships in quicktok-v1")
    batch_fill.main(["--workload", "json", "--batch", "2", "--threads", "1,2", "--steps", "5"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("json: 4 instances")
    assert [line.split()[:2] for line in lines[2:]] == [["2", "1"], ["2", "2"]]


def test_the_applier_check_accepts_gramkiln_and_refuses_a_wrong_applier(capsys) -> None:
    pytest.importorskip("torch", reason="torch is an optional dependency")
    assert apply_mask.check_agreement("gramkiln", gramkiln.apply_token_bitmask_inplace, "cpu", 1000)
    assert apply_mask.check_agreement("dense", apply_mask.dense_apply, "cpu", 1000)

    def masks_nothing(logits, bitmask) -> None:
        return None

    assert not apply_mask.check_agreement("wrong", masks_nothing, "cpu", 1000)
    assert "DISAGREES" in capsys.readouterr().out


def test_reference_masking_reads_bits_low_first() -> None:
    logits = np.zeros((1, 40), dtype=np.float32)
    bitmask = np.array([[0b101, 1 << 3]], dtype=np.int32)  # tokens 0, 2 and 35
    masked = apply_mask.reference_masked(logits, bitmask)
    assert np.flatnonzero(np.isfinite(masked[0])).tolist() == [0, 2, 35]
