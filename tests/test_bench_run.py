"""bench/run.py's measuring loop, on a tiny grammar and the built-in byte vocabulary.

Timings are never asserted; what is checked is the bookkeeping: one time per fill and per
commit whatever the number of repeats, the forced tokens all allowed, and the repeats
keeping each call's fastest time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import run as bench  # noqa: E402  (bench/ is not a package)

pytest.importorskip("gramkiln.runtime._core", reason="C++ runtime not built")

GRAMMAR = 'start: item ("," item)*\nitem: /[a-z]+/ | "(" start ")"\n'
INSTANCES = [b"ab,(cd,e)", b"(x)"]


@pytest.fixture(scope="module")
def vocab() -> bench.BenchVocab:
    from gramkiln.runtime.vocab import load_vocab

    return bench.BenchVocab(
        gk_vocab=load_vocab("byte"), tokenize=lambda data: list(data), tokenizer_name="bytes"
    )


@pytest.mark.parametrize("repeats", [1, 3])
def test_measure_times_every_call_once_per_position(vocab: bench.BenchVocab, repeats: int) -> None:
    engine = bench.GramkilnEngine()
    engine.setup(vocab)
    workload = bench.Workload("tiny", lark=GRAMMAR, instances=INSTANCES)
    tokenized = [vocab.tokenize(data) for data in INSTANCES]
    result = bench.measure(engine, workload, vocab, tokenized, 1, repeats)
    assert result.note is None
    tokens = sum(len(ids) for ids in tokenized)
    assert result.tokens == tokens
    assert result.refused == 0
    # One fill per token plus the final one (where EOS must be allowed) per instance.
    assert len(result.mask_us) == tokens + len(INSTANCES)
    assert len(result.commit_us) == tokens
    assert len(result.mask_digests) == len(INSTANCES)
    assert all(t >= 0 for t in result.mask_us + result.commit_us)


def test_repeats_keep_each_calls_fastest_time(
    vocab: bench.BenchVocab, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every decode after the first is made slower or faster per position by a fake clock;
    # the result must hold the per-position minimum.
    engine = bench.GramkilnEngine()
    engine.setup(vocab)
    workload = bench.Workload("tiny", lark=GRAMMAR, instances=INSTANCES[:1])
    tokenized = [vocab.tokenize(INSTANCES[0])]
    decodes: list[list[float]] = []
    original = bench.decode_all

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        original(*args, **kwargs)
        into = args[-1]
        # Decode k gets times k+1, 3-k, ... so each position's minimum comes from a
        # different decode.
        k = len(decodes)
        into.mask_us[:] = [float((k + i) % 3 + 1) for i in range(len(into.mask_us))]
        decodes.append(list(into.mask_us))

    monkeypatch.setattr(bench, "decode_all", recording)
    result = bench.measure(engine, workload, vocab, tokenized, 1, 3)
    assert len(decodes) == 3
    assert result.mask_us == [min(column) for column in zip(*decodes, strict=True)]
    assert result.mask_us == [1.0] * len(result.mask_us)
