"""Tests of the IR: lossless text and msgpack round trips, verify(), model validation."""

from __future__ import annotations

import math

import msgpack
import pytest
from gramkiln.ir import (
    IR_VERSION,
    CharClass,
    Choice,
    Embed,
    Empty,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    RuleOptions,
    Seq,
    Span,
    SpecialToken,
    Subgrammar,
    TokenSet,
    copy_with,
    expr_facts,
    ir_from_msgpack,
    ir_to_msgpack,
    parse_expr,
    parse_grammar,
    print_expr,
    print_grammar,
    strip_spans,
    walk,
)
from gramkiln.ir.nodes import normalise_ranges
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gramkiln.errors import IRError
from gramkiln.testing.strategies import grammars, rich_grammars

# ---------------------------------------------------------------------------------------------
# round trips


@given(rich_grammars())
def test_text_round_trip_is_lossless_without_spans(grammar: GrammarIR) -> None:
    text = print_grammar(grammar)
    assert parse_grammar(text) == strip_spans(grammar)
    assert print_grammar(parse_grammar(text)) == text


@given(rich_grammars())
def test_msgpack_round_trip_is_exact_with_spans(grammar: GrammarIR) -> None:
    data = ir_to_msgpack(grammar)
    assert ir_from_msgpack(data) == grammar
    assert ir_to_msgpack(ir_from_msgpack(data)) == data


@given(grammars(subgrammars=True))
def test_matchable_grammars_round_trip_too(grammar: GrammarIR) -> None:
    assert parse_grammar(print_grammar(grammar)) == grammar
    assert ir_from_msgpack(ir_to_msgpack(grammar)) == grammar


@pytest.mark.parametrize(
    "text",
    [
        '"a" "b" | "c"',
        '("a" | "b") "c"',
        '("a" "b")*',
        '"x"{2} "y"{2,} "z"{0,3}',
        "(&) (& a) (|) (| a)",
        '[^\\u{0}-\\u{1f}] b"\\x00\\xff"',
        '<[*]> <[^1,3-8]> <"<|tool|>"> @sub.1',
        '"\\u00e9\\n\\"" ()',
    ],
)
def test_expression_text_round_trips(text: str) -> None:
    expr = parse_expr(text)
    assert print_expr(expr) == text
    assert parse_expr(print_expr(expr)) == expr


def test_degenerate_nodes_keep_their_shape() -> None:
    for expr in (Seq(items=()), Seq(items=(Ref(name="a"),)), Choice(alternatives=())):
        assert parse_expr(print_expr(expr)) == expr
    nested = Seq(items=(Seq(items=(Literal(text="a"), Literal(text="b"))), Literal(text="c")))
    assert parse_expr(print_expr(nested)) == nested


def test_spans_are_dropped_from_text_but_kept_in_msgpack() -> None:
    span = Span(line=3, column=7, end_line=3, end_column=9)
    grammar = GrammarIR(rules=(Rule(name="start", body=Literal(text="ab", span=span), span=span),))
    assert "3" not in print_grammar(grammar).replace("%ir 1", "")
    assert ir_from_msgpack(ir_to_msgpack(grammar)).rules[0].body.span == span


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\xc1", "not a msgpack IR document"),
        (msgpack.packb(["other", IR_VERSION, {}]), "bad magic"),
        (msgpack.packb(["gramkiln-ir", IR_VERSION + 1, {}]), f"this build reads {IR_VERSION}"),
        (msgpack.packb(["gramkiln-ir", IR_VERSION, {"rules": 5}]), "malformed IR document"),
        (msgpack.packb({"not": "a list"}), "bad magic"),
    ],
)
def test_bad_msgpack_is_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(IRError, match=message):
        ir_from_msgpack(data)


@given(st.binary(max_size=40))
def test_random_bytes_never_crash_the_msgpack_reader(data: bytes) -> None:
    try:
        ir_from_msgpack(data)
    except IRError:
        pass


@pytest.mark.parametrize(
    "text",
    [
        "rule start =",
        "rule start = (",
        'rule start = "unterminated',
        "rule start = [a-",
        "rule start = x{3,1}",
        "rule start [bogus] = x",
        "bogus line",
        "}",
        "%subgrammar s {\n rule start = x",
        "%ir one",
        "term T [lazy] = x",
        "rule s = [b-a]",
    ],
)
def test_malformed_text_is_an_ir_error(text: str) -> None:
    with pytest.raises(IRError):
        parse_grammar(text).verify()


