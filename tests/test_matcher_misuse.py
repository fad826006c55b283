"""Random misuse of matchers never crashes and never corrupts them.

Sequences of calls mixing valid and invalid arguments (token ids out of range, rollbacks past
the history, buffers of the wrong dtype, shape, layout or row, batch fills with bad indices,
forks that go their own way): every invalid call raises a Python exception, and after every
call the matcher's mask, acceptance and step count equal those of a fresh matcher fed the
tokens it accepted.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from gramkiln.runtime.compiled import (
    allocate_token_bitmask,
    bitmask_to_ids,
    fill_next_token_bitmask_batch,
)
from gramkiln.runtime.vocab import Vocab

from gramkiln import Grammar

pytest.importorskip("gramkiln.runtime._core", reason="C++ runtime not built")

GRAMMARS = [
    'start: item ("," item)*\nitem: "id=" INT\n%import common.INT\n%import common.WS\n%ignore WS',
    'start: expr\nexpr: expr "+" term | term\nterm: term "*" NUM | NUM | "(" expr ")"\n'
    "NUM: /[0-9]+/",
    'start: s\ns: s s | "a" |',
    'start: "<" name ">" rest\nname[lazy]: /[a-z]+/\nrest: /[a-z]*/',
]
TEXT = "id=,1 2+*()a<>xyz"
INVALID = (ValueError, IndexError, TypeError, OverflowError)


def mask_ids(matcher, vocab_size: int) -> list[int]:
    buffer = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(buffer)
    return bitmask_to_ids(buffer[0], vocab_size)


@pytest.mark.parametrize("grammar_index", range(len(GRAMMARS)))
def test_random_misuse_leaves_matchers_consistent(grammar_index: int) -> None:
    compiled = Grammar.from_lark(GRAMMARS[grammar_index]).compile(Vocab.byte_level())
    size = compiled.vocab_size
    words = (size + 31) // 32
    rng = random.Random(grammar_index)
    for _ in range(40):
        matcher = compiled.matcher()
        history: list[int] = []
        for _ in range(rng.randint(1, 25)):
            op = rng.randrange(8)
            try:
                if op <= 1:
                    token = rng.choice(
                        [ord(rng.choice(TEXT)), rng.randrange(-3, size + 3), rng.randrange(size)]
                    )
                    if matcher.accept_token(token):
                        history.append(token)
                elif op == 2:
                    steps = rng.randint(-2, len(history) + 2)
                    matcher.rollback(steps)
                    del history[len(history) - steps :]
                elif op == 3:
                    shape = rng.choice([(1, words), (2, words), (1, words - 1), (words,)])
                    dtype = rng.choice([np.int32, np.int64, np.uint32, np.float32])
                    buffer = np.zeros(shape, dtype=dtype)
                    if rng.random() < 0.3 and buffer.ndim == 2:
                        buffer = np.zeros((shape[0], 2 * shape[1]), dtype=dtype)[:, ::2]
                    matcher.fill_next_token_bitmask(buffer, rng.choice([0, 1, -1, 7]))
                elif op == 4:
                    fork = matcher.fork()
                    fork.accept_string(rng.choice([b"id=1", b"1+", b"aa", b"<ab>", b"\xff"]))
                elif op == 5:
                    matchers = [matcher, compiled.matcher(), matcher.fork()]
                    buffer = allocate_token_bitmask(rng.randint(1, 4), size)
                    indices = [rng.randrange(-1, 5) for _ in matchers]
                    fill_next_token_bitmask_batch(
                        matchers, buffer, indices if rng.random() < 0.5 else None, threads=2
                    )
                elif op == 6:
                    tokens = [rng.randrange(-1, size + 2) for _ in range(rng.randint(0, 4))]
                    if matcher.accept_tokens(tokens):
                        history.extend(tokens)
                else:
                    matcher.reset()
                    history.clear()
            except INVALID:
                pass
            fresh = compiled.matcher()
            assert fresh.accept_tokens(history)
            assert matcher.num_steps == len(history)
            assert matcher.is_accepting() == fresh.is_accepting()
            assert mask_ids(matcher, size) == mask_ids(fresh, size)


def test_integers_past_int64_and_non_integers_get_the_usual_errors() -> None:
    # Past int64 an id is out of range like any other (not a binding's signature error);
    # anything with __index__ (numpy and torch integers) is an integer; generators of ids work.
    import numpy as np

    matcher = Grammar.from_lark('start: "a"+').compile(Vocab.byte_level()).matcher()
    bitmask = np.zeros((1, 9), dtype=np.int32)
    with pytest.raises(IndexError, match="token id 18446744073709551616 is out of range"):
        matcher.accept_token(2**64)
    with pytest.raises(IndexError, match="out of range"):
        matcher.accept_tokens([97, 2**70])
    with pytest.raises(TypeError, match="token id must be an integer, not float"):
        matcher.accept_token(1.5)
    with pytest.raises(TypeError, match="token id must be an integer, not str"):
        matcher.accept_tokens([97, "a"])
    with pytest.raises(ValueError, match="rollback count .* is out of range"):
        matcher.rollback(2**64)
    with pytest.raises(IndexError, match="bitmask row .* is out of range"):
        matcher.fill_next_token_bitmask(bitmask, 2**64)
    assert matcher.num_steps == 0
    assert matcher.accept_token(np.int64(97)) and matcher.accept_tokens(t for t in [97, 97])
    matcher.rollback(np.int32(1))
    matcher.fill_next_token_bitmask(bitmask, np.int64(0))
    assert matcher.num_steps == 2 and bitmask[0, 3] == 1 << 1  # "a" (97) still allowed
