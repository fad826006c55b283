"""The Lark front end's IR output: structure, spans, directives, options and embeddings."""

from __future__ import annotations

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.frontend.lark_common import COMMON_NAMES, common_terminal
from gramkiln.ir import (
    CharClass,
    Embed,
    Empty,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Seq,
    Span,
    SpecialToken,
    TokenSet,
    parse_expr,
    print_expr,
    print_grammar,
    strip_spans,
    walk,
)

from gramkiln.errors import GrammarError


def body(source: str, name: str = "start") -> str:
    """The canonical text of one definition's body."""
    return print_expr(parse_lark(source).rule(name).body)


def same_expr(source: str, expected_ir_text: str, name: str = "start") -> bool:
    """Whether a definition's body equals an expression written in the IR text form."""
    actual = strip_spans(parse_lark(source).rule(name).body)
    return actual == parse_expr(expected_ir_text)


# -- grammar structure --------------------------------------------------------------------


def test_seed_first_example_structure() -> None:
    grammar = parse_lark(
        """
    %import common.INT
    %import common.WS
    %ignore WS

    start: item ("," item)*
    item: "id=" INT
    """
    )
    assert [r.name for r in grammar.rules] == ["INT", "WS", "start", "item"]
    assert [r.terminal for r in grammar.rules] == [True, True, False, False]
    assert grammar.start == "start"
    assert grammar.ignore == (
        Ref(name="WS", span=Span(line=4, column=13, end_column=14, end_line=4)),
    )
    assert print_expr(grammar.rule("start").body) == 'item ("," item)*'
    assert print_expr(grammar.rule("item").body) == '"id=" INT'
    grammar.verify()


def test_continuation_lines_and_comments() -> None:
    source = """
start: "a"   # first
     | "b"   // second

     | "c"
"""
    assert body(source) == '"a" | "b" | "c"'


def test_rules_and_terminals_by_case() -> None:
    grammar = parse_lark(
        """
start: value (";" value)*     // rule
value: INT | NAME             // rule referencing terminals
INT: /[0-9]+/                 // terminal
NAME: /[a-z]+/                // terminal
"""
    )
    kinds = {r.name: r.terminal for r in grammar.rules}
    assert kinds == {"start": False, "value": False, "INT": True, "NAME": True}
    assert print_expr(grammar.rule("INT").body) == "[0-9]+"


def test_leading_underscore_names_and_hyphens() -> None:
    grammar = parse_lark(
        """
start: _item _SEP my-rule
_item: "x"
_SEP: ","
my-rule: "y"
__deep: "z"
"""
    )
    kinds = {r.name: r.terminal for r in grammar.rules}
    assert kinds == {
        "start": False,
        "_item": False,
        "_SEP": True,
        "my-rule": False,
        "__deep": False,
    }


def test_recursion_and_forward_references() -> None:
    grammar = parse_lark(
        """
start: value
value: "x" | "(" value ")" | "[" (value ("," value)*)? "]"
"""
    )
    assert print_expr(grammar.rule("value").body) == (
        '"x" | "(" value ")" | "[" (value ("," value)*)? "]"'
    )


def test_prefixes_aliases_and_priorities_are_accepted_and_ignored() -> None:
    plain = parse_lark('start: a | b\na: "a"\nb: "b"\nNUM: "1"')
    shaped = parse_lark('?start: a -> first\n    | b -> second\n!a: "a"\nb.2: "b"\nNUM.-1: "1"')
    assert strip_spans(plain) == strip_spans(shaped)


# -- literals, ranges, regexes -----------------------------------------------------------


def test_string_escapes() -> None:
    grammar = parse_lark(r'start: "\"\\\/\b\f\n\r\t" "\u03bb" "中文" "😀" "\ud83d\ude00"')
    items = grammar.rule("start").body.items  # type: ignore[union-attr]
    assert [item.text for item in items] == ['"\\/\b\f\n\r\t', "λ", "中文", "😀", "😀"]


