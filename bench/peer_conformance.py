"""False negatives and false positives of every engine on the same JSON Schema instances.

For a seeded sample of MaskBench schemas per split (the same sample as bench/conformance.py)
and optionally the JSON Schema Test Suite, every engine compiles every schema against the
same vocabulary (Llama 3 by default), and every test instance, written with
``json.dumps(data)``, is force-decoded through the engine as its greedy (longest-match)
tokens. An instance is accepted iff every forced token has its bit set in the engine's own
mask and the engine's commit succeeds, and the final state allows EOS (is accepting, for
engines without EOS in the mask). A valid instance that is rejected is a false negative, an
invalid one that is accepted a false positive.

Greedy tokens are not always the canonical BPE tokens: every false negative gets a second
opinion, byte-level acceptance where the engine has it (gramkiln, xgrammar, glrmask), else
the canonical BPE tokens (llguidance, outlines-core). A false negative that the second
opinion accepts is a tokenization artefact and is counted apart (column ``tok``).

Each engine runs in its own worker process, one schema at a time: a compile that exceeds
``--compile-timeout``, matching that exceeds ``--budget``, or a worker above ``--max-rss-gb``
is killed and the worker restarted, so a stalled or huge compile costs bounded time and
memory. A schema an engine refuses, fails or times out on counts as "not compiled" for it.
The second table keeps only the schemas every engine compiled (the fair comparison).

Usage (from the repository root)::

    python bench/peer_conformance.py --limit 30
    python bench/peer_conformance.py --split BFCL --limit 5 --engines gramkiln,xgrammar
    python bench/peer_conformance.py --suite draft7 --limit 50 --json-out /tmp/peer.json
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import random
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance  # noqa: E402  (bench/ is not a package)
import run as bench_run  # noqa: E402

ENGINE_CHOICES = ("gramkiln", "xgrammar", "llguidance", "glrmask", "outlines")
# The command line says "outlines"; bench/run.py's adapter is named after the package.
ADAPTER_NAMES = {"outlines": "outlines-core"}

# Verdicts of one instance.
ACCEPTED = "accepted"
REJECTED = "rejected"
SKIPPED = "skipped"  # the schema's matching budget ran out before this instance


@dataclass
class Instance:
    """One test instance: its text, its label, and its tokenizations."""

    text: str
    valid: bool
    greedy_ids: list[int]
    canonical_ids: list[int] | None  # BPE tokens, None without a BPE tokenizer


@dataclass
class SchemaJob:
    """One schema to run through every engine."""

    source: str  # split or suite draft
    name: str
    schema: Any
    instances: list[Instance]
    suite: bool = False  # JSON Schema Test Suite: gramkiln gets the suite's options


@dataclass
class EngineOutcome:
    """What one engine did with one schema."""

    compiled: bool
    note: str = ""  # why not compiled (refused, error, timeout, memory)
    compile_ms: float = 0.0
    verdicts: list[str] = field(default_factory=list)  # one per instance
    # Per instance: for a rejected valid instance, whether the second opinion (byte-level or
    # canonical tokens) accepts it; None where no second opinion was taken.
    second_opinion: list[bool | None] = field(default_factory=list)


@dataclass
class Tally:
    """Counts for one source (split or draft) and one engine."""

    schemas: int = 0
    compiled: int = 0
    timeouts: int = 0
    valid_accepted: int = 0
    valid_rejected: int = 0
    tokenization_artefacts: int = 0  # of valid_rejected: accepted by the second opinion
    invalid_rejected: int = 0
    invalid_accepted: int = 0
    skipped: int = 0
    compile_ms: list[float] = field(default_factory=list)

    def fp_percent(self) -> str:
        """False positives as a percentage of the decided invalid instances."""
        invalid = self.invalid_accepted + self.invalid_rejected
        return f"{100.0 * self.invalid_accepted / invalid:.1f}%" if invalid else "-"


# --------------------------------------------------------------------------------------------
# engines


class GramkilnSchemaEngine(bench_run.GramkilnEngine):
    """bench/run.py's gramkiln adapter, with the front-end options of conformance.py."""

    def compile(self, workload: bench_run.Workload) -> Any:
        from gramkiln.frontend.json_schema import JsonSchemaOptions

        options = JsonSchemaOptions()
        if getattr(workload, "suite", False):
            # The suite is written for validators: as in conformance.py, format is an
            # annotation and remote references resolve to its remotes/ folder.
            options = options.model_copy(
                update={"formats": "annotate", "remote_documents": conformance.load_remotes()}
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = self.gk.Grammar.from_json_schema(workload.schema, options)
        return grammar.compile(self.vocab.gk_vocab)


def make_engine(name: str) -> bench_run.Engine:
    """The adapter for an engine name of the command line."""
    if name == "gramkiln":
        return GramkilnSchemaEngine()
    return bench_run.ENGINES[ADAPTER_NAMES.get(name, name)]()


def final_state_accepts(engine: bench_run.Engine, matcher: Any, row: np.ndarray, eos: int) -> bool:
    """Whether the engine would end here: EOS in its mask, or is_accepting() where EOS is not
    part of the engine's vocabulary (glrmask)."""
    if not engine.eos_in_mask():
        return bool(matcher.is_accepting())
    return eos >= 0 and bench_run.bit_is_set(row, eos)


def force_decode(
    engine: bench_run.Engine,
    compiled: Any,
    ids: Sequence[int],
    buffer: Any,
    row: np.ndarray,
    eos: int,
) -> bool:
    """Accepted iff every token's mask bit is set and its commit succeeds, and the final state
    allows EOS."""
    matcher = engine.start(compiled)
    for token in ids:
        engine.fill(matcher, buffer)
        if not bench_run.bit_is_set(row, token):
            return False
        if not engine.commit(matcher, token):
            return False
    engine.fill(matcher, buffer)
    return final_state_accepts(engine, matcher, row, eos)


def accepts_bytes(
    engine: bench_run.Engine, compiled: Any, text: str, buffer: Any, row: np.ndarray, eos: int
) -> bool | None:
    """Byte-level acceptance, independent of tokenization; None where the engine has no
    byte-level input."""
    if engine.name == "gramkiln":
        matcher = compiled.matcher()
        return bool(matcher.accept_string(text)) and bool(matcher.is_accepting())
    if engine.name == "xgrammar":
        matcher = engine.start(compiled)
        if not matcher.accept_string(text):
            return False
        engine.fill(matcher, buffer)
        return final_state_accepts(engine, matcher, row, eos)
    if engine.name == "glrmask":
        state = engine.start(compiled)
        return bool(state.commit_bytes(text.encode("utf-8"))) and bool(state.is_accepting())
    return None


def second_opinion(
    engine: bench_run.Engine,
    compiled: Any,
    instance: Instance,
    buffer: Any,
    row: np.ndarray,
    eos: int,
) -> bool | None:
    """For a rejected valid instance: does the engine accept its bytes (or, without byte-level
    input, its canonical BPE tokens)? True marks the rejection as a tokenization artefact."""
    verdict = accepts_bytes(engine, compiled, instance.text, buffer, row, eos)
    if verdict is None and instance.canonical_ids is not None:
        if instance.canonical_ids == instance.greedy_ids:
            return False
        verdict = force_decode(engine, compiled, instance.canonical_ids, buffer, row, eos)
    return verdict


def run_schema(
    engine: bench_run.Engine,
    vocab: bench_run.BenchVocab,
    job: SchemaJob,
    budget_s: float,
    report: Callable[[str, Any], None] | None = None,
) -> EngineOutcome:
    """Compile one schema with one engine and decide every instance within `budget_s`.

    `report` (used by the worker process) is told ("compiled", ms) as soon as the compile
    is done, so that its parent can switch from the compile timeout to the matching budget.
    The compiled grammar is dropped before returning (memory stays bounded).
    """
    workload = bench_run.Workload(name=job.name, schema=job.schema)
    workload.suite = job.suite  # type: ignore[attr-defined]  # read by GramkilnSchemaEngine
    started = time.perf_counter()
    try:
        compiled = engine.compile(workload)
    except bench_run.Unavailable as exc:
        return EngineOutcome(False, f"refused: {exc}"[:200])
    except Exception as exc:  # noqa: BLE001 - an engine's failure is a finding, not a crash
        return EngineOutcome(False, f"{type(exc).__name__}: {exc}"[:200])
    outcome = EngineOutcome(True, compile_ms=(time.perf_counter() - started) * 1000)
    if report is not None:
        report("compiled", outcome.compile_ms)
    buffer, row = engine.new_bitmask(vocab)
    deadline = time.perf_counter() + budget_s
    try:
        for instance in job.instances:
            if time.perf_counter() > deadline:
                outcome.verdicts.append(SKIPPED)
                outcome.second_opinion.append(None)
                continue
            try:
                accepted = force_decode(
                    engine, compiled, instance.greedy_ids, buffer, row, vocab.eos
                )
            except Exception:  # noqa: BLE001 - an engine raising on a token rejects it
                accepted = False
            opinion = None
            if instance.valid and not accepted:
                try:
                    opinion = second_opinion(engine, compiled, instance, buffer, row, vocab.eos)
                except Exception:  # noqa: BLE001
                    opinion = False
            outcome.verdicts.append(ACCEPTED if accepted else REJECTED)
            outcome.second_opinion.append(opinion)
    finally:
        del compiled
        gc.collect()
    return outcome


# --------------------------------------------------------------------------------------------
# worker processes


def _worker_main(engine_name: str, vocab_spec: str, connection: Connection) -> None:
    """Worker loop: set the engine up once, then run the schemas the parent sends."""
    warnings.simplefilter("ignore")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    try:
        vocab = load_vocabulary(vocab_spec)
        engine = make_engine(engine_name)
        engine.setup(vocab)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as unavailable
        connection.send(("unavailable", f"{type(exc).__name__}: {exc}"[:300]))
        return
    connection.send(("ready", bench_run._version(engine.name)))
    while True:
        message = connection.recv()
        if message is None:
            return
        job, budget_s = message
        outcome = run_schema(engine, vocab, job, budget_s, report=lambda *m: connection.send(m))
        connection.send(("outcome", outcome))


class EngineWorker:
    """One engine in a child process, restarted after a timeout or memory overrun."""

    def __init__(self, engine_name: str, vocab_spec: str, max_rss_bytes: int) -> None:
        self.engine_name = engine_name
        self.vocab_spec = vocab_spec
        self.max_rss_bytes = max_rss_bytes
        self.process: multiprocessing.Process | None = None
        self.connection: Connection | None = None
        self.version = ""
        self.unavailable: str | None = None

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe()
        self.process = context.Process(
            target=_worker_main, args=(self.engine_name, self.vocab_spec, child_end), daemon=True
        )
        self.process.start()
        child_end.close()
        self.connection = parent_end
        kind, detail = self._receive(deadline=time.monotonic() + 600)
        if kind == "ready":
            self.version = detail
        else:
            self.unavailable = detail if kind == "unavailable" else f"setup {kind}"
            self.stop()

    def _receive(self, deadline: float) -> tuple[str, Any]:
        """The next message, or ("timeout"|"memory"|"died", detail) when the worker overruns
        the deadline, the memory cap, or exits."""
        assert self.connection is not None and self.process is not None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", None
            if self.connection.poll(min(remaining, 0.05)):
                try:
                    message = self.connection.recv()
                except (EOFError, OSError):
                    return "died", f"worker exited (code {self.process.exitcode})"
                return message[0], (message[1] if len(message) > 1 else None)
            if not self.process.is_alive():
                return "died", f"worker exited (code {self.process.exitcode})"
            if _resident_bytes(self.process.pid) > self.max_rss_bytes:
                return "memory", f"over {self.max_rss_bytes / 2**30:.1f} GiB resident"

    def ensure_started(self) -> bool:
        """Start the worker if it is not running; False when the engine is unavailable."""
        if self.unavailable is None and (self.process is None or not self.process.is_alive()):
            self._start()
        return self.unavailable is None

    def run(self, job: SchemaJob, compile_timeout_s: float, budget_s: float) -> EngineOutcome:
        """Run one schema; a worker that overruns is killed and the schema marked."""
        if not self.ensure_started():
            return EngineOutcome(False, f"unavailable: {self.unavailable}")
        assert self.connection is not None
        self.connection.send((job, budget_s))
        kind, detail = self._receive(deadline=time.monotonic() + compile_timeout_s)
        if kind == "compiled":
            compile_ms = detail
            # The worker stops matching itself at `budget_s`; the grace covers one slow
            # instance that the worker cannot interrupt.
            kind, detail = self._receive(deadline=time.monotonic() + budget_s * 2 + 5)
            if kind == "outcome":
                return detail
            self.stop()
            outcome = EngineOutcome(True, f"matching {kind}", compile_ms=compile_ms)
            outcome.verdicts = [SKIPPED] * len(job.instances)
            outcome.second_opinion = [None] * len(job.instances)
            return outcome
        if kind == "outcome":  # not compiled: refused or failed
            return detail
        self.stop()
        if kind == "timeout":
            return EngineOutcome(False, f"compile timeout ({compile_timeout_s:g} s)")
        return EngineOutcome(False, f"compile {kind}: {detail}")

    def stop(self) -> None:
        """End the worker process (it is ours: killed by its own handle)."""
        if self.process is not None and self.process.is_alive():
            try:
                if self.connection is not None:
                    self.connection.send(None)
            except OSError:
                pass
            self.process.join(0.5)
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        if self.connection is not None:
            self.connection.close()
        self.process = None
        self.connection = None


def _resident_bytes(pid: int | None) -> int:
    """Resident memory of a process (Linux /proc); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


# --------------------------------------------------------------------------------------------
# data


def load_vocabulary(spec: str) -> bench_run.BenchVocab:
    """The vocabulary, with the greedy tokenizer as the instance tokenizer (always)."""
    from gramkiln.runtime.vocab import load_vocab

    vocab = load_vocab(spec)
    return bench_run.BenchVocab(vocab, bench_run.greedy_tokenizer(vocab), "greedy longest-match")


def canonical_tokenizer(spec: str, vocab: Any) -> Callable[[bytes], list[int]] | None:
    """The real Llama 3 BPE (quicktok) when it round-trips on this vocabulary, else None."""
    if spec != "llama3":
        return None
    try:
        import quicktok

        encoding = quicktok.get_encoding("llama3")
        probe = '{"a": [1, 2.5e-3], "b": "\\u00e9\\n"}'
        if vocab.decode(encoding.encode(probe)) != probe.encode("utf-8"):
            return None
    except (ImportError, RuntimeError):
        return None
    return lambda data: list(encoding.encode(data.decode("utf-8")))


def make_jobs(
    source: str,
    cases: Sequence[conformance.Case],
    tokenize: Callable[[bytes], list[int]],
    canonical: Callable[[bytes], list[int]] | None,
    suite: bool = False,
) -> list[SchemaJob]:
    """Schemas with their instances, serialized with json.dumps and tokenized."""
    jobs = []
    for case in cases:
        instances = []
        for data, valid, _description in case.tests:
            text = json.dumps(data)
            raw = text.encode("utf-8")
            instances.append(
                Instance(text, valid, tokenize(raw), canonical(raw) if canonical else None)
            )
        jobs.append(SchemaJob(source, case.name, case.schema, instances, suite))
    return jobs


def sample_cases(source: str, limit: int | None, seed: int) -> list[conformance.Case]:
    """The same seeded sample as bench/conformance.py."""
    cases = (
        conformance.load_suite(source)
        if source in conformance.SUITE_DRAFTS
        else conformance.load_maskbench(source)
    )
    if limit is not None and len(cases) > limit:
        cases = random.Random(seed).sample(cases, limit)
    return cases


# --------------------------------------------------------------------------------------------
# counting and tables


def tally_outcomes(
    jobs: Sequence[SchemaJob],
    outcomes: dict[str, list[EngineOutcome]],
    only_common: bool = False,
) -> dict[str, dict[str, Tally]]:
    """Counts per source and engine. `outcomes[engine][i]` belongs to `jobs[i]`.

    With `only_common`, only schemas every engine compiled count, and only instances every
    engine decided (none skipped): every engine is then judged on the same instances.
    """
    engines = list(outcomes)
    tallies: dict[str, dict[str, Tally]] = {}
    for index, job in enumerate(jobs):
        row = [outcomes[engine][index] for engine in engines]
        if only_common and not all(outcome.compiled for outcome in row):
            continue
        per_engine = tallies.setdefault(job.source, {engine: Tally() for engine in engines})
        for engine, outcome in zip(engines, row, strict=True):
            tally = per_engine[engine]
            tally.schemas += 1
            if not outcome.compiled:
                tally.timeouts += "timeout" in outcome.note
                continue
            tally.compiled += 1
            tally.compile_ms.append(outcome.compile_ms)
            for position, instance in enumerate(job.instances):
                verdict = outcome.verdicts[position]
                if only_common and any(o.verdicts[position] == SKIPPED for o in row):
                    continue
                if verdict == SKIPPED:
                    tally.skipped += 1
                elif instance.valid and verdict == ACCEPTED:
                    tally.valid_accepted += 1
                elif instance.valid:
                    tally.valid_rejected += 1
                    tally.tokenization_artefacts += bool(outcome.second_opinion[position])
                elif verdict == ACCEPTED:
                    tally.invalid_accepted += 1
                else:
                    tally.invalid_rejected += 1
    return tallies


def total_tallies(tallies: dict[str, dict[str, Tally]]) -> dict[str, Tally]:
    """Per-engine sums over every source."""
    totals: dict[str, Tally] = {}
    for per_engine in tallies.values():
        for engine, tally in per_engine.items():
            total = totals.setdefault(engine, Tally())
            for name in (
                "schemas",
                "compiled",
                "timeouts",
                "valid_accepted",
                "valid_rejected",
                "tokenization_artefacts",
                "invalid_rejected",
                "invalid_accepted",
                "skipped",
            ):
                setattr(total, name, getattr(total, name) + getattr(tally, name))
            total.compile_ms.extend(tally.compile_ms)
    return totals


def format_table(tallies: dict[str, dict[str, Tally]], title: str) -> str:
    """A markdown table, one row per source and engine, plus the totals."""
    lines = [
        title,
        "",
        "| split | engine | schemas | compiled | valid accepted / FN (tok) "
        "| invalid rejected / FP | FP% | skipped | compile p50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(source, per) for source, per in tallies.items()]
    if len(rows) > 1:
        rows.append(("total", total_tallies(tallies)))
    for source, per_engine in rows:
        for engine, t in per_engine.items():
            p50 = sorted(t.compile_ms)[len(t.compile_ms) // 2] if t.compile_ms else 0.0
            compiled = f"{t.compiled}" + (f" ({t.timeouts} t/o)" if t.timeouts else "")
            lines.append(
                f"| {source} | {engine} | {t.schemas} | {compiled} "
                f"| {t.valid_accepted} / {t.valid_rejected} ({t.tokenization_artefacts}) "
                f"| {t.invalid_rejected} / {t.invalid_accepted} | {t.fp_percent()} "
                f"| {t.skipped} | {p50:,.0f} |"
            )
    return "\n".join(lines)


def failure_lines(
    jobs: Sequence[SchemaJob], outcomes: dict[str, list[EngineOutcome]], limit: int
) -> list[str]:
    """Up to `limit` FN/FP lines per engine, for looking at what went wrong."""
    lines = []
    for engine, per_job in outcomes.items():
        shown = 0
        for job, outcome in zip(jobs, per_job, strict=True):
            for position, instance in enumerate(job.instances):
                if shown >= limit or not outcome.compiled:
                    break
                verdict = outcome.verdicts[position]
                if verdict == SKIPPED or (verdict == ACCEPTED) == instance.valid:
                    continue
                kind = "FN" if instance.valid else "FP"
                if kind == "FN" and outcome.second_opinion[position]:
                    kind = "FN(tok)"
                lines.append(f"{engine} {kind} {job.name}: {instance.text[:140]}")
                shown += 1
    return lines


# --------------------------------------------------------------------------------------------
# main


def outcomes_record(
    jobs: Sequence[SchemaJob],
    outcomes: dict[str, list[EngineOutcome]],
    versions: dict[str, str],
    argv: Sequence[str],
) -> dict[str, Any]:
    """Every verdict as JSON-ready data (what --json-out writes and --reuse reads)."""
    return {
        "argv": list(argv),
        "versions": versions,
        "jobs": [
            {
                "source": job.source,
                "name": job.name,
                "valid": [instance.valid for instance in job.instances],
                "engines": {
                    engine: {
                        "compiled": per_job[index].compiled,
                        "note": per_job[index].note,
                        "compile_ms": round(per_job[index].compile_ms, 1),
                        "verdicts": per_job[index].verdicts,
                        "second_opinion": per_job[index].second_opinion,
                    }
                    for engine, per_job in outcomes.items()
                },
            }
            for index, job in enumerate(jobs)
        ],
    }


def reused_outcomes(
    record: dict[str, Any], jobs: Sequence[SchemaJob]
) -> tuple[dict[str, list[EngineOutcome]], dict[str, str]]:
    """The outcomes of a previous --json-out for the same jobs, per engine that it holds for
    every job; an error when the jobs differ (another sample or limit)."""
    saved = record["jobs"]
    if [(j["source"], j["name"]) for j in saved] != [(j.source, j.name) for j in jobs]:
        raise ValueError("the saved verdicts are for other schemas (split, limit or seed differ)")
    engines = set.intersection(*(set(j["engines"]) for j in saved)) if saved else set()
    outcomes = {
        engine: [
            EngineOutcome(
                compiled=j["engines"][engine]["compiled"],
                note=j["engines"][engine]["note"],
                compile_ms=j["engines"][engine]["compile_ms"],
                verdicts=list(j["engines"][engine]["verdicts"]),
                second_opinion=list(j["engines"][engine]["second_opinion"]),
            )
            for j in saved
        ]
        for engine in sorted(engines)
    }
    versions = {e: v for e, v in record.get("versions", {}).items() if e in outcomes}
    return outcomes, versions


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", action="append", help="MaskBench split (repeatable)")
    parser.add_argument(
        "--suite",
        action="append",
        choices=sorted(conformance.SUITE_DRAFTS),
        help="also a JSON Schema Test Suite draft (repeatable)",
    )
    parser.add_argument("--suite-only", action="store_true", help="no MaskBench splits")
    parser.add_argument("--limit", type=int, default=30, help="schemas per split (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (as conformance.py)")
    parser.add_argument("--engines", default=",".join(ENGINE_CHOICES), help="comma-separated")
    parser.add_argument("--vocab", default="llama3", help="vocabulary spec (default llama3)")
    parser.add_argument(
        "--compile-timeout", type=float, default=30.0, help="seconds per schema per engine"
    )
    parser.add_argument(
        "--budget", type=float, default=20.0, help="seconds of matching per schema per engine"
    )
    parser.add_argument(
        "--max-rss-gb", type=float, default=6.0, help="memory cap of one engine's worker"
    )
    parser.add_argument("--show-failures", type=int, default=5, help="FN/FP lines per engine")
    parser.add_argument(
        "--json-out", type=Path, help="write every verdict as JSON (after each engine)"
    )
    parser.add_argument(
        "--reuse",
        type=Path,
        help="a previous --json-out of the same sample: its engines are not run again",
    )
    args = parser.parse_args(argv)

    engine_names = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engine_names if e not in ENGINE_CHOICES]
    if unknown:
        parser.error(f"unknown engine(s): {', '.join(unknown)}")
    if not conformance.DATA.is_dir():
        print(f"data folder not found: {conformance.DATA}", file=sys.stderr)
        return 2
    sources = [] if args.suite_only else list(args.split or conformance.SPLITS)
    sources += args.suite or []

    started = time.perf_counter()
    vocab = load_vocabulary(args.vocab)
    canonical = canonical_tokenizer(args.vocab, vocab.gk_vocab)
    jobs: list[SchemaJob] = []
    for source in sources:
        suite = source in conformance.SUITE_DRAFTS
        cases = sample_cases(source, args.limit, args.seed)
        jobs += make_jobs(source, cases, vocab.tokenize, canonical, suite)
    instances = sum(len(job.instances) for job in jobs)
    print(
        f"{len(jobs)} schemas, {instances} instances from {', '.join(sources)} "
        f"(limit {args.limit}, seed {args.seed}); vocabulary {args.vocab} ({vocab.size:,} ids), "
        f"greedy tokens, second opinion: byte-level or "
        f"{'BPE tokens' if canonical else 'none'}; prepared in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    del vocab

    outcomes: dict[str, list[EngineOutcome]] = {}
    versions: dict[str, str] = {}
    if args.reuse:
        saved = json.loads(args.reuse.read_text(encoding="utf-8"))
        outcomes, versions = reused_outcomes(saved, jobs)
        outcomes = {e: outcomes[e] for e in engine_names if e in outcomes}
        print(f"reused from {args.reuse}: {', '.join(outcomes) or 'nothing'}", flush=True)
    run_argv = list(argv) if argv is not None else sys.argv[1:]
    for name in engine_names:
        if name in outcomes:
            continue
        # One engine at a time: one worker (and one copy of its vocabulary) alive at once.
        worker = EngineWorker(name, args.vocab, int(args.max_rss_gb * 2**30))
        engine_started = time.perf_counter()
        if not worker.ensure_started():
            print(f"{name}: not available ({worker.unavailable})", flush=True)
            continue
        versions[name] = worker.version
        results = []
        cpu_started = time.process_time()
        for done, job in enumerate(jobs, 1):
            results.append(worker.run(job, args.compile_timeout, args.budget))
            if done % 30 == 0:
                print(
                    f"  {name}: {done}/{len(jobs)} schemas, "
                    f"{time.perf_counter() - engine_started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
        worker.stop()
        outcomes[name] = results
        compiled = sum(o.compiled for o in results)
        print(
            f"{name} {worker.version}: {compiled}/{len(jobs)} compiled in "
            f"{time.perf_counter() - engine_started:.0f} s wall "
            f"(parent CPU {time.process_time() - cpu_started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        for outcome, job in zip(results, jobs, strict=True):
            if not outcome.compiled and "refused" not in outcome.note:
                print(f"    not compiled {job.name}: {outcome.note[:150]}", file=sys.stderr)
        if args.json_out:
            # Written after every engine, so that a long run interrupted later keeps what it
            # measured (--reuse picks it up).
            record = outcomes_record(jobs, outcomes, versions, run_argv)
            args.json_out.write_text(json.dumps(record), encoding="utf-8")

    if not outcomes:
        print("no engine available", file=sys.stderr)
        return 1
    # Table rows in the order of --engines, whatever was reused.
    outcomes = {e: outcomes[e] for e in engine_names if e in outcomes}
    print()
    print(", ".join(f"{name} {version}" for name, version in versions.items()))
    print()
    print(format_table(tally_outcomes(jobs, outcomes), "Every schema each engine compiled:"))
    print()
    common = tally_outcomes(jobs, outcomes, only_common=True)
    print(
        format_table(common, "Only schemas every engine compiled (instances every engine decided):")
    )
    lines = failure_lines(jobs, outcomes, args.show_failures)
    if lines:
        print("\nfirst false negatives / positives per engine:")
        for line in lines:
            print("   ", line)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
