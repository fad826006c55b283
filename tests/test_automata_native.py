"""The native byte-DFA builder gives exactly what the Python builder gives.

``build_dfa`` runs in C++ when the extension is built; ``build_dfa_python`` is the oracle.
Identical means the same start, accepting flags and table, and the same CompileError text.
"""

from __future__ import annotations

import json
from pathlib import Path

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
    automata,
    parse_expr,
)
from gramkiln.ir.automata import build_dfa, build_dfa_python
from gramkiln.runtime.vocab import Vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.errors import AutomatonSizeError, CompileError
from gramkiln.testing.strategies import char_classes, literals, repeat_bounds, terminal_exprs

pytestmark = pytest.mark.skipif(
    automata._native_builder() is None, reason="the C++ extension is not built"
)

ROOT = Path(__file__).resolve().parent.parent
MASKBENCH = Path("/work/shared/data/maskbench")
UNICODE_ALPHABET = "ab\u00e9\u0800\U0001f600"


def _outcome(builder, expr, terminals=None, **options):  # type: ignore[no-untyped-def]
    """The DFA, or the CompileError text, so that failures are compared too."""
    try:
        return builder(expr, terminals, **options)
    except CompileError as error:
        return f"CompileError: {error}"


def assert_identical(expr, terminals=None, **options) -> None:  # type: ignore[no-untyped-def]
    native = _outcome(build_dfa, expr, terminals, **options)
    python = _outcome(build_dfa_python, expr, terminals, **options)
    if isinstance(python, str) or isinstance(native, str):
        assert native == python
        return
    assert native.start == python.start
    assert native.accepting == python.accepting
    assert np.array_equal(native.table, python.table)
    assert not native.table.flags.writeable


@settings(max_examples=300, deadline=None)
@given(terminal_exprs(max_leaves=6), st.booleans(), st.sampled_from([1, 3, 8, 100_000]))
def test_random_expressions_match_python(expr, lazy: bool, max_states: int) -> None:  # type: ignore[no-untyped-def]
    # Small limits check that both paths fail on exactly the same expressions.
    assert_identical(expr, lazy=lazy, max_states=max_states)


@settings(max_examples=150, deadline=None)
@given(terminal_exprs(alphabet=UNICODE_ALPHABET, max_leaves=6), st.booleans())
def test_random_unicode_expressions_match_python(expr, lazy: bool) -> None:  # type: ignore[no-untyped-def]
    assert_identical(expr, lazy=lazy)


@settings(max_examples=150, deadline=None)
@given(
    terminal_exprs(("A", "B"), max_leaves=5),
    terminal_exprs(("B",), max_leaves=4),
    terminal_exprs(max_leaves=4),
    st.booleans(),
)
def test_random_expressions_with_references_match_python(root, a, b, lazy: bool) -> None:  # type: ignore[no-untyped-def]
    assert_identical(root, {"A": a, "B": b}, lazy=lazy)


def _expressions_with_dead_ends() -> st.SearchStrategy:
    """Expressions with empty leaves and empty classes: dead ends the trim must remove."""
    leaves = st.one_of(literals(), char_classes(), st.just(Empty()), st.just(CharClass(ranges=())))
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda xs: Seq(items=tuple(xs))),
            st.lists(inner, max_size=3).map(lambda xs: Choice(alternatives=tuple(xs))),
            st.builds(
                lambda item, bounds: Repeat(item=item, min=bounds[0], max=bounds[1]),
                inner,
                repeat_bounds(),
            ),
        ),
        max_leaves=6,
    )


@settings(max_examples=200, deadline=None)
@given(_expressions_with_dead_ends(), st.booleans())
def test_random_expressions_with_dead_ends_match_python(expr, lazy: bool) -> None:  # type: ignore[no-untyped-def]
    assert_identical(expr, lazy=lazy)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 0x3000)), max_size=5),
    st.booleans(),
    st.integers(0, 3),
)
def test_random_unicode_classes_match_python(ranges, negated: bool, copies: int) -> None:  # type: ignore[no-untyped-def]
    ranges = [(lo, min(lo + width, 0x10FFFF)) for lo, width in ranges]
    node = CharClass.of(ranges, negated=negated)
    assert_identical(Repeat(item=node, min=copies, max=copies + 1))


@pytest.mark.parametrize(
    "source",
    [
        '"a"{0,100}',
        '"a"{3,}',
        '[^"\\u{5c}]*',
        "[A-Z_a-z][0-9A-Z_a-z]{0,40}",
        '("ab" | "a")* "b"?',
        "[\\u{0}-\\u{10ffff}]{2,3}",
    ],
)
def test_known_expressions_match_python(source: str) -> None:
    for lazy in (False, True):
        assert_identical(parse_expr(source), lazy=lazy)


