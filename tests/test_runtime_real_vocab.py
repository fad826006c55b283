"""C++ masks equal the reference matcher with the real Llama 3 vocabulary.

The seed-text examples are checked at a few chosen positions (the start, mid-lexeme and after a
complete sentence, where EOS must be allowed); random grammars at every token boundary of
strings cut into real tokens; and grammars whose lexemes can be cut out of Llama 3's long
tokens (up to 128 bytes) in very many ways. The oracle prepares the 128,256-token vocabulary
once (about two seconds) and then brute-forces a mask in milliseconds, or in seconds when the
grammar admits nearly every token.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gramkiln.ir import GrammarIR, parse_grammar
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import CompiledGrammar, allocate_token_bitmask, bitmask_to_ids
from gramkiln.runtime.vocab import load_vocab
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.strategies import admits_most_tokens, grammars, mutated_strings
from gramkiln.testing.vocabularies import greedy_tokens

SEED_CASES = [
    (
        """
        %import common.INT
        %import common.WS
        %ignore WS
        start: item ("," item)*
        item: "id=" INT
        """,
        ["", "id=4", "id=1, id=42"],
    ),
    ("%import common.INT\nstart: INT INT\n", ["", "1", "123"]),
    ('start: "<" name ">" rest\nname[lazy]: /[a-z]+/\nrest: /[a-z]*/\n', ["<", "<a", "<a>b"]),
    ('start: expr\nexpr: expr "+" NUM | NUM\nNUM: /[0-9]+/\n', ["1+", "12+3"]),
]


@pytest.fixture(scope="module")
def llama3():
    try:
        return load_vocab("llama3")
    except Exception as exc:  # the vocabulary ships in an optional package
        pytest.skip(f"Llama 3 vocabulary not available: {exc}")


@pytest.mark.parametrize(("source", "prefixes"), SEED_CASES)
def test_seed_masks_with_llama3(llama3, source: str, prefixes: list[str]) -> None:
    ir = Grammar.from_lark(source).ir
    assert_masks_equal_oracle(llama3, ir, [prefix.encode() for prefix in prefixes])


def assert_masks_equal_oracle(llama3, ir: GrammarIR, prefixes: list[bytes]) -> Any:
    """The mask after each prefix equals brute force; returns the compiled grammar."""
    compiled = compile_grammar(ir, llama3)
    oracle = ReferenceMatcher(ir)
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    for prefix in prefixes:
        matcher = compiled.matcher()
        assert matcher.accept_string(prefix)
        matcher.fill_next_token_bitmask(bitmask)
        allowed = oracle.allowed_tokens(prefix, llama3.tokens, llama3.special_ids, llama3.eos_ids)
        expected = [i for i, ok in enumerate(allowed) if ok]
        assert bitmask_to_ids(bitmask[0], compiled.vocab_size) == expected, prefix
    return compiled


ANY_TEXT_WORDS = "%ir 1\n%start start\nrule start = r1*\nrule r1 = [^,]+\n"
# The random grammar that found the bug (session 16; its first fill under Llama 3 ran out of
# memory before session 17, see docs/design/runtime.md, Open problems 0).
FOUND_BY_STRESS = """%ir 1
%start start
%ignore [\\u{20}]
rule start = r1 | ()
rule r1 = (() | @sub | @sub) (){2,}
%subgrammar sub {
  %ir 1
  %start start
  %options allow_initial_skip
  %ignore [,]
  rule start = r1{3,}
  rule r1 = r1 (() [,]) | ([^),]* | ")"?)
}
"""


@pytest.mark.parametrize(
    "source", [ANY_TEXT_WORDS, FOUND_BY_STRESS], ids=["any-text-words", "found-by-stress"]
)
def test_lexeme_ending_at_every_byte(llama3, source: str) -> None:
    """A lexeme that can end after any byte and follow itself: a group's exits were kept with
    repeats (one per way of reaching the node), each repeat walked again one level down, so a
    long token cost 2^k walks and the first fill ran out of memory. Exits are now sets."""
    compiled = assert_masks_equal_oracle(llama3, parse_grammar(source), [b""])
    if source == ANY_TEXT_WORDS:
        # Its first fill would build groups over 8.4M trie nodes; it stops at the fill's trie
        # node budget and the search completes the mask.
        assert compiled.cache_stats()["fills_searched"] >= 1


def test_exponentially_many_segmentations_fall_back_to_the_trie_search(llama3) -> None:
    """Llama 3 has a token of 80 '='; cut into "=" and "==" it has Fibonacci-many
    segmentations, and each leaves a different parser stack here (palindromes), so exit walks,
    which follow one segmentation at a time, could not finish. Past the fill's walk budget the
    mask comes from the trie search, which merges segmentations per byte."""
    ir = Grammar.from_lark('start: s\ns: A s A | B s B | C\nA: "="\nB: "=="\nC: "!"\n').ir
    compiled = assert_masks_equal_oracle(llama3, ir, [b"", b"===", b"==!="])
    assert compiled.cache_stats()["fills_searched"] >= 1


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_grammars_decoded_with_llama3_tokens_equal_brute_force(llama3, data) -> None:
    """Random grammars, strings cut into real multi-byte tokens (longest match first) and decoded
    token by token through one runtime per grammar, prewarmed or not: at every token boundary the
    mask equals brute force over all 128,256 ids (tokens that span several lexemes and token-set
    elements, which a byte vocabulary cannot show)."""
    ir = data.draw(grammars(subgrammars=True))
    assume(not admits_most_tokens(ir))  # the oracle is slow there
    texts = [data.draw(mutated_strings(ir)).encode() for _ in range(2)]
    compiled = compile_grammar(ir, llama3)
    if data.draw(st.booleans()):
        compiled.prewarm()
    oracle = ReferenceMatcher(ir)
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    for text in texts + texts[:1]:
        ids = greedy_tokens(llama3, text, longest=8)
        assert b"".join(llama3.tokens[i] for i in ids) == text
        masks = oracle.masks_along(text, llama3.tokens, llama3.special_ids, llama3.eos_ids)
        matcher = compiled.matcher()
        offset = 0
        for k in range(len(ids) + 1):
            expected = [i for i, ok in enumerate(masks[offset]) if ok]
            matcher.fill_next_token_bitmask(bitmask)
            assert bitmask_to_ids(bitmask[0], compiled.vocab_size) == expected, (text, ids[:k])
            if k == len(ids):
                break
            accepted = matcher.accept_token(ids[k])
            assert accepted == (ids[k] in set(expected)), (text, ids[: k + 1])
            if not accepted:
                break
            offset += len(llama3.tokens[ids[k]])


def test_interleaved_bounded_strings_store_their_inside_sets_as_deltas(llama3) -> None:
    """The states of a length-bounded string and of a bounded pattern interleave in the
    builder's order, so a state's nearest earlier inside set can be several sets back. With
    only the previous set tried as a delta base, 168 of this schema's sets were stored dense
    (16 KB each) and the artifact was 5.1 MB; now 20 are, and it is 2.5 MB."""
    schema = {
        "type": "object",
        "properties": {
            "key": {"type": "string", "pattern": "^[0-9a-zA-Z_-]{1,255}$"},
            "value": {"type": "string", "minLength": 1, "maxLength": 255},
        },
        "required": ["key", "value"],
        "additionalProperties": False,
    }
    compiled = compile_grammar(Grammar.from_json_schema(schema).ir, llama3)
    blob = compiled._sections["runtime"]  # noqa: SLF001
    position, arrays = 8, []
    while position < len(blob):
        count, width = struct.unpack_from("<II", blob, position)
        arrays.append((position + 8, count))
        position += 8 + (count * width + 3) // 4 * 4
    kinds_at, num_sets = arrays[19]  # inside_kinds: 0 is a dense set
    kinds = blob[kinds_at : kinds_at + num_sets]
    assert kinds.count(0) <= 30, f"{kinds.count(0)} of {num_sets} inside sets stored dense"
    assert len(compiled.to_bytes()) < 3_000_000
    matcher = compiled.matcher()
    assert matcher.accept_string('{"key": "a-1", "value": "' + "x" * 255 + '"}')
    assert matcher.is_accepting()


@pytest.mark.parametrize(("name", "idle"), [("clike", True), ("json", False)])
def test_the_prewarm_leaves_depth_keys_out_where_its_traffic_finds_nothing_under_them(
    llama3, name: str, idle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Llama 3 tokens, with the future key in use, C-like's synthetic traffic finds almost
    no mask under a bounded-depth key, so the prewarm leaves those keys out: the decode after
    it neither finds nor stores a mask by depth. JSON, without future keys, keeps them (its
    nesting is what they are for). The masks equal those after a prewarm that ran no traffic,
    which keeps the keys."""
    monkeypatch.delenv("GRAMKILN_FUTURE_KEYS", raising=False)
    monkeypatch.setenv("GRAMKILN_PREWARM_MS", "60000")
    bench = Path(__file__).resolve().parents[1] / "bench"
    source = (bench / "grammars" / f"{name}.lark").read_text(encoding="utf-8")
    texts = [path.read_bytes() for path in sorted((bench / "instances" / name).glob("*.txt"))]
    data = compile_grammar(Grammar.from_lark(source).ir, llama3).to_bytes()
    token_lists = [greedy_tokens(llama3, text, longest=16) for text in texts[:2]]

    def masks_along(compiled: CompiledGrammar) -> list[bytes]:
        bitmask = allocate_token_bitmask(1, compiled.vocab_size)
        masks = []
        for tokens in token_lists:
            matcher = compiled.matcher()
            for token in tokens:
                matcher.fill_next_token_bitmask(bitmask)
                masks.append(bytes(np.asarray(bitmask)))
                assert matcher.accept_token(token)
        return masks

    compiled = CompiledGrammar.load(data, llama3, prewarm=False)
    compiled.prewarm()
    before = compiled.cache_stats()
    assert before["depth_keys_idle"] == int(idle)
    masks = masks_along(compiled)
    after = compiled.cache_stats()
    if idle:
        # Fills were computed, and none found a mask by depth. (JSON's decode of these two
        # texts may compute none after the traffic.)
        assert after["fills_computed"] > before["fills_computed"]
        assert after["hits_depth"] == before["hits_depth"]
    monkeypatch.setenv("GRAMKILN_PREWARM_TRAFFIC", "off")
    kept = CompiledGrammar.load(data, llama3, prewarm=False)
    kept.prewarm()
    assert kept.cache_stats()["depth_keys_idle"] == 0
    assert masks_along(kept) == masks


