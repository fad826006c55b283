"""The table builder and loader: shared per-vocabulary index, classes of states, compact blobs.

The builder walks the token trie once per class of DFA states that no token can tell apart and
shares first-byte subtree walks between classes; the loader expands the compact tables and
shares decoded trie tables between runtimes of one vocabulary. These tests check that all of
that is invisible: masks equal the reference matcher's brute force on grammars made of many
near-identical states (bounded strings, object keys), artifacts stay byte-identical, and the
shared pieces never mix up two vocabularies.
"""

from __future__ import annotations

import itertools
import pickle
import struct
import threading

import pytest
from gramkiln.ir import GrammarIR, parse_grammar
from gramkiln.runtime import _core
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import CompiledGrammar, allocate_token_bitmask, bitmask_to_ids
from gramkiln.runtime.vocab import Vocab
from hypothesis import given, settings

from gramkiln import Grammar
from gramkiln.errors import ArtifactError, CompileError
from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.strategies import grammars

# Short and long tokens over the bytes of small JSON documents, so that tokens end at every
# distance from the end of a bounded string and cross key/value boundaries.
TEXT_TOKENS = [
    *(b"a" * length for length in range(1, 10)),
    b"b",
    b"ab",
    b"ba",
    b"abab",
    b"bbbbbb",
    b'"',
    b'"a',
    b'a"',
    b'aa"',
    b'"aa"',
    b'":',
    b'":"',
    b'",',
    b'"}',
    b'{"',
    b'{"a',
    b"{",
    b"}",
    b":",
    b",",
    b" ",
    b"1",
    b"12",
    b"true",
    b"tr",
]
EOS = b"</s>"
TOKENS = [*TEXT_TOKENS, EOS]
EOS_ID = len(TEXT_TOKENS)


def make_vocab(tokens: list[bytes] = TOKENS) -> Vocab:
    """A fresh vocabulary object (so nothing is cached on it yet)."""
    return Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1], vocab_size=64)


def brute_force(ir: GrammarIR, vocab: Vocab, prefix: bytes) -> list[int]:
    oracle = ReferenceMatcher(ir)
    allowed = oracle.allowed_tokens(prefix, list(vocab.tokens), vocab.special_ids, vocab.eos_ids)
    return [i for i, ok in enumerate(allowed) if ok]


def mask_ids(matcher, vocab_size: int) -> list[int]:
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return bitmask_to_ids(bitmask[0], vocab_size)


def check_prefixes(ir: GrammarIR, vocab: Vocab, texts: list[bytes], compiled=None) -> None:
    """Masks equal brute force at every viable prefix of every text."""
    compiled = compiled if compiled is not None else compile_grammar(ir, vocab)
    oracle = ReferenceMatcher(ir)
    for text in texts:
        matcher = compiled.matcher()
        assert mask_ids(matcher, compiled.vocab_size) == brute_force(ir, vocab, b"")
        for end in range(1, len(text) + 1):
            if not oracle.is_prefix(text[:end]):
                assert not matcher.accept_string(text[end - 1 : end])
                break
            assert matcher.accept_string(text[end - 1 : end])
            assert mask_ids(matcher, compiled.vocab_size) == brute_force(ir, vocab, text[:end]), (
                text[:end]
            )


def test_bounded_string_states_are_exact() -> None:
    # A chain of string states, each a different distance from maxLength: states far from the
    # end share a class, the last ones (closer than the longest token) do not.
    ir = Grammar.from_json_schema({"type": "string", "minLength": 2, "maxLength": 12}).ir
    check_prefixes(
        ir, make_vocab(), [b'"aaaaaaaaaaaa"', b'"abababababab"', b'"a"', b'"bbbbbbbbbbbbb"']
    )


