"""JSON Schema conformance: MaskBench splits and the official JSON Schema Test Suite.

For every schema: does it compile (or is it reported unsupported, by keyword), and for every
test instance serialized with ``json.dumps(data)`` (the default layout): is a valid instance
accepted (a rejection is a false negative, a bug) and an invalid one rejected (an acceptance
is a false positive)? Membership is decided by the compiled runtime matcher when
``Grammar.compile`` works, else by the reference matcher, which is slow: a time budget per
schema bounds the run (instances beyond it are counted as skipped).

Usage::

    python bench/conformance.py                       # all splits and both suite drafts
    python bench/conformance.py --split Github_easy --limit 200 --budget 2
    python bench/conformance.py --suite-only --show-failures 20
    python bench/conformance.py --suite-only --suite-root jsonschema-4.23.0/json  # all drafts
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import signal
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gramkiln.frontend.json_schema import JsonSchemaOptions

import gramkiln
from gramkiln.errors import GrammarError

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
SPLITS = (
    "Github_trivial",
    "Github_easy",
    "Github_medium",
    "Glaiveai2K",
    "Kubernetes",
    "BFCL",
    "Handwritten",
    "Synthesized",
)
# Seconds the reference matcher may spend re-checking one runtime false negative/positive.
SECOND_OPINION_SECONDS = 20.0
SUITE_DRAFTS = {
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft4": "http://json-schema.org/draft-04/schema#",
}
# Where the suite lives: the copy in the shared data (drafts 2020-12 and 7), or another
# checkout of it given with --suite-root (the jsonschema sdist ships one with every draft).
SUITE_ROOT = DATA / "json-schema-test-suite"


@dataclass
class Case:
    """One schema with its instances."""

    name: str
    schema: Any
    tests: list[tuple[Any, bool, str]]


@dataclass
class Tally:
    """Counts for one split."""

    schemas: int = 0
    compiled: int = 0
    unsupported: int = 0
    errors: int = 0
    crashes: int = 0
    valid_accepted: int = 0
    valid_rejected: int = 0
    invalid_rejected: int = 0
    invalid_accepted: int = 0
    skipped: int = 0
    runtime_disagreements: int = 0
    by_keyword: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    compile_seconds: list[float] = field(default_factory=list)


def load_maskbench(split: str) -> list[Case]:
    """All cases of one MaskBench split."""
    cases = []
    with gzip.open(DATA / "maskbench" / f"{split}.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            tests = [
                (t["data"], bool(t["valid"]), t.get("description", "")) for t in record["tests"]
            ]
            cases.append(Case(record["id"], record["schema"], tests))
    return cases


def load_suite(draft: str) -> list[Case]:
    """The test suite's top-level files for one draft (optional/ tests excluded)."""
    cases = []
    for path in sorted((SUITE_ROOT / "tests" / draft).glob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            schema = group["schema"]
            if isinstance(schema, dict) and "$schema" not in schema:
                schema = {"$schema": SUITE_DRAFTS[draft], **schema}
            tests = [(t["data"], bool(t["valid"]), t["description"]) for t in group["tests"]]
            cases.append(Case(f"{path.stem}: {group['description']}", schema, tests))
    return cases


def load_remotes() -> dict[str, Any]:
    """The suite's remote documents by the URI its harness serves them at."""
    root = SUITE_ROOT / "remotes"
    documents = {}
    for path in sorted(root.rglob("*.json")):
        relative = path.relative_to(root).as_posix()
        documents[f"http://localhost:1234/{relative}"] = json.loads(
            path.read_text(encoding="utf-8")
        )
    return documents


def _matcher(grammar: gramkiln.Grammar, engine: str) -> Any:
    """A function text -> bool using the runtime when asked and available."""
    if engine in ("auto", "runtime"):
        try:
            compiled = grammar.compile()

            def runtime_accepts(text: str) -> bool:
                matcher = compiled.matcher()
                return bool(matcher.accept_string(text)) and bool(matcher.is_accepting())

            return runtime_accepts
        except _OutOfTime:
            raise
        except Exception:
            if engine == "runtime":
                raise
    return grammar.accepts


def unsupported_keywords(message: str) -> list[str]:
    """Keywords listed by an 'unsupported keyword(s) a, b: ...' error."""
    marker = "unsupported keyword(s) "
    if marker not in message:
        return []
    listed = message.split(marker, 1)[1].split(":", 1)[0]
    return [k.strip() for k in listed.split(",") if k.strip()]


def run_case(
    case: Case, options: JsonSchemaOptions, tally: Tally, args: argparse.Namespace
) -> None:
    """Compile one schema and check its instances within the time budget."""
    tally.schemas += 1
    started = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    _arm(args.compile_budget)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = gramkiln.Grammar.from_json_schema(case.schema, options)
    except _OutOfTime:
        tally.errors += 1
        tally.by_keyword.update(["(compile timeout)"])
        tally.failures.append(f"TIMEOUT {case.name}: compiling took over {args.compile_budget}s")
        return
    except GrammarError as exc:
        keywords = unsupported_keywords(exc.message)
        if keywords:
            tally.unsupported += 1
            tally.by_keyword.update(keywords)
        else:
            tally.errors += 1
            tally.by_keyword.update(["(schema error)"])
        if args.show_errors:
            tally.failures.append(f"ERROR {case.name}: {exc.message[:200]}")
        return
    except Exception as exc:  # a bug in the front end: counted and listed, the run goes on
        tally.crashes += 1
        tally.failures.append(f"CRASH {case.name}: {type(exc).__name__}: {str(exc)[:200]}")
        return
    finally:
        _disarm()
    _arm(args.compile_budget)
    try:
        accepts = _matcher(grammar, args.engine)
    except _OutOfTime:
        tally.errors += 1
        tally.by_keyword.update(["(runtime compile timeout)"])
        tally.failures.append(f"TIMEOUT {case.name}: runtime compile over {args.compile_budget}s")
        return
    except Exception as exc:  # the runtime could not compile this grammar: listed, run goes on
        tally.errors += 1
        tally.by_keyword.update([f"(runtime: {type(exc).__name__})"])
        tally.failures.append(f"RUNTIME {case.name}: {type(exc).__name__}: {str(exc)[:200]}")
        return
    finally:
        _disarm()
    tally.compiled += 1
    tally.compile_seconds.append(time.perf_counter() - started)
    deadline = time.perf_counter() + args.budget
    for data, valid, description in case.tests:
        if time.perf_counter() > deadline:
            tally.skipped += 1
            continue
        text = json.dumps(data)
        # The reference matcher can take long on one instance of a big grammar: an interval
        # timer interrupts it when the schema's budget is spent.
        signal.signal(signal.SIGALRM, _alarm)
        _arm(max(deadline - time.perf_counter(), 0.001))
        try:
            accepted = accepts(text)
        except _OutOfTime:
            tally.skipped += 1
            continue
        except Exception as exc:  # the matcher itself failed: count as a crash of the check
            tally.crashes += 1
            tally.failures.append(f"MATCH-CRASH {case.name}: {type(exc).__name__}: {exc}"[:300])
            continue
        finally:
            _disarm()
        tag = ""
        if valid != accepted and accepts is not grammar.accepts:
            tag = _second_opinion(grammar, text, accepted, tally)
        if valid and accepted:
            tally.valid_accepted += 1
        elif valid:
            tally.valid_rejected += 1
            tally.failures.append(f"FN{tag} {case.name} [{description}]: {text[:160]}")
        elif accepted:
            tally.invalid_accepted += 1
            tally.failures.append(f"FP{tag} {case.name} [{description}]: {text[:160]}")
        else:
            tally.invalid_rejected += 1


def _second_opinion(grammar: gramkiln.Grammar, text: str, accepted: bool, tally: Tally) -> str:
    """Re-check a runtime FN/FP with the reference matcher, so that a runtime bug is told
    apart from a grammar (front-end) bug: a tag for the failure line."""
    signal.signal(signal.SIGALRM, _alarm)
    _arm(SECOND_OPINION_SECONDS)
    try:
        reference = grammar.accepts(text)
    except _OutOfTime:
        return " (reference: timeout)"
    finally:
        _disarm()
    if reference == accepted:
        return " (reference agrees)"
    tally.runtime_disagreements += 1
    return f" (RUNTIME DISAGREES: reference {'accepts' if reference else 'rejects'})"


class _OutOfTime(Exception):
    """The per-schema matching budget ran out in the middle of one instance."""


# The alarm raises only while armed: a C++ call that overruns the budget delivers the signal
# when it returns, possibly after the guarded block ended, and an exception raised there would
# end the whole run.
_armed = [False]


def _alarm(signum: int, frame: Any) -> None:
    if _armed[0]:
        _armed[0] = False
        raise _OutOfTime


def _arm(seconds: float) -> None:
    _armed[0] = True
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _disarm() -> None:
    try:
        _armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _OutOfTime:  # delivered between the two statements above
        signal.setitimer(signal.ITIMER_REAL, 0)


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def print_table(results: dict[str, Tally]) -> None:
    """The per-split table plus unsupported keywords."""
    header = f"{'split':<16} {'schemas':>7} {'compiled':>9} {'unsupp':>6} {'errors':>6} {'crash':>5} {'valid ok':>8} {'FN':>4} {'invalid rej':>11} {'FP':>4} {'FP%':>6} {'skipped':>7} {'rt!=ref':>7} {'compile p50 ms':>14}"
    print(header)
    print("-" * len(header))
    for name, t in results.items():
        p50 = (
            sorted(t.compile_seconds)[len(t.compile_seconds) // 2] * 1000
            if t.compile_seconds
            else 0.0
        )
        print(
            f"{name:<16} {t.schemas:>7} {t.compiled:>4} {_percent(t.compiled, t.schemas):>4} {t.unsupported:>6} {t.errors:>6} {t.crashes:>5} "
            f"{t.valid_accepted:>8} {t.valid_rejected:>4} {t.invalid_rejected:>11} {t.invalid_accepted:>4} "
            f"{_percent(t.invalid_accepted, t.invalid_accepted + t.invalid_rejected):>6} {t.skipped:>7} {t.runtime_disagreements:>7} {p50:>14.1f}"
        )
    print()
    for name, t in results.items():
        if t.by_keyword:
            listed = ", ".join(f"{k} {n}" for k, n in t.by_keyword.most_common(12))
            print(f"unsupported/errors in {name}: {listed}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--split", action="append", help="MaskBench split (repeatable); default all"
    )
    parser.add_argument(
        "--suite",
        action="append",
        choices=sorted(SUITE_DRAFTS),
        help="test-suite draft (repeatable)",
    )
    parser.add_argument("--suite-only", action="store_true", help="only the JSON Schema Test Suite")
    parser.add_argument(
        "--suite-root",
        type=Path,
        default=None,
        help="a JSON Schema Test Suite checkout (default: the shared data's copy)",
    )
    parser.add_argument("--no-suite", action="store_true", help="only MaskBench")
    parser.add_argument(
        "--limit", type=int, default=None, help="at most N schemas per split (random sample)"
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed for --limit")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of matching per schema")
    parser.add_argument(
        "--compile-budget", type=float, default=30.0, help="seconds to build one grammar"
    )
    parser.add_argument("--engine", choices=("auto", "runtime", "reference"), default="auto")
    parser.add_argument(
        "--lenient", action="store_true", help="unsupported keywords become warnings"
    )
    parser.add_argument("--coerce-one-of", action="store_true", help="overlapping oneOf as anyOf")
    parser.add_argument(
        "--property-order",
        choices=("schema", "any"),
        default=JsonSchemaOptions().property_order,
        help="object key order (default: the front end's default)",
    )
    parser.add_argument(
        "--show-failures", type=int, default=10, help="print up to N FN/FP/crash lines per split"
    )
    parser.add_argument(
        "--show-errors", action="store_true", help="also list unsupported/error messages"
    )
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"data folder not found: {DATA}", file=sys.stderr)
        return 2
    options = JsonSchemaOptions(
        lenient=args.lenient, coerce_one_of=args.coerce_one_of, property_order=args.property_order
    )
    sources: dict[str, Any] = {}
    if not args.suite_only:
        for split in args.split or SPLITS:
            sources[split] = lambda split=split: load_maskbench(split)
    global SUITE_ROOT
    if args.suite_root is not None:
        SUITE_ROOT = args.suite_root
    if not args.no_suite and not args.split:
        present = [d for d in sorted(SUITE_DRAFTS) if (SUITE_ROOT / "tests" / d).is_dir()]
        for draft in args.suite or present:
            sources[draft] = lambda draft=draft: load_suite(draft)
    # The suite is written for validators: format is an annotation there, and remote
    # references point at its remotes/ folder.
    suite_options = options.model_copy(
        update={"formats": "annotate", "remote_documents": load_remotes()}
    )
    results: dict[str, Tally] = {}
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for name, load in sources.items():
        cases = load()
        if args.limit is not None and len(cases) > args.limit:
            cases = random.Random(args.seed).sample(cases, args.limit)
        tally = Tally()
        started = time.perf_counter()
        chosen = suite_options if name in SUITE_DRAFTS else options
        for case in cases:
            run_case(case, chosen, tally, args)
        results[name] = tally
        print(
            f"[{name}: {len(cases)} schemas in {time.perf_counter() - started:.0f}s]",
            file=sys.stderr,
        )
        for line in tally.failures[: args.show_failures]:
            print("   ", line, file=sys.stderr)
    print_table(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
