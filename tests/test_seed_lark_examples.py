"""Every example of the Lark seed text (shared/seeds/000_393662a2e08c0778.txt) as a test.

Strings the text says are accepted or rejected are checked through
``Grammar.from_lark(src).accepts`` (the reference matcher); every grammar shown must parse.
Examples whose semantics are documented as runtime-only (captures, budgets, temperature) are
checked for their parsed IR here; their enforcement belongs to the runtime.
"""

from __future__ import annotations

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.ir import Literal, Ref, SpecialToken, TokenSet, strip_spans
from gramkiln.runtime.vocab import Vocab

from gramkiln import Grammar
from gramkiln.errors import GrammarError
from gramkiln.testing import ReferenceMatcher, TokenUnit


def check(source: str, accepted: list[str] = (), rejected: list[str] = ()) -> Grammar:  # type: ignore[assignment]
    """Parse ``source`` and check membership of the given strings."""
    grammar = Grammar.from_lark(source)
    for text in accepted:
        assert grammar.accepts(text), f"should accept {text!r}"
    for text in rejected:
        assert not grammar.accepts(text), f"should reject {text!r}"
    return grammar


FIRST_EXAMPLE = r"""
    %import common.INT
    %import common.WS
    %ignore WS

    start: item ("," item)*
    item: "id=" INT
    """


# -- introduction and usage ----------------------------------------------------------------------


def test_first_example() -> None:
    check(
        FIRST_EXAMPLE,
        accepted=["id=1", "id=1, id=42", "id=1 ,id=2 , id=3", "id=12"],
        # Ignored whitespace is never inserted inside a terminal or before the first lexeme.
        rejected=["id=1 2", " id=1", "id=", "id=1,", "ID=1"],
    )


def test_usage_example() -> None:
    check('start: "a" | "b"', accepted=["a", "b"], rejected=["", "ab", "c"])


def test_seed_error_example() -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark("start: item\n\nitem missing\n")
    assert str(caught.value) == (
        "Lark error at line 3, column 6: expected ':' after rule name\nitem missing\n     ^"
    )


# -- grammar structure, rules and terminals --------------------------------------------------------


def test_continuation_lines() -> None:
    check('start: "a"\n     | "b"\n     | "c"\n', accepted=["a", "b", "c"], rejected=["ab"])


def test_rules_and_terminals_example() -> None:
    check(
        """
start: value (";" value)*     // rule
value: INT | NAME             // rule referencing terminals
INT: /[0-9]+/                 // terminal
NAME: /[a-z]+/                // terminal
""",
        accepted=["1", "abc;12;x", "12abc"[:2]],
        rejected=["", "1;", "A", "1 ;2"],
    )


def test_recursion_example() -> None:
    check(
        """
start: value
value: "x" | "(" value ")" | "[" (value ("," value)*)? "]"
""",
        accepted=["x", "((x))", "[]", "[x,(x),[x]]"],
        rejected=["(x", "[x,]", "[,x]"],
    )


def test_terminal_is_one_unit_with_ignore() -> None:
    # "spaces may appear around an INT but not between its digits"
    check(FIRST_EXAMPLE, accepted=["id= 12 ", "id=12 , id= 3"], rejected=["id=1 2"])


def test_terminals_cannot_reference_rules_or_recurse() -> None:
    with pytest.raises(GrammarError, match="a terminal cannot reference rule 'b'"):
        parse_lark('start: A\nA: b\nb: "x"')
    with pytest.raises(GrammarError, match="terminal 'A' is recursive: A -> A"):
        parse_lark('start: A\nA: "x" A?')


@pytest.mark.parametrize(
    "element",
    ['%json {"type": "string"}', '%lark { start: "a" }', "<|tool|>", "<[1]>", "@inner"],
)
def test_embeddings_and_special_tokens_cannot_appear_in_terminals(element: str) -> None:
    with pytest.raises(GrammarError, match="cannot appear in terminals"):
        parse_lark(f"start: A\nA: {element}", named_grammars={"inner": 'start: "a"'})


def test_prefixes_and_aliases_do_not_change_the_language() -> None:
    source = '?start: value\n!value: "a" -> first\n    | "b" -> second\n'
    check(source, accepted=["a", "b"], rejected=["ab", ""])


