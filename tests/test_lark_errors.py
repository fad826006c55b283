"""Bad Lark grammars: every error is a GrammarError whose full text is checked exactly.

The rendering is the seed's: ``Lark error at line L, column C: message``, the source line and
a caret under column C. The seed's own example comes first.
"""

from __future__ import annotations

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.ir import parse_grammar

from gramkiln.errors import GrammarError

BAD_GRAMMARS = [
    (
        "start: item\n\nitem missing\n",
        """\
Lark error at line 3, column 6: expected ':' after rule name
item missing
     ^""",
    ),
    (
        "start: foo\n",
        """\
Lark error at line 1, column 8: undefined rule 'foo'
start: foo
       ^""",
    ),
    (
        "start: FOO\n",
        """\
Lark error at line 1, column 8: undefined terminal 'FOO'
start: FOO
       ^""",
    ),
    (
        'start: "a"\nstart: "b"\n',
        """\
Lark error at line 2, column 1: duplicate definition of 'start' (first on line 1)
start: "b"
^""",
    ),
    (
        'start: A\nA: "a" B\nB: "b" A\n',
        """\
Lark error at line 3, column 8: terminal 'A' is recursive: A -> B -> A
B: "b" A
       ^""",
    ),
    (
        'start: A\nA: "a" b\nb: "c"\n',
        """\
Lark error at line 2, column 8: a terminal cannot reference rule 'b'
A: "a" b
       ^""",
    ),
    (
        'item: "a"\n',
        """\
Lark error at line 1, column 1: grammar has no 'start' rule
item: "a"
^""",
    ),
    (
        'start: "x"{4,2}\n',
        """\
Lark error at line 1, column 11: repetition upper bound 2 is below lower bound 4
start: "x"{4,2}
          ^""",
    ),
    (
        'start: "x"~5..3\n',
        """\
Lark error at line 1, column 11: repetition upper bound 3 is below lower bound 5
start: "x"~5..3
          ^""",
    ),
    (
        '%declare X\nstart: "a"\n',
        """\
Lark error at line 1, column 1: directive %declare is not supported
%declare X
^""",
    ),
    (
        '%import common.FOO\nstart: "a"\n',
        """\
Lark error at line 1, column 16: 'FOO' is not in the common library
%import common.FOO
               ^""",
    ),
    (
        "%import common.INT\n%import common.INT\nstart: INT\n",
        """\
Lark error at line 2, column 16: cannot import 'INT': already defined (first on line 1)
%import common.INT
               ^""",
    ),
    (
        'INT: "1"\n%import common (WS, INT)\nstart: INT\n',
        """\
Lark error at line 2, column 21: cannot import 'INT': already defined (first on line 1)
%import common (WS, INT)
                    ^""",
    ),
    (
        '%import lark.INT\nstart: "a"\n',
        """\
Lark error at line 1, column 9: only the common library can be imported
%import lark.INT
        ^""",
    ),
    (
        '%grammar_options {"skip": true}\nstart: "a"\n',
        """\
Lark error at line 1, column 18: unknown grammar option 'skip'
%grammar_options {"skip": true}
                 ^""",
    ),
    (
        '%grammar_options {"allow_initial_skip": tru}\nstart: "a"\n',
        """\
Lark error at line 1, column 41: invalid JSON after %grammar_options: Expecting value
%grammar_options {"allow_initial_skip": tru}
                                        ^""",
    ),
    (
        '%grammar_options [1]\nstart: "a"\n',
        """\
Lark error at line 1, column 18: %grammar_options expects a JSON object
%grammar_options [1]
                 ^""",
    ),
    (
        'start: "abc\n',
        """\
Lark error at line 1, column 8: unterminated string
start: "abc
       ^""",
    ),
    (
        "start: /abc\n",
        """\
Lark error at line 1, column 8: unterminated regex
start: /abc
       ^""",
    ),
    (
        'start: "ab".."z"\n',
        """\
Lark error at line 1, column 8: range endpoints must be exactly one character
start: "ab".."z"
       ^""",
    ),
    (
        'start: "a"i.."z"\n',
        """\
Lark error at line 1, column 11: the i flag is not allowed on range endpoints
start: "a"i.."z"
          ^""",
    ),
    (
        'start: "z".."a"\n',
        """\
Lark error at line 1, column 8: range start 'z' is after its end 'a'
start: "z".."a"
       ^""",
    ),
    (
        'start: "é"i\n',
        """\
Lark error at line 1, column 8: case-insensitive literals support ASCII characters only
start: "é"i
       ^""",
    ),
    (
        'start: A\nA[lazy]: "a"\n',
        """\
Lark error at line 2, column 2: terminals cannot carry rule options
A[lazy]: "a"
 ^""",
    ),
    (
        "start: A\nA: <|tool|>\n",
        """\
Lark error at line 2, column 4: special tokens cannot appear in terminals
A: <|tool|>
   ^""",
    ),
    (
        'start: A\nA: "a" <[1]>\n',
        """\
Lark error at line 2, column 8: special tokens cannot appear in terminals
A: "a" <[1]>
       ^""",
    ),
    (
        'start: a\na[greedy]: "a"\n',
        """\
Lark error at line 2, column 3: unknown rule option 'greedy'
a[greedy]: "a"
  ^""",
    ),
    (
        'start: ("a" "b"\n',
        """\
Lark error at line 1, column 8: unclosed '('
start: ("a" "b"
       ^""",
    ),
    (
        'start: "a" "b")\n',
        """\
Lark error at line 1, column 15: unmatched ')'
start: "a" "b")
              ^""",
    ),
    (
        'start: a\na[suffix="x", stop="y"]: "a"\n',
        """\
Lark error at line 2, column 2: suffix and stop cannot be used together
a[suffix="x", stop="y"]: "a"
 ^""",
    ),
    (
        'start: a\na[stop_capture="m"]: "a"\n',
        """\
Lark error at line 2, column 2: stop_capture requires suffix or stop
a[stop_capture="m"]: "a"
 ^""",
    ),
    (
        'start: a\na[max_tokens=0]: "a"\n',
        """\
Lark error at line 2, column 14: max_tokens must be between 1 and 1,000,000
a[max_tokens=0]: "a"
             ^""",
    ),
    (
        'start: a\na[capture="bad name"]: "a"\n',
        """\
Lark error at line 2, column 11: capture name 'bad name' may contain only letters, digits, '_', '-' and '.'
a[capture="bad name"]: "a"
          ^""",
    ),
    (
        'start: a\na[stop=""]: "a"\n',
        """\
Lark error at line 2, column 8: an empty string stop marker is not accepted
a[stop=""]: "a"
       ^""",
    ),
    (
        'start: a\na[temperature=0.5, lazy]: "a"\n',
        """\
Lark error at line 2, column 2: temperature cannot be combined with lazy
a[temperature=0.5, lazy]: "a"
 ^""",
    ),
    (
        "start: <[5-2000000]>\n",
        """\
Lark error at line 1, column 10: token id range 5-2000000 spans more than 1,000,000 ids
start: <[5-2000000]>
         ^""",
    ),
    (
        "start: <[^*]>\n",
        """\
Lark error at line 1, column 8: the negated wildcard <[^*]> is not allowed
start: <[^*]>
       ^""",
    ),
    (
        "start: /a/m\n",
        """\
Lark error at line 1, column 11: unsupported regex flag 'm' (only 'i' and 's' are supported)
start: /a/m
          ^""",
    ),
    (
        "start: /a(b/\n",
        """\
Lark error at line 1, column 10: invalid regex: missing ')': this group is never closed
start: /a(b/
         ^""",
    ),
    (
        "start: @missing\n",
        """\
Lark error at line 1, column 8: unknown named grammar @missing
start: @missing
       ^""",
    ),
    (
        'start: "a" %json {"type": }\n',
        """\
Lark error at line 1, column 27: invalid JSON after %json: Expecting value
start: "a" %json {"type": }
                          ^""",
    ),
    (
        'start: %lark { item: "x" }\n',
        """\
Lark error at line 1, column 8: %lark grammar has no 'start' rule
start: %lark { item: "x" }
       ^""",
    ),
    (
        'start: %lark { start: "x"\n',
        """\
Lark error at line 1, column 8: unclosed %lark block: expected '}'
start: %lark { start: "x"
       ^""",
    ),
    (
        '%ignore start\nstart: "a"\n',
        """\
Lark error at line 1, column 9: %ignore can only use terminals, strings and regexes, not rule 'start'
%ignore start
        ^""",
    ),
    (
        'start: "a"**\n',
        """\
Lark error at line 1, column 12: repetition operators cannot be stacked; use parentheses
start: "a"**
           ^""",
    ),
    (
        'start: "\\q"\n',
        "Lark error at line 1, column 9: invalid escape '\\q' in string\nstart: \"\\q\"\n        ^",
    ),
    (
        '1abc: "x"\n',
        """\
Lark error at line 1, column 1: expected a rule, a terminal or a directive, found '1'
1abc: "x"
^""",
    ),
    (
        'start: A\nA: %lark { start: "a" }\n',
        """\
Lark error at line 2, column 4: %lark cannot appear in terminals
A: %lark { start: "a" }
   ^""",
    ),
    (
        '%import common.WS\n| "b"\nstart: "a"\n',
        """\
Lark error at line 2, column 1: a line starting with '|' must continue a rule
| "b"
^""",
    ),
    (
        "start: /a\\/b(c/\n",
        "Lark error at line 1, column 13: invalid regex: missing ')': this group is never closed\nstart: /a\\/b(c/\n            ^",
    ),
    (
        'start: "x"{}\n',
        """\
Lark error at line 1, column 11: expected a repetition count in '{}'
start: "x"{}
          ^""",
    ),
    (
        'start: a\na[lazy=true]: "a"\n',
        """\
Lark error at line 2, column 7: lazy takes no value
a[lazy=true]: "a"
      ^""",
    ),
    (
        'A.x: "a"\nstart: A\n',
        """\
Lark error at line 1, column 3: expected an integer priority after '.'
A.x: "a"
  ^""",
    ),
    (
        '%ignore\nstart: "a"\n',
        """\
Lark error at line 1, column 8: %ignore needs an expression
%ignore
       ^""",
    ),
    (
        '%grammar_options {"allow_initial_skip": 1}\nstart: "a"\n',
        """\
Lark error at line 1, column 18: grammar option 'allow_initial_skip' must be true or false
%grammar_options {"allow_initial_skip": 1}
                 ^""",
    ),
    (
        'start: "a" ->\n',
        """\
Lark error at line 1, column 14: expected an alias name after '->'
start: "a" ->
             ^""",
    ),
    (
        'start: a\na[max_chars=-1]: "a"\n',
        """\
Lark error at line 2, column 13: max_chars must be between 0 and 2,147,483,647
a[max_chars=-1]: "a"
            ^""",
    ),
    (
        "start: <[3-1]>\n",
        """\
Lark error at line 1, column 10: token id range 3-1 is reversed
start: <[3-1]>
         ^""",
    ),
    (
        "start: x\nx: %lark {\n  start: item\n}\n",
        """\
Lark error at line 3, column 10: undefined rule 'item'
  start: item
         ^""",
    ),
    (
        'start: "a"\n%json {"type": "string"}\n',
        """\
Lark error at line 2, column 1: %json can only be used inside a rule
%json {"type": "string"}
^""",
    ),
    (
        '_1: "a"\nstart: "b"\n',
        """\
Lark error at line 1, column 1: name '_1' must start with a letter (after any leading '_')
_1: "a"
^""",
    ),
    (
        'start: "a" "\\ud800"\n',
        'Lark error at line 1, column 13: unpaired surrogate in \\u escape\nstart: "a" "\\ud800"\n            ^',
    ),
    (
        'start: a\na[suffix=b]: "a"\nb: "x"\n',
        """\
Lark error at line 2, column 10: suffix marker must be a string, a regex or a terminal name
a[suffix=b]: "a"
         ^""",
    ),
    (
        'start: a\na[suffix=MISSING]: "a"\n',
        """\
Lark error at line 2, column 10: undefined terminal 'MISSING'
a[suffix=MISSING]: "a"
         ^""",
    ),
    (
        'start: r\nr[suffix="!"]: sub\nsub: /[a-z]*/\n',
        """\
Lark error at line 2, column 16: a lazy, suffix or stop rule's body must be a terminal \
expression: it cannot reference rule 'sub' (write it with terminals, strings and regexes)
r[suffix="!"]: sub
               ^""",
    ),
    (
        'start: thing\nthing[lazy]: "a" thing | "b"\n',
        """\
Lark error at line 2, column 18: a lazy, suffix or stop rule's body must be a terminal \
expression: it cannot reference rule 'thing' (write it with terminals, strings and regexes)
thing[lazy]: "a" thing | "b"
                 ^""",
    ),
    (
        "start: <[9999999999999999999999]>\n",
        """\
Lark error at line 1, column 10: token id 9999999999999999999999 is beyond the largest token \
id (2,147,483,647)
start: <[9999999999999999999999]>
         ^""",
    ),
]


