"""Compile times of MaskBench schemas compiled in turn in one process, per engine.

What a build pipeline or a server that compiles many schemas sees: for each engine and split,
the median, p90, p99 and max compile time of a schema (front end + compile against the
vocabulary), how many took over 1 s and over 5 s, the slowest schemas, and the peak RSS of the
process; then gramkiln's median and p99 against each peer's over the schemas both compiled.
Each engine runs in a subprocess of its own, one after another, so its heap and peak RSS are
its own and the other engine's cores stay idle.

Usage (from the repository root)::

    python bench/compile_sweep.py --split Kubernetes --limit 200
    python bench/compile_sweep.py --split Github_medium --engines gramkiln,glrmask
    python bench/compile_sweep.py --split all --limit 100 --vocab byte

A schema an engine refuses or fails on counts as not compiled for it (by exception class);
one that runs past ``--timeout`` seconds (checked when the engine returns to Python) counts as
timed out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import conformance  # noqa: E402 - the MaskBench split names
import run as bench  # noqa: E402 - the engines and vocabularies of bench/run.py

SPLITS = conformance.SPLITS


def sample_schemas(split: str, limit: int, seed: int) -> list[tuple[str, Any]]:
    """(id, schema) of `split`, all of them or a seeded sample of `limit`, in file order."""
    path = bench.MASKBENCH_DIR / f"{split}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        entries = [json.loads(line) for line in handle]
    if 0 < limit < len(entries):
        keep = sorted(random.Random(seed).sample(range(len(entries)), limit))
        entries = [entries[i] for i in keep]
    return [(entry["id"], entry["schema"]) for entry in entries]


class _Timeout(Exception):
    pass


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def run_worker(engine_name: str, splits: Sequence[str], args: argparse.Namespace) -> dict:
    """Compile every sampled schema with one engine; per split, {id: seconds or 'error'}."""
    warnings.simplefilter("ignore")  # front-end warnings are findings of another script
    engine = bench.ENGINES[engine_name]()
    engine.setup(bench.load_bench_vocab(args.vocab))
    signal.signal(signal.SIGALRM, _on_alarm)
    results: dict[str, dict[str, Any]] = {}
    for split in splits:
        outcome: dict[str, Any] = {}
        for schema_id, schema in sample_schemas(split, args.limit, args.seed):
            workload = bench.Workload(name=schema_id, schema=schema)
            signal.alarm(max(1, int(args.timeout)))
            started = time.perf_counter()
            try:
                engine.precheck(workload)
                engine.compile(workload)
                outcome[schema_id] = time.perf_counter() - started
            except _Timeout:
                outcome[schema_id] = "timeout"
            except bench.Unavailable:
                outcome[schema_id] = "unsupported"
            except Exception as exc:  # noqa: BLE001 - a refusal is a finding, not a crash
                outcome[schema_id] = type(exc).__name__
            finally:
                signal.alarm(0)
        results[split] = outcome
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"engine": engine_name, "splits": results, "peak_rss_mb": peak_kib / 1024}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, linear between the closest ranks; NaN if none."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(outcome: dict[str, Any]) -> dict[str, Any]:
    """Figures of one engine on one split: times in ms, failures by kind."""
    times = [v for v in outcome.values() if isinstance(v, float)]
    failures = Counter(v for v in outcome.values() if not isinstance(v, float))
    slowest = sorted(((v, k) for k, v in outcome.items() if isinstance(v, float)), reverse=True)[:5]
    return {
        "schemas": len(outcome),
        "compiled": len(times),
        "p50": percentile(times, 50) * 1000,
        "p90": percentile(times, 90) * 1000,
        "p99": percentile(times, 99) * 1000,
        "max": (max(times) * 1000) if times else float("nan"),
        "over_1s": sum(t > 1 for t in times),
        "over_5s": sum(t > 5 for t in times),
        "failures": dict(failures),
        "slowest": [(k.split("---")[-1], v * 1000) for v, k in slowest],
    }


def print_report(reports: list[dict], out: Any = None) -> None:
    """One line per engine and split, the slowest schemas, then gramkiln against each peer."""
    out = out if out is not None else sys.stdout
    head = (
        f"{'split':<15} {'engine':<10} {'compiled':>11} {'p50 ms':>8} {'p90 ms':>8} "
        f"{'p99 ms':>9} {'max ms':>9} {'>1s':>4} {'>5s':>4} {'peak MB':>8}  failures"
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    for report in reports:
        for split, outcome in report["splits"].items():
            s = summarize(outcome)
            failures = ", ".join(f"{k} {v}" for k, v in sorted(s["failures"].items())) or "-"
            print(
                f"{split:<15} {report['engine']:<10} {s['compiled']:>5}/{s['schemas']:<5} "
                f"{s['p50']:>8.1f} {s['p90']:>8.1f} {s['p99']:>9.1f} {s['max']:>9.1f} "
                f"{s['over_1s']:>4} {s['over_5s']:>4} {report['peak_rss_mb']:>8.0f}  {failures}",
                file=out,
            )
            slow = ", ".join(f"{name} {ms:.0f}" for name, ms in s["slowest"])
            print(f"{'':<15} {'':<10} slowest (ms): {slow}", file=out)
    base = next((r for r in reports if r["engine"] == "gramkiln"), None)
    if base is None:
        return
    for peer in reports:
        if peer is base:
            continue
        print(f"ratio gramkiln / {peer['engine']} (schemas both compiled)", file=out)
        for split, outcome in base["splits"].items():
            theirs = peer["splits"].get(split, {})
            both = [
                k
                for k, v in outcome.items()
                if isinstance(v, float) and isinstance(theirs.get(k), float)
            ]
            if not both:
                print(f"  {split:<15} no schema compiled by both", file=out)
                continue
            ours = [outcome[k] for k in both]
            other = [theirs[k] for k in both]
            print(
                f"  {split:<15} {len(both):>5} schemas  p50 "
                f"{percentile(ours, 50) / percentile(other, 50):.2f}x  p99 "
                f"{percentile(ours, 99) / percentile(other, 99):.2f}x  sum "
                f"{sum(ours) / sum(other):.2f}x",
                file=out,
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep (or, with --worker, one engine's part of it) and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="Kubernetes", help=f"one of {SPLITS} or 'all'")
    parser.add_argument("--limit", type=int, default=0, help="a seeded sample (0: every one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", default="gramkiln", help="comma-separated bench engines")
    parser.add_argument("--vocab", default="llama3")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per schema")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    splits = SPLITS if args.split == "all" else (args.split,)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        parser.error(f"unknown split {unknown[0]!r}")
    if not bench.MASKBENCH_DIR.is_dir():
        print(f"no MaskBench data at {bench.MASKBENCH_DIR}", file=sys.stderr)
        return 2
    if args.worker:
        report = run_worker(args.worker, splits, args)
        Path(args.json_out).write_text(json.dumps(report), encoding="utf-8")
        return 0
    reports = []
    for name in args.engines.split(","):
        if name not in bench.ENGINES:
            parser.error(f"unknown engine {name!r}; known: {', '.join(bench.ENGINES)}")
        with tempfile.TemporaryDirectory() as scratch:
            out_path = Path(scratch) / "report.json"
            command = [sys.executable, __file__, "--worker", name, "--json-out", str(out_path)]
            command += ["--split", args.split, "--limit", str(args.limit)]
            command += ["--seed", str(args.seed), "--vocab", args.vocab]
            command += ["--timeout", str(args.timeout)]
            done = subprocess.run(command, check=False)
            if done.returncode != 0 or not out_path.exists():
                print(f"{name}: worker failed (exit status {done.returncode})", file=sys.stderr)
                continue
            reports.append(json.loads(out_path.read_text(encoding="utf-8")))
    print_report(reports)
    return 0 if reports else 1


if __name__ == "__main__":
    sys.exit(main())