# -- string literals, ranges, regular expressions -------------------------------------------------


def test_string_literal_escapes() -> None:
    check(r'start: "\"\\\/\b\f\n\r\t"', accepted=['"\\/\b\f\n\r\t'])
    check(r'start: "中文" "😀"', accepted=["中文😀"])
    check(r'start: "\u03bb"', accepted=["λ"], rejected=["\\u03bb"])


def test_case_insensitive_literal() -> None:
    check('start: "yes"i', accepted=["yes", "YES", "Yes", "yEs"], rejected=["no", "yes "])
    with pytest.raises(
        GrammarError, match="case-insensitive literals support ASCII characters only"
    ):
        parse_lark('start: "straße"i')


def test_character_ranges() -> None:
    check('start: "a".."z"', accepted=["a", "m", "z"], rejected=["A", "", "ab"])
    check('start: "α".."γ"', accepted=["α", "β", "γ"], rejected=["δ", "a"])
    with pytest.raises(GrammarError, match="the i flag is not allowed on range endpoints"):
        parse_lark('start: "a".."z"i')
    with pytest.raises(GrammarError, match="range endpoints must be exactly one character"):
        parse_lark('start: "a".."yz"')


def test_regex_dot_and_the_s_flag() -> None:
    check("start: /a.b/", accepted=["acb", "a😀b"], rejected=["a\nb", "ab"])
    check("start: /a.b/s", accepted=["acb", "a😀b", "a\nb"])
    # The seed's two-rule form: `line` uses the s flag.
    check("start: line\nline: /a.b/s", accepted=["a\nb"])


def test_regex_escaped_slash() -> None:
    check(r"start: /<\/?end>/", accepted=["<end>", "</end>"], rejected=["<//end>"])


def test_regex_i_flag() -> None:
    check("start: /ab+/i", accepted=["ab", "ABB", "aBb"], rejected=["a"])


# -- sequences, alternatives, groups, repetition -------------------------------------------------


@pytest.mark.parametrize(
    ("body", "accepted", "rejected"),
    [
        ('"a" "b"', ["ab"], ["a", "b", "ba"]),
        ('"a" | "b"', ["a", "b"], ["ab"]),
        ('("a" | "b") "c"', ["ac", "bc"], ["c", "abc"]),
        ('["a" "b"]', ["", "ab"], ["a", "b"]),
        ("", [""], ["a"]),
        ('| "a"', ["", "a"], ["aa"]),
        ('""', [""], ["a"]),
    ],
)
def test_sequences_alternatives_groups(body: str, accepted: list[str], rejected: list[str]) -> None:
    check(f"start: {body}", accepted, rejected)


@pytest.mark.parametrize(
    ("form", "counts"),
    [
        ("x?", {0, 1}),
        ("x*", {0, 1, 2, 3, 4, 5, 6}),
        ("x+", {1, 2, 3, 4, 5, 6}),
        ("x~3", {3}),
        ("x~2..4", {2, 3, 4}),
        ("x{3}", {3}),
        ("x{2,4}", {2, 3, 4}),
        ("x{2,}", {2, 3, 4, 5, 6}),
        ("x{,4}", {0, 1, 2, 3, 4}),
        ("x{0}", {0}),
        ('("x")~2', {2}),
    ],
)
def test_repetition(form: str, counts: set[int]) -> None:
    grammar = Grammar.from_lark(f'start: {form}\nx: "x"')
    for count in range(7):
        assert grammar.accepts("x" * count) == (count in counts), (form, count)


@pytest.mark.parametrize("form", ["x{4,2}", "x~3..1"])
def test_reversed_repetition_bounds_are_rejected(form: str) -> None:
    with pytest.raises(GrammarError, match="is below lower bound"):
        parse_lark(f'start: {form}\nx: "x"')


# -- %import common ---------------------------------------------------------------------------------


def test_import_forms() -> None:
    check("%import common.INT\nstart: INT", accepted=["0", "123"], rejected=["", "1a"])
    check("%import common.INT -> NUMBER\nstart: NUMBER", accepted=["42"], rejected=["4.2"])
    check(
        '%import common (INT, WS, CNAME)\n%ignore WS\nstart: CNAME "=" INT',
        accepted=["x_1=2", "_a = 10"],
        rejected=["1x=2"],
    )