def test_bytes_case_folding_and_empty_pieces_match_python() -> None:
    pieces = [
        Bytes(data=b"\x00\xff\x80"),
        Literal(text="HeLLo-1", case_insensitive=True),
        Literal(text=""),
        Seq(items=()),
        Choice(alternatives=()),
        Empty(),
        CharClass(ranges=()),
        CharClass(ranges=((0xD000, 0xE100),)),
        CharClass(ranges=((0xD800, 0xDFFF),), negated=True),
        Repeat(item=Literal(text="x"), min=0, max=0),
    ]
    for piece in pieces:
        assert_identical(piece)
    assert_identical(Seq(items=tuple(pieces[:6])))


def test_errors_match_python() -> None:
    recursive = {"A": Seq(items=(Literal(text="a"), Ref(name="B"))), "B": Ref(name="A")}
    cases = [
        (Ref(name="A"), recursive, {}),
        (Ref(name="NOPE"), None, {}),
        (Seq(items=(Literal(text="a"), TokenSet(ranges=((1, 2),)))), None, {}),
        (parse_expr('"a"{0,100}'), None, {"max_states": 50}),
        (parse_expr('"a"{0,100}'), None, {"max_states": 5}),
        (parse_expr('[a-b]*"a"[a-b]{12}'), None, {"max_states": 1000}),
    ]
    for expr, terminals, options in cases:
        native = _outcome(build_dfa, expr, terminals, **options)
        assert isinstance(native, str), expr
        assert native == _outcome(build_dfa_python, expr, terminals, **options)
    assert "NFA states" in _outcome(build_dfa, parse_expr('"a"{0,100}'), max_states=5)
    assert "1,000 DFA states" in _outcome(
        build_dfa, parse_expr('[a-b]*"a"[a-b]{12}'), max_states=1000
    )


def test_huge_repeat_bounds_hit_the_same_limit() -> None:
    for expr in (
        Repeat(item=Literal(text="a"), min=0, max=10**12),
        Repeat(item=Literal(text="a"), min=10**12, max=None),
        Repeat(item=Empty(), min=5 * 10**9, max=6 * 10**9),
    ):
        native = _outcome(build_dfa, expr, max_states=1000)
        assert native == _outcome(build_dfa_python, expr, max_states=1000)
        assert "10,000 NFA states" in native


def test_nested_counted_repetitions_hit_the_work_limit_at_once() -> None:
    # Each count is small and the DFA fits max_states (a{0,125000}), but every subset and
    # closure holds a large part of the NFA: the build ran for minutes and grew past
    # gigabytes before the work bound. Both builders now fail alike, as a size failure.
    for source in ('(("a"){0,50}){0,50}{0,50}', '(("ab" | "c"){0,50}){0,50}{0,50}'):
        native = _outcome(build_dfa, parse_expr(source), max_states=200_000)
        assert native == _outcome(build_dfa_python, parse_expr(source), max_states=200_000)
        assert "too costly to determinise" in native and "3,200,000 NFA states" in native
    with pytest.raises(AutomatonSizeError, match="too costly to determinise"):
        Grammar.from_lark('start: (("a"~0..100)~0..100)~0..100').compile(Vocab.byte_level())
    # The same nesting with small counts is fine.
    dfa = build_dfa(parse_expr('(("a"){0,5}){0,5}{0,5}'), max_states=200_000)
    assert sum(dfa.accepting) == 126


def test_reused_body_encodings_give_identical_programs() -> None:
    digits = parse_expr("[0-9]+")
    terminals = {
        "DIGITS": digits,
        "NUMBER": Seq(items=(Ref(name="SIGN"), Ref(name="DIGITS"))),
        "SIGN": parse_expr('"-"?'),
        "BAD": Seq(items=(Ref(name="DIGITS"), TokenSet(ranges=((1, 2),)))),
    }
    for root in (Ref(name="NUMBER"), Seq(items=(Ref(name="DIGITS"), Ref(name="NUMBER")))):
        automata._BODY_ENCODINGS.clear()
        fresh = automata._encode_program(root, terminals)
        reused = automata._encode_program(root, terminals)
        assert reused == fresh
        assert any(entry[0] is digits for entry in automata._BODY_ENCODINGS.values())
    # An invalid element inside a reused body still fails with the Python path's words.
    for _ in range(2):
        native = _outcome(build_dfa, Ref(name="BAD"), terminals)
        assert native == _outcome(build_dfa_python, Ref(name="BAD"), terminals)
        assert "tokens elements cannot appear" in native


