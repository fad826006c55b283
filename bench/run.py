"""Benchmark gramkiln against the reference engines in one process run.

Usage (from the repository root)::

    python bench/run.py                          # all workloads, all installed engines
    python bench/run.py --engines gramkiln,llguidance --workloads json --compile-repeats 5
    python bench/run.py --workloads maskbench    # the 34 fixed MaskBench schemas only
    python bench/run.py --json-out /tmp/bench.json
    python bench/run.py --decode-repeats 5       # per call, the fastest of 5 decodes

Every engine gets the same vocabulary (Llama 3, 128,256 ids, from the quicktok-v1 package;
`--vocab` takes any `gramkiln.runtime.vocab.load_vocab` spec) and force-decodes the same
valid instances token by token. Per engine and workload it prints compile ms (p50/max over
`--compile-repeats` fresh compiles), for gramkiln the artifact size and load ms, the mask
time per token (p50/p99/max, microseconds), the mean commit time, and how many forced tokens
the engine's own mask refused (should be 0: a refusal means the engine considers a valid
instance invalid). Then the ratio of gramkiln to each peer (below 1: gramkiln is faster).

Engines that are not installed, or cannot take a workload, are skipped with a note; see
bench/requirements.txt. Instances are tokenized with the real Llama 3 BPE (quicktok) when
available, else greedily (longest token first) over the vocabulary. Timings are wall-clock
on this machine; tests never assert them.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import hashlib
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
LARK_WORKLOADS = ("json", "clike", "toolcall")
# The standard JSON Schema workload: this many MaskBench schemas, always the same ones.
MASKBENCH_WORKLOAD = "maskbench"
MASKBENCH_SAMPLE = 34
# outlines-core: longest regex (from a JSON schema) that is indexed; longer ones fail fast.
OUTLINES_MAX_REGEX_CHARS = 200_000
# outlines-core: each index is first built in a child process with these limits.
OUTLINES_PROBE_SECONDS = 120
OUTLINES_PROBE_BYTES = 6 << 30
MASKBENCH_DIR = BENCH_DIR.parent.parent / "shared" / "data" / "maskbench"
ENGINE_NAMES = ("gramkiln", "gramkiln-lazy", "xgrammar", "llguidance", "glrmask", "outlines-core")


# --------------------------------------------------------------------------------------------
# workloads


@dataclass
class Workload:
    """One grammar plus the valid instances that are force-decoded through it."""

    name: str
    lark: str | None = None  # Lark source (gramkiln, llguidance, glrmask)
    gbnf: str | None = None  # the same language in GBNF (xgrammar)
    schema: Any = None  # JSON Schema (every engine that supports it)
    instances: list[bytes] = field(default_factory=list)


def lark_workloads(names: Iterable[str]) -> list[Workload]:
    """The Lark workloads from bench/grammars and bench/instances."""
    workloads = []
    for name in names:
        grammar_dir = BENCH_DIR / "grammars"
        instances = sorted((BENCH_DIR / "instances" / name).glob("*.txt"))
        gbnf_path = grammar_dir / f"{name}.gbnf"
        workloads.append(
            Workload(
                name=name,
                lark=(grammar_dir / f"{name}.lark").read_text(encoding="utf-8"),
                gbnf=gbnf_path.read_text(encoding="utf-8") if gbnf_path.exists() else None,
                # The newline that ends each file is not part of the instance: some engines
                # (llguidance) allow %ignore only between lexemes, not after the last one.
                instances=[path.read_bytes().removesuffix(b"\n") for path in instances],
            )
        )
    return workloads


def maskbench_workloads(count: int, seed: int = 0) -> list[Workload]:
    """A fixed sample of `count` MaskBench schemas, each with its valid instances.

    This is the hook for the JSON Schema workloads: the sample depends only on `count` and
    `seed` (the files are read in sorted order and shuffled with a seeded generator), so runs
    compare like with like. Instances are serialized with `json.dumps` (default separators).
    """
    if count <= 0:
        return []
    if not MASKBENCH_DIR.is_dir():
        print(f"note: {MASKBENCH_DIR} not found; no JSON Schema workloads", file=sys.stderr)
        return []
    candidates: list[Workload] = []
    for path in sorted(MASKBENCH_DIR.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                entry = json.loads(line)
                valid = [t["data"] for t in entry.get("tests", []) if t.get("valid")]
                if not valid:
                    continue
                candidates.append(
                    Workload(
                        name=entry["id"],
                        schema=entry["schema"],
                        instances=[json.dumps(d).encode("utf-8") for d in valid[:2]],
                    )
                )
    random.Random(seed).shuffle(candidates)
    return candidates[:count]


# --------------------------------------------------------------------------------------------
# vocabulary and tokenization


@dataclass
class BenchVocab:
    """The shared vocabulary in the forms the engines want, plus a tokenizer for instances."""

    gk_vocab: Any  # gramkiln.runtime.vocab.Vocab
    tokenize: Callable[[bytes], list[int]]
    tokenizer_name: str

    @property
    def size(self) -> int:
        return int(self.gk_vocab.vocab_size)

    @property
    def eos(self) -> int:
        return int(self.gk_vocab.eos_ids[0]) if self.gk_vocab.eos_ids else -1


def load_bench_vocab(spec: str) -> BenchVocab:
    """Load the vocabulary and pick the best available tokenizer for the instances."""
    from gramkiln.runtime.vocab import load_vocab

    vocab = load_vocab(spec)
    if spec == "llama3":
        try:
            import quicktok

            encoding = quicktok.get_encoding("llama3")
            probe = b'{"a": [1, 2.5e-3], "b": "\\u00e9\\n"} int x = y + 1;'
            if vocab.decode(encoding.encode(probe.decode())) == probe:
                return BenchVocab(
                    vocab, lambda data: list(encoding.encode(data.decode("utf-8"))), "llama3 BPE"
                )
        except (ImportError, RuntimeError, UnicodeDecodeError):
            pass
    return BenchVocab(vocab, greedy_tokenizer(vocab), "greedy longest-match")


def greedy_tokenizer(vocab: Any) -> Callable[[bytes], list[int]]:
    """Longest-match tokenization over the non-special tokens (fallback when no BPE)."""
    by_bytes: dict[bytes, int] = {}
    for token_id, token in enumerate(vocab.tokens):
        if token and token_id not in vocab.special_ids:
            by_bytes.setdefault(token, token_id)
    longest = max(len(t) for t in by_bytes)

    def tokenize(data: bytes) -> list[int]:
        ids = []
        position = 0
        while position < len(data):
            for length in range(min(longest, len(data) - position), 0, -1):
                token_id = by_bytes.get(data[position : position + length])
                if token_id is not None:
                    ids.append(token_id)
                    position += length
                    break
            else:
                raise ValueError(f"byte {data[position]:#x} has no token in the vocabulary")
        return ids

    return tokenize


# --------------------------------------------------------------------------------------------
# engines


class Unavailable(Exception):
    """An engine is not installed or cannot take a workload (the message says why)."""


class Engine:
    """Adapter interface: compile a workload, start a matcher, fill masks, commit tokens."""

    name = "engine"

    def setup(self, vocab: BenchVocab) -> None:
        """One-time per-vocabulary preparation (not part of compile time)."""

    def precheck(self, workload: Workload) -> None:
        """Before the timed compiles: raise when compiling would not finish in reasonable
        time or memory (default: nothing to check)."""

    def compile(self, workload: Workload) -> Any:
        """Compile the workload's grammar; raise Unavailable when unsupported."""
        raise NotImplementedError

    def start(self, compiled: Any) -> Any:
        """A fresh matcher for one instance."""
        raise NotImplementedError

    def new_bitmask(self, vocab: BenchVocab) -> tuple[Any, np.ndarray]:
        """The buffer the engine fills, and a numpy int32 view of its first row."""
        words = (vocab.size + 31) // 32
        buffer = np.zeros((1, words), dtype=np.int32)
        return buffer, buffer[0]

    def fill(self, matcher: Any, bitmask: Any) -> None:
        """Write the next-token mask into `bitmask`."""
        raise NotImplementedError

    def commit(self, matcher: Any, token: int) -> bool:
        """Advance by one token; False when the engine refuses it."""
        raise NotImplementedError

    def eos_in_mask(self) -> bool:
        """Whether the engine's mask includes EOS where the text is complete."""
        return True

    def artifact_stats(self, compiled: Any) -> dict[str, float] | None:
        """Artifact size (bytes) and load time (ms), for engines with artifacts."""
        return None

    def prepare(self, compiled: Any) -> tuple[Any, dict[str, float]]:
        """What the decoding loop uses, and figures about readying it (default: the compiled
        grammar as it is, nothing to report)."""
        return compiled, {}


