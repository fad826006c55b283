"""Batch mask fills on many cores: `fill_next_token_bitmask_batch` by batch size and threads.

An inference server fills one bitmask row per sequence each step, all rows in one call that
spreads them over threads with the GIL released. This script force-decodes a workload's
instances with `batch` matchers at once, each at its own place in its own instance (they start
staggered, and one that finishes starts its instance again), and times every step's batch fill
for each thread count. It prints the median and p90 step time, the median per row, and the
speed-up over one thread (of the median step; with `--cold`, of the sum of all steps, since
a fresh load with no prewarm computes its first masks and those are what threads speed up).

Usage (from the repository root)::

    python bench/batch_fill.py                                   # clike, llama3, 1..cores
    python bench/batch_fill.py --workload json --batch 16,64 --threads 1,2
    python bench/batch_fill.py --vocab path/to/llama3.vocab       # a vocabulary file
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # noqa: E402 - the benchmark module next to this script
from gramkiln.runtime.compiled import usable_cpus  # noqa: E402

import gramkiln  # noqa: E402


def default_threads() -> str:
    """1, 2, 4, ... up to the number of CPUs, as a comma-separated list."""
    cpus = usable_cpus()
    counts = [1]
    while counts[-1] * 2 <= cpus:
        counts.append(counts[-1] * 2)
    if counts[-1] != cpus:
        counts.append(cpus)
    return ",".join(str(count) for count in counts)


def time_batch(
    compiled: gramkiln.CompiledGrammar,
    tokenized: list[list[int]],
    batch: int,
    threads: int,
    steps: int,
) -> list[float]:
    """Microseconds of each of `steps` batch fills of `batch` staggered matchers."""
    matchers = []
    places = []
    for row in range(batch):
        tokens = tokenized[row % len(tokenized)]
        matcher = compiled.matcher()
        start = (row * 7) % max(1, len(tokens))
        for token in tokens[:start]:
            if not matcher.accept_token(token):
                raise SystemExit(f"instance {row % len(tokenized)} rejected at token {token}")
        matchers.append(matcher)
        places.append(start)
    bitmask = gramkiln.allocate_token_bitmask(batch, compiled.vocab_size)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        gramkiln.fill_next_token_bitmask_batch(matchers, bitmask, threads=threads)
        times.append((time.perf_counter() - started) * 1e6)
        for row, matcher in enumerate(matchers):
            tokens = tokenized[row % len(tokenized)]
            if places[row] >= len(tokens):
                matcher.reset()
                places[row] = 0
                continue
            if not matcher.accept_token(tokens[places[row]]):
                raise SystemExit(f"row {row}: token {tokens[places[row]]} rejected")
            places[row] += 1
    return times


def main(argv: Sequence[str] | None = None) -> None:
    """Compile the workload, prewarm, then print one line per (batch, threads)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="clike", help="json, clike or toolcall")
    parser.add_argument("--vocab", default="llama3", help="a packaged name or a file")
    parser.add_argument("--batch", default="1,16,64,128", help="comma-separated batch sizes")
    parser.add_argument("--threads", default=default_threads(), help="comma-separated")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per setting")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="a fresh load with no prewarm for every setting: the first steps compute their "
        "masks (CPU-bound), which is where threads pay; prints the sum of the step times too",
    )
    args = parser.parse_args(argv)

    vocab = bench.load_bench_vocab(args.vocab)
    workload = bench.lark_workloads([args.workload])[0]
    assert workload.lark is not None
    tokenized = [vocab.tokenize(data) for data in workload.instances]
    compiled = gramkiln.Grammar.from_lark(workload.lark).compile(vocab.gk_vocab)
    artifact = compiled.to_bytes()

    def ready() -> gramkiln.CompiledGrammar:
        loaded = gramkiln.CompiledGrammar.load(artifact, prewarm=False)
        if not args.cold:
            loaded.prewarm(wait=True)
        return loaded

    loaded = ready()
    print(
        f"{args.workload}: {len(tokenized)} instances, {sum(map(len, tokenized))} tokens "
        f"({vocab.tokenizer_name}), vocab {compiled.vocab_size}, {usable_cpus()} CPUs"
    )
    print(
        f"{'batch':>5} {'threads':>7} {'step p50 us':>11} {'step p90 us':>11} "
        f"{'us/row':>7} {'speed-up':>8}" + (f" {'sum ms':>8}" if args.cold else "")
    )
    for batch in (int(value) for value in args.batch.split(",")):
        single: float | None = None
        for threads in (int(value) for value in args.threads.split(",")):
            if args.cold:
                loaded = ready()
            else:  # every setting decodes the same positions; untimed, this warms caches
                time_batch(loaded, tokenized, batch, threads, min(args.steps, 20))
            times = time_batch(loaded, tokenized, batch, threads, args.steps)
            # Cold: the sum is what the threads are for; warm: the median step.
            figure = sum(times) if args.cold else statistics.median(times)
            single = figure if single is None else single
            print(
                f"{batch:>5} {threads:>7} {statistics.median(times):>11.1f} "
                f"{np.percentile(times, 90):>11.1f} {statistics.median(times) / batch:>7.2f} "
                f"{single / figure:>8.2f}" + (f" {sum(times) / 1000:>8.1f}" if args.cold else "")
            )


if __name__ == "__main__":
    main()