def test_case_insensitive_literal_and_empty_string() -> None:
    assert same_expr('start: "yes"i', '"yes"i')
    assert isinstance(parse_lark('start: ""').rule("start").body, Empty)
    assert isinstance(parse_lark("start:").rule("start").body, Empty)
    assert same_expr('start: | "a"', '() | "a"')


def test_character_ranges() -> None:
    assert parse_lark('start: "a".."z"').rule("start").body == CharClass(
        ranges=((97, 122),), span=Span(line=1, column=8, end_line=1, end_column=15)
    )
    assert same_expr('start: "α".."γ"', "[\\u{3b1}-\\u{3b3}]")
    assert same_expr('start: "\\u0000".."😀"', "[\\u{0}-\\u{1f600}]")


def test_regex_flags_and_escaped_slash() -> None:
    assert body("start: /a.b/") == '"a" [^\\u{a}] "b"'
    assert body("start: /a.b/s") == '"a" [\\u{0}-\\u{10ffff}] "b"'
    assert body(r"start: /x\/y/") == '"x/y"'
    assert body("start: /ab/i") == '"ab"i'


def test_regex_keeps_only_a_lark_source_span() -> None:
    rule = parse_lark("start: /ab|c+d/\n").rule("start")
    assert rule.body.span == Span(line=1, column=8, end_line=1, end_column=15)
    inner = list(walk(rule.body))[1:]
    assert inner, "the regex should produce a compound expression"
    assert all(node.span is None for node in inner)  # type: ignore[attr-defined]


# -- sequences, groups, repetition ------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "low", "high"),
    [
        ("x?", 0, 1),
        ("x*", 0, None),
        ("x+", 1, None),
        ("x~3", 3, 3),
        ("x~2..4", 2, 4),
        ("x{3}", 3, 3),
        ("x{2,4}", 2, 4),
        ("x{2,}", 2, None),
        ("x{,4}", 0, 4),
        ("x{0}", 0, 0),
        ("x { 2 , 4 }", 2, 4),
        ('["a" "b"]', 0, 1),
    ],
)
def test_repetition_forms(written: str, low: int, high: int | None) -> None:
    expr = parse_lark(f'start: {written}\nx: "x"').rule("start").body
    assert isinstance(expr, Repeat)
    assert (expr.min, expr.max) == (low, high)


def test_groups_and_optional_groups() -> None:
    assert body('start: ("a" | "b") "c"') == '("a" | "b") "c"'
    assert body('start: ["a" "b"] "c"') == '("a" "b")? "c"'
    assert body('start: ("a" "b")+') == '("a" "b")+'


def test_spans_cover_definitions_and_elements() -> None:
    grammar = parse_lark('\nstart: "ab" x\nx: "y"\n')
    rule = grammar.rule("start")
    assert rule.span == Span(line=2, column=1, end_line=2, end_column=13)
    assert isinstance(rule.body, Seq)
    assert rule.body.items[0].span == Span(line=2, column=8, end_line=2, end_column=11)
    assert rule.body.items[1] == Ref(
        name="x", span=Span(line=2, column=13, end_line=2, end_column=13)
    )


# -- %import common -------------------------------------------------------------------------


def test_common_library_has_every_seed_name() -> None:
    seed_table = (
        "DIGIT HEXDIGIT INT SIGNED_INT DECIMAL _EXP FLOAT SIGNED_FLOAT NUMBER SIGNED_NUMBER "
        "ESCAPED_STRING LCASE_LETTER UCASE_LETTER LETTER WORD CNAME "
        "WS_INLINE WS CR LF NEWLINE SH_COMMENT CPP_COMMENT C_COMMENT SQL_COMMENT"
    ).split()
    assert set(COMMON_NAMES) == set(seed_table)
    grammar = parse_lark(
        "start: " + " ".join(seed_table) + "\n%import common (" + ", ".join(seed_table) + ")"
    )
    for name in seed_table:
        assert grammar.rule(name).terminal
        assert strip_spans(grammar.rule(name).body) == common_terminal(name)
    grammar.verify()