class GramkilnEngine(Engine):
    """Decodes from the loaded artifact after its prewarm has finished; the prewarm's wall
    time is reported next to the load time (compile + load + prewarm is the time to a warm
    matcher)."""

    name = "gramkiln"
    prewarm = True

    def setup(self, vocab: BenchVocab) -> None:
        try:
            from gramkiln.runtime import compiled as compiled_module

            import gramkiln
        except ImportError as exc:
            raise Unavailable(f"runtime not built ({exc})") from exc
        self.gk = gramkiln
        self.compiled_module = compiled_module
        self.vocab = vocab

    def compile(self, workload: Workload) -> Any:
        if workload.lark is not None:
            grammar = self.gk.Grammar.from_lark(workload.lark)
        else:
            if not hasattr(self.gk.Grammar, "from_json_schema"):
                raise Unavailable("no JSON Schema front end")
            try:
                grammar = self.gk.Grammar.from_json_schema(workload.schema)
            except ImportError as exc:
                raise Unavailable(f"JSON Schema front end not built ({exc})") from exc
        return grammar.compile(self.vocab.gk_vocab)

    def start(self, compiled: Any) -> Any:
        return compiled.matcher()

    def new_bitmask(self, vocab: BenchVocab) -> tuple[Any, np.ndarray]:
        allocate = getattr(self.gk, "allocate_token_bitmask", None) or getattr(
            self.compiled_module, "allocate_token_bitmask", None
        )
        if allocate is None:
            return super().new_bitmask(vocab)
        buffer = allocate(1, vocab.size)
        return buffer, np.asarray(buffer)[0]

    def fill(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask, 0)

    def commit(self, matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token))

    def artifact_stats(self, compiled: Any) -> dict[str, float]:
        data = compiled.to_bytes()
        loads = []
        for _ in range(5):
            started = time.perf_counter()
            # The load alone: the prewarm is timed separately (prepare).
            self.compiled_module.CompiledGrammar.load(
                data, vocab=self.vocab.gk_vocab, prewarm=False
            )
            loads.append((time.perf_counter() - started) * 1000)
        return {"artifact_bytes": len(data), "load_ms": statistics.median(loads)}

    def prepare(self, compiled: Any) -> tuple[Any, dict[str, float]]:
        loaded = self.compiled_module.CompiledGrammar.load(
            compiled.to_bytes(), vocab=self.vocab.gk_vocab, prewarm=False
        )
        if not self.prewarm:
            return loaded, {}
        started = time.perf_counter()
        loaded.prewarm(wait=True)
        return loaded, {"prewarm_ms": (time.perf_counter() - started) * 1000}


