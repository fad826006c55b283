"""Where a workload's computed fills spend their time, stage by stage.

Needs a build with the fill trace (a diagnostic build; its fills read the clock at every
stage border, ~0.5 us a computed fill)::

    pip install . -C cmake.define.GRAMKILN_FILL_TRACE=ON
    python bench/fill_stages.py clike --loads 3 --top 25

Each load decodes the workload's instances from a fresh load and prewarm (as
``bench/positions.py`` does); every computed position keeps its fastest load's record. It
prints the slowest positions with the time of each stage (microseconds) and the fill's
counts, then each stage's share of all computed fills' time. A stage's time runs from the
border before it, so a stage a fill skips (the future key where future keys are off) adds
nothing and its time goes to the next one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import positions  # noqa: E402 - the per-position recorder next to this script

STAGES = (
    "whole probe",
    "future key",
    "future probe",
    "depth probes",
    "setup",
    "descent probes",
    "walks",
    "depths",
    "descent stores",
    "composition",
    "depth store",
    "whole store",
    "future store",
    "end",
)
COUNTS = ("threads", "walkers", "nodes", "parts")

Record = tuple[list[float], list[int]]


def fastest_records(workload_name: str, loads: int, vocab_spec: str) -> dict[int, Record]:
    """Decode `workload_name` `loads` times; per computed position, its fastest record."""
    from gramkiln.runtime import _core

    if not getattr(_core, "fill_trace_built", lambda: False)():
        raise SystemExit(
            "this build records no fill stages: pip install . -C "
            "cmake.define.GRAMKILN_FILL_TRACE=ON"
        )
    _core.take_fill_trace()  # count fills from the first decode's first
    best: dict[int, Record] = {}
    for _result in positions.decode_loads(workload_name, loads, vocab_spec):
        for position, stages, counts in _core.take_fill_trace():
            if len(stages) != len(STAGES):
                raise SystemExit(
                    f"the build records {len(stages)} stages, this script knows {len(STAGES)}"
                )
            if position not in best or sum(stages) < sum(best[position][0]):
                best[position] = (list(stages), list(counts))
    return best


def report(best: dict[int, Record], top: int) -> None:
    """Print the `top` slowest positions and every stage's share of the total."""
    header = "pos    total " + " ".join(f"{name[:8]:>8}" for name in STAGES)
    print(header + "  " + " ".join(f"{name:>7}" for name in COUNTS))
    ranked = sorted(best.items(), key=lambda item: -sum(item[1][0]))
    for position, (stages, counts) in ranked[:top]:
        cells = " ".join(f"{value:8.2f}" for value in stages)
        print(f"{position:4d} {sum(stages):7.1f} {cells}  " + " ".join(f"{c:7d}" for c in counts))
    totals = [sum(stages[i] for stages, _ in best.values()) for i in range(len(STAGES))]
    whole = sum(totals)
    print(f"\n{len(best)} computed positions, {whole:.1f} us in all:")
    shares = zip(STAGES, totals, strict=True)
    print(", ".join(f"{name} {100 * value / (whole or 1.0):.0f}%" for name, value in shares))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: record a workload's computed fills and print their stages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", help="a Lark workload: json, clike or toolcall")
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="slowest positions to list")
    parser.add_argument("--vocab", default="llama3")
    args = parser.parse_args(argv)
    report(fastest_records(args.workload, args.loads, args.vocab), args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
