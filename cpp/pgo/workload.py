"""The training run of the build profile: what train.py runs in the instrumented process.

Every corpus grammar is compiled against the vocabulary, saved and loaded, then decoded
token by token three ways: after the prewarm (most fills hit its caches), while the prewarm
still runs, and without one (cold first fills). Along the way it forks, rolls back, refuses
tokens the mask excludes, asks for jump-forward strings and fills batches. Random grammars
of the test strategies follow, decoded as the stress script decodes them. A wrong mask here
(a corpus text's own token refused) stops the run: a profile of a broken build is no use.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from corpus import CORPUS, TrainingGrammar

import gramkiln as gk

ROOT = Path(__file__).resolve().parents[2]


def grammar_of(entry: TrainingGrammar) -> gk.Grammar:
    """The corpus entry through its front end."""
    if entry.front_end == "lark":
        return gk.Grammar.from_lark(entry.source)
    if entry.front_end == "ebnf":
        return gk.Grammar.from_ebnf(entry.source)
    if entry.front_end == "json_schema":
        return gk.Grammar.from_json_schema(entry.source, entry.options)
    if entry.front_end == "regex":
        return gk.Grammar.from_regex(entry.source)
    if entry.front_end == "glrm":
        return gk.Grammar.from_glrm(entry.source)
    raise ValueError(f"unknown front end {entry.front_end!r}")


def allowed(bitmask: np.ndarray, row: int, token: int) -> bool:
    """Whether `token`'s bit is set in row `row`."""
    return bool((int(bitmask[row, token >> 5]) >> (token & 31)) & 1)


def decode(compiled: Any, ids: list[int], bitmask: np.ndarray, vocab_size: int) -> int:
    """Force-decode `ids` with the calls a server makes; returns the positions filled."""
    matcher = compiled.matcher()
    rng = np.random.default_rng(len(ids))
    for position, token in enumerate(ids):
        matcher.fill_next_token_bitmask(bitmask, 0)
        if not allowed(bitmask, 0, token):
            raise AssertionError(f"the mask excludes token {token} at position {position}")
        if position % 7 == 3:
            refused = int(rng.integers(vocab_size))
            if not allowed(bitmask, 0, refused) and matcher.accept_token(refused):
                raise AssertionError(f"token {refused} accepted outside the mask")
        if not matcher.accept_token(token):
            raise AssertionError(f"token {token} refused at position {position}")
        if position % 11 == 5:
            matcher.rollback(1)
            matcher.accept_token(token)
        if position % 13 == 6:
            fork = matcher.fork()
            fork.fill_next_token_bitmask(bitmask, 1)
        if position % 17 == 8:
            matcher.find_jump_forward_string()
    matcher.fill_next_token_bitmask(bitmask, 0)
    if not matcher.is_accepting():
        raise AssertionError("a corpus text is not accepted in full")
    return len(ids) + 1


def batch_decode(compiled: Any, ids: list[int], bitmask: np.ndarray) -> None:
    """Several matchers a few tokens apart, filled together as a serving batch is."""
    rows = bitmask.shape[0]
    matchers = [compiled.matcher() for _ in range(rows)]
    for row, matcher in enumerate(matchers):
        for token in ids[:row]:
            matcher.accept_token(token)
    for step in range(rows, len(ids)):
        gk.fill_next_token_bitmask_batch(matchers, bitmask, threads=2)
        for row, matcher in enumerate(matchers):
            matcher.accept_token(ids[step - rows + row])


def run_corpus(vocab: Any, tokenize: Any) -> int:
    """Every corpus grammar (and the GLRM example) three ways; returns the positions filled."""
    entries = list(CORPUS)
    glrm = ROOT / "examples" / "value.glrm"
    if glrm.exists():
        entries.append(TrainingGrammar("value", "glrm", glrm.read_text(), ("[1, [2, null], []]",)))
    bitmask = gk.allocate_token_bitmask(4, vocab.vocab_size)
    positions = 0
    for entry in entries:
        started = time.perf_counter()
        grammar = grammar_of(entry)
        for text in entry.texts:
            if not grammar.accepts(text):
                raise AssertionError(f"corpus grammar {entry.name!r} does not accept {text!r}")
        compiled = grammar.compile(vocab)
        artifact = compiled.to_bytes()
        token_texts = [tokenize(text.encode()) for text in entry.texts]
        for prewarm in ("waited", "racing", "none"):
            loaded = gk.CompiledGrammar.load(artifact, vocab=vocab, prewarm=prewarm != "none")
            if prewarm == "waited":
                loaded.prewarm(wait=True)
            for ids in token_texts:
                positions += decode(loaded, ids, bitmask, vocab.vocab_size)
            if prewarm == "waited":
                batch_decode(loaded, token_texts[0], bitmask)
        print(f"  {entry.name}: {time.perf_counter() - started:.1f} s", flush=True)
    return positions


def run_random(vocab: Any, examples: int) -> int:
    """Random grammars and mutated strings of the test strategies (seeded); positions filled."""
    from gramkiln.runtime.compile import compile_grammar
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from gramkiln.testing.strategies import grammars, mutated_strings
    from gramkiln.testing.vocabularies import greedy_tokens

    counts = [0]
    bitmask = gk.allocate_token_bitmask(1, vocab.vocab_size)

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        ir = data.draw(grammars(subgrammars=True))
        texts = [data.draw(mutated_strings(ir)).encode() for _ in range(2)]
        compiled = compile_grammar(ir, vocab)
        if data.draw(st.booleans()):
            compiled.prewarm()
        for text in texts:
            matcher = compiled.matcher()
            for token in greedy_tokens(vocab, text, longest=16):
                matcher.fill_next_token_bitmask(bitmask)
                counts[0] += 1
                if not matcher.accept_token(token):
                    break

    one()
    return counts[0]


def run(vocab_spec: str) -> None:
    """The whole training run."""
    sys.path.insert(0, str(ROOT / "bench"))
    from run import load_bench_vocab  # bench/run.py: the vocabulary and its tokenizer

    started = time.perf_counter()
    bench_vocab = load_bench_vocab(vocab_spec)
    print(f"training on {vocab_spec} ({bench_vocab.tokenizer_name})", flush=True)
    positions = run_corpus(bench_vocab.gk_vocab, bench_vocab.tokenize)
    positions += run_random(bench_vocab.gk_vocab, examples=60)
    print(f"{positions} positions filled in {time.perf_counter() - started:.0f} s", flush=True)