class GramkilnLazyEngine(GramkilnEngine):
    """gramkiln with no prewarm: every cache entry is built by the fills that need it (the
    first masks after a load that nobody waited for)."""

    name = "gramkiln-lazy"
    prewarm = False

    def artifact_stats(self, compiled: Any) -> None:
        return None


class XGrammarEngine(Engine):
    name = "xgrammar"

    def setup(self, vocab: BenchVocab) -> None:
        try:
            import xgrammar
        except ImportError as exc:
            raise Unavailable(f"not installed ({exc.name})") from exc
        self.xgr = xgrammar
        # xgrammar treats empty tokens as special (never text), which is what special and
        # padding ids must be here.
        encoded = [
            b"" if i in vocab.gk_vocab.special_ids else token
            for i, token in enumerate(vocab.gk_vocab.tokens)
        ]
        self.info = xgrammar.TokenizerInfo(
            encoded,
            xgrammar.VocabType.RAW,
            vocab_size=vocab.size,
            stop_token_ids=list(vocab.gk_vocab.eos_ids),
        )

    def compile(self, workload: Workload) -> Any:
        # A fresh compiler per compile with the cache off: every repeat does the full work.
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        if workload.gbnf is not None:
            return compiler.compile_grammar(workload.gbnf)
        if workload.schema is not None:
            return compiler.compile_json_schema(json.dumps(workload.schema), any_whitespace=True)
        raise Unavailable("takes GBNF or JSON Schema, not Lark (no .gbnf twin)")

    def start(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def new_bitmask(self, vocab: BenchVocab) -> tuple[Any, np.ndarray]:
        buffer = self.xgr.allocate_token_bitmask(1, vocab.size)
        return buffer, buffer.numpy()[0]

    def fill(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask, 0)

    def commit(self, matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token))


