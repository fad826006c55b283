"""Capture groups (seed 000, "Capture Groups"): ``rule[capture]`` records the spans of the
rule's completions while tokens or strings are accepted.

The oracle is independent of the runtime: a completion of a captured rule R over
``text[i:j]`` after ``text`` was accepted exists exactly when ``text[:i] + "\\x00" +
text[i:j] + "\\x01"`` is a viable prefix of the grammar in which any reference to R may
instead be ``"\\x00" body "\\x01"`` (checked by the reference matcher).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from gramkiln.ir import Choice, GrammarIR, Literal, Ref, Rule, Seq
from gramkiln.passes._common import map_expr
from gramkiln.runtime.compiled import CompiledGrammar, allocate_token_bitmask, bitmask_to_ids

from gramkiln import Grammar, Vocab
from gramkiln.testing.reference import ReferenceMatcher

SEED_GRAMMAR = r"""
start: tool* tail
tail: TEXT

tool_head[lazy]: TEXT "<tool_call>"
tool: tool_head arg "</tool_call>"
arg[capture]: /[0-9]+/

TEXT: /(\n|.)*/
"""


def test_seed_example() -> None:
    matcher = Grammar.from_lark(SEED_GRAMMAR).compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string("x<tool_call>42</tool_call>y<tool_call>7</tool_call>")
    assert matcher.get_captures() == [("arg", b"42"), ("arg", b"7")]
    # Every completion: /[0-9]+/ completes after each digit.
    assert matcher.get_captures(deduplicate=False) == [
        ("arg", b"4"),
        ("arg", b"42"),
        ("arg", b"7"),
    ]


def test_masks_record_nothing_and_rollback_removes_captures() -> None:
    vocab = Vocab([b"x", b"<tool_call>", b"4", b"2", b"</tool_call>", b"42"])
    compiled = Grammar.from_lark(SEED_GRAMMAR).compile(vocab)
    matcher = compiled.matcher()
    assert matcher.accept_tokens([0, 1, 2])
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    assert matcher.get_captures() == [("arg", b"4")]
    assert matcher.accept_token(3)
    assert matcher.get_captures() == [("arg", b"42")]
    fork = matcher.fork()
    matcher.rollback(1)
    assert matcher.get_captures() == [("arg", b"4")]
    assert fork.get_captures() == [("arg", b"42")]
    matcher.reset()
    assert matcher.get_captures() == []


def test_named_captures_nested_and_recursive() -> None:
    grammar = Grammar.from_lark(
        'start: pair ("," pair)*\n'
        'pair[capture="kv"]: key "=" value\n'
        "key[capture]: /[a-z]+/\n"
        'value: NUM | "(" start ")"\n'
        "NUM: /[0-9]/\n"
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string("a=1,b=(c=2),d=3")
    assert matcher.get_captures() == [
        ("key", b"a"),
        ("kv", b"a=1"),
        ("key", b"b"),
        ("key", b"c"),
        ("kv", b"c=2"),
        ("kv", b"b=(c=2)"),
        ("key", b"d"),
        ("kv", b"d=3"),
    ]


def test_lazy_captured_rule_is_recorded_as_its_lexeme() -> None:
    grammar = Grammar.from_lark('start: head "!"\nhead[lazy, capture]: /[a-z]+;/')
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string("ab;!")
    assert matcher.get_captures() == [("head", b"ab;")]


@pytest.mark.parametrize(
    ("source", "text", "expected"),
    [
        # suffix: the marker is left out of the rule's own capture.
        ('start: field "x"\nfield[suffix="!", capture]: /[a-z]*/', "ab!x", [("field", b"ab")]),
        ('start: field "x"\nfield[suffix="!", capture]: /[a-z]*/', "!x", [("field", b"")]),
        # stop_capture records the marker on its own.
        (
            'start: field "x"\nfield[suffix="!!", stop_capture="m"]: /[a-z]*/',
            "ab!!x",
            [("m", b"!!")],
        ),
        # stop: left out of the enclosing captures as well.
        (
            'start: outer "."\nouter[capture]: "<" field\n'
            'field[stop="END", capture, stop_capture="mk"]: /[a-z]*/',
            "<abEND.",
            [("mk", b"END"), ("field", b"ab"), ("outer", b"<ab")],
        ),
        # a suffix enclosing captures keep.
        (
            'start: outer "."\nouter[capture]: "<" field\nfield[suffix="END"]: /[a-z]*/',
            "<abEND.",
            [("outer", b"<abEND")],
        ),
    ],
)
def test_suffix_and_stop_markers_in_captures(source: str, text: str, expected: list) -> None:
    matcher = Grammar.from_lark(source).compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string(text)
    assert matcher.get_captures() == expected


@pytest.mark.parametrize(
    ("source", "text", "expected"),
    [
        (
            'start[capture="outer"]: field "z"\nfield[capture="inner", suffix="!"]: /[a-z]*/',
            "xy!z",
            [("inner", b"xy"), ("outer", b"xy!z")],
        ),
        (
            'start[capture="outer"]: field "z"\nfield[capture="inner", stop="!"]: /[a-z]*/',
            "xy!z",
            [("inner", b"xy"), ("outer", b"xyz")],
        ),
        (
            'start[capture="outer"]: field "z"\n'
            'field[capture="inner", suffix=/!!+/, stop_capture="marker"]: /[a-z]*/',
            "xy!!z",
            [("marker", b"!!"), ("inner", b"xy"), ("outer", b"xy!!z")],
        ),
    ],
)
def test_seed_suffix_and_stop_capture_examples(source: str, text: str, expected: list) -> None:
    matcher = Grammar.from_lark(source).compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string(text)
    assert matcher.get_captures() == expected


def test_every_stop_marker_inside_a_capture_is_hidden() -> None:
    grammar = Grammar.from_lark(
        'start[capture="all"]: (item ",")+\n'
        'item[stop=END, stop_capture="end"]: /[a-z]*/\n'
        'END: "." | ";;"'
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string("ab.,c;;,")
    # `all` first completes after "ab.," (one entry, at its first completion, longest span).
    assert matcher.get_captures() == [("end", b"."), ("all", b"ab,c,"), ("end", b";;")]


def test_longest_capture_leaves_out_trailing_ignored_text() -> None:
    grammar = Grammar.from_lark(
        'start: "[" v ("," v)* "]"\n'
        "v[capture]: NUM | STR | WORD+\n"
        "NUM: /[0-9]+/\n"
        'STR: /"[^"]*"/\n'
        "WORD: /[a-z]+/\n"
        "%ignore /[ \\n]+/\n"
    )
    matcher = grammar.compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string('[ 12 , "a " ,ab  cd\n]')
    assert matcher.get_captures() == [("v", b"12"), ("v", b'"a "'), ("v", b"ab  cd")]
    # The raw completions still include the ones that end after ignored text.
    assert ("v", b"12 ") in matcher.get_captures(deduplicate=False)


def test_grammar_without_captures_reports_none() -> None:
    matcher = Grammar.from_lark('start: "a"').compile(Vocab.byte_level()).matcher()
    assert matcher.accept_string("a")
    assert matcher.get_captures() == []


def test_captures_survive_the_artifact() -> None:
    compiled = Grammar.from_lark(SEED_GRAMMAR).compile(Vocab.byte_level())
    matcher = CompiledGrammar.load(compiled.to_bytes()).matcher()
    assert matcher.accept_string("<tool_call>9</tool_call>")
    assert matcher.get_captures() == [("arg", b"9")]


# -- against the marker oracle ---------------------------------------------------------------
def marked_grammar(ir: GrammarIR, captured: str) -> GrammarIR:
    """``ir`` where any reference to ``captured`` may be its body between \\x00 and \\x01."""
    marked_name = captured + "__marked"

    def either(node):
        if isinstance(node, Ref) and node.name == captured:
            return Choice(alternatives=(node, Ref(name=marked_name)))
        return node

    rules = [
        rule.model_copy(update={"body": map_expr(rule.body, either)}) if not rule.terminal else rule
        for rule in ir.rules
    ]
    body = next(rule.body for rule in rules if rule.name == captured)
    marked = Rule(
        name=marked_name, body=Seq(items=(Literal(text="\x00"), body, Literal(text="\x01")))
    )
    return ir.with_rules([*rules, marked])


def oracle_events(ir: GrammarIR, captured: str, text: str) -> Counter:
    reference = ReferenceMatcher(marked_grammar(ir, captured))
    events: Counter = Counter()
    for end in range(1, len(text) + 1):
        for start in range(end):
            probe = text[:start] + "\x00" + text[start:end] + "\x01"
            if reference.is_prefix(probe):
                events[(captured, text[start:end].encode())] += 1
    return events


ORACLE_GRAMMARS = [
    ('start: item ("," item)*\nitem[capture]: /[ab]+/ | "(" start ")"', "item"),
    ("start: (w | ws)+\nw[capture]: /[ab]+/\nws: /[ ]+/", "w"),
    ('start: e\ne[capture]: e "+" e | "a" | "(" e ")"', "e"),
    ('start: s\ns[capture]: s s | "a" | "b"', "s"),
    ('start: x "b"? x?\nx[capture]: "a"+ "b"?', "x"),
]


@pytest.mark.parametrize(("source", "captured"), ORACLE_GRAMMARS)
def test_every_completion_matches_the_marker_oracle(source: str, captured: str) -> None:
    grammar = Grammar.from_lark(source)
    compiled = grammar.compile(Vocab.byte_level())
    rng = random.Random(source)
    for _ in range(6):
        matcher = compiled.matcher()
        text = ""
        for _step in range(rng.randint(1, 9)):
            bitmask = allocate_token_bitmask(1, compiled.vocab_size)
            matcher.fill_next_token_bitmask(bitmask)
            allowed = [i for i in bitmask_to_ids(bitmask[0], compiled.vocab_size) if i < 256]
            if not allowed:
                break
            byte = rng.choice(allowed)
            assert matcher.accept_token(byte)
            text += chr(byte)
        events = Counter(matcher.get_captures(deduplicate=False))
        assert events == oracle_events(grammar.ir, captured, text), text