def test_malformed_programs_are_value_errors_not_crashes() -> None:
    native = automata._native_builder()

    def call(code: list[int], offsets: tuple[int, ...] = ()) -> object:
        to_bytes = automata._int32_bytes
        return native(to_bytes(code), to_bytes(list(offsets)), False, 100, 100)

    bad_programs = [
        [],
        [automata._OP_SEQ, 9],
        [automata._OP_BYTES, 4, 0, 300],
        [automata._OP_CLASS, 5, 0, 10, 5],
        [automata._OP_REPEAT, 6, 3, 1, automata._OP_EMPTY, 2],
        [automata._OP_REF, 3, 1],
        [99, 2],
    ]
    for code in bad_programs:
        with pytest.raises(ValueError):
            call(code)
    with pytest.raises(ValueError):
        call([automata._OP_REF, 3, 0], (7,))
    with pytest.raises(ValueError):
        native(b"\x00\x00\x00", b"", False, 100, 100)


def test_memoised_results_are_shared_and_frozen() -> None:
    terminals = {"DIGITS": parse_expr("[0-9]+")}
    first = build_dfa(Ref(name="DIGITS"), terminals)
    second = build_dfa(Ref(name="DIGITS"), {"DIGITS": parse_expr("[0-9]+")})
    assert first is second and not first.table.flags.writeable
    # Names are not part of the key: the same body under another name is the same DFA.
    assert build_dfa(Ref(name="INT"), {"INT": parse_expr("[0-9]+")}) is first
    assert build_dfa(Ref(name="DIGITS"), terminals, lazy=True).num_states == 2


def test_concurrent_builds_give_the_python_results() -> None:
    from concurrent.futures import ThreadPoolExecutor

    sources = ['[a-z]{0,30} "!"', '("ab" | "a")* "b"?', "[\\u{80}-\\u{10ffff}]{1,6}", '"x"{5,}']
    exprs = [parse_expr(source) for source in sources]
    expected = [build_dfa_python(expr) for expr in exprs]
    automata._DFA_MEMO.clear()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(build_dfa, exprs * 8))
    assert results == expected * 8


def test_falls_back_to_python_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    # False is what _native_builder caches when importing gramkiln.runtime._core fails.
    monkeypatch.setattr(automata, "_native_function", False)
    assert automata._native_builder() is None
    expr = parse_expr('[a-c]+ "!"')
    assert build_dfa(expr) == build_dfa_python(expr)
    with pytest.raises(CompileError, match="unknown terminal NOPE"):
        build_dfa(Ref(name="NOPE"))


def test_automata_does_not_import_the_extension_at_module_level() -> None:
    # ir/ must import where the extension is not built: the import happens on first use.
    source = Path(automata.__file__).read_text()
    top_level = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert not any("runtime" in line for line in top_level)


def _grammar_lexemes(ir):  # type: ignore[no-untyped-def]
    """Every lexeme the flattener would build for a lowered grammar, with its terminals."""
    from gramkiln.runtime import compile as runtime_compile

    lexemes = []

    def record(expr, terminals, lazy):  # type: ignore[no-untyped-def]
        lexemes.append((expr, dict(terminals), lazy))
        return build_dfa(expr, terminals, lazy=lazy, max_states=runtime_compile.MAX_DFA_STATES)

    original = runtime_compile._build_dfa
    runtime_compile._build_dfa = record
    try:
        runtime_compile.flatten_grammar(runtime_compile.lower_for_runtime(ir), _ascii_vocab())
    finally:
        runtime_compile._build_dfa = original
    assert lexemes
    return lexemes


def _ascii_vocab():  # type: ignore[no-untyped-def]
    from gramkiln.runtime.vocab import Vocab

    return Vocab([bytes([b]) for b in range(256)] + [b"</s>"], eos_ids=[256])


@pytest.mark.parametrize("name", ["json", "clike", "toolcall"])
def test_bench_grammar_lexemes_match_python(name: str) -> None:
    from gramkiln import Grammar

    source = (ROOT / "bench" / "grammars" / f"{name}.lark").read_text()
    for expr, terminals, lazy in _grammar_lexemes(Grammar.from_lark(source).ir):
        assert_identical(expr, terminals, lazy=lazy, max_states=200_000)


def _maskbench_schemas(count: int) -> list[dict]:
    import gzip

    schemas = []
    for split in ("Kubernetes", "Github_medium", "Glaiveai2K"):
        with gzip.open(MASKBENCH / f"{split}.jsonl.gz", "rt", encoding="utf-8") as handle:
            for line, _ in zip(handle, range(count), strict=False):
                schemas.append(json.loads(line)["schema"])
    return schemas


@pytest.mark.skipif(not MASKBENCH.is_dir(), reason="MaskBench data (/work/shared/data) absent")
def test_maskbench_schema_lexemes_match_python() -> None:
    from gramkiln import Grammar

    checked = 0
    for schema in _maskbench_schemas(2):
        try:
            ir = Grammar.from_json_schema(schema).ir
        except Exception:  # noqa: BLE001 - unsupported schemas are not this test's concern
            continue
        for expr, terminals, lazy in _grammar_lexemes(ir):
            assert_identical(expr, terminals, lazy=lazy, max_states=200_000)
            checked += 1
    assert checked > 20