class LLGuidanceEngine(Engine):
    name = "llguidance"

    def setup(self, vocab: BenchVocab) -> None:
        try:
            import llguidance
            import llguidance.numpy as llg_numpy
        except ImportError as exc:
            raise Unavailable(f"not installed ({exc.name})") from exc
        self.llg = llguidance
        self.fill_bitmask = llg_numpy.fill_next_token_bitmask
        gk_vocab = vocab.gk_vocab

        class TokenSource:
            """What llguidance.TokenizerWrapper reads: tokens, EOS/BOS ids and an encoder."""

            eos_token_id = vocab.eos
            bos_token_id = None
            # llguidance marks special tokens with a leading 0xFF byte (never valid UTF-8).
            tokens = [
                b"\xff" + t if i in gk_vocab.special_ids else t
                for i, t in enumerate(gk_vocab.tokens)
            ]
            special_token_ids = sorted(gk_vocab.special_ids)

            def __call__(self, text: bytes | str) -> list[int]:
                data = text.encode("utf-8") if isinstance(text, str) else text
                return vocab.tokenize(data)

        wrapper = llguidance.TokenizerWrapper(TokenSource())
        self.tokenizer = llguidance.LLTokenizer(
            wrapper, n_vocab=vocab.size, eos_token=list(gk_vocab.eos_ids) or None
        )

    def compile(self, workload: Workload) -> Any:
        if workload.lark is not None:
            grammar = workload.lark
        else:
            grammar = self.llg.LLMatcher.grammar_from_json_schema(
                workload.schema, defaults={"whitespace_flexible": True}
            )
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise Unavailable(f"grammar error: {matcher.get_error()}")
        return grammar

    def start(self, compiled: Any) -> Any:
        return self.llg.LLMatcher(self.tokenizer, compiled, log_level=0)

    def fill(self, matcher: Any, bitmask: Any) -> None:
        self.fill_bitmask(matcher, bitmask, 0)

    def commit(self, matcher: Any, token: int) -> bool:
        return bool(matcher.consume_token(token))


