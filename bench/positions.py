"""Per-position mask times of one workload, for paired comparisons of two builds.

The p99 of one benchmark run moves by 10-30% with the load on this shared host, more than most
engine changes do. Comparing two builds position by position is much steadier: each build
decodes the workload several times (a fresh load and prewarm each time), every position keeps
its fastest fill, and the slow positions (the computed fills) are compared pairwise.

Usage (from the repository root; run the two builds alternately, a few rounds each)::

    PYTHONPATH=/path/to/build_a python bench/positions.py record clike a1.npy --loads 5
    PYTHONPATH=/path/to/build_b python bench/positions.py record clike b1.npy --loads 5
    python bench/positions.py compare a1.npy,a2.npy b1.npy,b2.npy --above 6

`compare` prints, over the positions slower than `--above` microseconds in the first build,
the median of the second build's time over the first's (below 1: the second is faster), the
medians and sums of both, and both p99s.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # noqa: E402 - the benchmark module next to this script


def decode_loads(workload_name: str, loads: int, vocab_spec: str) -> Iterator[bench.Result]:
    """Decode `workload_name` `loads` times with gramkiln, each from a fresh load and prewarm,
    and yield each decode's timings once it is done."""
    vocab = bench.load_bench_vocab(vocab_spec)
    workload = bench.lark_workloads([workload_name])[0]
    tokenized = [vocab.tokenize(data) for data in workload.instances]
    engine = bench.ENGINES["gramkiln"]()
    engine.setup(vocab)
    compiled = engine.compile(workload)
    for _ in range(loads):
        prepared, _readiness = engine.prepare(compiled)
        result = bench.Result(engine.name, workload_name)
        bench.decode_all(engine, prepared, vocab, tokenized, result)
        yield result


def record(workload_name: str, out: Path, loads: int, vocab_spec: str) -> None:
    """Decode `workload_name` `loads` times with gramkiln, each from a fresh load and prewarm,
    and save each position's fastest fill time (microseconds) to `out` (.npy)."""
    fastest: np.ndarray | None = None
    for result in decode_loads(workload_name, loads, vocab_spec):
        times = np.array(result.mask_us)
        fastest = times if fastest is None else np.minimum(fastest, times)
    assert fastest is not None
    np.save(out, fastest)
    print(
        f"{workload_name}: {len(fastest)} positions, p50 {np.percentile(fastest, 50):.2f} us, "
        f"p99 {np.percentile(fastest, 99):.2f} us, max {fastest.max():.1f} us -> {out}"
    )


def compare(first: Sequence[Path], second: Sequence[Path], above: float) -> None:
    """Print the paired comparison of two builds' recordings (each the fastest over its files)."""
    a = np.min([np.load(path) for path in first], axis=0)
    b = np.min([np.load(path) for path in second], axis=0)
    if a.shape != b.shape:
        raise SystemExit(f"the recordings decode different positions ({a.shape} vs {b.shape})")
    slow = a > above
    if not slow.any():
        raise SystemExit(f"no position of the first build is slower than {above} us")
    print(
        f"{int(slow.sum())} positions above {above} us: second / first, median per position "
        f"{np.median(b[slow] / a[slow]):.3f}; medians {np.median(a[slow]):.2f} -> "
        f"{np.median(b[slow]):.2f} us; sums {a[slow].sum():.0f} -> {b[slow].sum():.0f} us"
    )
    print(f"p99 of all positions: {np.percentile(a, 99):.2f} -> {np.percentile(b, 99):.2f} us")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run `record` or `compare`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="decode a workload and save per-position times")
    rec.add_argument("workload", choices=bench.LARK_WORKLOADS)
    rec.add_argument("out", type=Path, help="where to save the times (.npy)")
    rec.add_argument("--loads", type=int, default=5, help="decodes, each from a fresh load")
    rec.add_argument("--vocab", default="llama3")
    cmp = commands.add_parser("compare", help="compare two builds' recordings, paired")
    cmp.add_argument("first", help="comma-separated .npy recordings of the first build")
    cmp.add_argument("second", help="comma-separated .npy recordings of the second build")
    cmp.add_argument("--above", type=float, default=5.0, help="slow positions, microseconds")
    args = parser.parse_args(argv)
    if args.command == "record":
        if args.loads < 1:
            parser.error("--loads must be >= 1")
        record(args.workload, args.out, args.loads, args.vocab)
    else:
        compare(
            [Path(p) for p in args.first.split(",")],
            [Path(p) for p in args.second.split(",")],
            args.above,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