def test_near_identical_key_states_are_exact() -> None:
    # Known keys next to free-form keys: the key states differ from the generic string state
    # on a few bytes only, so they share most first-byte walks and build their token sets from
    # one another.
    schema = {
        "type": "object",
        "properties": {
            "aa": {"type": "string", "maxLength": 3},
            "ab": {"type": "boolean"},
            "ba": {"type": "integer"},
        },
        "required": ["aa"],
    }
    ir = Grammar.from_json_schema(schema).ir
    check_prefixes(
        ir,
        make_vocab(),
        [b'{"aa":"aaa"}', b'{"aa":"a","ab":true}', b'{"aa":"","ba":12}', b'{"aab":1}'],
    )


def test_same_bytes_from_fresh_vocabularies_and_threads() -> None:
    ir = Grammar.from_json_schema({"type": "string", "maxLength": 5}).ir
    vocab = make_vocab()
    indexes: list[object] = []
    workers = [
        threading.Thread(target=lambda: indexes.append(vocab.core_index())) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    # One index per vocabulary, whichever thread asked first.
    assert len(indexes) == 8 and all(index is indexes[0] for index in indexes)
    first = compile_grammar(ir, vocab).to_bytes()
    assert compile_grammar(ir, vocab).to_bytes() == first
    assert compile_grammar(ir, make_vocab()).to_bytes() == first


def test_runtimes_of_different_vocabularies_never_share_trie_tables() -> None:
    # Same size, same special ids, different token bytes: loading both in one process must
    # give each its own token trie.
    ir = parse_grammar('%ir 1\n%start start\nrule start = "ab" ("a" | "b")*\n')
    first = make_vocab()
    swapped = [
        token.replace(b"a", b"#").replace(b"b", b"a").replace(b"#", b"b") for token in TOKENS
    ]
    second = make_vocab(swapped)
    blobs = [compile_grammar(ir, vocab).to_bytes() for vocab in (first, second)]
    loaded = [CompiledGrammar.load(blob) for blob in blobs]
    again = CompiledGrammar.load(blobs[0])  # shares the first one's tables
    for vocab, compiled in [(first, loaded[0]), (second, loaded[1]), (first, again)]:
        matcher = compiled.matcher()
        assert matcher.accept_string(b"a")
        assert mask_ids(matcher, compiled.vocab_size) == brute_force(ir, vocab, b"a")


def runtime_arrays(blob: bytes) -> list[tuple[int, int, int]]:
    """(offset of the count word, count, width) of every array in a runtime blob."""
    arrays, position = [], 8
    while position < len(blob):
        count, width = struct.unpack_from("<II", blob, position)
        arrays.append((position, count, width))
        position += 8 + (count * width + 3) // 4 * 4
    return arrays


def test_loader_refuses_old_versions_and_bad_compact_tables() -> None:
    ir = Grammar.from_json_schema({"type": "string", "maxLength": 6}).ir
    blob = compile_grammar(ir, make_vocab())._sections["runtime"]  # noqa: SLF001
    old = blob[:4] + struct.pack("<I", 3) + blob[8:]
    with pytest.raises(ArtifactError, match="version 3 is not the supported version 6"):
        _core.load_runtime(old)
    arrays = runtime_arrays(blob)
    byte_class_at = arrays[5][0]  # the 256 DFA byte classes follow the lexeme starts
    assert arrays[5][1:] == (256, 1)
    bad = bytearray(blob)
    bad[byte_class_at + 8] = 0xFF  # a byte class beyond the class count
    with pytest.raises(ArtifactError, match="byte class"):
        _core.load_runtime(bytes(bad))
    state_class_at, count, _ = arrays[17]  # one class per DFA state
    assert count == struct.unpack_from("<10I", blob, 16)[6]
    bad = bytearray(blob)
    bad[state_class_at + 8 : state_class_at + 12] = struct.pack("<I", 1 << 30)
    with pytest.raises(ArtifactError, match="state class"):
        _core.load_runtime(bytes(bad))


def test_transition_rows_are_stored_compact_when_smaller_and_checked_on_load() -> None:
    # Keyword-heavy lexemes have many states whose rows are mostly one target: the table is
    # then each row's most common target plus the classes that differ (arrays 42-45), and the
    # dense slot (array 6) is empty.
    words = [f"kw{i}x{i * 7}" for i in range(60)]
    grammar = Grammar.from_lark("start: KW+\nKW: " + " | ".join(f'"{w}"' for w in words))
    vocab = make_vocab()
    compiled = compile_grammar(grammar.ir, vocab)
    blob = compiled._sections["runtime"]  # noqa: SLF001
    arrays = runtime_arrays(blob)
    assert len(arrays) == 46
    assert arrays[6][1] == 0  # no dense table
    num_states = struct.unpack_from("<10I", blob, 16)[6]
    assert arrays[42][1] == num_states and arrays[43][1] == num_states
    assert 0 < arrays[44][1] == arrays[45][1]
    matcher = compiled.matcher()
    assert matcher.accept_string(words[3] + words[41])
    assert matcher.is_accepting()
    assert not compiled.matcher().accept_string("kw3x22")
    # Exception classes must ascend within a row: swap the first row's first two.
    end_at = arrays[43][0] + 8
    class_at = arrays[44][0] + 8
    ends = struct.unpack_from(f"<{num_states}I", blob, end_at)
    starts = (0, *ends[:-1])
    first = next(start for start, end in zip(starts, ends, strict=True) if end - start >= 2)
    bad = bytearray(blob)
    bad[class_at + first], bad[class_at + first + 1] = (
        bad[class_at + first + 1],
        bad[class_at + first],
    )
    with pytest.raises(ArtifactError, match="exception classes"):
        _core.load_runtime(bytes(bad))
    bad = bytearray(blob)
    struct.pack_into("<I", bad, end_at, arrays[44][1] + 1)  # past the exceptions
    with pytest.raises(ArtifactError, match="exception offsets|compact DFA table"):
        _core.load_runtime(bytes(bad))


def test_vocab_with_an_index_pickles_without_it() -> None:
    # Worker processes get vocabularies by pickle; the C++ index is per process.
    vocab = make_vocab()
    ir = Grammar.from_json_schema({"type": "string", "maxLength": 4}).ir
    blob = compile_grammar(ir, vocab).to_bytes()
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy == vocab and copy.tokens == vocab.tokens
    assert compile_grammar(ir, copy).to_bytes() == blob


def test_ir_hash_shortcut_matches_the_stripped_form() -> None:
    from gramkiln.ir import ir_to_msgpack, strip_spans
    from gramkiln.runtime.artifact import ir_hash

    with_spans = Grammar.from_lark('start: "span" NAME\nNAME: /[a-z]+/\n').ir
    without = strip_spans(with_spans)
    schema = Grammar.from_json_schema({"type": "object", "properties": {"span": {}}}).ir
    for ir in (with_spans, without, schema):
        assert ir_hash(ir, ir_to_msgpack(ir)) == ir_hash(ir)
    assert ir_hash(with_spans, ir_to_msgpack(with_spans)) == ir_hash(without)


BLOB_ARRAYS_BEFORE_EXITS = 23  # meta ... class_exit_offsets: exit_entry_byte is array 23


def blob_array(blob: bytes, index: int) -> bytes:
    """Array `index` of a runtime blob (docs/artifact-format.md), raw little-endian bytes."""
    position = 8
    for _ in range(index):
        count, width = struct.unpack_from("<II", blob, position)
        position += 8 + count * width
        position += -position % 4
    count, width = struct.unpack_from("<II", blob, position)
    return blob[position + 8 : position + 8 + count * width]


def test_exits_are_kept_only_for_bytes_a_following_lexeme_starts_with() -> None:
    # A bounded text ends at every byte, but only "<" starts what follows it: exit children of
    # other bytes could never be entered, and the builder leaves them out.
    alphabet = [b"a", b"b", b"<", b"/", b"x", b">"]
    tokens = [b"".join(p) for n in (1, 2, 3) for p in itertools.product(alphabet, repeat=n)]
    vocab = Vocab(tokens)
    grammar = Grammar.from_lark('start: body "</x>"\nbody: /[ab<>\\/x]{0,6}/')
    compiled = grammar.compile(vocab)
    blob = compiled._sections["runtime"]  # noqa: SLF001
    exit_bytes = set(blob_array(blob, BLOB_ARRAYS_BEFORE_EXITS))
    assert exit_bytes == {ord("<")}
    # And the masks stay exact.
    check_prefixes(grammar.ir, vocab, [b"", b"a", b"ab<", b"ab</", b"a>x/", b"<</"], compiled)


def _exit_bytes_by_rescanning(flat) -> list[int]:
    """The lexemes' exit bytes as first written: FIRST and FOLLOW by rescanning every
    suffix of every production until nothing changes (quadratic, kept here as the check)."""
    n = len(flat.nonterminal_names)
    dfas = flat.lexeme_dfas
    lexeme_nullable = [
        bool(d.start >= 0 and len(d.accepting) and d.accepting[d.start]) for d in dfas
    ]
    nullable = [False] * n

    def is_nullable(kind: str, index: int) -> bool:
        return nullable[index] if kind == "N" else kind == "L" and lexeme_nullable[index]

    first = [0] * n

    def first_of(rhs, start: int) -> tuple[int, bool]:
        bits = 0
        for kind, index in rhs[start:]:
            bits |= first[index] if kind == "N" else (1 << index if kind == "L" else 0)
            if not is_nullable(kind, index):
                return bits, False
        return bits, True

    follow_nt, follow_lexeme = [0] * n, [0] * len(dfas)
    changed = True
    while changed:
        changed = False
        for lhs, rhs in flat.productions:
            if not nullable[lhs] and all(is_nullable(k, i) for k, i in rhs):
                nullable[lhs] = changed = True
            bits, _ = first_of(rhs, 0)
            if bits | first[lhs] != first[lhs]:
                first[lhs] |= bits
                changed = True
            for position, (kind, index) in enumerate(rhs):
                if kind == "S":
                    continue
                bits, rest_nullable = first_of(rhs, position + 1)
                bits |= follow_nt[lhs] if rest_nullable else 0
                target = follow_nt if kind == "N" else follow_lexeme
                if bits | target[index] != target[index]:
                    target[index] |= bits
                    changed = True
    starts = []
    for dfa in dfas:
        row = dfa.table[dfa.start] if dfa.start >= 0 and len(dfa.accepting) else []
        starts.append(sum(1 << byte for byte, target in enumerate(row) if target >= 0))
    words = []
    for index in range(len(dfas)):
        mask = 0
        for other in range(len(dfas)):
            if follow_lexeme[index] >> other & 1:
                mask |= starts[other]
        words.extend((mask >> (32 * w)) & 0xFFFFFFFF for w in range(8))
    return words


@settings(max_examples=60, deadline=None)
@given(grammars(subgrammars=True))
def test_lexeme_exit_bytes_equal_a_rescanning_fixpoint(ir: GrammarIR) -> None:
    """The builder keeps a lexeme's exits only for the bytes a lexeme that can follow it starts
    with. FOLLOW is computed in one right-to-left scan of each production and a worklist
    (session 45: the rescanning fixpoint took ~15 s of a 587-property schema's compile); it
    equals the rescanning fixpoint on random grammars."""
    from gramkiln.runtime.compile import _lexeme_exit_bytes, flatten_grammar, lower_for_runtime

    vocab = Vocab([b"a", b"b", b"(", b")", b",", b" ", b"ab", b"a(", b"),", b"</s>"], eos_ids=[9])
    try:
        flat = flatten_grammar(lower_for_runtime(ir), vocab)
    except CompileError:
        return
    assert _lexeme_exit_bytes(flat, flat.lexeme_dfas) == _exit_bytes_by_rescanning(flat)
