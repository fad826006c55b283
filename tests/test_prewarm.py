"""Prewarming the mask caches (`CompiledGrammar.prewarm`, `load(prewarm=True)`).

A prewarm only builds context-free cache entries ahead of time, so masks must be identical with
and without it: checked against brute force on random grammars, and against a matcher that
never prewarmed on the bench grammars with a vocabulary of multi-lexeme tokens. Plus the
thread-safety and lifetime rules: fills running during a background prewarm, dropping a
grammar while it prewarms, and forking a process while a prewarm runs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.ir import GrammarIR
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import (
    CompiledGrammar,
    allocate_token_bitmask,
    bitmask_to_ids,
    fill_next_token_bitmask_batch,
)
from gramkiln.runtime.vocab import Vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.strategies import grammars, mutated_strings
from gramkiln.testing.vocabularies import greedy_tokens, substring_vocab

BENCH = Path(__file__).resolve().parents[1] / "bench"

SMALL_TOKENS = [b"a", b"b", b"(", b")", b",", b" ", b"ab", b"a(", b"(a", b"),", b"))", b", "]
SMALL_TOKENS += [b" a", b"a,b", b"(ab)", b"ba", b"x", b"</s>"]
SMALL_VOCAB = Vocab(
    SMALL_TOKENS, eos_ids=[len(SMALL_TOKENS) - 1], special_ids=[len(SMALL_TOKENS) - 1]
)


def mask_ids(matcher, vocab_size: int) -> list[int]:
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return bitmask_to_ids(bitmask[0], vocab_size)


def brute_force_ids(oracle: ReferenceMatcher, prefix: bytes) -> list[int]:
    allowed = oracle.allowed_tokens(
        prefix, SMALL_TOKENS, SMALL_VOCAB.special_ids, SMALL_VOCAB.eos_ids
    )
    return [i for i, ok in enumerate(allowed) if ok]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_prewarmed_masks_equal_brute_force_on_random_grammars(data: st.DataObject) -> None:
    ir: GrammarIR = data.draw(grammars(subgrammars=True))
    text = data.draw(mutated_strings(ir)).encode("utf-8")
    compiled = compile_grammar(ir, SMALL_VOCAB)
    stats = compiled.prewarm()
    assert stats is not None and set(stats) == {
        "levels",
        "masks",
        "explored",
        "item_walks",
        "local_walks",
        "kernels",
        "traffic_sentences",
        "traffic_tokens",
        "huge_page_extents",
        "read_back_bytes",
        "bytes",
        "complete",
    }
    assert stats["masks"] >= 1 and stats["explored"] >= 1  # at least the initial configuration
    oracle = ReferenceMatcher(ir)
    matcher = compiled.matcher()
    assert mask_ids(matcher, compiled.vocab_size) == brute_force_ids(oracle, b"")
    for end in range(1, len(text) + 1):
        if not oracle.is_prefix(text[:end]):
            assert not matcher.accept_string(text[end - 1 : end])
            break
        assert matcher.accept_string(text[end - 1 : end])
        assert mask_ids(matcher, compiled.vocab_size) == brute_force_ids(oracle, text[:end])


def bench_case(name: str) -> tuple[str, list[bytes]]:
    grammar = (BENCH / "grammars" / f"{name}.lark").read_text(encoding="utf-8")
    paths = sorted((BENCH / "instances" / name).glob("*.txt"))
    return grammar, [p.read_bytes().removesuffix(b"\n") for p in paths]


def bench_artifact(name: str) -> tuple[bytes, Vocab, list[list[int]]]:
    """A bench grammar compiled against a 400-token vocabulary of its instances' substrings,
    as artifact bytes, with the token lists of its first three instances."""
    grammar, instances = bench_case(name)
    vocab = substring_vocab(instances, limit=400)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    return data, vocab, [greedy_tokens(vocab, text) for text in instances[:3]]


@pytest.mark.parametrize("name", ["json", "clike", "toolcall"])
def test_prewarmed_masks_equal_lazy_masks_on_bench_grammars(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole prewarm runs (C-like's takes ~0.2 s, past the default 1 s bound on a slow or
    # sanitizer build): its masks are what is compared.
    monkeypatch.setenv("GRAMKILN_PREWARM_MS", "60000")
    grammar, instances = bench_case(name)
    vocab = substring_vocab(instances)
    ir = parse_lark(grammar)
    lazy = compile_grammar(ir, vocab)
    warm = CompiledGrammar.load(lazy.to_bytes(), vocab, prewarm=False)
    stats = warm.prewarm()
    assert stats is not None and stats["levels"] > 0 and stats["complete"]
    assert warm.prewarm_done and not lazy.prewarm_done
    for text in instances:
        lazy_matcher, warm_matcher = lazy.matcher(), warm.matcher()
        for token in greedy_tokens(vocab, text):
            assert mask_ids(warm_matcher, vocab.vocab_size) == mask_ids(
                lazy_matcher, vocab.vocab_size
            )
            assert lazy_matcher.accept_token(token) and warm_matcher.accept_token(token)
        assert warm_matcher.is_accepting() and lazy_matcher.is_accepting()


def masks_along(compiled: CompiledGrammar, token_lists: list[list[int]]) -> list[list[int]]:
    """The mask before each token of each token list, decoding them in order."""
    masks = []
    for tokens in token_lists:
        matcher = compiled.matcher()
        for token in tokens:
            masks.append(mask_ids(matcher, compiled.vocab_size))
            matcher.accept_token(token)
    return masks


def test_fills_during_a_background_prewarm_match_serial_fills() -> None:
    grammar, instances = bench_case("clike")
    vocab = substring_vocab(instances)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    token_lists = [greedy_tokens(vocab, text) for text in instances]
    expected = masks_along(CompiledGrammar.load(data, vocab, prewarm=False), token_lists)
    for _ in range(3):
        warming = CompiledGrammar.load(data, vocab)  # the prewarm starts now, in the background
        results: dict[int, list[list[int]]] = {}

        def decode(
            slot: int,
            compiled: CompiledGrammar = warming,
            results: dict[int, list[list[int]]] = results,
        ) -> None:
            results[slot] = masks_along(compiled, token_lists)

        threads = [threading.Thread(target=decode, args=(slot,)) for slot in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results[0] == expected and results[1] == expected
        assert warming.prewarm() is not None and warming.prewarm_done


def test_dropping_a_grammar_while_it_prewarms_keeps_its_matchers_working() -> None:
    grammar, instances = bench_case("toolcall")
    vocab = substring_vocab(instances)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    tokens = greedy_tokens(vocab, instances[0])
    expected_matcher = CompiledGrammar.load(data, vocab, prewarm=False).matcher()
    for _ in range(5):
        compiled = CompiledGrammar.load(data, vocab)
        matcher = compiled.matcher()
        del compiled  # stops and joins the prewarm; the matcher keeps the tables alive
        assert mask_ids(matcher, vocab.vocab_size) == mask_ids(expected_matcher, vocab.vocab_size)
    for token in tokens:
        assert matcher.accept_token(token)
    assert matcher.is_accepting()


def _forked_fill(conn, compiled: CompiledGrammar, vocab_size: int) -> None:
    conn.send(mask_ids(compiled.matcher(), vocab_size))
    conn.close()


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork() on this platform"
)
def test_fork_while_other_threads_fill_does_not_deadlock_the_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two threads decode without pause (with a mask budget of a few kilobytes most fills
    compute, taking the runtime's locks without the GIL) while the main thread forks again and
    again: the fork waits for the calls running without the GIL, so no child inherits a held
    lock, and each child fills the grammar's first mask."""
    grammar, instances = bench_case("clike")
    vocab = substring_vocab(instances)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    token_lists = [greedy_tokens(vocab, text) for text in instances]
    expected = mask_ids(
        CompiledGrammar.load(data, vocab, prewarm=False).matcher(), vocab.vocab_size
    )
    monkeypatch.setenv("GRAMKILN_MASK_CACHE_BYTES", "4096")  # read at load
    compiled = CompiledGrammar.load(data, vocab, prewarm=False)
    stop = threading.Event()

    def decode_until_stopped() -> None:
        while not stop.is_set():
            masks_along(compiled, token_lists)

    threads = [threading.Thread(target=decode_until_stopped) for _ in range(2)]
    for thread in threads:
        thread.start()
    context = multiprocessing.get_context("fork")
    try:
        for _ in range(20):
            parent_end, child_end = context.Pipe()
            child = context.Process(
                target=_forked_fill, args=(child_end, compiled, vocab.vocab_size)
            )
            child.start()
            assert parent_end.poll(60), "the forked child did not answer (deadlocked?)"
            assert parent_end.recv() == expected
            child.join(30)
            assert child.exitcode == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _accept_waits_at_the_gate(matcher: Any, token: int) -> None:
    """Accept `token` on another thread while the fork gate is closed: the call must wait
    (without the GIL) until one more fork_done_in_parent, then go through."""
    from gramkiln.runtime import _core

    done = threading.Event()

    def accept() -> None:
        assert matcher.accept_token(token)  # runs without the GIL: waits at the gate
        done.set()

    thread = threading.Thread(target=accept)
    try:
        thread.start()
        assert not done.wait(0.3), "a call started while a fork was being prepared"
    finally:
        _core.fork_done_in_parent()
    assert done.wait(30)
    thread.join()