def test_import_alias_and_import_after_use() -> None:
    grammar = parse_lark("start: NUMBER\n%import common.INT -> NUMBER\n")
    assert [r.name for r in grammar.rules] == ["start", "NUMBER"]
    assert strip_spans(grammar.rule("NUMBER").body) == common_terminal("INT")
    assert grammar.rule("NUMBER").span == Span(line=2, column=1, end_line=2, end_column=28)


def test_imports_are_self_contained() -> None:
    # FLOAT is built from INT and _EXP in Lark; importing it must not define them here.
    grammar = parse_lark('start: FLOAT\n%import common.FLOAT\nINT: "0"\n')
    assert [r.name for r in grammar.rules] == ["start", "FLOAT", "INT"]


# -- %ignore and %grammar_options ---------------------------------------------------------------


def test_ignore_declarations_are_merged_and_kept_unwoven() -> None:
    grammar = parse_lark(
        """
%import common (WS, CPP_COMMENT)
%ignore WS
%ignore CPP_COMMENT
%ignore /;+/
%ignore " " | "\\t" "x"
start: "a" "b"
"""
    )
    assert [print_expr(e) for e in grammar.ignore] == [
        "WS",
        "CPP_COMMENT",
        '";"+',
        '" " | "\\t" "x"',
    ]
    assert print_expr(grammar.rule("start").body) == '"a" "b"'


def test_grammar_options_are_merged() -> None:
    assert not parse_lark('start: "a"').options.allow_initial_skip
    grammar = parse_lark(
        '%grammar_options {"allow_initial_skip": false}\n'
        '%grammar_options {"allow_initial_skip": true}\nstart: "a"'
    )
    assert grammar.options.allow_initial_skip
    assert "%options allow_initial_skip" in print_grammar(grammar)


# -- rule options -------------------------------------------------------------------------------


def test_rule_options() -> None:
    grammar = parse_lark(
        """
start: reasoning name field value tagged stopper budget
reasoning[max_tokens=512, capture="reasoning"]: TEXT
name[lazy]: /[a-z]+/
field[suffix="!", stop_capture="marker"]: /[a-z]*/
value[temperature=0.7]: /[a-z]+/
tagged[capture, max_chars=0]: "t"
stopper[stop=/<\\/?end>/s]: /[a-z]*/
budget[stop=END, lazy]: /[a-z]*/
END: "</end>" | "<end>"
TEXT: /(\\n|.)*/
"""
    )
    options = {r.name: r.options for r in grammar.rules}
    assert options["reasoning"].max_tokens == 512
    assert options["reasoning"].capture == "reasoning"
    assert options["name"].lazy
    assert options["field"].suffix == Literal(
        text="!", span=Span(line=5, column=14, end_line=5, end_column=16)
    )
    assert options["field"].stop_capture == "marker"
    assert options["value"].temperature == 0.7
    assert options["tagged"].capture == "tagged"
    assert options["tagged"].max_chars == 0
    assert print_expr(options["stopper"].stop) == '"<" "/"? "end>"'  # type: ignore[arg-type]
    assert options["budget"].stop == Ref(
        name="END", span=Span(line=9, column=13, end_line=9, end_column=15)
    )
    assert options["budget"].lazy
    assert grammar.rule("END").options.is_default()


def test_case_insensitive_marker() -> None:
    grammar = parse_lark('start: f\nf[suffix="END"i]: /[a-z]*/')
    assert grammar.rule("f").options.suffix == Literal(
        text="END", case_insensitive=True, span=Span(line=2, column=10, end_line=2, end_column=15)
    )


# -- special tokens -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("<[128010]>", TokenSet(ranges=((128010, 128010),))),
        ("<[128000-128255]>", TokenSet(ranges=((128000, 128255),))),
        ("<[1,3-8,10]>", TokenSet(ranges=((1, 1), (3, 8), (10, 10)))),
        ("<[10,3-8,1,4,9]>", TokenSet(ranges=((1, 1), (3, 10)))),
        ("<[^1,3-8]>", TokenSet(ranges=((1, 1), (3, 8)), negated=True)),
        ("<[*]>", TokenSet(wildcard=True)),
        ("<[0-1000000]>", TokenSet(ranges=((0, 1_000_000),))),
        ("<|tool|>", SpecialToken(text="<|tool|>")),
        ("<think>", SpecialToken(text="<think>")),
        ("</think>", SpecialToken(text="</think>")),
    ],
)
def test_special_tokens(written: str, expected: object) -> None:
    assert strip_spans(parse_lark(f"start: {written}").rule("start").body) == expected


