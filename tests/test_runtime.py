"""Runtime behaviour: rollback/fork/reset, determinism, save/load, buffers, batches, misuse."""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
from gramkiln.ir import parse_grammar
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import (
    CompiledGrammar,
    _apply_bitmask_torch,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_ids,
    fill_next_token_bitmask_batch,
)
from gramkiln.runtime.vocab import Vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.errors import (
    ArtifactError,
    CompileError,
    EmptyLanguageWarning,
    EndTokenWarning,
    VocabError,
)

TOKENS = [
    b"{",
    b"}",
    b'"',
    b":",
    b",",
    b" ",
    b"a",
    b"b",
    b'"a"',
    b'":',
    b'",',
    b"{}",
    b"1",
    b"12",
    b"</s>",
]
VOCAB = Vocab(TOKENS, eos_ids=[14], special_ids=[14])
JSONISH = parse_grammar(
    """%ir 1
%start start
%ignore " "
rule start = obj
rule obj = "{" (pair ("," pair)*)? "}"
rule pair = STR ":" value
rule value = STR | NUM | obj
term STR = "\\"" [a-b]* "\\""
term NUM = [0-9]+
"""
)


@pytest.fixture(scope="module")
def compiled() -> CompiledGrammar:
    return compile_grammar(JSONISH, VOCAB)


def mask(matcher, vocab_size: int) -> list[int]:
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return bitmask_to_ids(bitmask[0], vocab_size)


def random_valid_walk(compiled: CompiledGrammar, rnd: random.Random, steps: int) -> list[int]:
    """Token ids chosen uniformly among the allowed ones (stops at a dead end or EOS)."""
    matcher = compiled.matcher()
    chosen: list[int] = []
    for _ in range(steps):
        allowed = mask(matcher, compiled.vocab_size)
        if not allowed:
            break
        token = rnd.choice(allowed)
        assert matcher.accept_token(token)
        chosen.append(token)
    return chosen


_SHARED: dict[str, CompiledGrammar] = {}


def shared_compiled() -> CompiledGrammar:
    """One compiled grammar for all hypothesis examples (compiling per example is wasteful)."""
    if "jsonish" not in _SHARED:
        _SHARED["jsonish"] = compile_grammar(JSONISH, VOCAB)
    return _SHARED["jsonish"]


@settings(max_examples=30)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(0, 3), min_size=1, max_size=25))
def test_accept_rollback_fork_interleavings_match_fresh_matcher(seed: int, ops: list[int]) -> None:
    compiled = shared_compiled()
    rnd = random.Random(seed)
    matcher = compiled.matcher()
    fed: list[int] = []
    for op in ops:
        allowed = mask(matcher, compiled.vocab_size)
        if op in (0, 1):  # accept an allowed token, or try any token
            token = rnd.choice(allowed) if allowed and op == 0 else rnd.randrange(len(TOKENS))
            if matcher.accept_token(token):
                fed.append(token)
        elif op == 2 and fed:  # roll back a random number of steps
            count = rnd.randint(1, len(fed))
            matcher.rollback(count)
            del fed[len(fed) - count :]
        elif op == 3 and allowed:  # advance a fork; the original must be unaffected
            token = rnd.choice(allowed)
            other = matcher.fork()
            assert other.accept_token(token)
            assert mask(matcher, compiled.vocab_size) == allowed
            if rnd.random() < 0.5:
                matcher, fed = other, [*fed, token]
        fresh = compiled.matcher()
        assert fresh.accept_tokens(fed)
        assert mask(matcher, compiled.vocab_size) == mask(fresh, compiled.vocab_size)
        assert matcher.is_accepting() == fresh.is_accepting()
        assert matcher.is_terminated() == fresh.is_terminated()


def test_rejected_token_leaves_state_unchanged(compiled: CompiledGrammar) -> None:
    matcher = compiled.matcher()
    assert matcher.accept_token(0)
    before = mask(matcher, compiled.vocab_size)
    assert not matcher.accept_token(12)  # a number cannot be a key
    assert mask(matcher, compiled.vocab_size) == before
    assert not matcher.accept_string('1"')
    assert mask(matcher, compiled.vocab_size) == before


def test_accept_tokens_is_all_or_nothing(compiled: CompiledGrammar) -> None:
    matcher = compiled.matcher()
    assert not matcher.accept_tokens([0, 8, 3, 12, 0])  # "{" "a" ":" 1 "{" -> the last fails
    assert matcher.num_steps == 0
    assert matcher.accept_tokens([0, 8, 3, 13, 1])
    assert matcher.is_accepting()
    assert mask(matcher, compiled.vocab_size) == [5, 14]  # trailing ignore, or the end


def test_rollback_past_history_and_reset(compiled: CompiledGrammar) -> None:
    matcher = compiled.matcher()
    initial = mask(matcher, compiled.vocab_size)
    assert matcher.accept_token(0)
    with pytest.raises(ValueError):
        matcher.rollback(2)
    with pytest.raises(ValueError):
        matcher.rollback(-1)
    matcher.reset()
    assert matcher.num_steps == 0
    assert mask(matcher, compiled.vocab_size) == initial