class GLRMaskEngine(Engine):
    name = "glrmask"

    def setup(self, vocab: BenchVocab) -> None:
        try:
            import glrmask
        except ImportError as exc:
            raise Unavailable(f"not installed ({exc.name})") from exc
        self.glrmask = glrmask
        special = vocab.gk_vocab.special_ids
        self.vocab = glrmask.Vocab.from_id_to_bytes(
            {i: t for i, t in enumerate(vocab.gk_vocab.tokens) if t and i not in special}
        )

    def compile(self, workload: Workload) -> Any:
        if workload.lark is not None:
            grammar = self.glrmask.Grammar.from_lark(workload.lark)
        else:
            grammar = self.glrmask.Grammar.from_json_schema(workload.schema)
        return grammar.compile(self.vocab)

    def start(self, compiled: Any) -> Any:
        return compiled.start()

    def fill(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_mask(bitmask[0])

    def commit(self, matcher: Any, token: int) -> bool:
        return bool(matcher.commit_token(token))

    def eos_in_mask(self) -> bool:
        return False  # EOS is not part of a glrmask vocabulary; completion is is_accepting()


def _probe_outlines_index(engine: OutlinesCoreEngine, regex: str) -> None:
    """Child process body: build the index under an address-space limit (exit 0 on success)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (OUTLINES_PROBE_BYTES, OUTLINES_PROBE_BYTES))
    engine.oc.Index(regex, engine.vocabulary)


class OutlinesCoreEngine(Engine):
    name = "outlines-core"

    def setup(self, vocab: BenchVocab) -> None:
        try:
            import outlines_core
        except ImportError as exc:
            raise Unavailable(f"not installed ({exc.name})") from exc
        self.oc = outlines_core
        by_bytes: dict[bytes, list[int]] = {}
        eos = set(vocab.gk_vocab.eos_ids)
        for token_id, token in enumerate(vocab.gk_vocab.tokens):
            if token and token_id not in vocab.gk_vocab.special_ids and token_id not in eos:
                by_bytes.setdefault(token, []).append(token_id)
        self.vocabulary = outlines_core.Vocabulary(vocab.eos, by_bytes)

    def _regex(self, workload: Workload) -> str:
        if workload.schema is None:
            raise Unavailable("regex/JSON Schema only (no context-free grammars)")
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(workload.schema))
        if len(regex) > OUTLINES_MAX_REGEX_CHARS:
            # Indexing a multi-megabyte regex against 128k tokens runs for many minutes (the
            # run never finishes); it is reported as a compile failure instead.
            raise RuntimeError(f"regex of {len(regex):,} characters: index not built")
        return regex

    def precheck(self, workload: Workload) -> None:
        # Some short regexes still blow up the index (a 12,886-character one from a MaskBench
        # schema grew past 9 GB in 16 minutes), and the build cannot be interrupted in-process:
        # build it once in a forked child with a time and memory limit first.
        regex = self._regex(workload)
        context = multiprocessing.get_context("fork")
        child = context.Process(target=_probe_outlines_index, args=(self, regex), daemon=True)
        child.start()
        child.join(OUTLINES_PROBE_SECONDS)
        if child.is_alive():
            child.kill()
            child.join()
            raise RuntimeError(f"index not built within {OUTLINES_PROBE_SECONDS} s (probe)")
        if child.exitcode != 0:
            raise RuntimeError(
                f"index build failed or passed {OUTLINES_PROBE_BYTES >> 30} GiB (probe)"
            )

    def compile(self, workload: Workload) -> Any:
        return self.oc.Index(self._regex(workload), self.vocabulary)

    def start(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled)

    def fill(self, matcher: Any, bitmask: Any) -> None:
        row = bitmask[0]
        matcher.write_mask_into(row.ctypes.data, row.size, row.itemsize)

    def commit(self, matcher: Any, token: int) -> bool:
        try:
            matcher.advance(token, False)
        except ValueError:
            return False
        return True


ENGINES: dict[str, type[Engine]] = {
    "gramkiln": GramkilnEngine,
    "gramkiln-lazy": GramkilnLazyEngine,
    "xgrammar": XGrammarEngine,
    "llguidance": LLGuidanceEngine,
    "glrmask": GLRMaskEngine,
    "outlines-core": OutlinesCoreEngine,
}


# --------------------------------------------------------------------------------------------
# measurement


@dataclass
class Result:
    """What one engine measured on one workload (times in ms / us as named)."""

    engine: str
    workload: str
    note: str | None = None
    compile_ms: list[float] = field(default_factory=list)
    mask_us: list[float] = field(default_factory=list)
    commit_us: list[float] = field(default_factory=list)
    refused: int = 0
    tokens: int = 0
    artifact: dict[str, float] | None = None
    # Per instance, per position: a digest of the mask (EOS bits cleared, since not every
    # engine puts EOS in its mask) and the number of allowed tokens. Not part of the timing.
    mask_digests: list[list[bytes]] = field(default_factory=list)
    allowed_counts: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Medians and tails, the figures the table prints."""
        if self.note is not None:
            return {"engine": self.engine, "workload": self.workload, "note": self.note}
        masks = np.array(self.mask_us) if self.mask_us else np.array([np.nan])
        return {
            "engine": self.engine,
            "workload": self.workload,
            "compile_ms_p50": statistics.median(self.compile_ms),
            "compile_ms_max": max(self.compile_ms),
            "mask_us_p50": float(np.percentile(masks, 50)),
            "mask_us_p99": float(np.percentile(masks, 99)),
            "mask_us_max": float(masks.max()),
            "commit_us_mean": statistics.fmean(self.commit_us) if self.commit_us else float("nan"),
            "masks": len(self.mask_us),
            "tokens": self.tokens,
            "refused": self.refused,
            "allowed_mean": statistics.fmean(self.allowed_counts) if self.allowed_counts else 0.0,
            **(self.artifact or {}),
        }


def mask_fingerprint(row: np.ndarray, eos_ids: Sequence[int], vocab_size: int) -> tuple[bytes, int]:
    """A digest of the mask row with EOS bits cleared, and the number of allowed tokens.

    Bits past `vocab_size` in the last word are ignored: engines differ in what they leave
    there (xgrammar sets them).
    """
    words = row.view(np.uint32).copy()
    if vocab_size & 31:
        words[vocab_size >> 5] &= np.uint32((1 << (vocab_size & 31)) - 1)
    for token in eos_ids:
        words[token >> 5] &= np.uint32(~(1 << (token & 31)) & 0xFFFFFFFF)
    allowed = int(np.unpackbits(words.view(np.uint8)).sum())
    return hashlib.blake2b(words.tobytes(), digest_size=8).digest(), allowed


def bit_is_set(row: np.ndarray, token: int) -> bool:
    """Whether `token`'s bit is set in an int32 bitmask row."""
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)


def decode_all(
    engine: Engine, compiled: Any, vocab: BenchVocab, tokenized: list[list[int]], into: Result
) -> None:
    """Force-decode every instance once, timing each fill and commit into `into` (which also
    gets the mask digests, allowed counts and refusals)."""
    buffer, row = engine.new_bitmask(vocab)
    clock = time.perf_counter_ns
    eos_ids = list(vocab.gk_vocab.eos_ids)
    gc.disable()
    try:
        for ids in tokenized:
            matcher = engine.start(compiled)
            digests: list[bytes] = []
            into.mask_digests.append(digests)
            for token in ids:
                started = clock()
                engine.fill(matcher, buffer)
                into.mask_us.append((clock() - started) / 1000)
                digest, allowed = mask_fingerprint(row, eos_ids, vocab.size)
                digests.append(digest)
                into.allowed_counts.append(allowed)
                if not bit_is_set(row, token):
                    into.refused += 1
                started = clock()
                ok = engine.commit(matcher, token)
                into.commit_us.append((clock() - started) / 1000)
                into.tokens += 1
                if not ok:
                    into.refused += 1
                    break
            else:
                started = clock()
                engine.fill(matcher, buffer)
                into.mask_us.append((clock() - started) / 1000)
                digests.append(mask_fingerprint(row, eos_ids, vocab.size)[0])
                if engine.eos_in_mask() and vocab.eos >= 0 and not bit_is_set(row, vocab.eos):
                    into.refused += 1
    finally:
        gc.enable()


