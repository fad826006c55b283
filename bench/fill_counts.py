"""Instructions and simulated cache misses of one workload's fills, under callgrind.

On a shared host a fill's time moves by more than most engine changes do, and even the
paired comparison of ``bench/positions.py`` can swing from 0.8x to 1.06x between rounds.
These counts do not move: valgrind's callgrind runs the decode on a simulated machine (a
32 KB L1 for data and one for instructions, a 32 MB last level), so two builds compare by
what their fills execute and where those miss, with no noise at all. The counts are not
times (one level past L1, no prefetchers, no out-of-order overlap), so a change that wins
here is timed with ``bench/positions.py`` as well. ``--last-level 1M`` simulates one core's
L2 as the last level instead: its misses are what natively goes on to L3 or memory.

Needs valgrind, and a build of the module that keeps its symbols (callgrind collects inside
the matcher's fill functions, found by name); a release build is stripped. For example::

    pip install . --no-deps --target /tmp/gk -C build-dir=/tmp/gk-build \\
        -C cmake.build-type=RelWithDebInfo \\
        -C "cmake.define.CMAKE_CXX_FLAGS_RELWITHDEBINFO=-O3 -g -DNDEBUG"
    PYTHONPATH=/tmp/gk python bench/fill_counts.py clike

It loads the workload's artifact, prewarms it (with a budget of ten minutes, so that
valgrind's slowdown cuts nothing short and the caches are those of a run at full speed) and
decodes its instances once, as ``bench/positions.py`` does; the counters are zeroed just
before the decode, so only its fills count. Two such decodes run side by side, one collecting
in every fill and one only in the computation of the fills the caches did not answer. It
prints the decode's computed fills and, for all fills and for the computed ones, the totals
and the per-fill means of: instructions (Ir), L1 and last-level instruction misses (I1mr,
ILmr), L1 data read and write misses (D1mr, D1mw) and last-level data read misses (DLmr). A copy of a 16 KB mask is
one ``rep movsb`` that valgrind counts byte by byte, so every fill adds about 16,000
instructions and the copy's misses.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

EVENTS = ("Ir", "I1mr", "ILmr", "D1mr", "D1mw", "DLmr")
# The simulated last level (--last-level): the machine's shared L3, or one core's L2. Under the
# second, the last-level misses are the accesses that natively go past the core's own caches
# (to L3 or memory), which is where a computed fill's time goes once Python and the mask
# copies between two fills have pushed its code and tables out of L2.
LAST_LEVELS = {"32M": "33554432,16,64", "1M": "1048576,8,64"}
# The matcher's two fill entry points (a cached fill is the first alone; a computed one calls
# the second after the first missed): everything a fill does below the bindings.
CACHED = "Matcher::fill_mask_if_cached"
COMPUTED = "Matcher::fill_mask_computed"


def decode_under_callgrind(workload_name: str, vocab_spec: str) -> None:
    """Prewarm and decode `workload_name` once; zero callgrind's counters before the decode and
    print how many fills it made and computed."""
    import run as bench

    vocab = bench.load_bench_vocab(vocab_spec)
    workload = bench.lark_workloads([workload_name])[0]
    tokenized = [vocab.tokenize(data) for data in workload.instances]
    engine = bench.ENGINES["gramkiln"]()
    engine.setup(vocab)
    prepared, _readiness = engine.prepare(engine.compile(workload))
    computed_before = prepared.cache_stats()["fills_computed"]
    subprocess.run(
        ["callgrind_control", "--zero", str(os.getpid())], check=True, capture_output=True
    )
    result = bench.Result(engine.name, workload_name)
    bench.decode_all(engine, prepared, vocab, tokenized, result)
    computed = prepared.cache_stats()["fills_computed"] - computed_before
    print(f"fills: {len(result.mask_us)}, computed fills: {computed}")


# One event column of callgrind_annotate: a count with its share ("2,113,395 (28.23%)") or a
# dot for none.
COLUMN = re.compile(r"\s*(?:([\d,]+)\s+\(\s*[\d.]+%\)|([\d,]+)|(\.))(?=\s)")


def parse_totals(annotated: str) -> dict[str, int] | None:
    """The program totals (EVENTS, in order) of `callgrind_annotate --show=...` output; None
    when it has no totals line."""
    for line in annotated.splitlines():
        if "PROGRAM TOTALS" not in line:
            continue
        counts: list[int] = []
        at = 0
        while len(counts) < len(EVENTS):
            match = COLUMN.match(line, at)
            if match is None:
                break
            value = match.group(1) or match.group(2)
            counts.append(int(value.replace(",", "")) if value else 0)
            at = match.end()
        if len(counts) == len(EVENTS):
            return dict(zip(EVENTS, counts, strict=True))
    return None


def format_counts(label: str, counts: dict[str, int], fills: int) -> str:
    """One line: each event's total and, after a slash, its mean per fill."""
    parts = [f"{name} {counts[name]:,} / {counts[name] / max(fills, 1):,.0f}" for name in EVENTS]
    return f"{label} ({fills} fills): " + ", ".join(parts)