def test_jump_forward(compiled: CompiledGrammar) -> None:
    matcher = compiled.matcher()
    assert matcher.find_jump_forward_string() == "{"
    assert matcher.accept_string('{"a"')
    assert matcher.find_jump_forward_string() == ""  # ":" or an ignored " " may follow
    forced = compile_grammar(
        parse_grammar('%ir 1\n%start start\nrule start = "h\u00e9llo" [a-b]\n')
    )
    assert forced.matcher().find_jump_forward_string() == "h\u00e9llo"


def test_jump_forward_strings_hold_only_whole_characters_the_matcher_takes() -> None:
    # After a token that ends inside a character the forced bytes start with a continuation
    # byte, which no string can carry: it used to come back as U+FFFD, which the matcher then
    # refused.
    byte_vocab = Vocab.byte_level()
    matcher = Grammar.from_regex("\u00e9x\u00e9").compile(byte_vocab).matcher()
    assert matcher.find_jump_forward_string() == "\u00e9x\u00e9"
    assert matcher.accept_token(0xC3)
    assert matcher.find_jump_forward_string() == ""
    assert matcher.accept_token(0xA9)
    assert matcher.find_jump_forward_string() == "x\u00e9"
    assert matcher.accept_token(ord("x")) and matcher.accept_token(0xC3)
    assert matcher.find_jump_forward_string() == ""
    rnd = random.Random(3)
    for pattern in ("\u00e9\u4e2d\U0001f600z", "a\u00e9?[\u00e0-\u00ff]{2}b", "(\u4e2d|\u4e2e)q"):
        matcher = Grammar.from_regex(pattern).compile(byte_vocab).matcher()
        for _ in range(12):
            forced = matcher.find_jump_forward_string()
            assert "\ufffd" not in forced
            assert matcher.fork().accept_string(forced)
            text_ids = [i for i in mask(matcher, byte_vocab.vocab_size) if i < 256]
            if not text_ids:
                break
            assert matcher.accept_token(rnd.choice(text_ids))


def test_deterministic_artifact_and_roundtrip(tmp_path, compiled: CompiledGrammar) -> None:
    again = compile_grammar(JSONISH, VOCAB)
    assert again.to_bytes() == compiled.to_bytes()
    path = tmp_path / "g.gkc"
    compiled.save(path)
    loaded = CompiledGrammar.load(path, vocab=VOCAB)
    assert loaded.to_bytes() == compiled.to_bytes()
    rnd = random.Random(7)
    walk = random_valid_walk(compiled, rnd, 12)
    a, b = compiled.matcher(), CompiledGrammar.load(compiled.to_bytes()).matcher()
    for token in walk:
        assert mask(a, compiled.vocab_size) == mask(b, compiled.vocab_size)
        assert a.accept_token(token) and b.accept_token(token)
    with pytest.raises(VocabError):
        CompiledGrammar.load(path, vocab=Vocab(TOKENS[:-1] + [b"x"], eos_ids=[14]))


def test_bitmask_buffer_checks(compiled: CompiledGrammar) -> None:
    matcher = compiled.matcher()
    words = (compiled.vocab_size + 31) // 32
    with pytest.raises(ValueError):
        matcher.fill_next_token_bitmask(np.zeros((1, words + 1), dtype=np.int32))
    with pytest.raises(ValueError):
        matcher.fill_next_token_bitmask(np.zeros((1, words), dtype=np.int64))
    with pytest.raises(ValueError):
        matcher.fill_next_token_bitmask(np.zeros((2, 2 * words), dtype=np.int32)[:, ::2])
    with pytest.raises(IndexError):
        matcher.fill_next_token_bitmask(np.zeros((2, words), dtype=np.int32), 2)
    with pytest.raises(TypeError):
        matcher.fill_next_token_bitmask([0] * words)
    with pytest.raises(ValueError):
        read_only = np.zeros((1, words), dtype=np.int32)
        read_only.setflags(write=False)
        matcher.fill_next_token_bitmask(read_only)
    with pytest.raises(ValueError):  # int32, but not in the machine's byte order
        matcher.fill_next_token_bitmask(
            np.zeros((1, words), dtype=np.dtype(np.int32).newbyteorder())
        )
    with pytest.raises(ValueError):  # rows of the right length that are not contiguous
        matcher.fill_next_token_bitmask(np.zeros((2, 2 * words), dtype=np.int32)[:, :words])
    one_d = np.zeros(words, dtype=np.int32)
    matcher.fill_next_token_bitmask(one_d)
    assert bitmask_to_ids(one_d, compiled.vocab_size) == [0, 11]  # "{" and "{}"

    # Plain arrays are read through numpy's own structure, anything else through the buffer
    # protocol: a subclass and a row of a larger array get the same mask.
    class Subclass(np.ndarray):
        pass

    for bitmask, row in (
        (np.full((1, words), -1, dtype=np.int32).view(Subclass), 0),
        (np.full((3, words), -1, dtype=np.int32)[1:], 1),
    ):
        matcher.fill_next_token_bitmask(bitmask, row)
        assert bitmask_to_ids(np.asarray(bitmask[row]), compiled.vocab_size) == [0, 11]