# ---------------------------------------------------------------------------------------------
# verify()


def _grammar(*rules: Rule, **fields: object) -> GrammarIR:
    return GrammarIR(rules=rules, **fields)  # type: ignore[arg-type]


def _problems(grammar: GrammarIR) -> str:
    with pytest.raises(IRError) as info:
        grammar.verify()
    return str(info.value)


START = Rule(name="start", body=Ref(name="T"))
T = Rule(name="T", body=Literal(text="t"), terminal=True)


def _walked_facts(expr: object) -> tuple:
    """The facts of ``expr`` the slow way: one walk over the whole subtree."""
    nodes = list(walk(expr))  # type: ignore[arg-type]
    counts = [max(n.min, n.max or 0) for n in nodes if isinstance(n, Repeat)]
    return (
        frozenset(n.name for n in nodes if isinstance(n, Ref)),
        frozenset(n.name for n in nodes if isinstance(n, Embed)),
        any(isinstance(n, (TokenSet, SpecialToken, Embed)) for n in nodes),
        any(
            isinstance(n, TokenSet) and list(n.ranges) != normalise_ranges(n.ranges) for n in nodes
        ),
        any(n.kind in ("literal", "bytes", "class", "ref") for n in nodes),
        max(counts, default=0),
        bool(counts),
    )


@given(rich_grammars())
def test_expr_facts_agree_with_a_walk(grammar: GrammarIR) -> None:
    for rule in grammar.rules:
        assert tuple(expr_facts(rule.body)) == _walked_facts(rule.body)
        for sub_expr in walk(rule.body):
            assert tuple(expr_facts(sub_expr)) == _walked_facts(sub_expr)


@given(grammars(subgrammars=True))
def test_the_quick_verify_check_passes_valid_grammars(grammar: GrammarIR) -> None:
    # verify() trusts _quickly_valid when it says yes; for valid grammars it must say yes,
    # or every verify falls back to the full walk.
    assert not list(grammar.problems())
    assert grammar._quickly_valid()


def test_the_quick_verify_check_flags_shared_subtrees_in_each_context() -> None:
    # The same subtree object is fine in a rule and a problem in a terminal: the facts are
    # memoised per node, the judgement per use.
    shared = Seq(items=(Literal(text="a"), SpecialToken(text="<x>")))
    ok = _grammar(Rule(name="start", body=shared), T)
    assert ok.verify() is ok
    bad = _grammar(
        Rule(name="start", body=Ref(name="U")), Rule(name="U", body=shared, terminal=True)
    )
    assert "terminal U cannot contain special elements" in _problems(bad)


def test_verify_accepts_a_valid_grammar() -> None:
    grammar = _grammar(START, T)
    assert grammar.verify() is grammar


def test_verify_reports_an_undefined_reference() -> None:
    assert "start references undefined missing" in _problems(
        _grammar(Rule(name="start", body=Ref(name="missing")))
    )


def test_verify_reports_a_missing_start() -> None:
    assert "start rule 'main' is not defined" in _problems(_grammar(START, T, start="main"))


def test_verify_reports_duplicates() -> None:
    assert "duplicate definition of T" in _problems(_grammar(START, T, T))
    sub = Subgrammar(name="s", grammar=_grammar(START, T))
    assert "duplicate sub-grammar names" in _problems(_grammar(START, T, subgrammars=(sub, sub)))


def test_verify_reports_recursive_terminals() -> None:
    a = Rule(name="A", body=Seq(items=(Literal(text="a"), Ref(name="B"))), terminal=True)
    b = Rule(name="B", body=Choice(alternatives=(Ref(name="A"), Empty())), terminal=True)
    message = _problems(_grammar(Rule(name="start", body=Ref(name="A")), a, b))
    assert "is recursive" in message and "A" in message and "B" in message
    selfish = Rule(name="S", body=Repeat(item=Ref(name="S")), terminal=True)
    assert "terminal S is recursive" in _problems(
        _grammar(Rule(name="start", body=Ref(name="S")), selfish)
    )


def test_verify_reports_a_terminal_referencing_a_rule() -> None:
    bad = Rule(name="T", body=Ref(name="start"), terminal=True)
    assert "terminal T references rule start" in _problems(_grammar(START, bad))


