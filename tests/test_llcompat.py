"""The llguidance compatibility layer (gramkiln.runtime.llcompat)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from gramkiln.frontend.json_schema.options import JsonSchemaOptions
from gramkiln.runtime.llcompat import (
    JsonCompiler,
    LarkCompiler,
    LLExecutor,
    LLInterpreter,
    LLMatcher,
    LLParserLimits,
    LLTokenizer,
    RegexCompiler,
    fill_next_token_bitmask,
    fill_next_token_bitmask_par,
    regex_to_lark,
)

import gramkiln as gk

BYTE = gk.Vocab.byte_level()
EOS_BYTE = 256

# A small vocabulary with overlapping tokens, a special token and EOS.
SMALL_TOKENS = [b"a", b"b", b"c", b"d", b"ab", b"abc", b"ba", b" ", b"<|x|>", b"</s>"]
SMALL = gk.Vocab(SMALL_TOKENS, eos_ids=[9], special_ids=[8, 9])


@pytest.fixture(scope="module")
def byte_tok() -> LLTokenizer:
    return LLTokenizer(BYTE)


@pytest.fixture(scope="module")
def small_tok() -> LLTokenizer:
    return LLTokenizer(SMALL)


def allowed(mask: bytes, vocab_size: int) -> set[int]:
    bits = np.unpackbits(np.frombuffer(mask, dtype=np.uint8), bitorder="little")
    return {int(i) for i in np.flatnonzero(bits[:vocab_size])}


def gramkiln_mask(matcher, vocab_size: int) -> bytes:
    bitmask = gk.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    return bitmask[0].astype("<i4").tobytes()


# ---------------------------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------------------------
def test_masks_equal_gramkiln_and_brute_force(small_tok: LLTokenizer) -> None:
    source = 'start: ("ab" | "c")+ "ba"? " "?'
    grammar = gk.Grammar.from_lark(source)
    reference = grammar.compile(SMALL, end_tokens=[9]).matcher()
    matcher = LLMatcher(small_tok, source)
    assert not matcher.is_error(), matcher.get_error()
    rng = random.Random(7)
    text = b""
    for _ in range(12):
        mask = matcher.compute_bitmask()
        assert mask == gramkiln_mask(reference, SMALL.vocab_size)
        expected = {
            i
            for i, token in enumerate(SMALL_TOKENS)
            if i not in SMALL.special_ids and grammar.is_prefix(text + token)
        }
        if grammar.accepts(text):
            expected.add(9)
        assert allowed(mask, SMALL.vocab_size) == expected
        choices = sorted(expected - {9})
        if not choices:
            break
        token = rng.choice(choices)
        assert matcher.consume_token(token)
        assert reference.accept_token(token)
        text += SMALL_TOKENS[token]


def test_json_schema_masks_equal_gramkiln(byte_tok: LLTokenizer) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "s": {"enum": ["x", "yy"]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    matcher = LLMatcher(byte_tok, LLMatcher.grammar_from_json_schema(schema))
    options = JsonSchemaOptions(whitespace="flexible", max_whitespace=None)
    reference = gk.Grammar.from_json_schema(schema, options).compile(BYTE).matcher()
    for token in byte_tok.tokenize_str('{ "n" :12, "s":"yy"}'):
        assert matcher.compute_bitmask() == gramkiln_mask(reference, BYTE.vocab_size)
        assert matcher.consume_token(token)
        assert reference.accept_token(token)
    assert matcher.is_accepting()
    # Flexible layout: trailing JSON whitespace may still follow, so the matcher goes on.
    assert matcher.stop_reason() == "NotStopped"
    assert allowed(matcher.compute_bitmask(), BYTE.vocab_size) == {9, 10, 13, 32, EOS_BYTE}


def test_logit_bias(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "a" | "b"+')
    bias = matcher.compute_logit_bias()
    assert len(bias) == byte_tok.vocab_size
    assert {i for i, v in enumerate(bias) if v} == {ord("a"), ord("b")}
    assert set(bias) == {0, 200}
    assert allowed(matcher.compute_bitmask(), 257) == {ord("a"), ord("b")}


def test_compile_cache_shared_between_matchers() -> None:
    tok = LLTokenizer(BYTE)
    first = LLMatcher(tok, 'start: "x"')
    second = LLMatcher(tok, 'start: "x"')
    assert len(tok._shared.cache) == 1
    assert first.consume_token(ord("x"))
    assert second.compute_bitmask() == LLMatcher(tok, 'start: "x"').compute_bitmask()
    tok.with_slices([]).vocab  # noqa: B018 - shares the cache
    LLMatcher(tok.with_slices(LLTokenizer.json_slices()), 'start: "x"')
    assert len(tok._shared.cache) == 1


# ---------------------------------------------------------------------------------------------
# error state
# ---------------------------------------------------------------------------------------------
def test_bad_grammar_enters_error_state(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, "start: foo", log_level=0)
    assert matcher.is_error()
    assert "undefined rule 'foo'" in matcher.get_error()
    assert matcher.is_stopped() and matcher.stop_reason() == "InternalError"
    assert not matcher.is_accepting()
    assert allowed(matcher.compute_bitmask(), 257) == {EOS_BYTE}
    assert not matcher.consume_token(ord("a"))
    assert matcher.consume_token(EOS_BYTE)  # EOS is always fine on a stopped matcher
    assert not matcher.rollback(1)
    assert not matcher.reset()
    assert matcher.validate_tokens([EOS_BYTE, 1]) == 1
    assert matcher.validate_tokens([1]) == 0
    assert matcher.try_consume_tokens([1]) == 0
    assert matcher.compute_ff_tokens() == [] and matcher.compute_ff_bytes() == b""
    assert matcher.deep_copy().get_error() == matcher.get_error()


@pytest.mark.parametrize(
    ("grammar", "fragment"),
    [
        ('{"grammars": [', "not valid JSON"),
        ({"grammars": []}, "empty"),
        ({"grammars": [{"lark_grammar": 'start: "a"', "max_tokens": 5}]}, "max_tokens"),
        ({"grammars": [{"lark_grammar": 'start: "a"', "bogus": 1}]}, "bogus"),
        ({"grammars": [{"lark_grammar": "start: @x"}, {"lark_grammar": 'start: "a"'}]}, "name"),
        (
            {"grammars": [{"json_schema": {"type": "object", "x-guidance": {"indent": 2}}}]},
            "indent",
        ),
    ],
)
def test_unsupported_specs_are_errors(byte_tok: LLTokenizer, grammar, fragment: str) -> None:
    matcher = LLMatcher(byte_tok, grammar, log_level=0)
    assert matcher.is_error()
    assert fragment in matcher.get_error()
    assert LLMatcher.validate_grammar(grammar, byte_tok) == matcher.get_error()


def test_bad_token_enters_error_state(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "ab"')
    assert matcher.consume_token(ord("a"))
    assert not matcher.consume_token(ord("z"))
    assert matcher.is_error()
    assert "token 122" in matcher.get_error() and '"z"' in matcher.get_error()
    assert not matcher.consume_token(ord("b"))  # never leaves the error state
    assert allowed(matcher.compute_bitmask(), 257) == {EOS_BYTE}

    out_of_range = LLMatcher(byte_tok, 'start: "ab"')
    assert not out_of_range.consume_tokens([ord("a"), 10_000])
    assert "outside the vocabulary" in out_of_range.get_error()
    early_eos = LLMatcher(byte_tok, 'start: "ab"')
    assert not early_eos.consume_token(EOS_BYTE)
    assert early_eos.is_error()


def test_api_misuse_raises(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "ab"')
    with pytest.raises(TypeError):
        matcher.consume_token("a")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LLMatcher("not a tokenizer", 'start: "a"')  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LLMatcher(byte_tok, 42)
    assert not matcher.is_error()


# ---------------------------------------------------------------------------------------------
# state: rollback, reset, copies, stop reasons
# ---------------------------------------------------------------------------------------------
def test_rollback_reset_deep_copy(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "ab" ("c" | "d") | "x"')
    start = matcher.compute_bitmask()
    assert matcher.consume_tokens([ord("a"), ord("b")])
    after_ab = matcher.compute_bitmask()
    assert allowed(after_ab, 257) == {ord("c"), ord("d")}
    copy = matcher.deep_copy()
    assert copy.consume_token(ord("c"))
    assert copy.stop_reason() == "NoExtension" and copy.is_stopped()
    assert matcher.compute_bitmask() == after_ab  # the original is untouched
    assert matcher.rollback(1)
    assert allowed(matcher.compute_bitmask(), 257) == {ord("b")}
    assert matcher.reset()
    assert matcher.compute_bitmask() == start
    assert not matcher.rollback(1)  # nothing to roll back: error state
    assert "cannot roll back" in matcher.get_error()


def test_eos_and_stop_reasons(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "a"+')
    assert matcher.stop_reason() == "NotStopped"
    assert matcher.consume_token(ord("a"))
    assert matcher.is_accepting() and not matcher.is_stopped()
    assert matcher.consume_token(EOS_BYTE)
    assert matcher.stop_reason() == "EndOfSentence" and matcher.is_accepting()
    assert allowed(matcher.compute_bitmask(), 257) == {EOS_BYTE}
    assert matcher.consume_token(EOS_BYTE)  # again: no step, no error
    assert not matcher.consume_token(ord("a"))
    assert matcher.is_error()

    rolled = LLMatcher(byte_tok, 'start: "a"+')
    assert rolled.consume_tokens([ord("a"), EOS_BYTE])
    assert rolled.rollback(1)
    assert rolled.stop_reason() == "NotStopped"
    assert rolled.consume_token(ord("a"))


# ---------------------------------------------------------------------------------------------
# validate / try_consume / fast-forward
# ---------------------------------------------------------------------------------------------
def test_validate_and_try_consume(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "abc" "d"*')
    tokens = [ord("a"), ord("b"), ord("z"), ord("c")]
    before = matcher.compute_bitmask()
    assert matcher.validate_tokens(tokens) == 2
    assert matcher.compute_bitmask() == before
    assert matcher.validate_tokens([ord(ch) for ch in "abcdd"] + [EOS_BYTE]) == 6
    assert matcher.try_consume_tokens(tokens) == 2
    assert not matcher.is_error()
    assert allowed(matcher.compute_bitmask(), 257) == {ord("c")}
    assert matcher.try_consume_tokens([ord("c"), EOS_BYTE, EOS_BYTE]) == 3
    assert matcher.stop_reason() == "EndOfSentence"


def test_ff_bytes_and_tokens_byte_level(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "hello" /[0-9]+/')
    assert matcher.compute_ff_bytes() == b"hello"
    assert matcher.compute_ff_tokens() == list(b"hello")
    assert matcher.consume_tokens(list(b"hello1"))
    assert matcher.compute_ff_bytes() == b""
    assert matcher.compute_ff_tokens() == []


def test_ff_tokens_keep_mergeable_tail(small_tok: LLTokenizer) -> None:
    assert not small_tok.is_canonical  # greedy over overlapping tokens is an approximation
    canonical = LLTokenizer(SMALL, slices=[])
    canonical._shared.canonical = True  # as with a real tokenizer attached
    forced_abd = LLMatcher(canonical, 'start: "abd" "c"*')
    assert forced_abd.compute_ff_bytes() == b"abd"
    assert forced_abd.compute_ff_tokens() == [4, 3]  # "ab" "d"
    forced_ab = LLMatcher(canonical, 'start: "ab" ("c" | "d")')
    # "ab" could still become "abc": nothing is safe to force as a token.
    assert forced_ab.compute_ff_tokens() == []
    assert LLMatcher(small_tok, 'start: "abd"').compute_ff_tokens() == []


# ---------------------------------------------------------------------------------------------
# raw pointers and the executor
# ---------------------------------------------------------------------------------------------
def test_unsafe_compute_mask_ptr(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "q"')
    words = (257 + 31) // 32
    buffer = np.full(words + 2, -1, dtype=np.int32)
    address = buffer.ctypes.data
    matcher.unsafe_compute_mask_ptr(address + 4, words * 4)
    assert buffer[0] == -1 and buffer[-1] == -1
    assert buffer[1 : 1 + words].astype("<i4").tobytes() == matcher.compute_bitmask()
    with pytest.raises(ValueError, match="size"):
        matcher.unsafe_compute_mask_ptr(address, words * 4 + 4)
    with pytest.raises(ValueError, match="size"):
        matcher.unsafe_compute_mask_ptr(address, words * 4 - 4)
    with pytest.raises(ValueError, match="Null"):
        matcher.unsafe_compute_mask_ptr(0, words * 4)
    with pytest.raises(ValueError, match="aligned"):
        matcher.unsafe_compute_mask_ptr(address + 2, words * 4)


def test_executor_batch(byte_tok: LLTokenizer) -> None:
    matchers = [LLMatcher(byte_tok, 'start: "ab" | "cd"') for _ in range(3)]
    matchers[1].consume_token(ord("a"))
    matchers[2].consume_token(ord("c"))
    broken = LLMatcher(byte_tok, "start: nope", log_level=0)
    words = (257 + 31) // 32
    bitmask = np.full((5, words), 7, dtype=np.int32)
    executor = LLExecutor(num_threads=2)
    pairs = [(matchers[0], 2), (matchers[1], 0), (matchers[2], 4), (broken, 1)]
    executor.unsafe_compute_mask_ptr(pairs, bitmask.ctypes.data, words * 4, 5)
    for matcher, row in pairs:
        assert bitmask[row].astype("<i4").tobytes() == matcher.compute_bitmask()
    assert (bitmask[3] == 7).all()
    with pytest.raises(ValueError, match="out of bounds"):
        executor.unsafe_compute_mask_ptr([(matchers[0], 5)], bitmask.ctypes.data, words * 4, 5)
    with pytest.raises(ValueError, match="No interpreters"):
        executor.unsafe_compute_mask_ptr([], bitmask.ctypes.data, words * 4, 5)
    with pytest.raises(ValueError, match="size"):
        executor.unsafe_compute_mask_ptr([(matchers[0], 0)], bitmask.ctypes.data, words * 8, 5)
    with pytest.raises(ValueError):
        executor.unsafe_compute_mask_ptr([(matchers[0],)], bitmask.ctypes.data, words * 4, 5)


def test_numpy_and_torch_helpers(byte_tok: LLTokenizer) -> None:
    torch = pytest.importorskip("torch")
    matchers = [LLMatcher(byte_tok, 'start: "x" "y"'), LLMatcher(byte_tok, 'start: "z"')]
    matchers[0].consume_token(ord("x"))
    bitmask = gk.allocate_token_bitmask(2, byte_tok.vocab_size)
    fill_next_token_bitmask(matchers[0], bitmask, 1)
    assert bitmask[1].astype("<i4").tobytes() == matchers[0].compute_bitmask()
    assert not bitmask[0].any()
    tensor = torch.zeros((2, bitmask.shape[1]), dtype=torch.int32)
    fill_next_token_bitmask_par(LLExecutor(), [(matchers[0], 1), (matchers[1], 0)], tensor)
    assert tensor[0].numpy().astype("<i4").tobytes() == matchers[1].compute_bitmask()
    assert tensor[1].numpy().astype("<i4").tobytes() == matchers[0].compute_bitmask()
    logits = np.zeros((2, byte_tok.vocab_size), dtype=np.float32)
    gk.apply_token_bitmask_inplace(logits, tensor.numpy())
    assert np.isfinite(logits[0]).sum() == 1 and np.isfinite(logits[0, ord("z")])
    with pytest.raises(ValueError):
        fill_next_token_bitmask(matchers[0], bitmask.astype(np.int64))
    with pytest.raises(IndexError):
        fill_next_token_bitmask(matchers[0], bitmask, 2)
    with pytest.raises(ValueError, match="size"):
        fill_next_token_bitmask(matchers[0], np.zeros((1, 3), dtype=np.int32))


def test_executor_draft_tokens(byte_tok: LLTokenizer) -> None:
    matcher = LLMatcher(byte_tok, 'start: "hello" " "*')
    other = LLMatcher(byte_tok, 'start: "ok"')
    words = (257 + 31) // 32
    bitmask = np.full((8, words), -5, dtype=np.int32)
    drafts = [ord("h"), ord("e"), ord("z"), ord("l")]
    LLExecutor().unsafe_compute_mask_ptr_with_draft_token(
        [(matcher, 1, drafts), (other, 6, [ord("o")])], bitmask.ctypes.data, words * 4, 8
    )

    def ids(row: int) -> set[int]:
        return allowed(bitmask[row].astype("<i4").tobytes(), 257)

    assert ids(1) == {ord("h")}
    assert ids(2) == {ord("e")}
    assert ids(3) == {ord("l")}
    assert (bitmask[4] == -5).all() and (bitmask[5] == -5).all()  # after the rejected draft
    assert ids(6) == {ord("o")} and ids(7) == {ord("k")}
    assert (bitmask[0] == -5).all()
    assert allowed(matcher.compute_bitmask(), 257) == {ord("h")}  # matcher unchanged
    with pytest.raises(ValueError, match="out of bounds"):
        LLExecutor().unsafe_compute_mask_ptr_with_draft_token(
            [(matcher, 6, drafts)], bitmask.ctypes.data, words * 4, 8
        )


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------
def test_tokenizer_byte_level(byte_tok: LLTokenizer) -> None:
    assert byte_tok.vocab_size == 257 and byte_tok.eos_token == EOS_BYTE
    assert byte_tok.is_canonical
    text = 'hé "x"\n'
    tokens = byte_tok.tokenize_str(text)
    assert tokens == list(text.encode())
    assert byte_tok.greedy_tokenize(text) == tokens
    assert byte_tok.decode_str(tokens) == text
    assert byte_tok.decode_bytes(tokens) == text.encode()
    assert byte_tok.decode_str([0xC3]) == "\ufffd"
    assert byte_tok.is_special_token(EOS_BYTE) and not byte_tok.is_special_token(65)
    assert byte_tok.dbg_tokens([104, 10, 34, 0xC3, EOS_BYTE]) == '"h‧\\n‧\\"‧\\xc3‧</s>"'
    assert byte_tok.test_trace_tokens([104, 10]) == "h‧\n"
    assert byte_tok.dbg_tokens(list(range(65, 65 + 20)) * 15).startswith('"…')
    assert byte_tok.tokenize_str("a</s>", parse_special=True) == [97, EOS_BYTE]
    assert byte_tok.tokenize_str("a</s>") == list(b"a</s>")
    assert byte_tok.tokenize_bytes(b"a\xff\xfeb") == [97, 0xFF, 0xFE, 98]


def test_tokenizer_small_vocab(small_tok: LLTokenizer) -> None:
    assert small_tok.greedy_tokenize("abcab ba") == [5, 4, 7, 6]
    assert small_tok.greedy_tokenize("abd") == [4, 3]
    assert small_tok.tokenize_str("c<|x|>a", parse_special=True) == [2, 8, 0]
    assert small_tok.tokenize_str("a<[9]>", parse_special=True) == [0, 9]
    assert small_tok.dbg_tokens([5, 7, 8]) == '"abc‧ ‧<|x|>"'
    with pytest.raises(ValueError, match="no token"):
        small_tok.greedy_tokenize("e")
    padded = LLTokenizer(SMALL, n_vocab=40)
    assert padded.vocab_size == 40
    assert padded.is_special_token(39)
    assert len(LLMatcher(padded, 'start: "a"').compute_bitmask()) == 8
    with pytest.raises(ValueError):
        LLTokenizer(SMALL, n_vocab=5)
    assert LLTokenizer(SMALL, eos_token=8).eos_token == 8
    assert small_tok.with_slices(["a+"]).slices == ["a+"]
    assert LLTokenizer.general_slices() and LLTokenizer.json_slices()


@pytest.mark.parametrize("text", ["abcabd", "ab", "abab", "ba ", "cabc", "d"])
def test_tokenize_partial_invariants(small_tok: LLTokenizer, text: str) -> None:
    data = text.encode()
    tokens, rest = small_tok.tokenize_partial(data, recent_tokens=[0])
    assert small_tok.decode_bytes(tokens) + rest == data
    for extra in ["", "a", "b", "c", "d", "ab", " "]:
        assert small_tok.tokenize_bytes(data + extra.encode())[: len(tokens)] == tokens


def test_tokenize_partial_byte_level(byte_tok: LLTokenizer) -> None:
    assert byte_tok.tokenize_partial(b"abc") == ([97, 98, 99], b"")
    assert byte_tok.tokenize_partial(b"") == ([], b"")


def _hf_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("a", "b"), ("ab", "c"), ("Ġ", "a")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|end|>", special=True)])
    return tok


def test_tokenizer_from_tokenizers_object() -> None:
    hf = _hf_tokenizer()
    tok = LLTokenizer(hf)
    end = hf.token_to_id("<|end|>")
    assert tok.eos_token == end and tok.vocab_size == hf.get_vocab_size()
    assert tok.is_canonical
    text = "abc ab a"
    assert tok.tokenize_str(text) == hf.encode(text).ids
    assert tok.decode_str(tok.tokenize_str(text)) == text
    assert tok.tokenize_str("a<|end|>", parse_special=True)[-1] == end
    assert end not in tok.tokenize_str("a<|end|>")
    assert tok.decode_str(tok.tokenize_str("a<|end|>")) == "a<|end|>"
    byte_ff = hf.token_to_id("ÿ")  # GPT-2's stand-in for the byte 0xff
    assert tok.tokenize_bytes(b"ab\xff") == hf.encode("ab").ids + [byte_ff]
    matcher = LLMatcher(tok, 'start: "abc" " ab" "c"?')
    assert matcher.compute_ff_bytes() == b"abc ab"
    # BPE gives "abc" "Ġ" "ab"; "ab" may still grow into "abc", so it is held back.
    ids = [hf.token_to_id(t) for t in ("abc", "Ġ")]
    assert matcher.compute_ff_tokens() == ids
    assert matcher.consume_tokens(ids)


def test_tokenizer_from_tokenizer_json_path(tmp_path) -> None:
    hf = _hf_tokenizer()
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    tok = LLTokenizer(str(path))
    assert tok.vocab_size == hf.get_vocab_size() and tok.is_canonical
    assert tok.tokenize_str("abc abc") == hf.encode("abc abc").ids
    assert LLTokenizer(path).eos_token == hf.token_to_id("<|end|>")
    with pytest.raises(ValueError, match="not a file"):
        LLTokenizer(str(tmp_path / "missing.json"))


def test_tokenizer_wrapper_like_object() -> None:
    class Wrapper:
        tokens = [b"x", b"y", b"xy", b"<eos>"]
        eos_token_id = 3
        bos_token_id = None
        special_token_ids = [3]

        def __call__(self, text: str) -> list[int]:
            return [{"x": 0, "y": 1}[ch] for ch in text]  # deliberately not greedy

    tok = LLTokenizer(Wrapper())
    assert tok.eos_token == 3 and tok.is_special_token(3)
    assert tok.tokenize_str("xy") == [0, 1]
    assert tok.greedy_tokenize("xy") == [2]
    assert tok.tokenize_str("xy<eos>", parse_special=True) == [0, 1, 3]
    matcher = LLMatcher(tok, 'start: "x" "y"+')
    assert allowed(matcher.compute_bitmask(), 4) == {0, 2}
    with pytest.raises(TypeError):
        LLTokenizer(object())


# ---------------------------------------------------------------------------------------------
# regex_to_lark
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("regex", "flags", "expected"),
    [
        (r"a/b", "", r"a\/b"),
        (r"a\/b", "", r"a\/b"),
        (r"\d+", "d", r"[0-9]+"),
        (r"\d+", "", r"\d+"),
        (r"\D\w", "d", r"[^0-9]\w"),
        (r"\w\W", "dw", r"[0-9a-zA-Z_][^0-9a-zA-Z_]"),
        (r"\s\S", "dws", r"[ \t\n\r\f\v][^ \t\n\r\f\v]"),
        (r"[\d.]", "d", r"[0-9.]"),
        (r"[^\d]", "d", r"[^0-9]"),
        (r"[\D]", "d", r"[^0-9]"),
        (r"[\Dx]", "d", r"(?:[^0-9]|[x])"),
        (r"[^\Dx]", "d", r"[0123456789]"),
        (r"[^\D3-5]", "d", r"[0126789]"),
        (r"\\d", "d", r"\\d"),
        (r"[\\d]", "d", r"[\\d]"),
        (r"[]/]", "", r"[]\/]"),
        (r"[/\]]", "", r"[\/\]]"),
        (r"\p{L}\d", "d", r"\p{L}[0-9]"),
        ("a\nb[\n]", "", r"a\nb[\n]"),
    ],
)
def test_regex_to_lark(regex: str, flags: str, expected: str) -> None:
    assert regex_to_lark(regex, flags) == expected


@pytest.mark.parametrize(
    ("regex", "flags", "yes", "no"),
    [
        (r"[\Da]+", "d", ["xa", "a"], ["1"]),
        (r"[^\D\s3]", "ds", ["4"], ["3", "a", " "]),
        (r"x/\d", "d", ["x/1"], ["x/a"]),
    ],
)
def test_regex_to_lark_languages(regex: str, flags: str, yes: list[str], no: list[str]) -> None:
    grammar = gk.Grammar.from_lark(f"start: /{regex_to_lark(regex, flags)}/")
    assert all(grammar.accepts(s) for s in yes)
    assert not any(grammar.accepts(s) for s in no)


def test_regex_to_lark_unterminated_class() -> None:
    with pytest.raises(ValueError, match="unterminated"):
        regex_to_lark("[abc")


# ---------------------------------------------------------------------------------------------
# grammar specifications
# ---------------------------------------------------------------------------------------------
def accepts_text(tok: LLTokenizer, grammar, text: str) -> bool:
    matcher = LLMatcher(tok, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(tok.tokenize_str(text)) and matcher.is_accepting()


def test_grammar_list_with_named_grammars(byte_tok: LLTokenizer) -> None:
    spec = {
        "grammars": [
            {"lark_grammar": 'start: "n=" @num ";" @word'},
            {"name": "num", "json_schema": {"type": "integer", "minimum": 0}},
            {"name": "word", "lark_grammar": "start: /[a-z]+/"},
        ]
    }
    assert accepts_text(byte_tok, spec, "n=12;abc")
    assert accepts_text(byte_tok, json.dumps(spec), "n=0;z")
    assert not accepts_text(byte_tok, spec, "n=-1;abc")
    assert not accepts_text(byte_tok, spec, "n=1;ABC")
    assert LLMatcher.validate_grammar(spec) == ""
    assert LLMatcher.validate_grammar_with_warnings(spec, byte_tok) == (False, [])


def test_allow_initial_skip_on_a_lark_entry(byte_tok: LLTokenizer) -> None:
    lark = '%ignore " "\nstart: "a" "b"'
    plain = {"grammars": [{"lark_grammar": lark}]}
    skipping = {"grammars": [{"lark_grammar": lark, "allow_initial_skip": True}]}
    assert accepts_text(byte_tok, plain, "a b") and not accepts_text(byte_tok, plain, " ab")
    assert accepts_text(byte_tok, skipping, " ab") and accepts_text(byte_tok, skipping, "a b")
    on_json = {"grammars": [{"json_schema": {"type": "integer"}, "allow_initial_skip": True}]}
    matcher = LLMatcher(byte_tok, on_json, log_level=0)
    assert matcher.is_error() and "allow_initial_skip applies to lark_grammar" in (
        matcher.get_error()
    )


def test_grammar_from_regex_and_lark(byte_tok: LLTokenizer) -> None:
    grammar = LLMatcher.grammar_from_regex(r"[a-c]+/\d")
    assert json.loads(grammar)["grammars"][0]["lark_grammar"] == r"start: /[a-c]+\/\d/"
    assert accepts_text(byte_tok, grammar, "ab/7")
    assert not accepts_text(byte_tok, grammar, "ab7")
    assert LLMatcher.grammar_from_lark('start: "a"') == 'start: "a"'
    assert RegexCompiler().compile("a+") == LLMatcher.grammar_from_regex("a+")
    assert LarkCompiler().compile('start: "a"') == 'start: "a"'
    with pytest.raises(ValueError, match="undefined rule"):
        LarkCompiler().compile("start: x")
    assert LLMatcher.validate_grammar(LLMatcher.grammar_from_regex("(")) != ""


SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def test_json_options_layout(byte_tok: LLTokenizer) -> None:
    flexible = LLMatcher.grammar_from_json_schema(SCHEMA)
    assert json.loads(flexible) == {"grammars": [{"json_schema": SCHEMA}]}
    assert accepts_text(byte_tok, flexible, '{ "a" : 1 ,\n"b":2 }')
    compact = LLMatcher.grammar_from_json_schema(SCHEMA, {"whitespace_flexible": False})
    assert accepts_text(byte_tok, compact, '{"a":1,"b":2}')
    assert not accepts_text(byte_tok, compact, '{"a": 1,"b":2}')
    spaced = LLMatcher.grammar_from_json_schema(
        SCHEMA,
        overrides={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "},
    )
    assert accepts_text(byte_tok, spaced, '{"a": 1, "b": 2}')
    assert not accepts_text(byte_tok, spaced, '{"a":1,"b":2}')


def test_json_options_precedence(byte_tok: LLTokenizer) -> None:
    schema = dict(SCHEMA, **{"x-guidance": {"whitespace_flexible": False}})
    in_schema = LLMatcher.grammar_from_json_schema(schema)
    assert not accepts_text(byte_tok, in_schema, '{ "a":1,"b":2}')
    # defaults < x-guidance: the schema's compact layout wins over flexible defaults.
    merged = LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": True})
    assert json.loads(merged)["grammars"][0]["json_schema"]["x-guidance"] == {
        "whitespace_flexible": False
    }
    assert not accepts_text(byte_tok, merged, '{ "a":1,"b":2}')
    # x-guidance < overrides.
    over = LLMatcher.grammar_from_json_schema(schema, overrides={"whitespace_flexible": True})
    assert accepts_text(byte_tok, over, '{ "a":1,"b":2}')
    with pytest.raises(ValueError, match="object schema"):
        LLMatcher.grammar_from_json_schema(True, overrides={"lenient": True})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not valid JSON"):
        LLMatcher.grammar_from_json_schema("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        LLMatcher.grammar_from_json_schema(SCHEMA, defaults="[")  # type: ignore[arg-type]


def test_json_whitespace_pattern(byte_tok: LLTokenizer) -> None:
    limited = LLMatcher.grammar_from_json_schema(
        SCHEMA, overrides={"whitespace_pattern": r"[ \t\n\r]{0,2}"}
    )
    assert accepts_text(byte_tok, limited, '{  "a":1,"b":2}')
    assert not accepts_text(byte_tok, limited, '{   "a":1,"b":2}')
    unbounded = LLMatcher.grammar_from_json_schema(
        SCHEMA, overrides={"whitespace_pattern": r"[\x20\x0A\x0D\x09]+"}
    )
    assert accepts_text(byte_tok, unbounded, '{      "a":1,"b":2}')
    odd = LLMatcher.grammar_from_json_schema(SCHEMA, overrides={"whitespace_pattern": r"[ ]*"})
    matcher = LLMatcher(byte_tok, odd, log_level=0)
    assert matcher.is_error() and "whitespace_pattern" in matcher.get_error()
    unknown = LLMatcher.grammar_from_json_schema(SCHEMA, overrides={"retries": 1})  # type: ignore[typeddict-unknown-key]
    assert "retries" in LLMatcher.validate_grammar(unknown)


def test_json_coerce_one_of_and_lenient(byte_tok: LLTokenizer) -> None:
    schema = {"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "minItems": 2}]}
    strict = LLMatcher.grammar_from_json_schema(schema)
    assert "may overlap" in LLMatcher.validate_grammar(strict, byte_tok)
    coerced = LLMatcher.grammar_from_json_schema(schema, overrides={"coerce_one_of": True})
    assert "uniqueItems" in LLMatcher.validate_grammar(coerced, byte_tok)
    both = LLMatcher.grammar_from_json_schema(
        schema, overrides={"coerce_one_of": True, "lenient": True}
    )
    is_error, messages = LLMatcher.validate_grammar_with_warnings(both, byte_tok)
    assert not is_error and any("uniqueItems" in m for m in messages)
    assert accepts_text(byte_tok, both, "[1, 1]")
    compiled = JsonCompiler(coerce_one_of=True).compile(json.dumps(schema), check=False)
    assert json.loads(compiled)["grammars"][0]["json_schema"]["x-guidance"]["coerce_one_of"]
    with pytest.raises(ValueError, match="uniqueItems"):
        JsonCompiler(coerce_one_of=True).compile(json.dumps(schema))


def test_grammar_warnings_recorded(byte_tok: LLTokenizer) -> None:
    empty = LLMatcher.grammar_from_json_schema({"type": "array", "minItems": 3, "maxItems": 1})
    matcher = LLMatcher(byte_tok, empty, log_level=0)
    assert not matcher.is_error()
    assert any("accepts no string" in w for w in matcher.get_grammar_warnings())
    is_error, messages = LLMatcher.validate_grammar_with_warnings(empty, byte_tok)
    assert not is_error and messages == matcher.get_grammar_warnings()


def test_special_tokens_in_lark(small_tok: LLTokenizer) -> None:
    matcher = LLMatcher(small_tok, 'start: "a" <|x|> "b"')
    assert not matcher.is_error(), matcher.get_error()
    assert matcher.consume_token(0)
    assert allowed(matcher.compute_bitmask(), SMALL.vocab_size) == {8}
    assert matcher.consume_tokens([8, 1, 9])
    assert matcher.stop_reason() == "EndOfSentence"


def test_limits_accepted(byte_tok: LLTokenizer) -> None:
    defaults = LLParserLimits()
    assert defaults.max_items_in_row == 2000 and defaults.initial_lexer_fuel == 1_000_000
    assert defaults.step_lexer_fuel == 200_000 and defaults.step_max_items == 50_000
    assert defaults.max_lexer_states == 250_000 and defaults.max_grammar_size == 500_000
    assert defaults.precompute_large_lexemes and defaults.verbose_errors
    limits = LLParserLimits(step_max_items=10, verbose_errors=False)
    assert limits.step_max_items == 10 and not limits.verbose_errors
    matcher = LLMatcher(byte_tok, 'start: "a"', limits=limits)
    assert not matcher.is_error()
    with pytest.raises(ValueError):
        LLParserLimits(max_grammar_size=-1)


# ---------------------------------------------------------------------------------------------
# interpreter
# ---------------------------------------------------------------------------------------------
def test_interpreter(byte_tok: LLTokenizer) -> None:
    interp = LLInterpreter(byte_tok, 'start: "say " ("hi" | "ho") "!"')
    assert interp.process_prompt([1, 2, 3]) == [1, 2, 3]
    mask, status = interp.compute_mask()
    assert mask is not None and len(mask) == 257 and mask[ord("s")] == 200
    assert sum(1 for v in mask if v) == 1
    assert json.loads(status)["stop"] is False
    assert interp.commit_token(ord("s")) == (0, [ord(ch) for ch in "say h"])
    assert interp.validate_tokens_raw([ord("i"), ord("!")]) == 2
    buffer = bytearray(257)
    interp.compute_mask_into(buffer)
    assert {i for i, v in enumerate(buffer) if v} == {ord("i"), ord("o")}
    copy = interp.deep_copy()
    assert interp.commit_token(ord("o")) == (0, [ord("o"), ord("!")])
    assert interp.has_pending_stop() and interp.is_accepting()
    mask, status = interp.compute_mask()
    assert mask is None and json.loads(status)["stop_reason"] == "NoExtension"
    assert interp.commit_token(None) == (0, [])
    with pytest.raises(ValueError, match="not allowed"):
        copy.commit_token(ord("x"))
    with pytest.raises(ValueError, match="undefined rule"):
        LLInterpreter(byte_tok, "start: nope", log_level=0)
    with pytest.raises(ValueError):
        interp.compute_mask_into(bytearray(3))
    no_ff = LLInterpreter(byte_tok, 'start: "ab"', enable_ff_tokens=False)
    no_ff.start_without_prompt()
    assert no_ff.commit_token(ord("a")) == (0, [ord("a")])


def test_packaged_llama3_tokenizes_with_its_real_bpe() -> None:
    quicktok = pytest.importorskip("quicktok", reason="quicktok ships the Llama 3 vocabulary")
    tok = LLTokenizer("llama3")
    text = "hello world, 12345 tokens"
    assert tok.is_canonical
    assert tok.tokenize_str(text) == list(quicktok.get_encoding("llama3").encode(text))
    matcher = LLMatcher(tok, 'start: "The answer is " /[0-9]+/', log_level=0)
    # Forced text is tokenized as the real BPE would, holding back a space that may merge.
    assert tok.decode_str(matcher.compute_ff_tokens()) == "The answer is"