def test_stored_masks_are_kept_compact_and_copied_back_exactly(llama3) -> None:
    """A stored mask that differs from all zeros, or from an earlier dense mask, in at most an
    eighth of its words keeps only those words: after the JSON prewarm nearly every distinct
    mask is compact (the string masks of every nesting differ in the words of their closing
    tokens; the masks after a value are a few hundred tokens), and the masks need a fraction of
    16 KB each. Masks copied from the stored forms (every fill of a second decode is a
    whole-stack hit) equal the ones the first decode computed."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    source = (bench / "grammars" / "json.lark").read_text(encoding="utf-8")
    text = (bench / "instances" / "json" / "02_records.txt").read_bytes()
    data = compile_grammar(Grammar.from_lark(source).ir, llama3).to_bytes()
    tokens = greedy_tokens(llama3, text, longest=16)
    words = (llama3.vocab_size + 31) // 32

    def decode(compiled: CompiledGrammar) -> list[bytes]:
        bitmask = allocate_token_bitmask(1, compiled.vocab_size)
        matcher = compiled.matcher()
        masks = []
        for token in tokens:
            matcher.fill_next_token_bitmask(bitmask)
            masks.append(bytes(np.asarray(bitmask)))
            assert matcher.accept_token(token)
        matcher.fill_next_token_bitmask(bitmask)
        masks.append(bytes(np.asarray(bitmask)))
        return masks

    lazy = CompiledGrammar.load(data, llama3, prewarm=False)
    computed = decode(lazy)
    assert lazy.cache_stats()["fills_computed"] > 0
    hits_before = lazy.cache_stats()["hits_whole_stack"]
    assert decode(lazy) == computed
    assert lazy.cache_stats()["hits_whole_stack"] == hits_before + len(computed)
    assert len(set(computed)) > 10

    warm = CompiledGrammar.load(data, llama3, prewarm=False)
    warm.prewarm()
    stats = warm.cache_stats()
    assert stats["compact_masks"] >= stats["distinct_masks"] * 3 // 4
    assert (
        stats["mask_bytes"] < 64 * stats["mask_entries"] + 4 * words * stats["distinct_masks"] // 2
    )
    assert decode(warm) == computed
