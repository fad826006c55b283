"""bench/fill_counts.py: reading callgrind_annotate's columns (valgrind itself is not needed)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import fill_counts  # noqa: E402  (bench/ is not a package)

# The totals line of `callgrind_annotate --show=Ir,I1mr,ILmr,D1mr,D1mw,DLmr`: a count with its
# share, or a dot where an event never happened.
ANNOTATED = """\
--------------------------------------------------------------------------------
Ir                 I1mr            ILmr          D1mr             D1mw            DLmr
--------------------------------------------------------------------------------
7,486,675 (100.0%) 43,002 (100.0%) 2,161 (100.0%) 120,092 (100.0%) 89,406 (100.0%) 13,272 (100.0%)  PROGRAM TOTALS
--------------------------------------------------------------------------------
2,113,395 (28.23%) 14,669 (34.11%)   904 (41.83%)  30,872 (25.71%) 17,608 (19.69%)  5,824 (43.88%)  /src/matcher.cpp:gramkiln::Matcher::fill_mask_computed(unsigned int*) const
"""


def test_the_totals_are_read_by_column() -> None:
    assert fill_counts.parse_totals(ANNOTATED) == {
        "Ir": 7_486_675,
        "I1mr": 43_002,
        "ILmr": 2_161,
        "D1mr": 120_092,
        "D1mw": 89_406,
        "DLmr": 13_272,
    }
    # Dots are events that never happened.
    dotted = "37,368 (100.0%)    196 (100.0%)  .  .  .  .  PROGRAM TOTALS\n"
    assert fill_counts.parse_totals(dotted) == {
        "Ir": 37_368,
        "I1mr": 196,
        "ILmr": 0,
        "D1mr": 0,
        "D1mw": 0,
        "DLmr": 0,
    }
    # Nothing collected: no totals line.
    assert fill_counts.parse_totals(ANNOTATED.replace("PROGRAM TOTALS", "")) is None


def test_counts_print_as_totals_and_means_per_fill() -> None:
    counts = {"Ir": 2_000, "I1mr": 10, "ILmr": 4, "D1mr": 30, "D1mw": 0, "DLmr": 5}
    assert fill_counts.format_counts("computed", counts, 4) == (
        "computed (4 fills): Ir 2,000 / 500, I1mr 10 / 2, ILmr 4 / 1, D1mr 30 / 8, D1mw 0 / 0, "
        "DLmr 5 / 1"
    )