@pytest.mark.parametrize(("source", "expected"), BAD_GRAMMARS)
def test_bad_grammar_message(source: str, expected: str) -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark(source)
    assert str(caught.value) == expected


def test_error_carries_line_and_column() -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark('start: "a"\n  item missing')
    assert (caught.value.line, caught.value.column) == (2, 8)
    assert caught.value.source_line == "  item missing"
    assert isinstance(caught.value, RuntimeError)


def test_regex_error_is_located_after_escaped_slashes() -> None:
    # In the pattern a/b/(c the unclosed group is at pattern offset 4; in the source the two
    # escaped slashes take two characters each.
    with pytest.raises(GrammarError) as caught:
        parse_lark("start: /a\\/b\\/(c/")
    assert caught.value.column == 8 + 1 + 6
    assert "invalid regex" in caught.value.message


def test_named_grammar_cycle_shows_the_chain() -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark("start: @a", named_grammars={"a": "start: @b", "b": 'start: "x" @a'})
    assert str(caught.value) == (
        "Lark error at line 1, column 12: in named grammar 'b': "
        "circular named grammar reference: @a -> @b -> @a\n"
        'start: "x" @a\n'
        "           ^"
    )


def test_named_grammar_self_reference() -> None:
    with pytest.raises(GrammarError, match="circular named grammar reference: @a -> @a\n"):
        parse_lark("start: @a", named_grammars={"a": "start: @a"})


