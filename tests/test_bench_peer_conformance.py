"""bench/peer_conformance.py: verdicts, counting and the worker process, on tiny schemas.

Everything runs on the built-in byte vocabulary (257 ids) so that it is fast and needs no
peer engine; the peer adapters are exercised where the peer is installed and skipped with
the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

import peer_conformance as pc  # noqa: E402  (bench/ is not a package)

BOOLEAN = {"type": "boolean"}
SMALL_INT = {"type": "integer", "minimum": 0, "maximum": 9}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 4}, "age": {"type": "integer"}},
    "required": ["name"],
    "additionalProperties": False,
}
CASES = [
    ("boolean", BOOLEAN, [(True, True), (False, True), (1, False), ("true", False)]),
    ("small int", SMALL_INT, [(0, True), (9, True), (10, False), (-1, False), (2.5, False)]),
    (
        "person",
        PERSON,
        [
            ({"name": "Ada"}, True),
            ({"name": "Ada", "age": 36}, True),
            ({"age": 36}, False),
            ({"name": "Adelaide"}, False),
            ({"name": "Ada", "x": 1}, False),
        ],
    ),
]


@pytest.fixture(scope="module")
def byte_vocab() -> pc.bench_run.BenchVocab:
    return pc.load_vocabulary("byte")


def _jobs(vocab: pc.bench_run.BenchVocab, source: str = "tiny") -> list[pc.SchemaJob]:
    cases = [
        pc.conformance.Case(name, schema, [(data, valid, "") for data, valid in tests])
        for name, schema, tests in CASES
    ]
    return pc.make_jobs(source, cases, vocab.tokenize, canonical=None)


def _engine(name: str, vocab: pc.bench_run.BenchVocab) -> pc.bench_run.Engine:
    engine = pc.make_engine(name)
    try:
        engine.setup(vocab)
    except pc.bench_run.Unavailable as exc:
        pytest.skip(f"{name} unavailable: {exc}")
    return engine


def test_gramkiln_verdicts_match_the_labels(byte_vocab: pc.bench_run.BenchVocab) -> None:
    engine = _engine("gramkiln", byte_vocab)
    for job in _jobs(byte_vocab):
        outcome = pc.run_schema(engine, byte_vocab, job, budget_s=60)
        assert outcome.compiled, outcome.note
        expected = [pc.ACCEPTED if i.valid else pc.REJECTED for i in job.instances]
        assert outcome.verdicts == expected, job.name
        assert outcome.second_opinion == [None] * len(job.instances)


def test_tokens_outside_the_grammar_are_rejected_not_raised(
    byte_vocab: pc.bench_run.BenchVocab,
) -> None:
    engine = _engine("gramkiln", byte_vocab)
    compiled = engine.compile(pc.bench_run.Workload("boolean", schema=BOOLEAN))
    buffer, row = engine.new_bitmask(byte_vocab)
    tokens = byte_vocab.tokenize(b"true")
    assert pc.force_decode(engine, compiled, tokens, buffer, row, byte_vocab.eos)
    # A prefix of a valid instance is not accepted: the final state must allow EOS.
    assert not pc.force_decode(engine, compiled, tokens[:3], buffer, row, byte_vocab.eos)
    assert not pc.force_decode(engine, compiled, [*tokens, tokens[0]], buffer, row, 256)
    assert pc.accepts_bytes(engine, compiled, "false", buffer, row, byte_vocab.eos) is True
    assert pc.accepts_bytes(engine, compiled, "fals", buffer, row, byte_vocab.eos) is False


def test_tally_counts_fn_fp_and_the_fair_subset(byte_vocab: pc.bench_run.BenchVocab) -> None:
    jobs = _jobs(byte_vocab)
    labels = [[i.valid for i in job.instances] for job in jobs]

    def perfect(valid: list[bool]) -> pc.EngineOutcome:
        verdicts = [pc.ACCEPTED if v else pc.REJECTED for v in valid]
        return pc.EngineOutcome(
            True, compile_ms=5.0, verdicts=verdicts, second_opinion=[None] * len(valid)
        )

    # "lax" accepts everything of "small int" (2 valid, 3 invalid: 3 FP), rejects the first
    # valid person (a tokenization artefact per its second opinion), and did not compile
    # "boolean"; its last person instance was skipped.
    lax = [pc.EngineOutcome(False, "compile timeout (30 s)")]
    lax.append(
        pc.EngineOutcome(
            True, compile_ms=7.0, verdicts=[pc.ACCEPTED] * 5, second_opinion=[None] * 5
        )
    )
    person = perfect(labels[2])
    person.verdicts[0] = pc.REJECTED
    person.second_opinion[0] = True
    person.verdicts[4] = pc.SKIPPED
    lax.append(person)
    outcomes = {"exact": [perfect(v) for v in labels], "lax": lax}

    every = pc.tally_outcomes(jobs, outcomes)["tiny"]
    assert (every["exact"].schemas, every["exact"].compiled) == (3, 3)
    assert (every["exact"].valid_accepted, every["exact"].valid_rejected) == (6, 0)
    assert (every["exact"].invalid_rejected, every["exact"].invalid_accepted) == (8, 0)
    lax_tally = every["lax"]
    assert (lax_tally.compiled, lax_tally.timeouts) == (2, 1)
    assert (lax_tally.valid_accepted, lax_tally.valid_rejected) == (3, 1)
    assert lax_tally.tokenization_artefacts == 1
    assert (lax_tally.invalid_rejected, lax_tally.invalid_accepted) == (2, 3)
    assert lax_tally.skipped == 1
    assert lax_tally.fp_percent() == "60.0%"

    # The fair subset drops "boolean" (lax did not compile it) and the instance lax skipped.
    fair = pc.tally_outcomes(jobs, outcomes, only_common=True)["tiny"]
    assert fair["exact"].schemas == fair["lax"].schemas == 2
    assert fair["exact"].invalid_rejected == 5  # 3 small-int + 2 person (third one skipped)
    assert (fair["lax"].invalid_accepted, fair["lax"].invalid_rejected) == (3, 2)
    assert fair["lax"].skipped == 0

    table = pc.format_table(pc.tally_outcomes(jobs, outcomes), "title")
    assert "| tiny | lax | 3 | 2 (1 t/o) | 3 / 1 (1) | 2 / 3 | 60.0% | 1 | 7 |" in table
    failures = pc.failure_lines(jobs, outcomes, limit=10)
    assert sum(line.startswith("lax FP ") for line in failures) == 3
    assert sum(line.startswith("lax FN(tok) ") for line in failures) == 1


def test_saved_verdicts_round_trip(byte_vocab: pc.bench_run.BenchVocab) -> None:
    jobs = _jobs(byte_vocab)
    outcomes = {
        "exact": [
            pc.EngineOutcome(
                True,
                compile_ms=1.0,
                verdicts=[pc.ACCEPTED] * len(j.instances),
                second_opinion=[None] * len(j.instances),
            )
            for j in jobs
        ]
    }
    record = json.loads(json.dumps(pc.outcomes_record(jobs, outcomes, {"exact": "1"}, [])))
    reused, versions = pc.reused_outcomes(record, jobs)
    assert reused == outcomes and versions == {"exact": "1"}
    with pytest.raises(ValueError, match="other schemas"):
        pc.reused_outcomes(record, jobs[:2])


def test_worker_process_runs_schemas_and_survives_a_timeout(
    byte_vocab: pc.bench_run.BenchVocab,
) -> None:
    jobs = _jobs(byte_vocab)
    worker = pc.EngineWorker("gramkiln", "byte", max_rss_bytes=8 * 2**30)
    try:
        outcome = worker.run(jobs[2], compile_timeout_s=120, budget_s=60)
        assert outcome.compiled and outcome.verdicts == [
            pc.ACCEPTED,
            pc.ACCEPTED,
            pc.REJECTED,
            pc.REJECTED,
            pc.REJECTED,
        ]
        first_process = worker.process
        # A compile timeout of zero leaves no time: the worker is killed, the schema is not
        # compiled...
        timed_out = worker.run(jobs[0], compile_timeout_s=0, budget_s=60)
        assert not timed_out.compiled and "compile timeout" in timed_out.note
        assert worker.process is None and not first_process.is_alive()
        # ...and the next schema gets a fresh worker.
        again = worker.run(jobs[1], compile_timeout_s=120, budget_s=60)
        assert again.compiled and again.verdicts.count(pc.ACCEPTED) == 2
    finally:
        worker.stop()


def test_an_unknown_engine_is_reported_unavailable() -> None:
    worker = pc.EngineWorker("no-such-engine", "byte", max_rss_bytes=2**30)
    outcome = worker.run(pc.SchemaJob("tiny", "x", BOOLEAN, []), 10, 10)
    assert not outcome.compiled and outcome.note.startswith("unavailable: KeyError")


PEER_MODULES = {
    "xgrammar": "xgrammar",
    "llguidance": "llguidance",
    "glrmask": "glrmask",
    "outlines": "outlines_core",
}


@pytest.mark.parametrize("peer", sorted(PEER_MODULES))
def test_peer_adapter_decides_tiny_schemas(peer: str, byte_vocab: pc.bench_run.BenchVocab) -> None:
    if importlib.util.find_spec(PEER_MODULES[peer]) is None:
        pytest.skip(f"{peer} is not installed (pip install -r bench/requirements.txt)")
    engine = _engine(peer, byte_vocab)
    for job in _jobs(byte_vocab):
        outcome = pc.run_schema(engine, byte_vocab, job, budget_s=60)
        if not outcome.compiled:
            continue  # a peer may refuse a keyword; that is what "not compiled" counts
        # Byte tokens are canonical for every engine: no tokenization artefacts possible, so
        # every peer must accept the valid instances of these plain schemas.
        for instance, verdict in zip(job.instances, outcome.verdicts, strict=True):
            if instance.valid:
                assert verdict == pc.ACCEPTED, (peer, job.name, instance.text)


def test_a_rejection_the_bytes_disprove_is_a_tokenization_artefact(
    byte_vocab: pc.bench_run.BenchVocab,
) -> None:
    # The token sequence spells "tru" while the text is "true": the forced tokens are
    # rejected (no EOS after "tru"), the byte-level second opinion accepts the text.
    instance = pc.Instance("true", True, byte_vocab.tokenize(b"tru"), canonical_ids=None)
    job = pc.SchemaJob("tiny", "boolean", BOOLEAN, [instance])
    outcome = pc.run_schema(_engine("gramkiln", byte_vocab), byte_vocab, job, budget_s=60)
    assert outcome.verdicts == [pc.REJECTED] and outcome.second_opinion == [True]
    tally = pc.tally_outcomes([job], {"gramkiln": [outcome]})["tiny"]["gramkiln"]
    assert (tally.valid_rejected, tally.tokenization_artefacts) == (1, 1)