def test_apply_token_bitmask_inplace(compiled: CompiledGrammar) -> None:
    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(2, compiled.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 1)
    logits = np.zeros((2, compiled.vocab_size), dtype=np.float32)
    apply_token_bitmask_inplace(logits, bitmask)
    assert np.isneginf(logits[0]).all()
    assert np.flatnonzero(np.isfinite(logits[1])).tolist() == [0, 11]


def test_apply_token_bitmask_inplace_to_chosen_rows(compiled: CompiledGrammar) -> None:
    # Only the rows in `indices` are masked: a batch can mix constrained and free requests.
    bitmask = allocate_token_bitmask(3, compiled.vocab_size)
    compiled.matcher().fill_next_token_bitmask(bitmask, 2)
    logits = np.zeros((3, compiled.vocab_size), dtype=np.float64)
    apply_token_bitmask_inplace(logits, bitmask, indices=[2])
    assert np.isfinite(logits[:2]).all()
    assert np.flatnonzero(np.isfinite(logits[2])).tolist() == [0, 11]
    one_d = np.zeros(compiled.vocab_size, dtype=np.float16)
    apply_token_bitmask_inplace(one_d, bitmask[2], indices=[0])
    assert np.flatnonzero(np.isfinite(one_d)).tolist() == [0, 11]
    untouched = np.zeros((3, compiled.vocab_size), dtype=np.float32)
    apply_token_bitmask_inplace(untouched, bitmask, indices=[])
    assert np.isfinite(untouched).all()
    with pytest.raises(IndexError, match="indices"):
        apply_token_bitmask_inplace(logits, bitmask, indices=[3])
    with pytest.raises(TypeError, match="indices must be integers"):
        apply_token_bitmask_inplace(logits, bitmask, indices=[0.5])
    # With indices the two may differ in rows: only the indexed ones must exist in both.
    tall = np.zeros((5, compiled.vocab_size), dtype=np.float32)
    apply_token_bitmask_inplace(tall, bitmask, indices=[2])
    assert np.isfinite(tall[[0, 1, 3, 4]]).all()
    assert np.flatnonzero(np.isfinite(tall[2])).tolist() == bitmask_to_ids(
        bitmask[2], compiled.vocab_size
    )
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        apply_token_bitmask_inplace(tall, bitmask, indices=[4])
    with pytest.raises(ValueError, match="shapes do not match"):
        apply_token_bitmask_inplace(tall, bitmask)
    empty = np.zeros((0, compiled.vocab_size), dtype=np.float32)  # an empty batch: nothing to do
    apply_token_bitmask_inplace(empty, bitmask[:0])