def test_calls_that_would_start_while_a_fork_is_prepared_wait_for_it() -> None:
    """Python lets the GIL go between the before-fork hooks and fork() itself, so holding it
    is not what keeps new calls out: prepare_fork closes a gate that a call without the GIL
    waits at (without the GIL) until the after-fork hook opens it. Driven here by hand."""
    from gramkiln.runtime import _core

    compiled = Grammar.from_lark('start: ("a" | "b")+').compile(Vocab.byte_level())
    matcher = compiled.matcher()
    _core.prepare_fork()
    _accept_waits_at_the_gate(matcher, ord("a"))
    assert matcher.accept_token(ord("b")) and matcher.is_accepting()


def test_the_gate_stays_closed_until_every_fork_being_prepared_is_done() -> None:
    """Two threads may fork at once: the first fork's after-fork hook runs while the second is
    still between its hooks (Python lets the GIL go there), so the gate counts them."""
    from gramkiln.runtime import _core

    compiled = Grammar.from_lark('start: ("a" | "b")+').compile(Vocab.byte_level())
    matcher = compiled.matcher()
    _core.prepare_fork()
    _core.prepare_fork()
    _core.fork_done_in_parent()  # the first fork is done, the second is not
    _accept_waits_at_the_gate(matcher, ord("a"))
    # One hook too many leaves the count at zero, not below: the next fork still closes the gate.
    _core.fork_done_in_parent()
    _core.prepare_fork()
    _accept_waits_at_the_gate(matcher, ord("b"))
    assert matcher.is_accepting()


@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="under AddressSanitizer the unwinding that ends a daemon thread (pthread_exit) "
    "leaves its stack poisoned, which ASan then reports (a false positive it warns of)",
)
def test_daemon_threads_inside_calls_at_exit_do_not_abort_the_process(tmp_path: Path) -> None:
    """Daemon threads still filling when the interpreter exits are ended by Python as they
    take the GIL back; that unwinding once passed a noexcept destructor, and the process
    aborted ("terminate called without an active exception", exit status 134) every time."""
    script = tmp_path / "exit_with_daemons.py"
    script.write_text(
        "import threading, time\n"
        "import gramkiln as gk\n"
        'g = gk.Grammar.from_lark(\'start: ("a" | "b" | "(" start ")")+\')\n'
        "v = gk.Vocab.byte_level()\n"
        "c = gk.CompiledGrammar.load(g.compile(v).to_bytes(), vocab=v, prewarm=False)\n"
        "def loop():\n"
        "    b = gk.allocate_token_bitmask(1, v.vocab_size)\n"
        "    while True:\n"
        "        m = c.matcher()\n"
        "        for ch in b'(a(b(a)))ab':\n"
        "            m.fill_next_token_bitmask(b, 0)\n"
        "            m.accept_token(ch)\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=loop, daemon=True).start()\n"
        "time.sleep(0.3)\n"
    )
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert "terminate called" not in run.stderr