def measure(
    engine: Engine,
    workload: Workload,
    vocab: BenchVocab,
    tokenized: list[list[int]],
    compile_repeats: int,
    decode_repeats: int = 1,
) -> Result:
    """Compile `compile_repeats` times, then force-decode every instance, timing each call.

    With `decode_repeats` > 1 the decode is repeated from a fresh compile (and, for gramkiln,
    a fresh load and prewarm), so every repeat starts as cold as the first, and each fill and
    commit keeps its fastest time over the repeats: on a shared, noisy machine that is the
    estimate of what the call itself costs (the same for every engine). Digests and refusals
    are the first decode's.
    """
    result = Result(engine.name, workload.name)
    compiled = None
    try:
        engine.precheck(workload)
        for _ in range(compile_repeats):
            started = time.perf_counter()
            compiled = engine.compile(workload)
            result.compile_ms.append((time.perf_counter() - started) * 1000)
    except Unavailable as exc:
        result.note = str(exc)
        return result
    except Exception as exc:  # noqa: BLE001 - a peer's failure is a finding, not a crash
        result.note = f"compile failed: {type(exc).__name__}: {str(exc)[:160]}"
        return result
    result.artifact = engine.artifact_stats(compiled)
    try:
        compiled, readiness = engine.prepare(compiled)
    except Exception as exc:  # noqa: BLE001 - report and keep benchmarking the others
        result.note = f"prepare failed: {type(exc).__name__}: {str(exc)[:160]}"
        return result
    if readiness:
        result.artifact = {**(result.artifact or {}), **readiness}
    try:
        decode_all(engine, compiled, vocab, tokenized, result)
        for _ in range(decode_repeats - 1):
            again, _readiness = engine.prepare(engine.compile(workload))
            repeat = Result(engine.name, workload.name)
            decode_all(engine, again, vocab, tokenized, repeat)
            if (len(repeat.mask_us), len(repeat.commit_us)) != (
                len(result.mask_us),
                len(result.commit_us),
            ):
                break  # a repeat that decoded differently times something else
            pairs = zip(result.mask_us, repeat.mask_us, strict=True)
            result.mask_us = [min(a, b) for a, b in pairs]
            pairs = zip(result.commit_us, repeat.commit_us, strict=True)
            result.commit_us = [min(a, b) for a, b in pairs]
    except Exception as exc:  # noqa: BLE001 - report and keep benchmarking the others
        result.note = f"decoding failed: {type(exc).__name__}: {str(exc)[:160]}"
    return result


# --------------------------------------------------------------------------------------------
# reporting