def test_import_after_use() -> None:
    check("start: WORD\n%import common.WORD", accepted=["hello"], rejected=["hi there"])


def test_import_of_defined_name_and_foreign_library_are_errors() -> None:
    with pytest.raises(GrammarError, match="cannot import 'INT': already defined"):
        parse_lark('INT: "1"\n%import common.INT\nstart: INT')
    with pytest.raises(GrammarError, match="only the common library can be imported"):
        parse_lark("%import mylib.INT\nstart: INT")


@pytest.mark.parametrize(
    ("name", "accepted", "rejected"),
    [
        ("DIGIT", ["0", "9"], ["", "12", "a"]),
        ("HEXDIGIT", ["a", "F", "7"], ["g", "ff"]),
        ("INT", ["0", "0042"], ["", "-1", "1.0"]),
        ("SIGNED_INT", ["-1", "+2", "3"], ["--1", "+"]),
        ("DECIMAL", ["1.", "1.5", ".5"], [".", "1", "1.5e3"]),
        ("_EXP", ["e5", "E-3", "e+10"], ["e", "5"]),
        ("FLOAT", ["1e5", "1.5", ".5e-3", "2.E4"], ["1", "e5", "."]),
        ("SIGNED_FLOAT", ["-1.5", "+.5", "1e3"], ["-1", "--1.5"]),
        ("NUMBER", ["1", "1.5", "1e9"], ["-1", "a"]),
        ("SIGNED_NUMBER", ["-1", "+1.5", "7"], ["-", "1-"]),
        ("ESCAPED_STRING", ['""', '"a b"', r'"a\"b"', r'"\\"'], ['"a', r'"\"', '"a"b"', '"a\nb"']),
        ("LCASE_LETTER", ["a", "z"], ["A", "ab"]),
        ("UCASE_LETTER", ["A", "Z"], ["a", "AB"]),
        ("LETTER", ["a", "Z"], ["1", "ab"]),
        ("WORD", ["hello", "Hi"], ["", "a1", "a b"]),
        ("CNAME", ["_x1", "abc", "A_9"], ["1a", "", "a-b"]),
        ("WS_INLINE", [" ", "\t \t"], ["", "\n"]),
        ("WS", [" ", " \t\n\r\f"], ["", "x"]),
        ("CR", ["\r"], ["\n"]),
        ("LF", ["\n"], ["\r"]),
        ("NEWLINE", ["\n", "\r\n", "\n\r\n\n"], ["\r", ""]),
        ("SH_COMMENT", ["#", "# hi"], ["# a\nb", "//"]),
        ("CPP_COMMENT", ["//", "// hi"], ["/ hi", "// a\n"]),
        ("C_COMMENT", ["/**/", "/* a\n* b **/"], ["/* a */ b */", "/*/", "/* a"]),
        ("SQL_COMMENT", ["--", "-- hi"], ["- hi", "-- a\nb"]),
    ],
)
def test_common_library(name: str, accepted: list[str], rejected: list[str]) -> None:
    check(f"%import common.{name}\nstart: {name}", accepted, rejected)


# -- %ignore and %grammar_options ----------------------------------------------------------------


IGNORE_EXAMPLE = """
%import common.WS
%ignore WS
start: "a" DIGIT
DIGIT: "0".."9"
"""


def test_ignore_example() -> None:
    check(IGNORE_EXAMPLE, accepted=["a1", "a 1", "a\n1 "], rejected=[" a1", "a1 2", "a"])


def test_ignore_is_not_allowed_before_the_first_lexeme_unless_enabled() -> None:
    check(IGNORE_EXAMPLE, rejected=[" a1", "\na 1"])
    enabled = '%grammar_options {"allow_initial_skip": true}\n' + IGNORE_EXAMPLE
    check(enabled, accepted=[" a1", "\na 1 ", "a1"])


def test_multiple_ignores_are_merged() -> None:
    check(
        """
%import common (WS, CPP_COMMENT)
%ignore WS
%ignore CPP_COMMENT
%ignore /;+/
start: "a" "b"
""",
        accepted=["ab", "a b", "a;;b;", "a// note\nb", "a ; // x\n ;b"],
        rejected=["a/b", "a // x", "a /* x */ b"],
    )