def _prewarm_into(compiled: CompiledGrammar, results: list[dict]) -> None:
    results.append(compiled.prewarm())


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork() on this platform"
)
@pytest.mark.parametrize("runs_on", ["background thread", "caller thread"])
def test_fork_while_prewarming_does_not_deadlock_the_child(runs_on: str) -> None:
    """A prewarm runs on a background thread (started by load) or on the thread that called
    prewarm(); a fork from another thread meanwhile stops it, the child fills masks, and the
    parent's prewarm() call returns."""
    grammar, instances = bench_case("clike")
    vocab = substring_vocab(instances)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    expected = mask_ids(
        CompiledGrammar.load(data, vocab, prewarm=False).matcher(), vocab.vocab_size
    )
    context = multiprocessing.get_context("fork")
    for _ in range(3):
        results: list[dict] = []
        prewarming = None
        if runs_on == "background thread":
            compiled = CompiledGrammar.load(data, vocab)  # prewarm running while we fork
        else:
            compiled = CompiledGrammar.load(data, vocab, prewarm=False)
            prewarming = threading.Thread(target=_prewarm_into, args=(compiled, results))
            prewarming.start()
        parent_end, child_end = context.Pipe()
        child = context.Process(target=_forked_fill, args=(child_end, compiled, vocab.vocab_size))
        child.start()
        assert parent_end.poll(60), "the forked child did not answer (deadlocked?)"
        assert parent_end.recv() == expected
        child.join(30)
        assert child.exitcode == 0
        if prewarming is not None:
            prewarming.join(60)
            assert not prewarming.is_alive() and len(results) == 1
        assert mask_ids(compiled.matcher(), vocab.vocab_size) == expected


def test_masks_equal_token_by_token_acceptance_with_small_inside_sets() -> None:
    """Where a keyword and a name are both being lexed (`wh` of `while` or of `whx`), the
    keyword's thread admits only a few tokens while the name's admits thousands; with a large
    vocabulary the small inside sets are added to the mask as token lists, the large ones as
    bitsets. Every mask must equal the set of tokens the matcher accepts one by one, with and
    without prewarm."""
    grammar, instances = bench_case("clike")
    vocab_base = substring_vocab(instances)
    rng = random.Random(7)
    junk = set()
    while len(junk) < 3600:
        size = rng.randint(2, 7)
        junk.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(size)).encode())
    text_tokens = sorted(set(vocab_base.tokens[:-1]) | junk)
    tokens = [*text_tokens, b"</s>"]
    eos = len(tokens) - 1
    vocab = Vocab(tokens, eos_ids=[eos], special_ids=[eos])
    assert (vocab.vocab_size + 31) // 32 >= 160  # sets of up to words / 16 tokens are lists
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    ids = greedy_tokens(vocab, instances[0])[:70]
    for prewarm in (False, True):
        compiled = CompiledGrammar.load(data, vocab, prewarm=False)
        if prewarm:
            compiled.prewarm()
        matcher = compiled.matcher()
        for token in ids:
            mask = set(mask_ids(matcher, vocab.vocab_size))
            accepted = set()
            for candidate in range(eos):
                if matcher.accept_token(candidate):
                    accepted.add(candidate)
                    matcher.rollback(1)
            assert mask - {eos} == accepted
            assert matcher.accept_token(token)


def test_many_loads_at_once_start_at_most_a_bounded_number_of_prewarms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loading many grammars at once starts prewarms only while fewer run than there are cores
    (the rest build their caches lazily); every grammar's masks stay right, and an explicit
    `prewarm()` still runs for any of them."""
    import os

    # The explicit prewarm runs to its end, even beside the background ones on a slow host or
    # a sanitizer build (it ran past the default 1 s under ASan with the machine busy).
    monkeypatch.setenv("GRAMKILN_PREWARM_MS", "60000")

    grammar, instances = bench_case("toolcall")
    vocab = substring_vocab(instances)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    token_lists = [greedy_tokens(vocab, instances[0])]
    expected = masks_along(CompiledGrammar.load(data, vocab, prewarm=False), token_lists)
    loaded = [CompiledGrammar.load(data, vocab) for _ in range(3 * (os.cpu_count() or 2) + 4)]
    for compiled in loaded[::5]:
        assert masks_along(compiled, token_lists) == expected
    stats = loaded[-1].prewarm()
    assert stats is not None and stats["complete"] and loaded[-1].prewarm_done
    assert masks_along(loaded[-1], token_lists) == expected


def test_prewarm_stops_a_few_dozen_lexemes_into_a_grammar_with_one_way_on() -> None:
    """Each configuration of `s s? s?` over `R R R+` has one successor, so exploring lexeme by
    lexeme used to follow a single chain 600 lexemes deep, with fills that grow with the text
    (every earlier position is a live lexeme start): minutes of background work. It stops 32
    lexemes in at most (sooner now that equivalent lexer threads merge and the configurations
    repeat), and masks after it still equal a matcher's that never prewarmed."""
    grammar = "start: s s? s?\ns: R R R+\nR: /[^a]{3,}/\n"
    tokens = [bytes([b]) for b in range(256)] + [b"aa", b"bbb", b"cccc", b"</s>"]
    vocab = Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    warm = CompiledGrammar.load(data, vocab, prewarm=False)
    stats = warm.prewarm()
    assert stats is not None and 1 <= stats["explored"] <= 33
    cold = CompiledGrammar.load(data, vocab, prewarm=False)
    token_lists = [[vocab.tokens.index(b"bbb")] * 40, [vocab.tokens.index(b"cccc")] * 30]
    assert masks_along(warm, token_lists) == masks_along(cold, token_lists)