@pytest.mark.parametrize(
    "element", [TokenSet(wildcard=True), SpecialToken(text="<|x|>"), Embed(name="s")]
)
def test_verify_reports_token_elements_inside_terminals(element: object) -> None:
    bad = Rule(name="T", body=Seq(items=(Literal(text="a"), element)), terminal=True)  # type: ignore[arg-type]
    sub = Subgrammar(name="s", grammar=_grammar(START, T))
    assert f"terminal T cannot contain {element.kind} elements" in _problems(  # type: ignore[attr-defined]
        _grammar(START, bad, subgrammars=(sub,))
    )


def test_verify_reports_a_bad_embed() -> None:
    bad = Rule(name="start", body=Embed(name="nowhere"))
    assert "start embeds unknown sub-grammar nowhere" in _problems(_grammar(bad))


def test_verify_reports_bad_ignore_content() -> None:
    assert "%ignore references rule start" in _problems(
        _grammar(START, T, ignore=(Ref(name="start"),))
    )
    assert "%ignore references undefined X" in _problems(
        _grammar(START, T, ignore=(Ref(name="X"),))
    )
    assert "%ignore cannot contain special elements" in _problems(
        _grammar(START, T, ignore=(SpecialToken(text="x"),))
    )


def test_verify_reports_problems_inside_subgrammars_with_their_name() -> None:
    inner = _grammar(Rule(name="start", body=Ref(name="gone")))
    grammar = _grammar(
        Rule(name="start", body=Embed(name="inner")),
        subgrammars=(Subgrammar(name="inner", grammar=inner),),
    )
    assert "inner: start references undefined gone" in _problems(grammar)


def test_verify_reports_a_foreign_ir_version() -> None:
    assert f"is not {IR_VERSION}" in _problems(_grammar(START, T, ir_version=IR_VERSION + 1))


def test_verify_lists_every_problem_at_once() -> None:
    message = _problems(
        _grammar(Rule(name="start", body=Seq(items=(Ref(name="x"), Ref(name="y")))), T, T)
    )
    assert "undefined x" in message and "undefined y" in message and "duplicate" in message


def test_verify_checks_markers() -> None:
    rule = Rule(name="start", body=Empty(), options=RuleOptions(suffix=Ref(name="END")))
    assert "start references undefined END" in _problems(_grammar(rule))


# ---------------------------------------------------------------------------------------------
# model validation


