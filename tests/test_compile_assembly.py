"""The compile path after the pass pipeline: byte DFAs of repeated terminals, the table
builder's inputs, and the artifact assembly (the IR section made on first need).

Each shortcut must be invisible: the same DFAs as the reference construction, the same
artifact bytes as an eager assembly, the same errors.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from gramkiln.ir import (
    CharClass,
    Choice,
    Literal,
    Ref,
    Repeat,
    Seq,
    ir_to_msgpack,
    parse_expr,
    parse_grammar,
    print_expr,
)
from gramkiln.ir.automata import (
    ByteDFA,
    _ByteNFA,
    _connect,
    build_dfa,
    build_dfa_python,
)
from gramkiln.runtime.artifact import ir_hash, make_header, write_artifact
from gramkiln.runtime.compile import FlatGrammar, build_tables, compile_grammar
from gramkiln.runtime.compiled import (
    RUNTIME_LAYOUT,
    CompiledGrammar,
    allocate_token_bitmask,
    bitmask_to_ids,
)
from gramkiln.runtime.vocab import Vocab

from gramkiln import Grammar
from gramkiln.errors import CompileError
from gramkiln.testing import ReferenceMatcher

# A key complement in the shape the JSON Schema front end writes: every key prefix may go on
# into the string tail TAIL, and all of them end before the same closing quote.
KEYS = ["name", "nature", "number", "id", "idle", "items", "index", "value", "values"]


def _chars(text: str, negated: bool = False) -> CharClass:
    """The class of the characters of `text` (or of every other character)."""
    ranges: list[tuple[int, int]] = []
    for point in sorted({ord(char) for char in text}):
        if ranges and ranges[-1][1] + 1 == point:
            ranges[-1] = (ranges[-1][0], point)
        else:
            ranges.append((point, point))
    return CharClass(ranges=tuple(ranges), negated=negated)


# A JSON string body: any character but quote and backslash, or an escape.
TAIL = Repeat(
    item=Choice(
        alternatives=(
            _chars('"\\', negated=True),
            Seq(items=(Literal(text="\\"), _chars('"\\/bfnrt'))),
        )
    ),
    min=0,
    max=None,
)


def _key_complement(keys: list[str]) -> Choice:
    """Strings that are none of `keys`: a choice per first character, nested by prefix."""
    alternatives: list = [] if "" in keys else [Literal(text="")]
    firsts = sorted({key[0] for key in keys if key})
    alternatives.append(
        Seq(items=(_chars('"\\' + "".join(firsts), negated=True), Ref(name="TAIL")))
    )
    for first in firsts:
        rests = [key[1:] for key in keys if key and key[0] == first]
        alternatives.append(Seq(items=(Literal(text=first), _key_complement(rests))))
    return Choice(alternatives=tuple(alternatives))


def _quoted_key_complement() -> Seq:
    return Seq(items=(Literal(text='"'), _key_complement(KEYS), Literal(text='"')))


def test_key_complement_dfa_matches_the_reference_and_the_language() -> None:
    expr = _quoted_key_complement()
    terminals = {"TAIL": TAIL}
    native = build_dfa(expr, terminals, max_states=200_000)
    assert native == build_dfa_python(expr, terminals, max_states=200_000)
    for key in KEYS:
        assert not native.matches(f'"{key}"'.encode())
        assert native.matches(f'"{key}x"'.encode())
        assert native.matches(f'"{key[:-1]}"'.encode()) == (key[:-1] not in KEYS)
    assert native.matches(b'""') and native.matches('"caf\u00e9"'.encode())


def test_a_terminal_before_one_continuation_is_built_once() -> None:
    # Every key prefix ends in TAIL before the same quote: one copy of TAIL in the NFA, not one
    # per prefix (which made the subset construction 26x larger than the minimal DFA).
    expr = _quoted_key_complement()
    nfa = _ByteNFA(10**6)
    start, final = nfa.new_state(), nfa.new_state()
    _connect(nfa, expr, start, final, {"TAIL": TAIL}, ())
    copies_of_tail = [key for key in nfa.copies if key[0] == "TAIL"]
    assert len(copies_of_tail) == 1
    single = _ByteNFA(10**6)
    s, f = single.new_state(), single.new_state()
    _connect(single, Ref(name="TAIL"), s, f, {"TAIL": TAIL}, ())
    # One copy per use would be `uses` copies of TAIL; one shared copy leaves the key letters
    # and their classes.
    uses = print_expr(expr).count("TAIL")
    assert uses > 30
    assert nfa.count < uses * single.count / 2


def test_shared_copies_keep_errors_identical() -> None:
    terminals = {"A": parse_expr('"a" B'), "B": parse_expr('"b" A'), "T": parse_expr('"t"+')}
    recursive = Choice(alternatives=(Seq(items=(Literal(text="x"), Ref(name="T"))), Ref(name="A")))
    for builder in (build_dfa, build_dfa_python):
        with pytest.raises(CompileError, match="recursive"):
            builder(recursive, terminals)
    # Many uses of one terminal before one continuation still hit the same limits.
    repeated = Seq(
        items=(
            Choice(alternatives=tuple(Seq(items=(Literal(text=c), Ref(name="T"))) for c in "abc")),
            Literal(text="!"),
        )
    )
    for max_states in (1, 2, 3, 5, 8):
        outcomes = []
        for builder in (build_dfa, build_dfa_python):
            try:
                outcomes.append(builder(repeated, terminals, max_states=max_states))
            except CompileError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1]


def test_build_tables_accepts_empty_lexemes_and_plain_tables() -> None:
    vocab = Vocab([b"a", b"b", b"ab"], eos_ids=[])
    word = build_dfa(Repeat(item=parse_expr('"a" | "b"'), min=1, max=None))
    empty = ByteDFA(start=-1, accepting=(), table=np.zeros((0, 256), dtype=np.int32))
    flat = FlatGrammar(
        nonterminal_names=["$start"],
        productions=[(0, (("L", 1),))],
        lexeme_names=["empty", "word"],
        lexeme_dfas=[empty, word],
        tokensets=[],
        start=0,
    )
    blob = build_tables(flat, vocab, [])
    compiled = CompiledGrammar.from_parts(
        parse_grammar('%ir 1\n%start start\nrule start = "a"\n'), vocab, blob, {}
    )
    matcher = compiled.matcher()
    assert matcher.accept_string("abba") and matcher.is_accepting()


def test_from_parts_gives_the_eager_artifact_bytes() -> None:
    ir = Grammar.from_lark('start: item ("," item)*\nitem: /[a-z]+/ | "[" start "]"\n').ir
    vocab = Vocab([bytes([b]) for b in range(256)] + [b"ab", b",[", b"]]"], eos_ids=[256])
    compiled = compile_grammar(ir, vocab)
    blob = compiled._sections["runtime"]  # noqa: SLF001 - comparing against an eager assembly
    eager = write_artifact(
        make_header(ir.verify(), vocab, {"end_tokens": [256]}, runtime_layout=RUNTIME_LAYOUT),
        {"ir": ir_to_msgpack(ir.verify()), "runtime": blob},
    )
    assert compiled.header["ir_hash"] == ir_hash(ir.verify())
    assert compiled.to_bytes() == eager
    assert compile_grammar(ir, vocab).to_bytes() == eager  # save() / repr() complete it too
    loaded = CompiledGrammar.load(eager, vocab)
    assert loaded.header == compiled.header and loaded.to_bytes() == eager


# Byte tokens plus multi-byte ones that cross string, key and value boundaries.
WALK_TOKENS = [bytes([b]) for b in range(256)] + [
    b'{"',
    b'":',
    b'": "',
    b'","',
    b'"}',
    b"ab",
    b"abc",
    b"abcd",
    b"abcde",
    b'a"',
    b'\\"',
    b"\\u00",
    b"12",
    b"1.5",
    b"true",
    b'"],',
    "\u00e9t\u00e9".encode(),
]
WALK_SCHEMAS = [
    {"type": "object", "properties": {"ab": {"type": "string"}, "n": {"type": "integer"}}},
    {"type": "array", "items": {"type": "string", "maxLength": 3}},
    {"type": "object", "properties": {"abc": {"type": "number"}, "t": {"type": "boolean"}}},
    {"type": "string", "pattern": "^[a-z]+$"},
]


def test_walk_cache_never_changes_the_tables() -> None:
    # The vocabulary's walk cache replays walks by the language of the state entered; a hit
    # must be exactly the walk it replaces, whatever grammar filled the cache, in any order and
    # from concurrent compiles.
    vocab = Vocab(WALK_TOKENS, eos_ids=[0], special_ids=[0])
    index = vocab.core_index()
    irs = [Grammar.from_json_schema(schema).ir for schema in WALK_SCHEMAS]
    # Words of even and of odd length: after the first letter both lexemes are a two-state
    # cycle over the letters, accepting in opposite states (a key must tell them apart).
    for word in ("([a-z][a-z])+", "[a-z]([a-z][a-z])*"):
        irs.append(parse_grammar(f"%ir 1\n%start start\nrule start = W\nterm W = {word}\n"))
    cold = []
    for ir in irs:
        index.clear_walk_cache()
        cold.append(compile_grammar(ir, vocab).to_bytes())
    for order in (list(range(len(irs))), list(reversed(range(len(irs))))):
        for position in order:
            assert compile_grammar(irs[position], vocab).to_bytes() == cold[position]
    index.clear_walk_cache()
    results: dict[tuple[int, int], bytes] = {}

    def compile_all(worker: int) -> None:
        for round_ in range(2):
            for position in range(len(irs)):
                position = (position + worker) % len(irs)
                results[(worker, round_ * 10 + position)] = compile_grammar(
                    irs[position], vocab
                ).to_bytes()

    workers = [threading.Thread(target=compile_all, args=(worker,)) for worker in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(results) == 4 * 2 * len(irs)
    for (_, key), data in results.items():
        assert data == cold[key % 10]
    assert index.clear_walk_cache() > 0  # the string and number walks were shared


def test_bounded_strings_share_walks_only_within_reach() -> None:
    # States of a bounded string that agree for as many bytes as a first-byte subtree is deep
    # share that subtree's walk, even though they differ further on. Subtrees of very different
    # depths (tokens of up to 9 "a"s, short "b" tokens, multi-byte UTF-8) around a bound of 10
    # code points: masks must equal brute force at every distance from the bound.
    tokens = [
        *(b"a" * length for length in range(1, 10)),
        b"b",
        b"bb",
        b'"',
        b'a"',
        b'b"',
        "\u00e9".encode(),
        "\u00e9\u00e9a".encode(),
        b"<eos>",
    ]
    vocab = Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    ir = Grammar.from_json_schema({"type": "string", "maxLength": 10}).ir
    compiled = compile_grammar(ir, vocab)
    for text in [b'"' + b"a" * 10 + b'"', ('"' + "\u00e9" * 4 + "b" * 6 + '"').encode()]:
        _check_masks_byte_by_byte(compiled, ReferenceMatcher(ir), tokens, vocab, text)


@pytest.mark.parametrize("longest, bound", [(9, 10), (12, 12), (12, 20)])
def test_bounded_strings_take_whole_subtrees_only_when_they_fit(longest: int, bound: int) -> None:
    # Runs of "a" tokens form subtrees of one byte, which a bounded string's states walk in one
    # step while the bound leaves room for the whole subtree, and node by node near the bound.
    tokens = [b"a" * length for length in range(1, longest + 1)] + [b'"', b"<eos>"]
    vocab = Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    ir = Grammar.from_json_schema({"type": "string", "maxLength": bound}).ir
    compiled = compile_grammar(ir, vocab)
    text = b'"' + b"a" * bound + b'"'
    _check_masks_byte_by_byte(compiled, ReferenceMatcher(ir), tokens, vocab, text)


def _check_masks_byte_by_byte(compiled, oracle, tokens: list[bytes], vocab: Vocab, text: bytes):  # type: ignore[no-untyped-def]
    """Feed `text` a byte at a time; after each byte the mask equals the oracle's."""
    matcher = compiled.matcher()
    for end in range(1, len(text) + 1):
        assert matcher.accept_string(text[end - 1 : end])
        expected = oracle.allowed_tokens(text[:end], tokens, vocab.special_ids, vocab.eos_ids)
        bitmask = allocate_token_bitmask(1, compiled.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        assert bitmask_to_ids(bitmask[0], compiled.vocab_size) == [
            token for token, ok in enumerate(expected) if ok
        ], text[:end]
