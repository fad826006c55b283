"""bench/compile_sweep.py: its figures from known outcomes, and a small sweep end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import compile_sweep  # noqa: E402  (bench/ is not a package)


def test_summarize_counts_times_and_failures() -> None:
    outcome = {
        "Split---a": 0.010,
        "Split---b": 0.030,
        "Split---c": 2.0,
        "Split---d": 6.0,
        "Split---e": "timeout",
        "Split---f": "GrammarError",
    }
    s = compile_sweep.summarize(outcome)
    assert (s["schemas"], s["compiled"], s["over_1s"], s["over_5s"]) == (6, 4, 2, 1)
    assert s["p50"] == pytest.approx(1015.0)  # between 30 ms and 2 s
    assert s["max"] == pytest.approx(6000.0)
    assert s["failures"] == {"timeout": 1, "GrammarError": 1}
    assert [name for name, _ in s["slowest"]] == ["d", "c", "b", "a"]


def test_the_report_compares_over_the_schemas_both_engines_compiled(capsys) -> None:
    ours = {"engine": "gramkiln", "peak_rss_mb": 100.0, "splits": {"S": {"x": 0.1, "y": 0.4}}}
    theirs = {"engine": "peer", "peak_rss_mb": 90.0, "splits": {"S": {"x": 0.2, "y": "E"}}}
    compile_sweep.print_report([ours, theirs])
    out = capsys.readouterr().out
    assert "ratio gramkiln / peer (schemas both compiled)" in out
    # Only "x" counts: 0.1 s against 0.2 s.
    assert "1 schemas  p50 0.50x  p99 0.50x  sum 0.50x" in out


@pytest.mark.skipif(
    not compile_sweep.bench.MASKBENCH_DIR.is_dir(),
    reason="MaskBench data (../shared/data/maskbench) is absent",
)
def test_a_small_sweep_runs_end_to_end(capsys) -> None:
    status = compile_sweep.main(
        ["--split", "Synthesized", "--limit", "3", "--vocab", "byte", "--engines", "gramkiln"]
    )
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("Synthesized"))
    assert row.split()[1] == "gramkiln" and row.split()[2] == "3/3"
