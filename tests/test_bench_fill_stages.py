"""bench/fill_stages.py: the report of computed fills' stages, and the runtime's trace switch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import fill_stages  # noqa: E402  (bench/ is not a package)


def test_report_lists_the_slowest_positions_and_each_stage_share(capsys) -> None:
    stages = len(fill_stages.STAGES)
    slow = [0.0] * stages
    slow[fill_stages.STAGES.index("walks")] = 6.0
    slow[fill_stages.STAGES.index("future key")] = 2.0
    fast = [0.0] * stages
    fast[fill_stages.STAGES.index("composition")] = 2.0
    fill_stages.report({7: (slow, [11, 2, 9, 30]), 3: (fast, [6, 0, 0, 12])}, top=1)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("pos    total whole pr future k")
    # Only the slowest position is listed, with its total and counts.
    assert out[1].split()[:2] == ["7", "8.0"]
    assert out[1].split()[-4:] == ["11", "2", "9", "30"]
    assert out[3] == "2 computed positions, 10.0 us in all:"
    shares = dict(part.rsplit(" ", 1) for part in out[4].split(", "))
    assert (shares["walks"], shares["future key"], shares["composition"]) == ("60%", "20%", "20%")
    assert shares["whole probe"] == "0%"


def test_the_default_build_records_no_stages() -> None:
    from gramkiln.runtime import _core

    if _core.fill_trace_built():
        pytest.skip("a GRAMKILN_FILL_TRACE build")
    assert _core.take_fill_trace() == []
    with pytest.raises(SystemExit, match="GRAMKILN_FILL_TRACE=ON"):
        fill_stages.fastest_records("json", 1, "byte")