def start_callgrind(
    workload: str, vocab: str, toggles: Sequence[str], out: Path, last_level: str = "32M"
) -> subprocess.Popen:
    """Start the decode under callgrind, collecting only inside the functions `toggles` name,
    with the simulated last level `last_level` (a key of LAST_LEVELS)."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--cache-sim=yes",
        f"--LL={LAST_LEVELS[last_level]}",
        "--collect-atstart=no",
        *(f"--toggle-collect=*{function}*" for function in toggles),
        f"--callgrind-out-file={out}",
        sys.executable,
        str(Path(__file__).resolve()),
        workload,
        "--vocab",
        vocab,
        "--inside",
    ]
    env = dict(os.environ, GRAMKILN_PREWARM_MS="600000")
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish_callgrind(run: subprocess.Popen, out: Path) -> tuple[int, int, dict[str, int]]:
    """Wait for a run of start_callgrind; its fills, computed fills and collected totals."""
    stdout, stderr = run.communicate()
    if run.returncode != 0:
        raise SystemExit(f"the decode under callgrind failed:\n{stderr[-4000:]}")
    counted = re.search(r"fills: (\d+), computed fills: (\d+)", stdout)
    if counted is None:
        raise SystemExit(f"the decode printed no count:\n{stdout[-2000:]}")
    annotated = subprocess.run(
        ["callgrind_annotate", f"--show={','.join(EVENTS)}", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    totals = parse_totals(annotated)
    if totals is None or totals["Ir"] == 0:
        raise SystemExit(
            "callgrind collected nothing in the fills: is the module built with its symbols?"
        )
    return int(counted.group(1)), int(counted.group(2)), totals


def main(argv: Sequence[str] | None = None) -> int:
    """Run the decode under callgrind (or, with --inside, be that decode) and print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", help="a Lark workload of bench/run.py: json, clike, toolcall")
    parser.add_argument("--vocab", default="llama3")
    parser.add_argument("--keep", type=Path, help="also save callgrind's output of all fills here")
    parser.add_argument(
        "--keep-computed",
        type=Path,
        help="also save callgrind's output of the computed fills' computation here",
    )
    parser.add_argument(
        "--last-level",
        choices=sorted(LAST_LEVELS),
        default="32M",
        help="the simulated last level: 32M (the shared L3, default) or 1M (one core's L2)",
    )
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:
        decode_under_callgrind(args.workload, args.vocab)
        return 0
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (this script needs valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        # Two decodes side by side, each read by its program totals: per-function inclusive
        # lines of callgrind_annotate can disagree with each other where debug information
        # names one source file two ways.
        every_out, computed_out = Path(tmp) / "all.out", Path(tmp) / "computed.out"
        every_run = start_callgrind(
            args.workload, args.vocab, (CACHED, COMPUTED), every_out, args.last_level
        )
        computed_run = start_callgrind(
            args.workload, args.vocab, (COMPUTED,), computed_out, args.last_level
        )
        fills, computed, totals = finish_callgrind(every_run, every_out)
        _, computed_again, computed_counts = finish_callgrind(computed_run, computed_out)
        if computed_again != computed:
            raise SystemExit(f"the two decodes computed {computed} and {computed_again} fills")
        if args.keep is not None:
            shutil.copyfile(every_out, args.keep)
        if args.keep_computed is not None:
            shutil.copyfile(computed_out, args.keep_computed)
    print(f"{args.workload}: {computed} of {fills} fills computed, last level {args.last_level}")
    print(format_counts("all fills", totals, fills))
    print(format_counts("computed fills, their computation", computed_counts, computed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