def test_ignore_may_be_a_string_or_a_combination() -> None:
    check(
        '%ignore "_" | "-" "-"\nstart: "a" "b"',
        accepted=["a_b", "a--b", "a_--_b"],
        rejected=["a-b"],
    )


def test_grammar_options_errors() -> None:
    with pytest.raises(GrammarError, match="unknown grammar option 'skip_ws'"):
        parse_lark('%grammar_options {"skip_ws": true}\nstart: "a"')


# -- %json, %lark, named grammars ------------------------------------------------------------------


JSON_EXAMPLE = """
start: "<tool_call>" arguments "</tool_call>"
arguments: %json {
  "type": "object",
  "properties": {"city": {"type": "string"}},
  "required": ["city"],
  "additionalProperties": false
}
"""

LARK_EXAMPLE = """
start: "[" %lark {
  %import common.WS
  %ignore WS
  start: item ":" %json {"type": "integer"}
  item: "x" | "(" item ")"
} "]"
"""


def test_json_example() -> None:
    check(
        JSON_EXAMPLE,
        accepted=['<tool_call>{"city": "Paris"}</tool_call>'],
        rejected=['<tool_call>{"town": "Paris"}</tool_call>', "<tool_call></tool_call>"],
    )


def test_lark_example_with_json_inside() -> None:
    check(
        LARK_EXAMPLE, accepted=["[x:1]", "[(x) : 42]", "[((x)):-3]"], rejected=["[x:a]", "[ x:1]"]
    )


def test_nested_lark_has_its_own_namespace_and_ignore() -> None:
    check(
        """
start: "[" %lark {
  %import common.WS
  %ignore WS
  start: item ":" item
  item: "x" | "(" item ")"
} "]" item
item: "y"
""",
        accepted=["[x:x]y", "[(x) : ( x )]y", "[x:x ]y"],
        rejected=["[x:x] y", "[y:x]y", "[x:x]x"],
    )


def test_multiple_and_nested_lark_blocks() -> None:
    source = 'start: %lark { start: "a" %lark { start: "b" } } "," %lark { start: "c" }'
    check(source, accepted=["ab,c"], rejected=["a,c", "ab,"])


def test_named_grammars_example() -> None:
    arguments = Grammar.from_json_schema(
        {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        }
    )
    grammar = Grammar.from_lark(
        'start: "<tool_call>" @arguments "</tool_call>" ":" @status',
        named_grammars={"arguments": arguments, "status": 'start: "ok" | "cancelled"'},
    )
    assert grammar.accepts('<tool_call>{"city": "Oslo"}</tool_call>:ok')
    assert not grammar.accepts('<tool_call>{"city": "Oslo"}</tool_call>:maybe')


def test_named_grammars_reference_each_other_and_nested_blocks() -> None:
    grammar = Grammar.from_lark(
        'start: @status "/" %lark { start: @pair }',
        named_grammars={
            "status": 'start: "ok" | "cancelled"',
            "pair": 'start: @status "&" @status',
        },
    )
    assert grammar.accepts("ok/cancelled&ok")
    assert not grammar.accepts("ok/ok")
    with pytest.raises(GrammarError, match="circular named grammar reference: @a -> @b -> @a"):
        Grammar.from_lark("start: @a", named_grammars={"a": "start: @b", "b": "start: @a"})


def test_named_grammars_keep_their_own_ignore() -> None:
    grammar = Grammar.from_lark(
        'start: "(" @words ")"',
        named_grammars={
            "words": "%import common.WS\n%ignore WS\nstart: WORD+\n%import common.WORD"
        },
    )
    assert grammar.accepts("(ab cd )")
    assert not grammar.accepts("( ab)")


# -- special tokens ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("start: <[128010]>", TokenSet(ranges=((128010, 128010),))),
        ("start: <[128000-128255]>", TokenSet(ranges=((128000, 128255),))),
        ("start: <[1,3-8,10]>", TokenSet(ranges=((1, 1), (3, 8), (10, 10)))),
        ("start: <[^1,3-8]>", TokenSet(ranges=((1, 1), (3, 8)), negated=True)),
        ("start: <[*]>", TokenSet(wildcard=True)),
    ],
)
def test_token_set_examples(source: str, expected: TokenSet) -> None:
    assert strip_spans(parse_lark(source).rule("start").body) == expected


