"""bench/positions.py's paired comparison: which positions count, and what it prints."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import positions  # noqa: E402  (bench/ is not a package)


def test_compare_pairs_the_slow_positions_of_the_first_build(tmp_path, capsys) -> None:
    # Two recordings per build: each position counts with its fastest time over them.
    first = [np.array([1.0, 10.0, 20.0, 2.0]), np.array([1.5, 12.0, 18.0, 9.0])]
    second = [np.array([1.0, 5.0, 30.0, 1.0]), np.array([0.5, 6.0, 27.0, 1.0])]
    paths = []
    for name, arrays in (("a", first), ("b", second)):
        for i, array in enumerate(arrays):
            path = tmp_path / f"{name}{i}.npy"
            np.save(path, array)
            paths.append(str(path))
    positions.main(["compare", ",".join(paths[:2]), ",".join(paths[2:]), "--above", "5"])
    out = capsys.readouterr().out
    # Slow in the first build (fastest > 5 us): positions 1 (10 -> 5) and 2 (18 -> 27); the
    # per-position ratios are 0.5 and 1.5, median 1.0; position 3 (fastest 2.0) is left out.
    assert out.splitlines()[0] == (
        "2 positions above 5.0 us: second / first, median per position 1.000; "
        "medians 14.00 -> 16.00 us; sums 28 -> 32 us"
    )


def test_compare_refuses_recordings_of_different_decodes(tmp_path) -> None:
    np.save(tmp_path / "a.npy", np.ones(3))
    np.save(tmp_path / "b.npy", np.ones(4))
    with pytest.raises(SystemExit, match="different positions"):
        positions.main(["compare", str(tmp_path / "a.npy"), str(tmp_path / "b.npy")])