def test_torch_logits_of_every_floating_dtype_and_device(compiled: CompiledGrammar) -> None:
    # Model logits are often bfloat16, which numpy cannot view; the mask is applied by torch
    # itself, on the logits' device (`meta` stands in for an accelerator here).
    torch = pytest.importorskip("torch", reason="torch is an optional dependency")
    bitmask = torch.zeros((2, (compiled.vocab_size + 31) // 32), dtype=torch.int32)
    compiled.matcher().fill_next_token_bitmask(bitmask, 1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        logits = torch.zeros((2, compiled.vocab_size), dtype=dtype)
        apply_token_bitmask_inplace(logits, bitmask)
        assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [0, 11]
        assert not torch.isfinite(logits[0]).any()
        rows = torch.zeros((2, compiled.vocab_size), dtype=dtype)
        apply_token_bitmask_inplace(rows, bitmask, indices=[1])
        assert torch.isfinite(rows[0]).all()
        assert torch.isfinite(rows[1]).nonzero().flatten().tolist() == [0, 11]
    wide = torch.zeros((2, compiled.vocab_size + 40))
    apply_token_bitmask_inplace(wide[:, 3:], bitmask)  # a strided view, written through
    assert torch.isfinite(wide[1]).nonzero().flatten().tolist() == [0, 1, 2, 3, 14]
    apply_token_bitmask_inplace(torch.zeros((2, compiled.vocab_size), device="meta"), bitmask)
    with pytest.raises(TypeError, match="floating-point"):
        apply_token_bitmask_inplace(
            torch.zeros((2, compiled.vocab_size), dtype=torch.int32), bitmask
        )


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 4),
    vocab=st.integers(1, 100),
    words_delta=st.integers(-2, 2),
    seed=st.integers(0, 2**32 - 1),
    pick=st.lists(st.integers(0, 3), max_size=4),
)
def test_torch_unpacking_agrees_with_numpy(
    rows: int, vocab: int, words_delta: int, seed: int, pick: list[int]
) -> None:
    # Torch logits on an accelerator get the packed mask unpacked on their own device; numpy
    # logits are the reference. Random words set the sign bit too, and the bitmask may be narrower (tokens
    # beyond it disallowed) or wider than the vocabulary.
    torch = pytest.importorskip("torch", reason="torch is an optional dependency")
    words = max(0, (vocab + 31) // 32 + words_delta)
    generator = np.random.default_rng(seed)
    bitmask = generator.integers(-(2**31), 2**31, size=(rows, words), dtype=np.int64)
    bitmask = bitmask.astype(np.int32)
    base = generator.standard_normal((rows, vocab)).astype(np.float32)
    indices = sorted({row for row in pick if row < rows}) if pick else None
    expected = base.copy()
    apply_token_bitmask_inplace(expected, bitmask, indices=indices)
    for mask in (bitmask, torch.from_numpy(bitmask)):
        logits = torch.from_numpy(base.copy())
        apply_token_bitmask_inplace(logits, mask, indices=indices)
        assert np.array_equal(logits.numpy(), expected)
        if indices:  # a bitmask with just the rows up to the last index
            logits = torch.from_numpy(base.copy())
            _apply_bitmask_torch(logits, mask[: indices[-1] + 1], np.asarray(indices))
            assert np.array_equal(logits.numpy(), expected)
        # The accelerator path (packed mask moved, unpacked by torch), run on the CPU here.
        logits = torch.from_numpy(base.copy())
        selected = None if indices is None else np.asarray(indices, dtype=np.int64)
        _apply_bitmask_torch(logits, mask, selected)
        assert np.array_equal(logits.numpy(), expected)
    if rows == 1:
        one_row = torch.from_numpy(base[0].copy())
        apply_token_bitmask_inplace(one_row, bitmask[0])
        assert np.array_equal(one_row.numpy(), _masked_row(base[0], bitmask[0]))


def test_cuda_logits_agree_with_numpy(compiled: CompiledGrammar) -> None:
    # Runs where torch sees a GPU (the CI machine has none): the packed mask crosses to the
    # device and is unpacked there, for every floating dtype, all rows and chosen rows.
    torch = pytest.importorskip("torch", reason="torch is an optional dependency")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the accelerator path is run on the CPU by the test above")
    generator = np.random.default_rng(3)
    for vocab in (compiled.vocab_size, 1000, 128_256):
        words = (vocab + 31) // 32
        bitmask = generator.integers(-(2**31), 2**31, size=(5, words), dtype=np.int64)
        bitmask = bitmask.astype(np.int32)
        base = generator.standard_normal((5, vocab)).astype(np.float32)
        for indices in (None, [0, 3]):
            expected = base.copy()
            apply_token_bitmask_inplace(expected, bitmask, indices=indices)
            for dtype in (torch.bfloat16, torch.float16, torch.float32):
                for mask in (bitmask, torch.from_numpy(bitmask), torch.from_numpy(bitmask).cuda()):
                    logits = torch.from_numpy(base).to("cuda", dtype)
                    apply_token_bitmask_inplace(logits, mask, indices=indices)
                    masked = torch.isinf(logits).cpu().numpy()
                    assert np.array_equal(masked, np.isinf(expected))
    one_row = torch.zeros(compiled.vocab_size, device="cuda")
    row_mask = allocate_token_bitmask(1, compiled.vocab_size)
    compiled.matcher().fill_next_token_bitmask(row_mask)
    apply_token_bitmask_inplace(one_row, row_mask[0])
    assert torch.isfinite(one_row).nonzero().flatten().tolist() == bitmask_to_ids(
        row_mask[0], compiled.vocab_size
    )


def _masked_row(row: np.ndarray, words: np.ndarray) -> np.ndarray:
    """`row` with -inf wherever the packed `words` have no bit, computed bit by bit."""
    out = row.copy()
    for token in range(len(row)):
        word = token // 32
        if word >= len(words) or not (int(words[word]) >> (token % 32)) & 1:
            out[token] = -np.inf
    return out


def test_batch_fill_refuses_one_row_for_two_matchers(compiled: CompiledGrammar) -> None:
    first, second = compiled.matcher(), compiled.matcher()
    assert second.accept_string("{")
    bitmask = allocate_token_bitmask(2, compiled.vocab_size)
    with pytest.raises(ValueError, match="distinct"):
        fill_next_token_bitmask_batch([first, second], bitmask, indices=[1, 1])
    with pytest.raises(TypeError, match="indices must be integers"):
        fill_next_token_bitmask_batch([first, second], bitmask, indices=[1.0, 0.0])
    with pytest.raises(IndexError, match="out of range"):
        fill_next_token_bitmask_batch([first, second], bitmask, indices=[2**64, 0])
    fill_next_token_bitmask_batch([first, second], bitmask, indices=np.array([1, 0]))
    assert bitmask_to_ids(bitmask[1], compiled.vocab_size) == [0, 11]
    assert bitmask_to_ids(bitmask[0], compiled.vocab_size) == mask(second, compiled.vocab_size)


def walked_matchers(
    compiled: CompiledGrammar, seed: int, count: int, max_steps: int
) -> tuple[list[Any], np.ndarray]:
    """`count` matchers each after a random valid walk, and their masks filled one by one."""
    rnd = random.Random(seed)
    matchers = []
    for _ in range(count):
        matcher = compiled.matcher()
        for token in random_valid_walk(compiled, rnd, rnd.randint(0, max_steps)):
            matcher.accept_token(token)
        matchers.append(matcher)
    serial = allocate_token_bitmask(len(matchers), compiled.vocab_size)
    for row, matcher in enumerate(matchers):
        matcher.fill_next_token_bitmask(serial, row)
    return matchers, serial


def test_batch_fill_from_threads_matches_serial(compiled: CompiledGrammar) -> None:
    matchers, serial = walked_matchers(compiled, 3, 16, 10)
    batch = allocate_token_bitmask(len(matchers), compiled.vocab_size)
    fill_next_token_bitmask_batch(matchers, batch, threads=4)
    assert np.array_equal(batch, serial)
    reversed_rows = allocate_token_bitmask(len(matchers), compiled.vocab_size)
    fill_next_token_bitmask_batch(matchers, reversed_rows, list(range(15, -1, -1)), threads=3)
    assert np.array_equal(reversed_rows[::-1], serial)

    outputs = [allocate_token_bitmask(len(matchers), compiled.vocab_size) for _ in range(4)]

    def worker(out: np.ndarray) -> None:
        for _ in range(5):
            fill_next_token_bitmask_batch(matchers, out, threads=2)

    workers = [threading.Thread(target=worker, args=(out,)) for out in outputs]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    for out in outputs:
        assert np.array_equal(out, serial)
    with pytest.raises(IndexError):
        fill_next_token_bitmask_batch(matchers[:2], batch, [0, 16])
    with pytest.raises(ValueError):
        fill_next_token_bitmask_batch(matchers[:2], batch, [0])


def test_batch_fill_computes_the_rows_of_several_grammars(compiled: CompiledGrammar) -> None:
    # Computed rows go to threads by runtime (in turn up to 16 rows, then more threads), so a
    # cold batch mixing two runtimes, one of them with 40 rows to compute, must still give
    # every row the mask a serial fill gives.
    rnd = random.Random(11)
    walks = [random_valid_walk(compiled, rnd, rnd.randint(0, 12)) for _ in range(56)]
    data = compiled.to_bytes()
    for threads in (1, 2, 4):
        runtimes = [CompiledGrammar.load(data, prewarm=False) for _ in range(2)]
        matchers = []
        for row, walk in enumerate(walks):
            matcher = runtimes[0 if row < 40 else 1].matcher()
            for token in walk:
                assert matcher.accept_token(token)
            matchers.append(matcher)
        order = list(range(len(walks)))
        rnd.shuffle(order)  # the two runtimes' rows interleaved in the batch
        batch = allocate_token_bitmask(len(walks), compiled.vocab_size)
        fill_next_token_bitmask_batch([matchers[i] for i in order], batch, threads=threads)
        serial = allocate_token_bitmask(len(walks), compiled.vocab_size)
        for row, i in enumerate(order):
            reference = compiled.matcher()
            for token in walks[i]:
                assert reference.accept_token(token)
            reference.fill_next_token_bitmask(serial, row)
        assert np.array_equal(batch, serial)


def test_batch_fill_pool_over_many_calls_and_after_fork(compiled: CompiledGrammar) -> None:
    # The batch fill's worker threads persist between calls and grow when a call asks for
    # more; a forked child has none of them and must make its own rather than wait forever.
    matchers, serial = walked_matchers(compiled, 5, 12, 8)
    for call in range(60):
        batch = allocate_token_bitmask(len(matchers), compiled.vocab_size)
        fill_next_token_bitmask_batch(matchers, batch, threads=1 + call % 7)
        assert np.array_equal(batch, serial)
    # Past 64 rows a thread, the cached rows are spread over threads too (a matcher may fill
    # several rows).
    many = allocate_token_bitmask(20 * len(matchers), compiled.vocab_size)
    fill_next_token_bitmask_batch(matchers * 20, many, threads=4)
    assert np.array_equal(many, np.tile(serial, (20, 1)))
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when its batch fill is exact
        status = 1
        try:
            batch = allocate_token_bitmask(len(matchers), compiled.vocab_size)
            fill_next_token_bitmask_batch(matchers, batch, threads=4)
            status = 0 if np.array_equal(batch, serial) else 2
        finally:
            os._exit(status)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(wait_status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's batch fill did not finish within 60 s")


def test_end_tokens_take_numpy_ids_once_each() -> None:
    compiled = compile_grammar(JSONISH, VOCAB, end_tokens=[np.int64(14), 14, np.int32(14)])
    assert compiled.header["options"]["end_tokens"] == [14]
    for bad in (14, "14", [14.0], [True]):
        with pytest.raises(CompileError, match="end"):
            compile_grammar(JSONISH, VOCAB, end_tokens=bad)


def test_compile_errors_are_clear() -> None:
    with pytest.raises(CompileError):
        compile_grammar(JSONISH, VOCAB, end_tokens=[99])
    with pytest.raises(CompileError):
        compile_grammar(JSONISH, VOCAB, bogus_option=True)
    recursive = parse_grammar('%ir 1\n%start start\nrule start [max_tokens=3] = "a" start?\n')
    with pytest.raises(CompileError, match="needs a body that compiles to one terminal"):
        compile_grammar(recursive, VOCAB)


@pytest.mark.parametrize(
    "source, located",
    [
        ('start: A\nA: "a"{0,1000000}\n', "terminal A (line 2, column 1): "),
        ('start: "x" r\nr[max_tokens=3]: "a" r?\n', "rule r (line 2, column 1): max_tokens"),
        ('start: "x" "' + "ab" * 125_000 + '"\n', "(line 1, column 8): "),
    ],
)
def test_compile_errors_name_the_terminal_and_its_line(source: str, located: str) -> None:
    from gramkiln import Grammar

    with pytest.raises(CompileError, match=re.escape(located)):
        Grammar.from_lark(source).compile()


def test_a_count_fused_whole_past_the_dfa_limit_falls_back_to_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A counted repetition up to MAX_FUSED_COUNT is fused into one DFA; where that DFA needs
    more states than the limit, the compiler lowers again with such counts split into blocks
    (as every count past MAX_FUSED_COUNT is), and the language is the same."""
    import gramkiln.runtime.compile as compile_module
    from gramkiln.runtime.compile import flatten_grammar, lower_for_runtime

    from gramkiln.errors import AutomatonSizeError

    monkeypatch.setattr(compile_module, "MAX_DFA_STATES", 2500)  # ("ab" | "cd"){0,1500}: ~3,000
    grammar = parse_grammar('%ir 1\n%start start\nrule start = "<" ("ab" | "cd"){0,1500} ">"\n')
    with pytest.raises(AutomatonSizeError):
        flatten_grammar(lower_for_runtime(grammar), VOCAB)
    compiled = compile_grammar(grammar, VOCAB)
    for count in (0, 1, 31, 32, 33, 1499, 1500, 1501):
        pairs = "".join(random.Random(count).choice(["ab", "cd"]) for _ in range(count))
        matcher = compiled.matcher()
        assert (matcher.accept_string("<" + pairs + ">") and matcher.is_accepting()) == (
            count <= 1500
        ), count


def test_a_run_fused_whole_past_the_automaton_limits_keeps_its_lexeme_boundaries() -> None:
    """(Found by hypothesis.) With the ignored terminals woven between its items, `start`'s
    run fuses into one automaton whose determinisation passes the work bound, though every
    piece of it is small: the compiler lowers again with every lexeme boundary of ordinary
    rules kept (fuse_terminal_leaves), and the language is the same."""
    from gramkiln.runtime.compile import flatten_grammar, lower_for_runtime

    from gramkiln.errors import AutomatonSizeError
    from gramkiln.testing.reference import ReferenceMatcher

    grammar = Grammar.from_lark(
        'start: "a" "a" "a" "a" "a" "a" ("a" "a")*\n'
        'T0: ","\nT1: /(a|aa,){3,}/\n%ignore T0\n%ignore T1\n'
    )
    with pytest.raises(AutomatonSizeError, match="too costly to determinise"):
        flatten_grammar(lower_for_runtime(grammar.ir), VOCAB)
    vocab = Vocab([b"a", b",", b"aa", b"a,", b"aa,", b",a", b"</s>"], eos_ids=[6], special_ids=[6])
    compiled = compile_grammar(grammar.ir, vocab)
    reference = ReferenceMatcher(grammar.ir)
    for text in ("aaaaaa", "aa,aaaaaa", "a,aaa,a,aaa", "aaaaaaaaa,aa,aaa", "aaaaaaaa,,"):
        expected = reference.masks_along(text, vocab.tokens, vocab.special_ids, vocab.eos_ids)
        matcher = compiled.matcher()
        for position, byte in enumerate(text.encode()):
            got = mask(matcher, vocab.vocab_size)
            assert got == [i for i, ok in enumerate(expected[position]) if ok], (text, position)
            if not matcher.accept_token(vocab.tokens.index(bytes([byte]))):
                assert not any(expected[position + 1]), (text, position)
                break
        else:
            assert matcher.is_accepting() == reference.accepts(text), text


def test_the_compiler_refuses_an_unknown_fusion() -> None:
    from gramkiln.runtime.compile import lower_for_runtime

    with pytest.raises(ValueError, match="unknown fusion 'none'"):
        lower_for_runtime(JSONISH, fusion="none")


def test_empty_language_allows_nothing() -> None:
    ir = parse_grammar('%ir 1\n%start start\nrule start = "a" <[13]> \n')
    small = Vocab([b"a", b"b"])
    with pytest.warns(EmptyLanguageWarning):  # token id 13 is outside this vocabulary
        compiled = compile_grammar(ir, small)
    matcher = compiled.matcher()
    assert mask(matcher, compiled.vocab_size) == []
    assert not matcher.accept_token(0)


def test_corrupt_runtime_section_is_artifact_error(compiled: CompiledGrammar) -> None:
    from gramkiln.runtime import _core

    blob = compiled._sections["runtime"]  # noqa: SLF001 - testing the loader directly
    for cut in (0, 3, 8, len(blob) // 2, len(blob) - 1):
        with pytest.raises(ArtifactError):
            _core.load_runtime(blob[:cut])


def test_torch_cpu_tensors(compiled: CompiledGrammar) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional dependency")
    matcher = compiled.matcher()
    bitmask = torch.zeros((2, (compiled.vocab_size + 31) // 32), dtype=torch.int32)
    matcher.fill_next_token_bitmask(bitmask, 1)
    assert bitmask_to_ids(bitmask[1].numpy(), compiled.vocab_size) == [0, 11]
    logits = torch.zeros((2, compiled.vocab_size))
    apply_token_bitmask_inplace(logits, bitmask)
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [0, 11]
    with pytest.raises(ValueError):
        matcher.fill_next_token_bitmask(bitmask.to(torch.int64))


@pytest.mark.parametrize("length", [40, 1000])
def test_long_chains_of_leading_rules_match_the_reference(length: int) -> None:
    # r_i = r_{i+1} "a" | "b": predicting r_0 predicts every rule of the chain, so prediction
    # closures are quadratic in its length; past their budget (the 1,000-rule chain) sets are
    # closed item by item. Both ways must give the same language.
    lines = ["%ir 1", "%start start", "rule start = r0"]
    lines += [f'rule r{i} = r{i + 1} "a" | "b"' for i in range(length)]
    lines.append(f'rule r{length} = "c"')
    ir = parse_grammar("\n".join(lines) + "\n")
    vocab = Vocab([b"a", b"b", b"c", b"aa", b"</s>"], eos_ids=[4], special_ids=[4])
    compiled = compile_grammar(ir, vocab)
    for text, expected in [
        ("b", True),
        ("b" + "a" * (length - 1), True),
        ("b" + "a" * length, False),
        ("c" + "a" * length, True),
        ("c" + "a" * (length - 1), False),
        ("ab", False),
    ]:
        matcher = compiled.matcher()
        assert (matcher.accept_string(text) and matcher.is_accepting()) == expected, text
    matcher = compiled.matcher()
    assert mask(matcher, vocab.vocab_size) == [1, 2]
    assert matcher.accept_token(2)
    assert mask(matcher, vocab.vocab_size) == [0, 3]
    assert matcher.accept_string("a" * (length - 1))
    assert mask(matcher, vocab.vocab_size) == [0]
    assert matcher.accept_token(0)
    assert mask(matcher, vocab.vocab_size) == [4]


def test_overlapping_calls_on_one_matcher_raise_instead_of_racing() -> None:
    # accept_token runs without the GIL, so two threads could change one matcher at once (a
    # segfault within a few thousand steps). Overlapping changes now raise RuntimeError, and
    # every call that returned normally took effect exactly once.
    matcher = Grammar.from_lark('start: "a"*').compile(Vocab.byte_level()).matcher()
    accepted = [0, 0]
    refused = [0, 0]
    mask = allocate_token_bitmask(1, 257)

    def stepper(slot: int) -> None:
        for step in range(20_000):
            try:
                if step % 3 == 2:
                    matcher.fill_next_token_bitmask(mask)
                elif matcher.accept_token(97):
                    accepted[slot] += 1
            except RuntimeError as error:
                assert "in use by another thread" in str(error) or "being changed" in str(error)
                refused[slot] += 1

    workers = [threading.Thread(target=stepper, args=(slot,)) for slot in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert matcher.num_steps == sum(accepted)
    assert matcher.is_accepting()
    matcher.fill_next_token_bitmask(mask)
    assert bitmask_to_ids(mask[0], 257) == [97, 256]


def test_accept_string_takes_bytearray_and_memoryview() -> None:
    matcher = Grammar.from_lark('start: "abc"').compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string(bytearray(b"a"))
    assert matcher.accept_string(memoryview(b"xbx")[1:2])
    assert matcher.accept_string("c")
    assert matcher.is_accepting()


def test_an_end_token_that_is_also_text_is_only_an_end() -> None:
    # An end id the vocabulary does not mark special ("ab" here), or a text token passed as
    # compile(end_tokens=...), is allowed and accepted exactly where the input is accepted,
    # as the end, as the reference matcher has it; it used to be taken as text elsewhere.
    vocab = Vocab([b"a", b"b", b"ab"], eos_ids=[2])
    grammar = Grammar.from_lark('start: "a" "b"*')
    matcher = grammar.compile(vocab).matcher()
    assert mask(matcher, 3) == [0]
    assert not matcher.accept_token(2) and matcher.num_steps == 0
    assert matcher.accept_token(0)
    assert mask(matcher, 3) == [1, 2]
    assert matcher.accept_token(2) and matcher.is_terminated()
    newline_end = Vocab([b"a", b"\n", b"a\n"], eos_ids=[])
    lines = Grammar.from_lark('start: ("a" "\\n")+').compile(newline_end, end_tokens=[1])
    matcher = lines.matcher()
    assert mask(matcher, 3) == [0, 2]  # "\n" only as the end, and the input is not accepted
    assert matcher.accept_token(0) and not matcher.accept_token(1)
    assert mask(matcher, 3) == []  # the "\n" the grammar needs is an end token: no token left
    assert matcher.accept_string("\n")
    assert mask(matcher, 3) == [0, 1, 2]
    assert matcher.accept_token(1) and matcher.is_terminated()


def test_bad_text_and_logits_get_clear_errors() -> None:
    matcher = Grammar.from_lark('start: "a"').compile(Vocab.byte_level()).matcher()
    with pytest.raises(UnicodeEncodeError):
        matcher.accept_string("\ud800")  # a lone surrogate has no UTF-8 form
    assert matcher.num_steps == 0 and matcher.accept_string("a")
    bitmask = allocate_token_bitmask(1, 257)
    with pytest.raises(TypeError, match="floating-point"):
        apply_token_bitmask_inplace(np.zeros((1, 257), dtype=np.int64), bitmask)


END_VOCAB = Vocab([b"<s>", b"</s>", b"aa", b"bb", b"cc", b"dd"], eos_ids=[1], special_ids=[0, 1])


def _masked_and_accepted(compiled: CompiledGrammar) -> tuple[list[int], list[int]]:
    matcher = compiled.matcher()
    allowed = mask(matcher, compiled.vocab_size)
    accepted = [t for t in range(compiled.vocab_size) if matcher.fork().accept_token(t)]
    return allowed, accepted


@pytest.mark.parametrize(
    ("source", "kind", "expected"),
    [
        ("root ::= !<[3]>", "ebnf", [0, 2, 4, 5]),
        ('start: <[*]> "aa"', "lark", [0, 2, 3, 4, 5]),
        ("start: <[^3]>", "lark", [0, 2, 4, 5]),
        ("start: <[0-5]>", "lark", [0, 2, 3, 4, 5]),
    ],
)
def test_end_tokens_are_never_matched_by_token_elements(
    source: str, kind: str, expected: list[int]
) -> None:
    # An end token only ends the input, where it is accepted (as in the reference matcher):
    # a token set that covers its id does not put it in the mask where accept_token would
    # refuse it.
    from gramkiln.testing import ReferenceMatcher

    grammar = Grammar.from_ebnf(source) if kind == "ebnf" else Grammar.from_lark(source)
    compiled = grammar.compile(END_VOCAB)
    allowed, accepted = _masked_and_accepted(compiled)
    assert allowed == accepted == expected
    oracle = ReferenceMatcher(grammar.ir, special_texts={0: "<s>", 1: "</s>"})
    reference = oracle.allowed_tokens(b"", END_VOCAB.tokens, [0, 1], [1])
    assert [i for i, ok in enumerate(reference) if ok] == expected
    matcher = compiled.matcher()
    assert matcher.accept_token(expected[0])
    # Accepted after one token (except where "aa" must follow), the end token is allowed.
    assert (1 in mask(matcher, compiled.vocab_size)) == ('"aa"' not in source)


def test_a_grammar_element_naming_only_end_tokens_warns() -> None:
    with pytest.warns(EndTokenWarning) as caught, pytest.warns(EmptyLanguageWarning):
        compiled = Grammar.from_lark('start: "aa" </s>').compile(END_VOCAB)
    assert str(caught[0].message).startswith(
        "</s> (line 1, column 13) names only end tokens (id 1), which no grammar element "
        "matches: an end token ends the input, and is allowed exactly where the input is "
        "accepted."
    )
    assert _masked_and_accepted(compiled) == ([], [])
    # Written without it, the end token ends the input after "aa".
    matcher = Grammar.from_lark('start: "aa"').compile(END_VOCAB).matcher()
    assert matcher.accept_token(2) and mask(matcher, 6) == [1] and matcher.accept_token(1)


def test_runtime_settles_end_ids_that_an_artifact_put_in_a_token_set() -> None:
    # Tables from another writer may list an end id in a token set; the runtime still allows
    # it only where the input is accepted, so that the mask and accept_token agree.
    from gramkiln.runtime.compile import build_tables, flatten_grammar, lower_for_runtime

    grammar = Grammar.from_lark('start: <[^3]> "aa"?')
    flat = flatten_grammar(lower_for_runtime(grammar.ir), END_VOCAB)  # no end ids left out
    assert 1 in flat.tokensets[0]
    blob = build_tables(flat, END_VOCAB, [1])
    compiled = CompiledGrammar.from_parts(grammar.ir, END_VOCAB, blob, {"end_tokens": [1]})
    assert _masked_and_accepted(compiled) == ([0, 2, 4, 5], [0, 2, 4, 5])
    matcher = compiled.matcher()
    assert matcher.accept_token(0)
    assert mask(matcher, 6) == [1, 2] and matcher.fork().accept_token(1)


def test_batch_threads_default_to_the_cpus_the_process_may_use(monkeypatch) -> None:
    # A container limited to 2 of a host's 64 cores must not start 64 fill threads.
    from gramkiln.runtime import compiled as compiled_module

    monkeypatch.setattr(compiled_module.os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    monkeypatch.setattr(compiled_module.os, "cpu_count", lambda: 64)
    assert compiled_module.usable_cpus() == 2

    def refused(pid: int) -> set[int]:
        raise OSError("not permitted")

    monkeypatch.setattr(compiled_module.os, "sched_getaffinity", refused, raising=False)
    assert compiled_module.usable_cpus() == 64