def test_named_special_tokens_checked_against_a_vocabulary() -> None:
    from gramkiln.runtime.vocab import Vocab

    vocab = Vocab([b"a", b"<|tool|>", b"b"])
    assert parse_lark("start: <|tool|>", vocab=vocab).rule("start").body.kind == "special"
    assert parse_lark("start: <|tool|>", vocab=["a", "<|tool|>", "b"]).rules
    with pytest.raises(GrammarError, match="special token <|x|> is not in the vocabulary"):
        parse_lark("start: <|x|>", vocab=vocab)


# -- embedded grammars ----------------------------------------------------------------------------


def test_nested_lark_blocks() -> None:
    grammar = parse_lark(
        """
start: "[" %lark {
  %import common.WS
  %ignore WS
  start: item ":" item
  item: "x" | "(" item ")"
} "]" %lark { start: "y" }
item: "outer"
"""
    )
    assert print_expr(grammar.rule("start").body) == '"[" @lark.1 "]" @lark.2'
    inner = grammar.subgrammar("lark.1")
    assert [r.name for r in inner.rules] == ["WS", "start", "item"]
    assert print_expr(inner.ignore[0]) == "WS"
    assert print_expr(grammar.subgrammar("lark.2").rule("start").body) == '"y"'
    assert grammar.ignore == ()
    assert grammar.rule("start").body.items[1] == Embed(  # type: ignore[union-attr]
        name="lark.1", span=Span(line=2, column=12, end_line=7, end_column=1)
    )
    grammar.verify()


def test_named_grammars_are_shared_and_may_reference_each_other() -> None:
    status = parse_lark('start: "ok" | "cancelled"')
    grammar = parse_lark(
        'start: "<" @status @pair %lark { start: @status }',
        named_grammars={"status": status, "pair": "start: @status @status"},
    )
    names = [sub.name for sub in grammar.subgrammars]
    assert names == ["@status", "@pair", "lark.1"]
    assert grammar.subgrammar("@status") is status
    pair = grammar.subgrammar("@pair")
    assert pair.subgrammar("@status") is status
    assert print_expr(pair.rule("start").body) == "@@status @@status"
    assert grammar.subgrammar("lark.1").subgrammar("@status") is status
    grammar.verify()


def test_named_grammar_ir_values_can_come_from_the_facade() -> None:
    from gramkiln import Grammar

    inner = Grammar.from_lark('start: "x"')
    outer = Grammar.from_lark("start: @inner @inner", named_grammars={"inner": inner})
    assert isinstance(outer.ir.subgrammar("@inner"), GrammarIR)
    assert len(outer.ir.subgrammars) == 1


def test_json_embedding() -> None:
    source = (
        'start: "<" arguments ">" %json {"type": "string"}\narguments: %json {"type": "integer"}\n'
    )
    grammar = parse_lark(source)
    assert print_expr(grammar.rule("start").body) == '"<" arguments ">" @json.1'
    assert print_expr(grammar.rule("arguments").body) == "@json.2"
    assert [sub.name for sub in grammar.subgrammars] == ["json.1", "json.2"]
    grammar.verify()


def test_json_schema_errors_are_located_at_the_schema() -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark('start: "a"\nx: %json {"type": "integer", "minimum": "x"}')
    assert (caught.value.line, caught.value.column) == (2, 10)
    assert caught.value.message.startswith("invalid %json schema: ")


def test_parse_lark_accepts_grammar_objects_as_named_grammars() -> None:
    from gramkiln import Grammar

    inner = Grammar.from_lark('start: "x"')
    grammar = parse_lark("start: @inner", named_grammars={"inner": inner})  # type: ignore[dict-item]
    assert grammar.subgrammar("@inner") is inner.ir