def test_token_sets_match_one_token() -> None:
    matcher = ReferenceMatcher(parse_lark("start: <[1,3-8,10]>"))
    for token_id, allowed in [(1, True), (2, False), (5, True), (9, False), (10, True)]:
        assert matcher.accepts_units([TokenUnit(token_id)]) == allowed
    negated = ReferenceMatcher(parse_lark("start: <[^1,3-8]>"))
    assert negated.accepts_units([TokenUnit(2)]) and not negated.accepts_units([TokenUnit(4)])


def test_token_set_limits() -> None:
    with pytest.raises(GrammarError, match="spans more than 1,000,000 ids"):
        parse_lark("start: <[0-1000001]>")
    with pytest.raises(GrammarError, match=r"the negated wildcard <\[\^\*\]> is not allowed"):
        parse_lark("start: <[^*]>")


def test_named_special_token_with_a_vocabulary() -> None:
    vocab = Vocab([b"a", b"<|tool|>", b"b"])
    ir = parse_lark("start: <|tool|>", vocab=vocab)
    assert strip_spans(ir.rule("start").body) == SpecialToken(text="<|tool|>")
    matcher = ReferenceMatcher(ir, special_texts={1: "<|tool|>"})
    assert matcher.accepts_units([TokenUnit(1)])
    assert not matcher.accepts_units([TokenUnit(0)])
    with pytest.raises(GrammarError, match="special token <|call|> is not in the vocabulary"):
        parse_lark("start: <|call|>", vocab=vocab)


# -- rule options ----------------------------------------------------------------------------------


def test_rule_options_examples_parse() -> None:
    grammar = parse_lark(
        """
start: reasoning name field value
reasoning[max_tokens=512, capture="reasoning"]: TEXT
name[lazy]: /[a-z]+/
field[suffix="!", stop_capture="marker"]: /[a-z]*/
value[temperature=0.7]: /[a-z]+/
TEXT: /(\\n|.)*/
"""
    )
    options = {rule.name: rule.options for rule in grammar.rules}
    assert (options["reasoning"].max_tokens, options["reasoning"].capture) == (512, "reasoning")
    assert options["name"].lazy
    assert strip_spans(options["field"].suffix) == Literal(text="!")  # type: ignore[arg-type]
    assert options["field"].stop_capture == "marker"
    assert options["value"].temperature == 0.7


def test_options_only_on_rules() -> None:
    with pytest.raises(GrammarError, match="terminals cannot carry rule options"):
        parse_lark('start: A\nA[lazy]: "a"')
    with pytest.raises(GrammarError, match="suffix and stop cannot be used together"):
        parse_lark('start: a\na[suffix="x", stop="y"]: "a"')
    with pytest.raises(GrammarError, match="stop_capture requires suffix or stop"):
        parse_lark('start: a\na[stop_capture="m"]: "a"')


def test_temperature_example() -> None:
    grammar = check(
        'start: "answer:" value\nvalue[temperature=0.7]: /[a-z]+/', accepted=["answer:yes"]
    )
    assert grammar.ir.rule("value").options.temperature == 0.7
    with pytest.raises(GrammarError, match="temperature cannot be combined with max_tokens"):
        parse_lark('start: v\nv[temperature=0.1, max_tokens=3]: "a"')


def test_general_lazy_example() -> None:
    check(
        """
start: "<" name ">" rest
name[lazy]: /[a-z]+/     // stops at the first position where it can end
rest: /[a-z]+/
""",
        accepted=["<a>b"],
        rejected=["<ab>c"],
    )


def test_lazy_rule_that_can_be_empty_matches_empty() -> None:
    check('start: foo "x"\nfoo[lazy]: /.*/', accepted=["x"], rejected=["ax"])


def test_standalone_lazy_head_completes_at_the_trigger() -> None:
    grammar = check(
        'start: head\nhead[lazy]: TEXT "<end>"\nTEXT: /(\\n|.)*/',
        accepted=["<end>", "some\ntext<end>"],
        rejected=["a<end>b", "a<end><end>"],
    )
    assert grammar.is_prefix("partial <en")