def test_error_inside_a_named_grammar_names_it() -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark("start: @status", named_grammars={"status": 'start: "ok" |\nitem missing'})
    assert str(caught.value) == (
        "Lark error at line 2, column 6: in named grammar 'status': expected ':' after rule name\n"
        "item missing\n"
        "     ^"
    )


def test_named_grammar_without_start() -> None:
    with pytest.raises(GrammarError) as caught:
        parse_lark("start: @x", named_grammars={"x": 'item: "a"'})
    assert str(caught.value) == (
        "Lark error at line 1, column 1: in named grammar 'x': grammar has no 'start' rule\n"
        'item: "a"\n'
        "^"
    )


@pytest.mark.parametrize(
    ("named", "message"),
    [
        ({"@a": 'start: "a"'}, "invalid named grammar key '@a'"),
        ({"a b": 'start: "a"'}, "invalid named grammar key 'a b'"),
        ({"a": 42}, "named grammar 'a' must be a Grammar, GrammarIR or Lark source string"),
    ],
)
def test_bad_named_grammar_mapping(named: dict, message: str) -> None:
    with pytest.raises(GrammarError, match=message):
        parse_lark('start: "a"', named_grammars=named)


def test_source_must_be_text() -> None:
    with pytest.raises(GrammarError, match="grammar source must be a str, not bytes"):
        parse_lark(b'start: "a"')  # type: ignore[arg-type]


def test_named_ir_values_are_used_as_given() -> None:
    inner = parse_grammar('%ir 1\n%start start\nrule start = "q"\n')
    grammar = parse_lark("start: @q", named_grammars={"q": inner})
    assert grammar.subgrammar("@q") is inner


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"named_grammars": ["start: 'a'"]}, "named_grammars must be a mapping"),
        ({"vocab": 42}, "vocab must be a gramkiln Vocab or a list of token strings"),
    ],
)
def test_bad_argument_types(arguments: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        parse_lark('start: "a"', **arguments)