def print_table(rows: list[dict[str, Any]], out: Any = sys.stdout) -> None:
    """One line per engine and workload."""
    head = (
        f"{'workload':<34} {'engine':<13} {'compile ms p50/max':>19} {'mask us p50':>11} "
        f"{'p99':>8} {'max':>9} {'commit us':>9} {'refused':>7}  artifact"
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    for row in rows:
        name = row["workload"][:34]
        if "note" in row:
            print(f"{name:<34} {row['engine']:<13} skipped: {row['note']}", file=out)
            continue
        artifact = ""
        if "artifact_bytes" in row:
            artifact = f"{row['artifact_bytes'] / 1024:,.0f} KiB, load {row['load_ms']:.2f} ms"
        if "prewarm_ms" in row:
            artifact += f", prewarm {row['prewarm_ms']:.1f} ms"
            if "prewarm_ms_max" in row:
                artifact += f" (max {row['prewarm_ms_max']:.1f})"
        compile_text = f"{row['compile_ms_p50']:.1f}/{row['compile_ms_max']:.1f}"
        print(
            f"{name:<34} {row['engine']:<13} {compile_text:>19} {row['mask_us_p50']:>11.1f} "
            f"{row['mask_us_p99']:>8.1f} {row['mask_us_max']:>9.1f} "
            f"{row['commit_us_mean']:>9.1f} {row['refused']:>7}  {artifact}",
            file=out,
        )


def agreement(reference: list[list[bytes]], other: list[list[bytes]]) -> tuple[int, int]:
    """(equal, compared) mask positions between two engines over the common prefixes."""
    equal = compared = 0
    for ours, theirs in zip(reference, other, strict=False):
        for a, b in zip(ours, theirs, strict=False):
            compared += 1
            equal += a == b
    return equal, compared


def print_agreement(rows: list[dict[str, Any]], out: Any = sys.stdout) -> None:
    """How often each peer's mask equals gramkiln's (EOS aside), and mean allowed tokens.

    Engines differ legitimately where their semantics differ (gramkiln lexes exactly, most
    peers lex greedily), so this is a map of differences to look at, not a score.
    """
    print("\nmask agreement with gramkiln (EOS bits aside) and mean allowed tokens", file=out)
    for row in rows:
        if "note" in row:
            continue
        agree = row.get("agree")
        text = "reference" if row["engine"] == "gramkiln" else "n/a"
        if agree is not None:
            equal, compared = agree
            text = f"{equal}/{compared} positions equal" if compared else "nothing compared"
        print(
            f"  {row['workload'][:34]:<34} {row['engine']:<13} {text:<28} "
            f"allowed mean {row['allowed_mean']:,.0f}",
            file=out,
        )


def print_ratios(rows: list[dict[str, Any]], out: Any = sys.stdout) -> None:
    """gramkiln / peer for mask p50, p99 and compile p50 (below 1: gramkiln is faster)."""
    by_key = {(r["workload"], r["engine"]): r for r in rows if "note" not in r}
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    print("\nratio gramkiln / peer (below 1 = gramkiln faster)", file=out)
    printed = False
    for workload in workloads:
        ours = by_key.get((workload, "gramkiln"))
        if ours is None:
            continue
        for engine in ENGINE_NAMES[1:]:
            peer = by_key.get((workload, engine))
            if peer is None:
                continue
            printed = True
            print(
                f"  {workload[:34]:<34} vs {engine:<13} mask p50 {_ratio(ours, peer, 'mask_us_p50')}"
                f"  p99 {_ratio(ours, peer, 'mask_us_p99')}"
                f"  max {_ratio(ours, peer, 'mask_us_max')}"
                f"  compile p50 {_ratio(ours, peer, 'compile_ms_p50')}",
                file=out,
            )
    if not printed:
        print("  (none: gramkiln or every peer was unavailable)", file=out)


def _ratio(ours: dict[str, Any], peer: dict[str, Any], key: str) -> str:
    if not peer[key]:
        return "   n/a"
    return f"{ours[key] / peer[key]:6.2f}x"


def aggregate(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Medians over many workloads (used for the MaskBench sample), one row per engine."""
    out = []
    for engine in ENGINE_NAMES:
        mine = [r for r in rows if r["engine"] == engine and "note" not in r]
        if not mine:
            continue
        out.append(
            {
                "engine": engine,
                "workload": f"{name} ({len(mine)} compiled)",
                "compile_ms_p50": statistics.median(r["compile_ms_p50"] for r in mine),
                "compile_ms_max": max(r["compile_ms_max"] for r in mine),
                "mask_us_p50": statistics.median(r["mask_us_p50"] for r in mine),
                "mask_us_p99": statistics.median(r["mask_us_p99"] for r in mine),
                "mask_us_max": max(r["mask_us_max"] for r in mine),
                "commit_us_mean": statistics.fmean(r["commit_us_mean"] for r in mine),
                "refused": sum(r["refused"] for r in mine),
            }
        )
        for key in ("artifact_bytes", "load_ms", "prewarm_ms"):
            values = [r[key] for r in mine if key in r]
            if len(values) == len(mine):
                out[-1][key] = statistics.median(values)
        if "prewarm_ms" in out[-1]:
            out[-1]["prewarm_ms_max"] = max(r["prewarm_ms"] for r in mine)
    return out


# --------------------------------------------------------------------------------------------
# main


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run every engine on every workload, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", default="llama3", help="vocabulary spec (default llama3)")
    parser.add_argument("--engines", default=",".join(ENGINE_NAMES), help="comma-separated")
    parser.add_argument(
        "--workloads",
        default=",".join((*LARK_WORKLOADS, MASKBENCH_WORKLOAD)),
        help=f"Lark workloads and/or {MASKBENCH_WORKLOAD!r} (the fixed sample of "
        f"{MASKBENCH_SAMPLE} MaskBench schemas)",
    )
    parser.add_argument(
        "--maskbench",
        type=int,
        default=MASKBENCH_SAMPLE,
        metavar="N",
        help=f"sample size of the {MASKBENCH_WORKLOAD!r} workload (default {MASKBENCH_SAMPLE}; "
        "0 = leave it out)",
    )
    parser.add_argument("--compile-repeats", type=int, default=3)
    parser.add_argument(
        "--decode-repeats",
        type=int,
        default=1,
        metavar="N",
        help="decode every workload N times, each from a fresh compile (and load), and keep "
        "each call's fastest time (default 1: one decode; on a noisy machine 5 gives steadier "
        "figures for every engine)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=0,
        help="cut each instance to this many tokens (0 = whole instance)",
    )
    parser.add_argument("--json-out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)

    engines_wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines_wanted if e not in ENGINES]
    workload_names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown += [w for w in workload_names if w not in (*LARK_WORKLOADS, MASKBENCH_WORKLOAD)]
    lark_names = [w for w in workload_names if w in LARK_WORKLOADS]
    if unknown:
        parser.error(f"unknown engine/workload: {', '.join(unknown)}")
    if args.compile_repeats < 1:
        parser.error("--compile-repeats must be >= 1")
    if args.decode_repeats < 1:
        parser.error("--decode-repeats must be >= 1")

    started = time.perf_counter()
    vocab = load_bench_vocab(args.vocab)
    print(
        f"vocabulary {args.vocab}: {vocab.size:,} ids, EOS {list(vocab.gk_vocab.eos_ids)}, "
        f"instances tokenized with {vocab.tokenizer_name} "
        f"(loaded in {time.perf_counter() - started:.1f} s)"
    )
    if args.decode_repeats > 1:
        print(
            f"mask and commit times: each call's fastest of {args.decode_repeats} decodes, "
            "each from a fresh compile"
        )
    lark = lark_workloads(lark_names)
    wants_schemas = MASKBENCH_WORKLOAD in workload_names
    schemas = maskbench_workloads(args.maskbench) if wants_schemas else []
    workloads = lark + schemas
    tokenized = {}
    for workload in workloads:
        ids = [vocab.tokenize(data) for data in workload.instances]
        tokenized[workload.name] = [t[: args.max_tokens] if args.max_tokens else t for t in ids]

    engines: list[Engine] = []
    for name in engines_wanted:
        engine = ENGINES[name]()
        setup_started = time.perf_counter()
        try:
            engine.setup(vocab)
        except Unavailable as exc:
            print(f"{name}: not available ({exc})")
            continue
        except Exception as exc:  # noqa: BLE001 - keep going with the other engines
            print(f"{name}: not available (setup failed: {type(exc).__name__}: {exc})")
            continue
        version = _version(name)
        print(
            f"{name} {version}: ready (vocabulary setup {time.perf_counter() - setup_started:.1f} s)"
        )
        engines.append(engine)

    rows: list[dict[str, Any]] = []
    for workload in workloads:
        tokens = sum(len(t) for t in tokenized[workload.name])
        print(
            f"... {workload.name}: {len(workload.instances)} instances, {tokens} tokens",
            file=sys.stderr,
        )
        reference_digests: list[list[bytes]] | None = None
        for engine in engines:
            result = measure(
                engine,
                workload,
                vocab,
                tokenized[workload.name],
                args.compile_repeats,
                args.decode_repeats,
            )
            row = result.summary()
            if engine.name == "gramkiln" and result.note is None:
                reference_digests = result.mask_digests
            elif result.note is None and reference_digests is not None:
                row["agree"] = agreement(reference_digests, result.mask_digests)
            rows.append(row)

    print()
    lark_rows = [r for r in rows if r["workload"] in LARK_WORKLOADS]
    if lark_rows:
        print_table(lark_rows)
        print_ratios(lark_rows)
        print_agreement(lark_rows)
    if schemas:
        schema_rows = [r for r in rows if r["workload"] not in LARK_WORKLOADS]
        summary = aggregate(schema_rows, "maskbench")
        print(
            f"\nMaskBench sample: {len(schemas)} schemas; medians over the schemas each engine compiled"
        )
        print_table(summary)
        print_ratios(summary)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


def _version(engine: str) -> str:
    from importlib import metadata

    distribution = {"gramkiln-lazy": "gramkiln"}.get(engine, engine)
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        version = "(version unknown)"
    if distribution == "gramkiln":
        from gramkiln.runtime import _core

        profile = getattr(_core, "core_build_profile", lambda: "")()
        version += f" (core built with the {profile} profile)" if profile else " (no profile)"
    return version


if __name__ == "__main__":
    sys.exit(main())