SUFFIX_FORMS = [
    'field[suffix="<end>"]: /[a-z]*/',
    "field[suffix=/<\\/?end>/]: /[a-z]*/",
    'field[suffix=END]: /[a-z]*/\nEND: "</end>" | "<end>"',
    'field[stop="<end>"]: /[a-z]*/',
]


@pytest.mark.parametrize("definition", SUFFIX_FORMS)
def test_suffix_and_stop_markers_end_lazily(definition: str) -> None:
    check(
        f'start: field "z"\n{definition}',
        accepted=["ab<end>z", "<end>z"],
        rejected=["ab<end>", "a<end>b<end>z"],
    )


def test_suffix_marker_kinds_in_the_ir() -> None:
    grammar = parse_lark(f"start: field\n{SUFFIX_FORMS[2]}")
    assert strip_spans(grammar.rule("field").options.suffix) == Ref(name="END")  # type: ignore[arg-type]


def test_capture_examples_parse() -> None:
    for field in (
        'field[capture="inner", suffix="!"]: /[a-z]*/',
        'field[capture="inner", stop="!"]: /[a-z]*/',
        'field[capture="inner", suffix=/!!+/, stop_capture="marker"]: /[a-z]*/',
    ):
        grammar = parse_lark(f'start[capture="outer"]: field "z"\n{field}')
        assert grammar.rule("start").options.capture == "outer"
        assert grammar.rule("field").options.capture == "inner"
    check(
        'start[capture="outer"]: field "z"\nfield[capture="inner", suffix="!"]: /[a-z]*/',
        accepted=["xy!z"],
    )
    check(
        'start[capture="outer"]: field "z"\nfield[capture="inner", stop="!"]: /[a-z]*/',
        accepted=["xy!z"],
    )
    check(
        'start[capture="outer"]: field "z"\n'
        'field[capture="inner", suffix=/!!+/, stop_capture="marker"]: /[a-z]*/',
        accepted=["xy!!z"],
        # Committed-shortest: the marker ends at the first "!!", so a third "!" cannot follow.
        rejected=["xy!!!z", "xy!z"],
    )


def test_marker_flags() -> None:
    check('start: f "z"\nf[suffix="END"i]: /[a-z]*/', accepted=["abEnDz"])
    check('start: f "z"\nf[stop=/BEGIN.*END/s]: /[a-z]*/', accepted=["abBEGIN\nENDz"])


def test_empty_string_marker_is_rejected() -> None:
    with pytest.raises(GrammarError, match="an empty string stop marker is not accepted"):
        parse_lark('start: f\nf[stop=""]: /[a-z]*/')


def test_token_and_character_budget_examples_parse() -> None:
    for option in ("max_tokens=512", "max_chars=2048"):
        grammar = parse_lark(
            f"start: <think> reasoning </think> answer\nreasoning[{option}]: TEXT\n"
            "answer: /[0-9]+/\nTEXT: /(\\n|.)*/"
        )
        items = grammar.rule("start").body.items  # type: ignore[union-attr]
        assert strip_spans(items[0]) == SpecialToken(text="<think>")
        assert strip_spans(items[2]) == SpecialToken(text="</think>")
    with pytest.raises(GrammarError, match="max_tokens must be between 1 and 1,000,000"):
        parse_lark('start: a\na[max_tokens=1000001]: "a"')
    with pytest.raises(GrammarError, match="max_chars must be between 0 and 2,147,483,647"):
        parse_lark('start: a\na[max_chars=2147483648]: "a"')


def test_list_budget_wrapper_parses() -> None:
    grammar = parse_lark('start: list\nlist[max_tokens=8]: item+\nitem: "a"')
    assert grammar.rule("list").options.max_tokens == 8


# -- tool-call dispatch grammars ------------------------------------------------------------------


MULTIPLE_TOOLS = r"""
start: (foo | bar)* tail
tail: TEXT

foo_head[lazy]: TEXT "<function"
foo: foo_head "=foo>" /[a-z]+/ "</function>"

bar_head[lazy]: TEXT "<function"
bar: bar_head "=bar>" /[0-9]+/ "</function>"

TEXT: /(\n|.)*/
"""


def test_multiple_tools_example() -> None:
    check(
        MULTIPLE_TOOLS,
        accepted=[
            "plain text",
            "",
            "a<function=foo>abc</function>b",
            "<function=bar>12</function>x<function=foo>q</function>",
            "partial <functio",
        ],
    )