@pytest.mark.parametrize(
    "options, message",
    [
        ({"suffix": Literal(text="!"), "stop": Literal(text="?")}, "cannot be used together"),
        ({"stop_capture": "m"}, "stop_capture requires suffix or stop"),
        ({"suffix": Literal(text="")}, "empty string marker"),
        ({"stop": Literal(text="")}, "empty string marker"),
        ({"max_tokens": 0}, "max_tokens must be between 1 and 1,000,000"),
        ({"max_tokens": 1_000_001}, "max_tokens must be between"),
        ({"max_chars": -1}, "max_chars must be between 0 and"),
        ({"max_chars": 2**31}, "max_chars must be between"),
        ({"capture": "has space"}, "capture name 'has space' may contain only"),
        ({"suffix": Literal(text="!"), "stop_capture": "a/b"}, "stop_capture name"),
        ({"temperature": -0.5}, "finite non-negative"),
        ({"temperature": math.nan}, "finite non-negative"),
        ({"temperature": math.inf}, "finite non-negative"),
        ({"temperature": 0.7, "lazy": True}, "cannot be combined with lazy"),
        ({"temperature": 0.7, "max_tokens": 3}, "cannot be combined with max_tokens"),
        ({"temperature": 0.7, "stop": Literal(text="!")}, "cannot be combined with stop"),
        ({"bogus": True}, "Extra inputs are not permitted"),
    ],
)
def test_rule_option_combinations_are_validated(options: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RuleOptions(**options)


@pytest.mark.parametrize(
    "options",
    [
        {"lazy": True, "max_tokens": 5, "max_chars": 0, "capture": "a.b-c_d"},
        {"suffix": Literal(text="!"), "stop_capture": "m", "lazy": True},
        {"stop": CharClass.of([(0x21, 0x21)]), "max_chars": 2_147_483_647},
        {"temperature": 0.0, "capture": "x", "max_chars": 10},
        {"suffix": Repeat(item=Literal(text="x"))},  # a nullable regex marker is allowed
    ],
)
def test_supported_rule_option_combinations(options: dict) -> None:
    assert not RuleOptions(**options).is_default()


def test_terminals_cannot_carry_options() -> None:
    with pytest.raises(ValidationError, match="terminal T cannot carry rule options"):
        Rule(name="T", body=Literal(text="t"), terminal=True, options=RuleOptions(lazy=True))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Repeat(item=Empty(), min=-1), "minimum must be >= 0"),
        (lambda: Repeat(item=Empty(), min=3, max=2), "upper bound 2 is below lower bound 3"),
        (lambda: CharClass(ranges=((5, 9), (1, 2))), "sorted, disjoint and non-adjacent"),
        (lambda: CharClass(ranges=((1, 2), (3, 4))), "sorted, disjoint and non-adjacent"),
        (lambda: CharClass(ranges=((0, 0x110000),)), "bad code point range"),
        (lambda: Literal(text="é", case_insensitive=True), "ASCII characters only"),
        (lambda: TokenSet(), "needs at least one id"),
        (lambda: TokenSet(wildcard=True, negated=True), "takes no ranges"),
        (lambda: TokenSet(ranges=((3, 4), (1, 2))), "sorted, disjoint"),
        (lambda: TokenSet(ranges=((-1, 2),)), "bad token id range"),
        (lambda: Literal(text="a", colour="red"), "Extra inputs are not permitted"),
        (lambda: Seq(items=({"kind": "nope"},)), "does not match any of the expected tags"),
    ],
)
def test_node_validation_errors(build: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build()  # type: ignore[operator]


def test_nodes_are_frozen_and_hashable() -> None:
    literal = Literal(text="a")
    with pytest.raises(ValidationError):
        literal.text = "b"  # type: ignore[misc]
    assert hash(literal) == hash(Literal(text="a"))
    assert CharClass.of([(5, 9), (1, 4), (7, 12)]).ranges == ((1, 12),)


# ---------------------------------------------------------------------------------------------
# copy_with (the passes' cheap model_copy)


@given(rich_grammars())
def test_copy_with_equals_model_copy(grammar: GrammarIR) -> None:
    for rule in grammar.rules:
        for node in walk(rule.body):
            update: dict[str, object] = {"span": Span(line=1, column=2)}
            if isinstance(node, Seq):
                update["items"] = node.items[::-1]
            fast, slow = copy_with(node, update), node.model_copy(update=update)
            assert type(fast) is type(slow)
            assert fast == slow and hash(fast) == hash(slow)
            assert fast.model_fields_set == slow.model_fields_set
            assert fast.model_dump() == slow.model_dump()
        renamed = copy_with(rule, {"name": "other"})
        assert renamed == rule.model_copy(update={"name": "other"})
        assert ir_to_msgpack(copy_with(grammar, {"rules": (renamed,)})) == ir_to_msgpack(
            grammar.model_copy(update={"rules": (renamed,)})
        )


def test_ir_models_have_no_private_or_extra_state() -> None:
    # copy_with relies on both; a model that gains either must be copied by pydantic.
    for model in (Seq, Choice, Repeat, Literal, CharClass, Ref, Rule, RuleOptions, GrammarIR):
        assert not model.__private_attributes__
        assert model.model_config.get("extra") == "forbid"


def test_expr_facts_and_verify_survive_absurd_nesting() -> None:
    # Python recursion gives up near depth 1,000; the facts fall back to an explicit stack.
    expr = Ref(name="T")
    for index in range(5000):
        expr = Seq(items=(expr, Literal(text="b"))) if index % 2 else Choice(alternatives=(expr,))
    assert tuple(expr_facts(expr)) == _walked_facts(expr)
    grammar = _grammar(Rule(name="start", body=expr), T)
    assert grammar.verify() is grammar
    bad = _grammar(Rule(name="start", body=Seq(items=(expr, Ref(name="gone")))), T)
    assert "start references undefined gone" in _problems(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[\\\\]", "bad escape in class"),
        ("[\\u{zz}]", "bad escape in class"),
        ("[\\u{110000}]", "code point above U\\+10FFFF"),
        ('b"\\q1"', "bad escape in bytes"),
        ("<[1,x]>", "bad token id range"),
        ("<[1,2", "unterminated token set"),
    ],
)
def test_malformed_expression_text_is_an_ir_error(text: str, message: str) -> None:
    """Bad escapes and token sets in the canonical text form raise IRError with the column,
    never a bare ValueError."""
    from gramkiln.ir import parse_expr

    with pytest.raises(IRError, match=message):
        parse_expr(text)
