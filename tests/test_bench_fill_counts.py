"""bench/fill_counts.py: reading callgrind_annotate's columns (valgrind itself is not needed)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import fill_counts  # noqa: E402  (bench/ is not a package)

# The shape of `callgrind_annotate --inclusive=yes --show=Ir,I1mr,D1mr,D1mw,DLmr` output: a count
# with its share, or a dot where an event never happened.
ANNOTATED = """\
--------------------------------------------------------------------------------
Ir                 I1mr            D1mr             D1mw            DLmr
--------------------------------------------------------------------------------
7,486,675 (100.0%) 43,002 (100.0%) 120,092 (100.0%) 89,406 (100.0%) 13,272 (100.0%)  PROGRAM TOTALS
--------------------------------------------------------------------------------
2,113,395 (28.23%) 14,669 (34.11%)  30,872 (25.71%) 17,608 (19.69%)  5,824 (43.88%)  /src/matcher.cpp:gramkiln::Matcher::fill_mask_computed(unsigned int*) const
2,100,000 (28.00%)  1,000 ( 2.00%)       .               .               .          => /src/matcher.cpp:gramkiln::Matcher::fill_mask_computed(unsigned int*) const (52x)
   37,368 ( 0.50%)    196 ( 0.45%)       .               .               .           /src/matcher.cpp:gramkiln::local_walk_key(unsigned int)
"""


def test_the_totals_and_a_functions_inclusive_counts_are_read_by_column() -> None:
    assert fill_counts.parse_counts(ANNOTATED, "") == {
        "Ir": 7_486_675,
        "I1mr": 43_002,
        "D1mr": 120_092,
        "D1mw": 89_406,
        "DLmr": 13_272,
    }
    # The function's own line, not a caller's line naming it as a callee (`=>`).
    assert fill_counts.parse_counts(ANNOTATED, "Matcher::fill_mask_computed") == {
        "Ir": 2_113_395,
        "I1mr": 14_669,
        "D1mr": 30_872,
        "D1mw": 17_608,
        "DLmr": 5_824,
    }
    # Dots are events that never happened.
    assert fill_counts.parse_counts(ANNOTATED, "local_walk_key") == {
        "Ir": 37_368,
        "I1mr": 196,
        "D1mr": 0,
        "D1mw": 0,
        "DLmr": 0,
    }
    assert fill_counts.parse_counts(ANNOTATED, "Matcher::accept_token") is None


def test_counts_print_as_totals_and_means_per_fill() -> None:
    counts = {"Ir": 2_000, "I1mr": 10, "D1mr": 30, "D1mw": 0, "DLmr": 5}
    assert fill_counts.format_counts("computed", counts, 4) == (
        "computed (4 fills): Ir 2,000 / 500, I1mr 10 / 2, D1mr 30 / 8, D1mw 0 / 0, DLmr 5 / 1"
    )