@pytest.mark.parametrize(
    "head",
    [
        'head[lazy]: TEXT "<tool>"',
        "head[lazy]: TEXT <|tool_token|>",
        "head[lazy]: /(\\n|.)*<tool>/",
        'head[suffix="<tool>"]: TEXT',
        'head[stop="<tool>"]: TEXT',
    ],
)
def test_dispatch_head_forms_parse(head: str) -> None:
    grammar = parse_lark(f'start: tool* tail\ntail: TEXT\ntool: head "x"\n{head}\nTEXT: /(\\n|.)*/')
    grammar.verify()


def test_inline_token_trigger_form_parses() -> None:
    parse_lark('start: tool* tail\ntail: TEXT\ntool: TEXT <|tool_token|> "x"\nTEXT: /(\\n|.)*/')


@pytest.mark.parametrize(
    "text_regex",
    [
        "/(.|\\n)*/",
        "/(\\n|.)*/",
        "/(?:.|\\n)*/",
        "/(?:\\n|.)*/",
        "/[\\s\\S]*/",
        "/(?s:.*)/",
        "/.*/s",
    ],
)
def test_any_text_terminal_forms(text_regex: str) -> None:
    check(f"start: TEXT\nTEXT: {text_regex}", accepted=["", "a\nb", "😀"])


def test_dispatch_example_with_json() -> None:
    check(
        r"""
start: tool* tail
tail: TEXT

tool_head[lazy]: TEXT "<tool_call>"
tool: tool_head %json {
  "type": "object",
  "properties": {"x": {"type": "integer"}},
  "required": ["x"],
  "additionalProperties": false
} "</tool_call>"

TEXT: /(\n|.)*/
""",
        accepted=["no call", 'a<tool_call>{"x": 1}</tool_call>b', "final <tool_cal"],
    )


def test_capture_groups_example_parses() -> None:
    grammar = check(
        """
start: tool* tail
tail: TEXT

tool_head[lazy]: TEXT "<tool_call>"
tool: tool_head arg "</tool_call>"
arg[capture]: /[0-9]+/

TEXT: /(\\n|.)*/
""",
        accepted=["x<tool_call>42</tool_call>y<tool_call>7</tool_call>"],
    )
    assert grammar.ir.rule("arg").options.capture == "arg"


# -- DESIGN.md section 2: exact membership, no greedy lexing -----------------------------------------


def test_terminals_are_not_lexed_greedily() -> None:
    check("%import common.INT\nstart: INT INT", accepted=["12", "123"], rejected=["1", "1 2", ""])
    check(
        "%import common.INT\n%import common.WS\n%ignore WS\nstart: INT INT",
        accepted=["12", "123", "1 2", "1 23 ", "1\n\t2"],
        rejected=[" 12", "1", "1 "],
    )


def test_initial_skip_option_applies_before_the_first_lexeme() -> None:
    source = "%import common.INT\n%import common.WS\n%ignore WS\nstart: INT INT"
    check(source, rejected=[" 12"])
    check('%grammar_options {"allow_initial_skip": true}\n' + source, accepted=[" 12", "  1 2 "])


def test_lazy_example_from_design() -> None:
    check(
        'start: "<" name ">" rest\nname[lazy]: /[a-z]+/\nrest: /[a-z]+/',
        accepted=["<a>b", "<z>abc"],
        rejected=["<ab>c", "<>b"],
    )


def test_json_inside_sequences_alternatives_and_repetition() -> None:
    check(
        'start: (%json {"type": "integer"} ",")* ("x" | %json {"type": "boolean"})',
        accepted=["x", "1,2,x", "true", "3,false"],
        rejected=["1", "x,", "1,,x"],
    )


def test_special_tokens_inside_text_rules() -> None:
    ir = parse_lark('start: "a" <[*]> <|tool|> "b"')
    matcher = ReferenceMatcher(ir, special_texts={7: "<|tool|>"})
    units = [ord("a"), TokenUnit(3, b"x"), TokenUnit(7), ord("b")]
    assert matcher.accepts_units(units)
    assert not matcher.accepts_units([ord("a"), TokenUnit(3, b"x"), TokenUnit(8), ord("b")])
