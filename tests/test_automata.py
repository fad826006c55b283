"""Tests for gramkiln.ir.utf8 and gramkiln.ir.automata (byte DFAs of terminal expressions)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Empty,
    Literal,
    Ref,
    Repeat,
    Seq,
    TokenSet,
    parse_expr,
)
from gramkiln.ir.automata import ByteDFA, build_dfa
from gramkiln.ir.utf8 import utf8_sequences
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln.errors import CompileError

# --------------------------------------------------------------------------------------------
# utf8_sequences


def _matches_sequences(sequences: list[list[tuple[int, int]]], data: bytes) -> int:
    return sum(
        1
        for sequence in sequences
        if len(sequence) == len(data)
        and all(lo <= byte <= hi for (lo, hi), byte in zip(sequence, data, strict=True))
    )


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 0x10FFFF), st.integers(0, 0x10FFFF), st.data())
def test_utf8_sequences_cover_exactly_the_range(a: int, b: int, data: st.DataObject) -> None:
    lo, hi = min(a, b), max(a, b)
    sequences = utf8_sequences(lo, hi)
    # Inside the range: exactly one sequence matches each scalar value's encoding.
    probes = {lo, hi, min(lo + 1, hi), max(hi - 1, lo)}
    probes |= set(data.draw(st.lists(st.integers(lo, hi), max_size=30)))
    for cp in probes:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        assert _matches_sequences(sequences, chr(cp).encode("utf-8")) == 1
    # Anything a sequence matches is valid UTF-8 for a value inside the range.
    for sequence in sequences:
        for pick in (min, max):
            encoded = bytes(pick(lo_hi) for lo_hi in sequence)
            assert lo <= ord(encoded.decode("utf-8")) <= hi
    # Just outside the range nothing matches.
    for cp in (lo - 1, hi + 1):
        if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF:
            assert _matches_sequences(sequences, chr(cp).encode("utf-8")) == 0


def test_utf8_sequences_known_splits() -> None:
    assert utf8_sequences(0x41, 0x5A) == [[(0x41, 0x5A)]]
    assert utf8_sequences(0, 0x7FF) == [[(0x00, 0x7F)], [(0xC2, 0xDF), (0x80, 0xBF)]]
    # Surrogates are cut out of a range that spans them.
    assert utf8_sequences(0xD7FF, 0xE000) == [
        [(0xED, 0xED), (0x9F, 0x9F), (0xBF, 0xBF)],
        [(0xEE, 0xEE), (0x80, 0x80), (0x80, 0x80)],
    ]
    assert utf8_sequences(0xD800, 0xDFFF) == []
    assert len(utf8_sequences(0, 0x10FFFF)) <= 12


def test_utf8_sequences_rejects_bad_ranges() -> None:
    with pytest.raises(ValueError, match="outside"):
        utf8_sequences(0, 0x110000)
    assert utf8_sequences(5, 4) == []


# --------------------------------------------------------------------------------------------
# random terminal expressions and their Python-regex equivalents

ALPHABET = "ab\u00e9\U0001f600"
CLASS_RANGES = [(0x61, 0x61), (0x61, 0x62), (0x62, 0x62), (0xE9, 0xE9), (0x1F600, 0x1F600)]


def _class_regex(node: CharClass) -> str:
    parts = "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in node.ranges
    )
    if not node.ranges:
        return "[^\\s\\S]" if not node.negated else "[\\s\\S]"
    return f"[{'^' if node.negated else ''}{parts}]"


def to_regex(node) -> str:  # type: ignore[no-untyped-def]
    """The Python regex for a terminal expression over ALPHABET (test helper)."""
    if isinstance(node, Empty):
        return "(?:)"
    if isinstance(node, Literal):
        text = re.escape(node.text)
        return f"(?i:{text})" if node.case_insensitive else f"(?:{text})"
    if isinstance(node, CharClass):
        return _class_regex(node)
    if isinstance(node, Seq):
        return "(?:" + "".join(to_regex(item) for item in node.items) + ")"
    if isinstance(node, Choice):
        return "(?:" + "|".join(to_regex(alt) for alt in node.alternatives) + ")"
    if isinstance(node, Repeat):
        upper = "" if node.max is None else str(node.max)
        return f"(?:{to_regex(node.item)}){{{node.min},{upper}}}"
    raise AssertionError(node)


leaves = st.one_of(
    st.builds(Literal, text=st.text(alphabet=ALPHABET, min_size=0, max_size=3)),
    st.builds(Literal, text=st.sampled_from(["a", "ab", "B"]), case_insensitive=st.just(True)),
    st.builds(
        CharClass.of,
        st.lists(st.sampled_from(CLASS_RANGES), min_size=0, max_size=3),
        negated=st.booleans(),
    ),
    st.just(Empty()),
)


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(lambda items: Seq(items=tuple(items)), st.lists(children, max_size=3)),
        st.builds(
            lambda alts: Choice(alternatives=tuple(alts)),
            st.lists(children, min_size=1, max_size=3),
        ),
        st.builds(
            lambda item, lo, extra: Repeat(
                item=item, min=lo, max=None if extra < 0 else lo + extra
            ),
            children,
            st.integers(0, 2),
            st.integers(-1, 2),
        ),
    )


expressions = st.recursive(leaves, _extend, max_leaves=6)
samples = st.text(alphabet=ALPHABET + "AB", max_size=6)


@settings(max_examples=120, deadline=None)
@given(expressions, st.lists(samples, min_size=5, max_size=15))
def test_build_dfa_agrees_with_python_re(expr, strings: list[str]) -> None:  # type: ignore[no-untyped-def]
    dfa = build_dfa(expr)
    pattern = re.compile(to_regex(expr))
    for text in strings:
        assert dfa.matches(text.encode("utf-8")) == bool(pattern.fullmatch(text)), text
    _assert_trimmed_and_canonical(dfa)


@given(expressions, st.lists(samples, min_size=5, max_size=15))
def test_lazy_dfa_keeps_words_without_accepted_proper_prefix(expr, strings: list[str]) -> None:  # type: ignore[no-untyped-def]
    eager, lazy = build_dfa(expr), build_dfa(expr, lazy=True)
    for text in strings:
        data = text.encode("utf-8")
        shortest = eager.matches(data) and not any(
            eager.matches(data[:i]) for i in range(len(data))
        )
        assert lazy.matches(data) == shortest, text
    for state, accepting in enumerate(lazy.accepting):
        if accepting:
            assert (lazy.table[state] == -1).all()


def _assert_trimmed_and_canonical(dfa: ByteDFA) -> None:
    assert dfa.table.dtype == np.int32
    assert dfa.table.shape == (dfa.num_states, 256)
    if dfa.is_empty:
        return
    assert dfa.start == 0
    # Breadth-first numbering in byte order: discovering states in that order gives 0, 1, ...
    order, seen = [0], {0}
    for state in order:
        for target in dfa.table[state].tolist():
            if target != -1 and target not in seen:
                seen.add(target)
                order.append(target)
    assert order == list(range(dfa.num_states))
    # Every state can reach acceptance.
    alive = {s for s, accepting in enumerate(dfa.accepting) if accepting}
    changed = True
    while changed:
        changed = False
        for state in range(dfa.num_states):
            if state not in alive and any(t in alive for t in dfa.table[state].tolist()):
                alive.add(state)
                changed = True
    assert alive == set(range(dfa.num_states))


def _assert_minimal(dfa: ByteDFA) -> None:
    """Brute-force Myhill-Nerode check on a small DFA: all states pairwise distinguishable."""
    n = dfa.num_states
    distinct = {(p, q) for p in range(n) for q in range(n) if dfa.accepting[p] != dfa.accepting[q]}
    changed = True
    while changed:
        changed = False
        for p, q in itertools.combinations(range(n), 2):
            if (p, q) in distinct:
                continue
            for byte in range(256):
                a, b = int(dfa.table[p, byte]), int(dfa.table[q, byte])
                if a == b:
                    continue
                if a == -1 or b == -1 or (a, b) in distinct:
                    distinct |= {(p, q), (q, p)}
                    changed = True
                    break
    assert all((p, q) in distinct for p, q in itertools.combinations(range(n), 2))


@given(expressions)
def test_random_dfas_are_minimal(expr) -> None:  # type: ignore[no-untyped-def]
    dfa = build_dfa(expr)
    if dfa.num_states <= 12:
        _assert_minimal(dfa)


def test_equal_languages_give_identical_dfas() -> None:
    a = build_dfa(parse_expr('("a" | "b")*'))
    b = build_dfa(parse_expr('("a"* "b"*)*'))
    c = build_dfa(parse_expr('[a-b]* | "a"'))
    assert a == b == c and hash(a) == hash(b)
    assert build_dfa(parse_expr('"ab" | "ac"')) == build_dfa(parse_expr('"a" [b-c]'))
    assert not a.table.flags.writeable


def test_unicode_negated_class_stays_small_and_exact() -> None:
    dfa = build_dfa(parse_expr('[^"\\u{5c}]*'))
    assert dfa.num_states < 12
    assert dfa.matches("héllo wörld 😀".encode())
    assert not dfa.matches(b'a"b') and not dfa.matches(b"a\\b")
    assert not dfa.matches(b"\xed\xa0\x80")  # an encoded surrogate is not a character
    assert not dfa.matches(b"\xc0\x80")  # overlong
    assert not dfa.matches(b"\xf4\x90\x80\x80")  # above U+10FFFF
    assert dfa.run(dfa.start, b"\xf0\x9f") != -1  # inside a 4-byte character: still alive
    assert dfa.run(dfa.start, b"\xff") == -1


def test_large_bounded_repeat_is_linear() -> None:
    dfa = build_dfa(parse_expr('[0-9]{0,1000} "x"'))
    assert dfa.num_states == 1002
    assert dfa.matches(b"1" * 1000 + b"x")
    assert not dfa.matches(b"1" * 1001 + b"x")
    exact = build_dfa(parse_expr('"ab"{2,4}'))
    assert [exact.matches(b"ab" * k) for k in range(6)] == [False, False, True, True, True, False]
    assert build_dfa(parse_expr('"a"{0}')).matches(b"")
    assert not build_dfa(parse_expr('"a"{0}')).matches(b"a")


def test_literals_bytes_and_case_folding() -> None:
    dfa = build_dfa(Literal(text="yes", case_insensitive=True))
    assert all(dfa.matches(s) for s in (b"yes", b"YES", b"yEs"))
    assert not dfa.matches(b"yes!")
    raw = build_dfa(Bytes(data=b"\xff\x00"))
    assert raw.matches(b"\xff\x00") and not raw.matches(b"\xff")
    assert build_dfa(Literal(text="")).matches(b"")


def test_terminal_references_resolve_and_cycles_fail() -> None:
    terminals = {"DIGIT": parse_expr("[0-9]"), "INT": parse_expr("DIGIT+")}
    dfa = build_dfa(parse_expr('"-"? INT'), terminals)
    assert dfa.matches(b"-12") and not dfa.matches(b"-")
    with pytest.raises(CompileError, match="recursive"):
        build_dfa(Ref(name="A"), {"A": Seq(items=(Literal(text="a"), Ref(name="A")))})
    with pytest.raises(CompileError, match="unknown terminal"):
        build_dfa(Ref(name="NOPE"))
    with pytest.raises(CompileError, match="tokens"):
        build_dfa(TokenSet(ranges=((1, 2),)))


def test_lazy_examples() -> None:
    lazy = build_dfa(parse_expr("[a-z]+"), lazy=True)
    assert lazy.matches(b"a") and not lazy.matches(b"ab")
    marker = build_dfa(parse_expr('[a-z]* "!"'), lazy=True)
    assert marker.matches(b"xy!") and not marker.matches(b"x!y!")
    nullable = build_dfa(parse_expr('"a"*'), lazy=True)
    assert nullable.matches(b"") and not nullable.matches(b"a") and nullable.num_states == 1


def test_empty_language_and_limits() -> None:
    empty = build_dfa(Seq(items=(Literal(text="a"), CharClass(ranges=()))))
    assert empty.is_empty and empty.start == -1 and empty.num_states == 0
    assert not empty.matches(b"") and not empty.matches(b"a")
    with pytest.raises(CompileError, match="50"):
        build_dfa(parse_expr('"a"{0,100}'), max_states=50)


def test_absurd_nesting_is_a_compile_error() -> None:
    expr = Literal(text="a")
    for _ in range(3000):
        expr = Seq(items=(expr, Literal(text="b")))
    with pytest.raises(CompileError, match="too deep"):
        build_dfa(expr)


def test_byte_dfa_checks_its_fields_and_pickles_frozen() -> None:
    import pickle

    dfa = build_dfa(parse_expr("[a-z]+"))
    copy = pickle.loads(pickle.dumps(dfa))
    assert copy == dfa and not copy.table.flags.writeable
    with pytest.raises(ValueError, match="shape"):
        ByteDFA(start=0, accepting=(True,), table=np.zeros((2, 256), dtype=np.int32))
    with pytest.raises(ValueError, match="does not exist"):
        ByteDFA(start=0, accepting=(True,), table=np.full((1, 256), 5, dtype=np.int32))
    with pytest.raises(ValueError, match="int32"):
        ByteDFA(start=0, accepting=(True,), table=np.zeros((1, 256), dtype=np.int64))
    with pytest.raises(ValueError, match="start"):
        ByteDFA(start=1, accepting=(True,), table=np.zeros((1, 256), dtype=np.int32))


def test_minimal_dfa_canonicalises_a_redundant_table() -> None:
    from gramkiln.ir.automata import build_dfa, minimal_dfa

    # "ab" | "cb" written with two copies of the 'b' state and an unreachable one.
    table = np.full((5, 256), -1, dtype=np.int32)
    table[0, ord("a")], table[0, ord("c")] = 1, 2
    table[1, ord("b")], table[2, ord("b")] = 3, 3
    accepting = [False, False, False, True, True]
    expected = build_dfa(Choice(alternatives=(Literal(text="ab"), Literal(text="cb"))))
    assert minimal_dfa(table, accepting) == expected
    assert minimal_dfa(np.zeros((0, 256), dtype=np.int32), []).is_empty