@pytest.mark.parametrize("name", ["json", "clike"])
def test_masks_are_unchanged_when_the_mask_tables_turn_over(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a mask budget of a few kilobytes the mask tables turn over generations every few
    fills (a hit in the previous generation is stored again in the current one): masks equal
    those of a grammar loaded with the default budget, with and without a prewarm."""
    data, vocab, token_lists = bench_artifact(name)
    expected = masks_along(CompiledGrammar.load(data, vocab, prewarm=False), token_lists)
    monkeypatch.setenv("GRAMKILN_MASK_CACHE_BYTES", "4096")  # read when a grammar is loaded
    small = CompiledGrammar.load(data, vocab, prewarm=False)
    assert masks_along(small, token_lists) == expected
    assert masks_along(small, token_lists) == expected  # now mostly from the tables
    warm = CompiledGrammar.load(data, vocab, prewarm=False)
    warm.prewarm()
    assert masks_along(warm, token_lists) == expected


@pytest.mark.parametrize(
    ("walk_bytes", "future_keys", "admission"),
    [("16384", "auto", "second"), ("196608", "on", "first"), ("196608", "on", "second")],
)
def test_batch_fills_stay_exact_while_other_threads_clear_the_walk_tables(
    walk_bytes: str, future_keys: str, admission: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fills by items collect walk results by address, without reference counts, valid until
    the walk tables are next cleared: a fill that released the walk lock checks their
    generation and goes back to walks by sets after a clear. With a 16 KB walk budget every
    few walks clear the tables, so batch fills on four threads clear them under each other;
    masks equal serial fills of a grammar loaded with the default budget. With 192 KB and
    future keys on, descents are also found by their thread's future between the clears (two
    clears, two to five such hits; at 128 KB, since the threads that start at the last set
    keep their descents as one, the clears often left none), where the decode stores every
    descent it walks (GRAMKILN_DESCENT_ADMISSION=first); by default it stores those it walks
    a second time, whose hits between clears are too few to count on. Descents by future are
    forced on (GRAMKILN_FUTURE_DESCENTS=on): a decode would otherwise judge them by its first
    probes."""
    monkeypatch.setenv("GRAMKILN_FUTURE_KEYS", future_keys)  # read at load
    monkeypatch.setenv("GRAMKILN_DESCENT_ADMISSION", admission)
    monkeypatch.setenv("GRAMKILN_FUTURE_DESCENTS", "on")  # not judged by the decode
    data, vocab, token_lists = bench_artifact("clike")
    matchers_at: list[tuple[int, int]] = [
        (list_index, length)
        for list_index, tokens in enumerate(token_lists)
        for length in range(0, len(tokens), 3)
    ]

    def matchers_of(compiled: CompiledGrammar) -> list:
        matchers = []
        for list_index, length in matchers_at:
            matcher = compiled.matcher()
            for token in token_lists[list_index][:length]:
                assert matcher.accept_token(token)
            matchers.append(matcher)
        return matchers

    reference = CompiledGrammar.load(data, vocab, prewarm=False)
    expected = allocate_token_bitmask(len(matchers_at), vocab.vocab_size)
    for row, matcher in enumerate(matchers_of(reference)):
        matcher.fill_next_token_bitmask(expected, row)
    monkeypatch.setenv("GRAMKILN_WALK_CACHE_BYTES", walk_bytes)  # read at load
    for prewarm in (False, True):
        wants_future_hits = future_keys == "on" and admission == "first" and not prewarm
        # Which descents are found by future between two clears depends on how the four
        # threads interleave: about one load in four found none (2 of ~8 full-suite runs
        # failed here). Where such hits are wanted, a few fresh loads, until one has them.
        loads = 0
        while True:
            loads += 1
            small = CompiledGrammar.load(data, vocab, prewarm=False)
            if prewarm:
                small.prewarm()
            matchers = matchers_of(small)
            for _ in range(2):  # the second round meets tables the first one filled and cleared
                batch = allocate_token_bitmask(len(matchers), vocab.vocab_size)
                fill_next_token_bitmask_batch(matchers, batch, threads=4)
                assert (batch == expected).all()
            stats = small.cache_stats()
            assert stats["walk_clears"] > 0
            if not wants_future_hits or stats["descent_hits_future"] > 0 or loads == 5:
                break
        if wants_future_hits:
            assert stats["descent_hits_future"] > 0, f"no descent found by future in {loads} loads"


@pytest.mark.parametrize("name", ["json", "clike"])
def test_masks_are_unchanged_when_the_walk_tables_are_cleared(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a walk budget of 16 KB the walk tables are cleared again and again, in the
    prewarm and inside fills (whose walks by items and by sets then compute what was dropped):
    masks equal those of a grammar loaded with the default budget, with and without a
    prewarm."""
    data, vocab, token_lists = bench_artifact(name)
    expected = masks_along(CompiledGrammar.load(data, vocab, prewarm=False), token_lists)
    monkeypatch.setenv("GRAMKILN_WALK_CACHE_BYTES", "16384")  # read at load
    small = CompiledGrammar.load(data, vocab, prewarm=False)
    assert masks_along(small, token_lists) == expected
    assert small.cache_stats()["walk_clears"] > 0
    warm = CompiledGrammar.load(data, vocab, prewarm=False)
    warm.prewarm()
    assert masks_along(warm, token_lists) == expected
    assert warm.cache_stats()["walk_clears"] > 0


def test_sparse_masks_are_interned_without_compare_storms() -> None:
    """Interning a mask compares it word by word only with stored masks of equal digest. The
    masks inside the words of a large enum are sparse (a few tokens each) and differ in words
    a sampled digest skips: hashed by their set words, each new mask meets at most a few
    candidates, not every sparse mask stored before (10,011 compares for these 150 masks with
    the sampled digest alone, 0 now). Every mask still equals brute force over the words."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    rng = random.Random(7)
    words = sorted(
        {"".join(rng.choice(letters) for _ in range(rng.randint(5, 9))) for _ in range(300)}
    )
    # 18,508 tokens (579 words a mask): bytes, then every two- and three-letter string.
    tokens = [bytes([b]) for b in range(256)]
    tokens += [(a + b).encode() for a in letters for b in letters]
    tokens += [(a + b + c).encode() for a in letters for b in letters for c in letters]
    vocab = Vocab(tokens + [b"<eos>"], eos_ids=[len(tokens)])
    grammar = "start: " + " | ".join(f'"{word}"' for word in words) + "\n"
    compiled = CompiledGrammar.load(
        compile_grammar(parse_lark(grammar), vocab).to_bytes(), vocab, prewarm=False
    )
    encoded = [word.encode() for word in words]
    ids = {token: i for i, token in enumerate(tokens)}
    for word in encoded[::3]:
        tokens_of_word = greedy_tokens(vocab, word)
        matcher = compiled.matcher()
        prefix = b""
        for token in tokens_of_word:
            # Tokens are at most three bytes: the next one, two or three bytes of some word.
            expected = {
                ids[rest[:size]]
                for rest in (w[len(prefix) :] for w in encoded if w.startswith(prefix))
                for size in (1, 2, 3)
                if len(rest) >= size
            }
            if prefix in encoded:
                expected.add(len(tokens))
            assert set(mask_ids(matcher, compiled.vocab_size)) == expected
            assert matcher.accept_token(token)
            prefix += tokens[token]
    stats = compiled.cache_stats()
    assert stats["fills_computed"] > 100
    assert stats["mask_compares"] <= 2 * stats["fills_computed"]


def test_stored_masks_are_interned_by_content() -> None:
    """Thousands of stored masks share a few dozen contents: each distinct mask is stored once
    (with and without end tokens at most), and each of the three mask tables (whole-stack,
    future-language and bounded-depth keys) counts a content once in the budget."""
    grammar, instances = bench_case("json")
    vocab = substring_vocab(instances, limit=400)
    compiled = CompiledGrammar.load(
        compile_grammar(parse_lark(grammar), vocab).to_bytes(), vocab, prewarm=False
    )
    token_lists = [greedy_tokens(vocab, text) for text in instances]
    seen = {tuple(mask) for mask in masks_along(compiled, token_lists)}
    stats = compiled.cache_stats()
    # Most computed masks recur as the same parts (inside sets, walk results, token sets) in
    # another configuration, and are found by those parts without comparing contents.
    assert 0 < stats["interned_by_parts"] < stats["fills_computed"]
    assert stats["mask_entries"] > 2 * len(seen)
    assert 0 < stats["distinct_masks"] <= 2 * len(seen)
    words = (vocab.vocab_size + 31) // 32
    assert stats["mask_bytes"] <= 64 * stats["mask_entries"] + 12 * words * stats["distinct_masks"]
    compiled.prewarm()
    after = compiled.cache_stats()
    assert after["mask_entries"] > stats["mask_entries"]
    assert after["distinct_masks"] < after["mask_entries"] // 4


def test_the_prewarm_fills_every_inner_state_of_expected_lexemes() -> None:
    """Subword tokens stop anywhere inside a lexeme (`(` `cu` `stomer` `na` `me` `)`); the
    prewarm fills the masks at every inner DFA state of the lexemes it expects (up to 64 each),
    so decoding those words computes no fill. Until session 20 only states before a byte that is
    not a letter or digit were filled, and five of these fills were computed."""
    tokens = [b"(", b"cu", b"stomer", b"na", b"me", b")", b"id", b"ent", b"ifier", b"</s>"]
    vocab = Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    grammar = 'start: "(" WORD ")" start?\nWORD: "customername" | "identifier"\n'
    compiled = CompiledGrammar.load(
        compile_grammar(parse_lark(grammar), vocab).to_bytes(), vocab, prewarm=False
    )
    compiled.prewarm()
    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    before = compiled.cache_stats()["fills_computed"]
    for token in [0, 1, 2, 3, 4, 5, 0, 6, 7, 8, 5]:
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token)
    matcher.fill_next_token_bitmask(bitmask)
    assert compiled.cache_stats()["fills_computed"] == before
    oracle = ReferenceMatcher(parse_lark(grammar))
    assert oracle.accepts(b"(customername)(identifier)")
    assert matcher.is_accepting()


def test_the_prewarm_explores_past_lexemes_longer_than_32_bytes() -> None:
    """A JSON Schema key with its separators is one lexeme (`"grocery_info.nutritional_info": `,
    34 bytes). The exploration writes each lexeme as a shortest string; those were cut at 32
    bytes, so such a key stopped it two configurations in (found on a BFCL schema)."""
    schema = {
        "type": "object",
        "properties": {
            "grocery_info.nutritional_info": {
                "type": "object",
                "properties": {"store": {"type": "string"}, "food": {"type": "string"}},
                "required": ["store", "food"],
                "additionalProperties": False,
            }
        },
        "required": ["grocery_info.nutritional_info"],
        "additionalProperties": False,
    }
    tokens = [bytes([b]) for b in range(256)] + [b"</s>"]
    vocab = Vocab(tokens, eos_ids=[256], special_ids=[256])
    compiled = CompiledGrammar.load(
        Grammar.from_json_schema(schema).compile(vocab).to_bytes(), vocab, prewarm=False
    )
    stats = compiled.prewarm()
    assert stats is not None and stats["explored"] > 10


def test_the_prewarm_explores_nested_json_by_neighbourhood() -> None:
    """The exploration tells configurations apart by the stack within five origin hops, not by
    the whole stack, so its 1,500 configurations reach deeper nestings of objects and arrays
    instead of the same neighbourhoods under other stacks: decoding two nested documents after
    it computes at most two fills (four when configurations were told apart by the whole
    stack, 600 of them)."""
    grammar, _ = bench_case("json")
    tokens = [bytes([b]) for b in range(32, 127)]
    tokens += [b'{"', b'":', b"},", b"],", b"[[", b"]]", b"}]", b"[{", b'": [', b'": {', b"</s>"]
    vocab = Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    compiled = CompiledGrammar.load(
        compile_grammar(parse_lark(grammar), vocab).to_bytes(), vocab, prewarm=False
    )
    compiled.prewarm()
    texts = [
        b'{"a": [{"b": [[1, 2], [3]], "c": {"d": [true]}}], "e": {"f": {"g": [null, {"h": 0}]}}}',
        b'[[[{"a": [[0], {}]}, [1]], {"b": {"c": [[], [2]]}}]]',
    ]
    before = compiled.cache_stats()["fills_computed"]
    masks = masks_along(compiled, [greedy_tokens(vocab, text) for text in texts])
    assert compiled.cache_stats()["fills_computed"] - before <= 2
    lazy = compile_grammar(parse_lark(grammar), vocab)
    assert masks == masks_along(lazy, [greedy_tokens(vocab, text) for text in texts])


def test_concurrent_waits_for_one_prewarm_return_its_stats() -> None:
    """prewarm(wait=True) runs on the calling thread; another thread that waits meanwhile gets
    the same finished prewarm, and the masks are those of a grammar never prewarmed."""
    grammar, instances = bench_case("clike")
    vocab = substring_vocab(instances)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    compiled = CompiledGrammar.load(data, vocab, prewarm=False)
    results: list[dict] = []
    waiters = [
        threading.Thread(target=lambda: results.append(compiled.prewarm())) for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    assert len(results) == 3 and all(result == results[0] for result in results)
    assert results[0]["levels"] > 0 and compiled.prewarm_done
    token_lists = [greedy_tokens(vocab, text) for text in instances[:2]]
    cold = CompiledGrammar.load(data, vocab, prewarm=False)
    assert masks_along(compiled, token_lists) == masks_along(cold, token_lists)


@pytest.mark.parametrize("name", ["json", "clike"])
def test_future_keys_on_off_and_decided_by_the_prewarm_give_the_same_masks(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The future-language key is used always (GRAMKILN_FUTURE_KEYS=on), never (off), or
    where the prewarm finds it pays (the default): masks are the same either way, and off
    means no fill is answered by it (nor any exit walk or descent by its thread's future).
    Computed fills walk by items (the default) either way, and where the key is used take
    descents by their thread's future where their neighbourhood is new; walking by sets
    instead (GRAMKILN_ITEM_WALKS=off), they take top-level exit walks from the future-keyed
    walk table. (Without the synthetic traffic: after it, the JSON decode may meet no new
    neighbourhood, and then takes no descent by future. And with every descent the decode walks
    stored, GRAMKILN_DESCENT_ADMISSION=first: by default one is stored at its second walk, and
    the JSON decode walks none twice.)"""
    data, vocab, token_lists = bench_artifact(name)
    monkeypatch.setenv("GRAMKILN_PREWARM_TRAFFIC", "off")
    monkeypatch.setenv("GRAMKILN_DESCENT_ADMISSION", "first")
    monkeypatch.setenv("GRAMKILN_FUTURE_DESCENTS", "on")
    results = {}
    for mode, item_walks in (("on", "auto"), ("on", "off"), ("off", "auto"), ("auto", "auto")):
        monkeypatch.setenv("GRAMKILN_FUTURE_KEYS", mode)  # read when a grammar is loaded
        monkeypatch.setenv("GRAMKILN_ITEM_WALKS", item_walks)
        compiled = CompiledGrammar.load(data, vocab, prewarm=False)
        compiled.prewarm()
        results[mode, item_walks] = masks_along(compiled, token_lists)
        stats = compiled.cache_stats()
        if mode == "off":
            assert stats["hits_future"] == stats["walk_hits_future"] == 0
            assert stats["descent_hits_future"] == 0
        if item_walks == "auto":
            assert stats["fills_by_items"] > 0 and stats["walk_hits_future"] == 0
        if mode == "on" and item_walks == "auto":
            assert stats["descent_hits_future"] > 0
        if mode == "on" and item_walks == "off":
            assert stats["walk_hits_future"] > 0 and stats["fills_by_items"] == 0
    first = next(iter(results.values()))
    assert all(masks == first for masks in results.values())


@pytest.mark.parametrize("name", ["json", "clike"])
def test_a_decode_stores_the_descents_it_walks_a_second_time(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a prewarm every descent is walked by the decode. By default
    (GRAMKILN_DESCENT_ADMISSION=second) one is stored when it is walked a second time, and
    found by its thread's future from the third: fewer walk bytes and fewer hits than storing
    every walked descent (first), and the same masks."""
    data, vocab, token_lists = bench_artifact(name)
    monkeypatch.setenv("GRAMKILN_PREWARM_TRAFFIC", "off")
    monkeypatch.setenv("GRAMKILN_FUTURE_KEYS", "on")
    monkeypatch.setenv("GRAMKILN_FUTURE_DESCENTS", "on")
    results = {}
    for admission in ("first", "second"):
        monkeypatch.setenv("GRAMKILN_DESCENT_ADMISSION", admission)  # read at load
        compiled = CompiledGrammar.load(data, vocab, prewarm=False)
        before = compiled.cache_stats()
        masks = masks_along(compiled, token_lists)
        after = compiled.cache_stats()
        results[admission] = (
            masks,
            after["descent_hits_future"],
            after["walk_bytes"] - before["walk_bytes"],
            after["descents_walked"],
        )
    first, second = results["first"], results["second"]
    assert second[0] == first[0]
    assert 0 < second[1] < first[1]  # found again, after a second walk
    assert second[2] < first[2]
    assert second[3] > first[3]  # the descents found under `first` are walked again


@pytest.mark.parametrize("name", ["json", "clike"])
def test_descents_by_future_on_off_and_judged_by_the_decode_give_the_same_masks(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode looks descents up by their thread's future always (GRAMKILN_FUTURE_DESCENTS=on),
    never (off), or until its first 16 probes of a table that holds some have found too few
    (auto, the default): the same masks either way, no descent found by future with off, and
    with auto the judgement made (idle) once a decode without a prewarm found almost none."""
    data, vocab, token_lists = bench_artifact(name)
    monkeypatch.setenv("GRAMKILN_PREWARM_TRAFFIC", "off")
    monkeypatch.setenv("GRAMKILN_FUTURE_KEYS", "on")
    results = {}
    for mode in ("on", "off", "auto"):
        monkeypatch.setenv("GRAMKILN_FUTURE_DESCENTS", mode)  # read at load
        for prewarm in (False, True):
            compiled = CompiledGrammar.load(data, vocab, prewarm=False)
            if prewarm:
                compiled.prewarm()
            results[mode, prewarm] = masks_along(compiled, token_lists)
            stats = compiled.cache_stats()
            if mode == "off":
                assert stats["descent_hits_future"] == 0
            if mode == "on":
                assert stats["future_descents_idle"] == 0
                if not prewarm:
                    assert stats["descent_hits_future"] > 0
            if mode == "auto" and not prewarm:
                assert stats["future_descents_idle"] == 1
    first = next(iter(results.values()))
    assert all(masks == first for masks in results.values())


@pytest.mark.parametrize("name", ["json", "clike", "toolcall"])
def test_the_prewarm_computes_every_item_walk_a_decode_looks_up(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prewarm computes the item walk of every (exit group a thread starts in, item
    waiting for its lexeme) pair and, to a fixed point, those of the groups at which their
    left-hand sides complete: decodes after it look item walks up and compute none, with the
    same masks as walking by sets. (Without the synthetic traffic, after which the tool-call
    decode computes no fill at all.)"""
    monkeypatch.delenv("GRAMKILN_ITEM_WALKS", raising=False)
    monkeypatch.setenv("GRAMKILN_PREWARM_TRAFFIC", "off")
    data, vocab, token_lists = bench_artifact(name)
    compiled = CompiledGrammar.load(data, vocab, prewarm=False)
    prewarm = compiled.prewarm()
    assert prewarm is not None and prewarm["item_walks"] > 0
    before = compiled.cache_stats()
    assert before["item_walk_entries"] == prewarm["item_walks"]
    masks = masks_along(compiled, token_lists)
    after = compiled.cache_stats()
    assert after["fills_by_items"] > before["fills_by_items"]
    assert after["item_walk_entries"] == before["item_walk_entries"]
    monkeypatch.setenv("GRAMKILN_ITEM_WALKS", "off")
    by_sets = CompiledGrammar.load(data, vocab, prewarm=False)
    assert by_sets.prewarm()["item_walks"] == 0  # type: ignore[index]
    assert masks_along(by_sets, token_lists) == masks


def test_the_prewarm_computes_local_walks_at_every_kernel_it_met(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After its exploration, the prewarm computes the local walk of every completion it knows
    (a group and the symbol it completes) at every kernel its matchers built, not only the
    pairs its own fills met, and its matchers build every kernel the text reaches: the C-like
    decode then computes no local walk (122 without that phase; 18 before the exploration by
    kernels, which builds the declarations' `int t =` kernels as real text writes them), and
    its masks are those of a matcher that was never prewarmed."""
    monkeypatch.delenv("GRAMKILN_ITEM_WALKS", raising=False)
    monkeypatch.setenv("GRAMKILN_PREWARM_MS", "60000")  # the whole prewarm, on a slow host too
    data, vocab, token_lists = bench_artifact("clike")
    compiled = CompiledGrammar.load(data, vocab, prewarm=False)
    prewarm = compiled.prewarm()
    assert prewarm is not None and prewarm["local_walks"] > 0 and prewarm["kernels"] > 0
    before = compiled.cache_stats()
    masks = masks_along(compiled, token_lists)
    after = compiled.cache_stats()
    assert after["local_walk_entries"] == before["local_walk_entries"]
    cold = CompiledGrammar.load(data, vocab, prewarm=False)
    assert masks_along(cold, token_lists) == masks


def test_the_prewarm_follows_an_object_to_its_last_property(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breadth-first, the prewarm reaches a few properties into an object whose properties
    may come in any order (each set of properties written so far is its own parser state);
    one path along the first choices that leave the text incomplete follows the declared
    properties to the end, so a decode that writes them in that order computes no mask."""
    monkeypatch.setenv("GRAMKILN_PREWARM_MS", "60000")  # the whole prewarm, on a slow host too
    names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    schema = {"type": "object", "properties": {name: {"type": "string"} for name in names}}
    text = b"{" + b", ".join(b'"%s": "x"' % name.encode() for name in names) + b"}"
    vocab = substring_vocab([text], limit=400)
    data = Grammar.from_json_schema(schema).compile(vocab).to_bytes()
    compiled = CompiledGrammar.load(data, vocab, prewarm=False)
    compiled.prewarm()
    before = compiled.cache_stats()["fills_computed"]
    tokens = greedy_tokens(vocab, text)
    masks = masks_along(compiled, [tokens])
    assert compiled.cache_stats()["fills_computed"] == before
    assert len(masks) == len(tokens) > len(names)
    assert masks == masks_along(CompiledGrammar.load(data, vocab, prewarm=False), [tokens])


@pytest.mark.parametrize(("name", "used"), [("clike", True), ("json", False)])
def test_the_prewarm_keeps_future_keys_where_they_pay(
    name: str, used: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left to the prewarm (the default), the future-language key is used for C-like code,
    where contexts with equal futures recur, and not for JSON, where nesting makes them
    differ: a decode after the prewarm is answered by it, or never. The prewarm runs whole (a
    sanitizer build passes the default 1 s bound before the prewarm judges the key)."""
    monkeypatch.delenv("GRAMKILN_FUTURE_KEYS", raising=False)
    monkeypatch.setenv("GRAMKILN_PREWARM_MS", "60000")
    data, vocab, token_lists = bench_artifact(name)
    compiled = CompiledGrammar.load(data, vocab, prewarm=False)
    compiled.prewarm()
    before = compiled.cache_stats()
    masks_along(compiled, token_lists)
    after = compiled.cache_stats()
    answered = sum(
        after[key] - before[key]
        for key in ("hits_future", "walk_hits_future", "descent_hits_future")
    )
    assert (answered > 0) == used


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GRAMKILN_PREWARM_MS", "5s"),
        ("GRAMKILN_PREWARM_MS", "-1"),
        ("GRAMKILN_MASK_CACHE_BYTES", " 4096"),
        ("GRAMKILN_MERGE_AFTER", "many"),
        ("GRAMKILN_FUTURE_KEYS", "yes"),
        ("GRAMKILN_PREWARM_TRAFFIC", "no"),
        ("GRAMKILN_HUGE_PAGES", "never"),
    ],
)
def test_unreadable_tuning_variables_warn_at_load(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    # The runtime ignores a value it cannot read (a typo must not take a server down), so the
    # load says so, naming the variable and what it must hold; masks are unchanged.
    compiled = Grammar.from_lark('start: "a"+').compile(Vocab.byte_level())
    data = compiled.to_bytes()
    expected = allocate_token_bitmask(1, 257)
    CompiledGrammar.load(data, prewarm=False).matcher().fill_next_token_bitmask(expected)
    monkeypatch.setenv(name, value)
    with pytest.warns(RuntimeWarning, match=f"{name}='{re.escape(value)}' is not "):
        loaded = CompiledGrammar.load(data, prewarm=False)
    bitmask = allocate_token_bitmask(1, 257)
    loaded.matcher().fill_next_token_bitmask(bitmask)
    assert (bitmask == expected).all()


def test_readable_tuning_variables_load_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = Grammar.from_lark('start: "a"+').compile(Vocab.byte_level())
    for name, value in [
        ("GRAMKILN_PREWARM_MS", "250"),
        ("GRAMKILN_PREWARM_TRAFFIC", "0"),
        ("GRAMKILN_ITEM_WALKS", "on"),
        ("GRAMKILN_FUTURE_KEYS", "auto"),
        ("GRAMKILN_HUGE_PAGES", "off"),
    ]:
        monkeypatch.setenv(name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = CompiledGrammar.load(compiled.to_bytes(), prewarm=False)
        loaded.prewarm()
    assert loaded.matcher().accept_string("aaa")


def _kernel_collapses_into_huge_pages() -> bool:
    """Whether this kernel backs an anonymous 2 MB extent with a huge page on request
    (MADV_COLLAPSE, Linux 6.1 and later, transparent huge pages not switched off)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import mmap

    try:
        size = int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return False
    region = mmap.mmap(-1, 2 * size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        start = (base + size - 1) // size * size
        region[start - base : start - base + size] = b"\x01" * size
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        madv_collapse = 25
        return bool(libc.madvise(start, size, madv_collapse) == 0)
    finally:
        region.close()


PREWARM_AND_DECODE_SCRIPT = """
import json, sys
from pathlib import Path
from gramkiln import Grammar
from gramkiln.runtime.compiled import CompiledGrammar, allocate_token_bitmask
from gramkiln.runtime.vocab import Vocab
from gramkiln.testing.vocabularies import greedy_tokens, substring_vocab

grammar = Path(sys.argv[1]).read_text(encoding="utf-8")
instances = [Path(p).read_bytes().removesuffix(b"\\n") for p in sys.argv[2:]]
vocab = substring_vocab(instances)
loaded = CompiledGrammar.load(Grammar.from_lark(grammar).compile(vocab).to_bytes(), vocab,
                              prewarm=False)
stats = loaded.prewarm()
masks = []
for text in instances:
    matcher = loaded.matcher()
    for token in greedy_tokens(vocab, text):
        bitmask = allocate_token_bitmask(1, vocab.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        masks.append(bitmask.tobytes().hex())
        assert matcher.accept_token(token)
print(json.dumps({"extents": stats["huge_page_extents"], "read_back": stats["read_back_bytes"],
                  "masks": masks}))
"""


def _prewarm_and_decode_clike_with(variable: str) -> dict[str, dict[str, Any]]:
    """Run PREWARM_AND_DECODE_SCRIPT on two C-like instances in a fresh process for each of
    `variable`=on and =off (so that neither inherits the other's huge pages); its outputs by
    setting."""
    paths = sorted((BENCH / "instances" / "clike").glob("*.txt"))[:2]
    outputs = {}
    for setting in ("on", "off"):
        env = dict(os.environ, **{variable: setting}, GRAMKILN_PREWARM_MS="60000")
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                PREWARM_AND_DECODE_SCRIPT,
                str(BENCH / "grammars" / "clike.lark"),
            ]
            + [str(p) for p in paths],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        outputs[setting] = json.loads(done.stdout)
    return outputs


def test_huge_pages_for_the_caches_leave_masks_unchanged() -> None:
    # The prewarm asks the kernel to back its caches with huge pages. Masks are the same either
    # way, and where this kernel collapses an extent on request, the prewarm backed some.
    outputs = _prewarm_and_decode_clike_with("GRAMKILN_HUGE_PAGES")
    assert outputs["off"]["extents"] == 0
    assert outputs["on"]["masks"] == outputs["off"]["masks"] and len(outputs["on"]["masks"]) > 50
    if _kernel_collapses_into_huge_pages():
        assert outputs["on"]["extents"] > 0


def test_the_read_back_of_the_fill_tables_leaves_masks_unchanged() -> None:
    # The prewarm's last step reads back the tables computed fills read (so that a decode right
    # after finds them in cache); with it left out nothing is read, and masks are the same.
    outputs = _prewarm_and_decode_clike_with("GRAMKILN_PREWARM_READBACK")
    assert outputs["off"]["read_back"] == 0
    # The walk arena and the stored local walks at least; never past its 24 MB bound by more
    # than the last piece read.
    assert 0 < outputs["on"]["read_back"] < 25 << 20
    assert outputs["on"]["masks"] == outputs["off"]["masks"] and len(outputs["on"]["masks"]) > 50
