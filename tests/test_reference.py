"""Tests for the reference matcher (gramkiln.testing.ReferenceMatcher), the project's oracle."""

from __future__ import annotations

import re

import pytest
from gramkiln.ir import (
    Bytes,
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
    parse_grammar,
    print_grammar,
)
from gramkiln.ir.automata import build_dfa
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.errors import CompileError, IRError
from gramkiln.testing import ReferenceMatcher, TokenUnit, brute_force_mask


def grammar(text: str, start: str = "start") -> GrammarIR:
    """A grammar from the canonical IR text form, header added."""
    return parse_grammar(f"%ir 1\n%start {start}\n{text}")


def matcher(text: str, **kwargs) -> ReferenceMatcher:  # type: ignore[no-untyped-def]
    return ReferenceMatcher(grammar(text), **kwargs)


def accepted(m: ReferenceMatcher, candidates: list[str | bytes]) -> list[str | bytes]:
    return [c for c in candidates if m.accepts(c)]


# --------------------------------------------------------------------------------------------
# context-free core


def test_terminals_are_not_lexed_greedily() -> None:
    m = matcher("rule start = INT INT\nterm INT = [0-9]+\n")
    assert accepted(m, ["1", "12", "123", "1234", "1 2", "", "a1"]) == ["12", "123", "1234"]
    assert m.is_prefix("1") and m.is_prefix("") and not m.is_prefix("1a")


def test_ambiguous_grammar() -> None:
    m = matcher('rule start = start start | "x" | "xx"\n')
    assert accepted(m, ["", "x", "xx", "xxxxx", "xy"]) == ["x", "xx", "xxxxx"]
    assert m.accepts("x" * 60)


def test_left_and_right_recursion() -> None:
    left = matcher('rule start = start "+" term | term\nrule term = "a" | "(" start ")"\n')
    assert accepted(left, ["a", "a+a", "(a+a)+a", "a+", "+a", "(a", "((a))"]) == [
        "a",
        "a+a",
        "(a+a)+a",
        "((a))",
    ]
    assert left.is_prefix("(a+") and not left.is_prefix("a)")
    right = matcher('rule start = "a" start | "b"\n')
    assert accepted(right, ["b", "ab", "aab", "a", "ba"]) == ["b", "ab", "aab"]


def test_nullable_rules() -> None:
    m = matcher('rule start = opt opt2 "c" opt\nrule opt = () | "a"\nrule opt2 = opt opt\n')
    assert accepted(m, ["c", "ac", "aac", "aaac", "aaaca", "ca", "aaaac"]) == [
        "c",
        "ac",
        "aac",
        "aaac",
        "aaaca",
        "ca",
    ]
    assert matcher("rule start = ()\n").accepts("")
    deep = matcher("rule start = a b\nrule a = b b\nrule b = () | a\n")
    assert deep.accepts("") and not deep.is_prefix("x")


def test_empty_language() -> None:
    m = matcher('rule start = "a" nothing\nrule nothing = []\n')
    assert not m.accepts("") and not m.is_prefix("") and not m.is_prefix("a")
    never = matcher('rule start = "a" start\n')  # no base case: unproductive
    assert not never.is_prefix("") and not never.is_prefix("aaa")
    partial = matcher('rule start = "a" | "b" nothing\nrule nothing = [] | nothing\n')
    assert partial.accepts("a") and not partial.is_prefix("b")


def test_repeat_bounds() -> None:
    def counts(m: ReferenceMatcher) -> list[int]:
        return [k for k in range(8) if m.accepts("a" * k)]

    assert counts(matcher('rule start = "a"{0}\n')) == [0]
    assert counts(matcher('rule start = "a"{2,4}\n')) == [2, 3, 4]
    assert counts(matcher('rule start = "a"{3,}\n')) == [3, 4, 5, 6, 7]
    assert counts(matcher('rule start = ("a" | "aa"){2,3}\n')) == [2, 3, 4, 5, 6]
    assert counts(matcher('term start = "a"{2,4}\n')) == [2, 3, 4]


def test_large_repeat_bounds_stay_cheap() -> None:
    m = matcher('rule start = "ab"{1000,1000000} "c"\n')
    assert m.accepts("ab" * 1000 + "c")
    assert not m.accepts("ab" * 999 + "c")
    assert m.is_prefix("ab" * 1500) and not m.is_prefix("ab" * 10 + "c")


# --------------------------------------------------------------------------------------------
# %ignore


WS_GRAMMAR = "%ignore WS\nrule start = INT INT\nterm INT = [0-9]+\nterm WS = [ ]+\n"


def test_ignore_between_and_after_lexemes_not_inside_or_before() -> None:
    m = matcher(WS_GRAMMAR)
    assert accepted(m, ["12", "1 2", "1   2  ", "12 ", " 12", "1 2 3", "123"]) == [
        "12",
        "1 2",
        "1   2  ",
        "12 ",
        "123",
    ]
    single = matcher("%ignore [ ]\nrule start = INT\nterm INT = [0-9]+\n")
    assert single.accepts("12 ") and not single.accepts("1 2")
    assert not m.is_prefix(" ")


def test_initial_skip_option() -> None:
    m = matcher("%options allow_initial_skip\n" + WS_GRAMMAR)
    assert m.accepts(" 1 2") and m.accepts("  12 ") and m.is_prefix(" ")


def test_ignore_follows_literals_classes_and_embeds_but_not_rules() -> None:
    m = matcher('%ignore " "\nrule start = "a" [b-c] inner\nrule inner = "d" "e"\n')
    assert accepted(m, ["abde", "a b d e ", "a bd e", "ab  de"]) == [
        "abde",
        "a b d e ",
        "a bd e",
        "ab  de",
    ]
    assert not m.accepts(" abde")


def test_subgrammars_have_their_own_ignore() -> None:
    text = (
        '%ignore ","\n'
        'rule start = "[" @inner "]"\n'
        "%subgrammar inner {\n"
        "  %ir 1\n"
        "  %start start\n"
        '  %ignore " "\n'
        '  rule start = "x" "y"\n'
        "}\n"
    )
    m = ReferenceMatcher(grammar(text))
    assert m.accepts("[xy]")
    assert m.accepts("[x y ]")  # the inner ignore inside and after the inner lexemes
    assert m.accepts("[,xy,],")  # the outer ignore after "[" and after the embed
    assert not m.accepts("[x,y]")  # the outer ignore does not reach inside
    assert not m.accepts("[xy] ")  # nor the inner one outside
    assert not m.accepts("[ xy]")  # no initial skip inside the sub-grammar


def test_subgrammar_initial_skip_and_separate_namespaces() -> None:
    text = (
        'rule start = item @inner\nrule item = "a"\n'
        "%subgrammar inner {\n"
        "  %ir 1\n"
        "  %start start\n"
        "  %options allow_initial_skip\n"
        '  %ignore " "\n'
        '  rule start = item\n  rule item = "b"\n'
        "}\n"
    )
    m = ReferenceMatcher(grammar(text))
    assert m.accepts("ab") and m.accepts("a b ") and not m.accepts("aa")


# --------------------------------------------------------------------------------------------
# lazy, suffix, stop


LAZY = 'rule start = "<" name ">" rest\nrule name [lazy] = [a-z]+\nrule rest = [a-z]+\n'


def test_lazy_is_committed_shortest() -> None:
    m = matcher(LAZY)
    assert m.accepts("<a>b")
    assert not m.accepts("<ab>c")
    assert not m.is_prefix("<ab") and m.is_prefix("<a") and m.is_prefix("<a>")


def test_nullable_lazy_matches_only_empty() -> None:
    m = matcher('rule start = foo "x"\nrule foo [lazy] = [a-z]*\n')
    assert m.accepts("x") and not m.accepts("ax") and not m.is_prefix("a")


def test_lazy_rule_is_one_lexeme_for_ignore() -> None:
    m = matcher('%ignore " "\nrule start = head "!"\nrule head [lazy] = "a" "b"\n')
    assert m.accepts("ab!") and m.accepts("ab !") and not m.accepts("a b!")


def test_suffix_and_stop_end_at_the_first_marker() -> None:
    for option in ("suffix", "stop"):
        m = matcher(f'rule start = field "z"\nrule field [{option}=("!")] = [a-z]*\n')
        assert m.accepts("xy!z") and m.accepts("!z")
        assert not m.accepts("xyz")  # the marker is required
        assert not m.accepts("x!y!z")  # the body cannot continue through a marker
        assert not m.is_prefix("x!y")


def test_lazy_head_with_text_and_trigger() -> None:
    m = matcher(
        'rule start = head "{" [0-9] "}"\nrule head [lazy] = TEXT "<tool>"\nterm TEXT = [^]*\n'
    )
    assert m.accepts("hello <tool>{1}") and m.accepts("<tool>{2}")
    assert not m.accepts("a<tool>b<tool>{1}")  # committed at the first trigger
    assert m.is_prefix("hi <to") and not m.is_prefix("<tool>x")


def test_recursive_lazy_body_is_a_clear_error() -> None:
    with pytest.raises(CompileError, match="recursive"):
        matcher('rule start = a\nrule a [lazy] = "x" | "(" b ")"\nrule b = a\n')


# --------------------------------------------------------------------------------------------
# bytes and Unicode


def test_prefixes_inside_utf8_characters() -> None:
    m = matcher('rule start = "é" [^a] "x"\n')
    assert m.is_prefix(b"\xc3") and not m.accepts(b"\xc3")
    assert m.is_prefix("é".encode() + b"\xf0\x9f")  # the start of an emoji
    assert not m.is_prefix("é".encode() + b"\xed\xa0")  # the start of a surrogate
    assert not m.is_prefix("é".encode() + b"\xc0")  # an overlong lead byte
    assert not m.is_prefix("é".encode() + b"\x80")  # a stray continuation byte
    assert m.accepts("é😀x") and not m.accepts("éax")


def test_unicode_classes_and_negation() -> None:
    m = matcher('rule start = "\\"" [^"\\u{5c}]* "\\""\n')
    assert m.accepts('"héllo 世界 😀"')
    assert not m.accepts('"a"b"') and not m.accepts('"a\\"')
    greek = matcher("rule start = [\\u{3b1}-\\u{3b3}]+\n")
    assert greek.accepts("αβγ") and not greek.accepts("δ")
    assert greek.is_prefix(b"\xce") and not greek.is_prefix(b"\xcf")  # U+03C0.. is past γ


def test_bytes_and_case_insensitive_literals() -> None:
    m = matcher('rule start = b"\\xff\\x00" "ok"i\n')
    assert m.accepts(b"\xff\x00OK") and m.accepts(b"\xff\x00oK") and not m.accepts(b"\xffok")


# --------------------------------------------------------------------------------------------
# special tokens and masks


def test_token_sets_match_token_units() -> None:
    m = matcher('rule start = "x" <[5,7-9]> "y"\n')
    assert m.accepts_units([ord("x"), TokenUnit(5), ord("y")])
    assert m.accepts_units([ord("x"), TokenUnit(8, b"zz"), ord("y")])
    assert not m.accepts_units([ord("x"), TokenUnit(6), ord("y")])
    assert not m.accepts("x<5>y")  # a token element never matches text
    negated = matcher('rule start = <[^1-3]> "!"\n')
    assert negated.accepts_units([TokenUnit(0), ord("!")])
    assert not negated.accepts_units([TokenUnit(2), ord("!")])
    wildcard = matcher("rule start = <[*]>+\n")
    assert wildcard.accepts_units([TokenUnit(123456), TokenUnit(0, b"a")])
    assert not wildcard.accepts("a") and not wildcard.accepts_units([])


def test_ordinary_tokens_also_match_their_text() -> None:
    m = matcher('rule start = "ab" "c"\n')
    assert m.accepts_units([TokenUnit(1, b"ab"), TokenUnit(2, b"c")])
    assert m.accepts_units([TokenUnit(1, b"a"), TokenUnit(2, b"bc")])
    assert not m.accepts_units([TokenUnit(1, None), TokenUnit(2, b"c")])  # special: no text
    assert m.is_prefix_units([ord("a")]) and not m.is_prefix_units([TokenUnit(3, b"ac")])


def test_special_token_by_text() -> None:
    ir = grammar('rule start = <"<|tool|>"> "{}"\n')
    m = ReferenceMatcher(ir, special_texts={7: "<|tool|>", 8: "<|end|>"})
    assert m.accepts_units([TokenUnit(7), ord("{"), ord("}")])
    assert not m.accepts_units([TokenUnit(8), ord("{"), ord("}")])
    assert not m.accepts("<|tool|>{}")
    assert not ReferenceMatcher(ir).is_prefix("")  # unknown special token: matches nothing


def test_lazy_rule_with_token_trigger() -> None:
    m = matcher('rule start = head "x"\nrule head [lazy] = TEXT <[9]>\nterm TEXT = [^]*\n')
    assert m.accepts_units([ord("a"), ord("b"), TokenUnit(9), ord("x")])
    assert not m.accepts_units([ord("a"), TokenUnit(9), TokenUnit(9), ord("x")])


def test_allowed_tokens_brute_force() -> None:
    ir = grammar('rule start = "x" <[5,7-9]> "y"\n')
    vocab = [b"x", b"y", b"", b"xy", b"z", b"t", b"t", b"t", b"t", b"t"]
    m = ReferenceMatcher(ir)
    start_mask = m.allowed_tokens([], vocab, special_ids={5, 6}, eos_ids=[4])
    assert [i for i, ok in enumerate(start_mask) if ok] == [0]
    after_x = m.allowed_tokens(b"x", vocab, special_ids={5, 6}, eos_ids=[4])
    assert [i for i, ok in enumerate(after_x) if ok] == [5, 7, 8, 9]
    done = m.allowed_tokens([ord("x"), TokenUnit(8, b"t"), ord("y")], vocab, eos_ids=[4])
    assert [i for i, ok in enumerate(done) if ok] == [4]  # only EOS once accepted
    assert brute_force_mask(ir, b"x", vocab, {5, 6}, [4]) == after_x


def test_allowed_tokens_agree_with_is_prefix() -> None:
    m = matcher('%ignore [ ]\nrule start = INT ("," INT)*\nterm INT = [0-9]+\n')
    vocab = [b"1", b"12", b",", b", ", b"1,", b" ", b"a", b",,", "é".encode(), b"", b"2 3"]
    for prefix in [b"", b"1", b"1 ", b"1,", b"1, 2"]:
        mask = m.allowed_tokens(prefix, vocab, eos_ids=[])
        expected = [bool(token) and m.is_prefix(prefix + token) for token in vocab]
        assert mask == expected, prefix


def test_empty_text_tokens_need_a_token_element() -> None:
    vocab = [b"a", b""]
    assert matcher('rule start = "a"*\n').allowed_tokens(b"", vocab) == [True, False]
    assert matcher("rule start = <[1]>\n").allowed_tokens(b"", vocab) == [False, True]


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs_give_clear_errors() -> None:
    m = matcher('rule start = "a"\n')
    with pytest.raises(TypeError, match="unit"):
        m.accepts_units([1.5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="out of range"):
        m.is_prefix_units([256])
    with pytest.raises(ValueError, match="non-negative"):
        m.accepts_units([TokenUnit(-1)])
    with pytest.raises(ValueError, match="surrogate"):
        m.accepts("\ud800")
    with pytest.raises(TypeError, match="GrammarIR"):
        ReferenceMatcher("start: 'a'")  # type: ignore[arg-type]
    with pytest.raises(IRError):
        ReferenceMatcher(GrammarIR(rules=(Rule(name="other", body=Literal(text="a")),)))
    with pytest.raises(CompileError, match="max_chars"):
        ReferenceMatcher(
            GrammarIR(
                rules=(
                    Rule(name="start", body=Literal(text="a"), options=RuleOptions(max_chars=3)),
                )
            )
        )


@pytest.mark.parametrize(
    "options, body, ends_without_marker",
    [
        ('suffix=">"', "/[a-z]*/", True),
        ('stop=">"', "/[a-z]*/", True),
        ("lazy", "/[a-z]*>/", False),
    ],
)
def test_max_chars_on_lexeme_like_rules_is_honoured_not_ignored(
    options: str, body: str, ends_without_marker: bool
) -> None:
    # A budget decides where such a rule ends ("the first boundary wins"); the reference
    # matcher does not model budgets, so Grammar.accepts answers with the byte runtime.
    grammar = Grammar.from_lark(f'start: r "!"\nr[max_chars=2, {options}]: {body}\n')
    # suffix / stop: the spent budget ends the rule where its body can end ("aa"); a lazy
    # rule whose body cannot end there goes on to its earliest end ("aaaa>").
    assert grammar.accepts("aa!") == ends_without_marker
    assert grammar.accepts("aaaa>!") == (not ends_without_marker)
    assert grammar.accepts("a>!")


def test_oversized_lexeme_is_a_compile_error() -> None:
    # Automata are built when an input first reaches the lexeme.
    m = matcher('term start = "a"{0,5000}\n', max_nfa_states=1000)
    with pytest.raises(CompileError, match="max_nfa_states"):
        m.accepts("a")


# --------------------------------------------------------------------------------------------
# cross-checks against independent implementations

ALPHABET = "ab\u00e9"
leaf_exprs = st.sampled_from(
    ['"a"', '"ab"', '"b"i', "[a-b]", "[^a]", "()", '"é"', "[\\u{e9}-\\u{ff}]"]
)


@st.composite
def regular_rule_bodies(draw: st.DrawFn, depth: int = 3) -> str:
    """A rule body in the canonical text form that is a plain regular expression."""
    if depth == 0 or draw(st.booleans()):
        return draw(leaf_exprs)
    kind = draw(st.sampled_from(["seq", "choice", "star", "bounded"]))
    if kind == "seq":
        items = draw(st.lists(regular_rule_bodies(depth - 1), min_size=2, max_size=3))
        return "(" + " ".join(items) + ")"
    if kind == "choice":
        items = draw(st.lists(regular_rule_bodies(depth - 1), min_size=2, max_size=3))
        return "(" + " | ".join(items) + ")"
    inner = draw(regular_rule_bodies(depth - 1))
    if kind == "star":
        return f"({inner})*"
    lo = draw(st.integers(0, 2))
    return f"({inner}){{{lo},{lo + draw(st.integers(0, 2))}}}"


@given(regular_rule_bodies(), st.lists(st.binary(max_size=5), min_size=4, max_size=10), st.data())
def test_rule_and_terminal_forms_agree_with_build_dfa(body: str, blobs, data) -> None:  # type: ignore[no-untyped-def]
    # The same expression as a CFG rule (Repeat/Choice become helper rules) and as one
    # terminal lexeme must agree with each other and with the independent byte DFA.
    as_rule = matcher(f"rule start = {body}\n")
    as_term = matcher(f"term start = {body}\n")
    dfa = build_dfa(grammar(f"term start = {body}\n").rule("start").body)
    texts = data.draw(st.lists(st.text(alphabet=ALPHABET + "B", max_size=5), max_size=8))
    for candidate in [t.encode() for t in texts] + list(blobs):
        expected = dfa.matches(candidate)
        expected_prefix = dfa.run(dfa.start, candidate) != -1
        assert as_rule.accepts(candidate) == expected, candidate
        assert as_term.accepts(candidate) == expected, candidate
        assert as_rule.is_prefix(candidate) == expected_prefix, candidate
        assert as_term.is_prefix(candidate) == expected_prefix, candidate


@given(regular_rule_bodies(), st.lists(st.text(alphabet=ALPHABET, max_size=5), max_size=8))
def test_lazy_rules_agree_with_the_lazy_dfa(body: str, texts: list[str]) -> None:
    m = matcher(f'rule start = head "!"\nrule head [lazy] = {body}\n')
    lazy = build_dfa(grammar(f"term start = {body}\n").rule("start").body, lazy=True)
    for text in texts:
        data = text.encode()
        assert m.accepts(data + b"!") == lazy.matches(data), text


def _to_python_regex(body: str) -> str:
    """Translate the tiny canonical-text subset used above into a Python regex."""
    out = body.replace("()", "(?:)").replace("(", "(?:").replace("(?:?:)", "(?:)")
    out = out.replace('"b"i', "[bB]").replace('"', "").replace(" ", "")
    return out.replace("\\u{e9}", "\u00e9").replace("\\u{ff}", "\u00ff")


@given(regular_rule_bodies(), st.lists(st.text(alphabet=ALPHABET + "B", max_size=5), max_size=8))
def test_rules_agree_with_python_re(body: str, texts: list[str]) -> None:
    m = matcher(f"rule start = {body}\n")
    pattern = re.compile(_to_python_regex(body), re.DOTALL)
    for text in texts:
        assert m.accepts(text) == bool(pattern.fullmatch(text)), (body, text)


@given(st.lists(st.sampled_from(["1", "2", " ", ",", "é"]), max_size=8))
def test_every_prefix_of_an_accepted_string_is_a_prefix(pieces: list[str]) -> None:
    m = matcher('%ignore [ ]\nrule start = INT ("," INT)* | "é"\nterm INT = [0-9]+\n')
    data = "".join(pieces).encode()
    if m.accepts(data):
        assert all(m.is_prefix(data[:i]) for i in range(len(data) + 1))
    if not m.is_prefix(data):
        assert not m.accepts(data) and not m.is_prefix(data + b"1")


def test_a_few_hundred_rules_and_a_long_input() -> None:
    # A chain of 300 rules around a JSON-like list: exercises many predictions per position.
    rules = "".join(f'rule r{i} = r{i + 1} | "<{i}>" r{i + 1}\n' for i in range(300))
    text = (
        "%ignore [ ]\n"
        'rule start = "[" (r0 ("," r0)*)? "]"\n'
        + rules
        + 'rule r300 = STR | INT\nterm STR = "\\"" [^"]* "\\""\nterm INT = [0-9]+\n'
    )
    m = matcher(text)
    items = ", ".join('"héllo wörld"' if i % 2 else str(i) for i in range(200))
    document = f"[{items}]"
    assert len(document.encode()) > 2000
    assert m.accepts(document)
    assert m.is_prefix(document[:-1])
    assert m.accepts('[<0><7>"a"]') and not m.accepts('[<7><0>"a"]')


def test_grammar_ir_built_by_hand() -> None:
    ir = GrammarIR(
        rules=(
            Rule(name="start", body=Seq(items=(Literal(text="a"), CharClass.of([(0x30, 0x39)])))),
        )
    )
    assert ReferenceMatcher(ir).accepts("a5") and not ReferenceMatcher(ir).accepts("a")


# --------------------------------------------------------------------------------------------
# a second, independent decider: least fixpoint over the spans of one input


class SpanDecider:
    """Decides membership of one byte string with a different algorithm than the oracle.

    It evaluates the IR directly over spans ``data[i:j]`` (no CFG translation, no automata):
    rule spans are a least fixpoint, ``%ignore`` is woven on the fly after each lexeme, lazy
    rules are "body matches and no shorter span does". Only for small inputs and grammars.
    """

    def __init__(self, ir: GrammarIR, data: bytes) -> None:
        self.data = data
        self.scopes: dict[int, tuple[GrammarIR, int | None]] = {}
        self._add_scope(ir, None)
        self.root = id(ir)
        self.table: dict[tuple[int, str], set[tuple[int, int]]] = {}
        self.memo: dict[tuple, bool] = {}
        self._fixpoint()

    def _add_scope(self, grammar: GrammarIR, parent: int | None) -> None:
        self.scopes[id(grammar)] = (grammar, parent)
        for sub in grammar.subgrammars:
            self._add_scope(sub.grammar, id(grammar))

    def accepts(self) -> bool:
        return self.entry(self.root, 0, len(self.data))

    def _fixpoint(self) -> None:
        n = len(self.data)
        changed = True
        while changed:
            changed = False
            self.memo.clear()
            for scope, (grammar, _) in self.scopes.items():
                for rule in grammar.rules:
                    if rule.terminal or self._lexeme_like(rule):
                        continue
                    spans = self.table.setdefault((scope, rule.name), set())
                    for i in range(n + 1):
                        for j in range(i, n + 1):
                            if (i, j) not in spans and self.derives(rule.body, i, j, scope, True):
                                spans.add((i, j))
                                changed = True

    @staticmethod
    def _lexeme_like(rule: Rule) -> bool:
        o = rule.options
        return o.lazy or o.suffix is not None or o.stop is not None

    def _rule(self, scope: int, name: str) -> Rule:
        return self.scopes[scope][0].rule(name)

    def entry(self, scope: int, i: int, j: int) -> bool:
        grammar = self.scopes[scope][0]
        start = Ref(name=grammar.start)
        if self.derives(start, i, j, scope, True):
            return True
        skip = grammar.options.allow_initial_skip
        return skip and any(
            self.ignored(scope, i, k) and self.derives(start, k, j, scope, True)
            for k in range(i + 1, j + 1)
        )

    def ignored(self, scope: int, i: int, j: int) -> bool:
        """data[i:j] is zero or more pieces of the scope's ignore content."""
        if i == j:
            return True
        ignore = self.scopes[scope][0].ignore
        return any(
            any(self.derives(expr, i, k, scope, False) for expr in ignore)
            and self.ignored(scope, k, j)
            for k in range(i + 1, j + 1)
        )

    def lexeme_then_ignore(self, scope: int, i: int, j: int, lexeme) -> bool:  # type: ignore[no-untyped-def]
        return any(lexeme(k) and self.ignored(scope, k, j) for k in range(i, j + 1))

    def derives(self, expr, i: int, j: int, scope: int, woven: bool) -> bool:  # type: ignore[no-untyped-def]
        key = (id(expr), i, j, scope, woven)
        if key not in self.memo:
            self.memo[key] = False  # cycles through empty spans are least-fixpoint False
            self.memo[key] = self._derives(expr, i, j, scope, woven)
        return self.memo[key]

    def _leaf(self, expr, i: int, j: int) -> bool:  # type: ignore[no-untyped-def]
        piece = self.data[i:j]
        if isinstance(expr, Literal):
            text = expr.text.encode()
            return piece.lower() == text.lower() if expr.case_insensitive else piece == text
        if isinstance(expr, CharClass):
            try:
                chars = piece.decode("utf-8")
            except UnicodeDecodeError:
                return False
            return len(chars) == 1 and any(
                lo <= ord(chars) <= hi for lo, hi in expr.positive_ranges()
            )
        return piece == expr.data  # Bytes

    def _derives(self, expr, i: int, j: int, scope: int, woven: bool) -> bool:  # type: ignore[no-untyped-def]
        if isinstance(expr, Empty):
            return i == j
        if isinstance(expr, (Literal, Bytes, CharClass)):
            if (isinstance(expr, Literal) and not expr.text) or (
                isinstance(expr, Bytes) and not expr.data
            ):
                return i == j  # an empty literal is the empty string, not a lexeme
            if not woven:
                return self._leaf(expr, i, j)
            return self.lexeme_then_ignore(scope, i, j, lambda k: self._leaf(expr, i, k))
        if isinstance(expr, Seq):
            return self._seq(expr.items, 0, i, j, scope, woven)
        if isinstance(expr, Choice):
            return any(self.derives(alt, i, j, scope, woven) for alt in expr.alternatives)
        if isinstance(expr, Repeat):
            return self._repeat(expr, expr.min, expr.max, i, j, scope, woven)
        if isinstance(expr, Ref):
            rule = self._rule(scope, expr.name)
            if rule.terminal:
                if not woven:
                    return self.derives(rule.body, i, j, scope, False)
                return self.lexeme_then_ignore(
                    scope, i, j, lambda k: self.derives(rule.body, i, k, scope, False)
                )
            if self._lexeme_like(rule):
                return self.lexeme_then_ignore(scope, i, j, lambda k: self._lazy(rule, i, k, scope))
            if not woven:
                return self.derives(rule.body, i, j, scope, False)
            return (i, j) in self.table.get((scope, rule.name), set())
        if isinstance(expr, Embed):
            sub = self._find_sub(scope, expr.name)
            return self.lexeme_then_ignore(scope, i, j, lambda k: self.entry(sub, i, k))
        return False  # token elements never match text

    def _find_sub(self, scope: int, name: str) -> int:
        current: int | None = scope
        while current is not None:
            grammar, parent = self.scopes[current]
            for sub in grammar.subgrammars:
                if sub.name == name:
                    return id(sub.grammar)
            current = parent
        raise KeyError(name)

    def _lazy(self, rule: Rule, i: int, j: int, scope: int) -> bool:
        marker = rule.options.suffix if rule.options.suffix is not None else rule.options.stop
        body = rule.body if marker is None else Seq(items=(rule.body, marker))
        return self.derives(body, i, j, scope, False) and not any(
            self.derives(body, i, k, scope, False) for k in range(i, j)
        )

    def _seq(self, items, index: int, i: int, j: int, scope: int, woven: bool) -> bool:  # type: ignore[no-untyped-def]
        if index == len(items):
            return i == j
        return any(
            self.derives(items[index], i, k, scope, woven)
            and self._seq(items, index + 1, k, j, scope, woven)
            for k in range(i, j + 1)
        )

    def _repeat(self, expr, lo: int, hi, i: int, j: int, scope: int, woven: bool) -> bool:  # type: ignore[no-untyped-def]
        if hi == 0:
            return i == j
        if i == j:
            return lo == 0 or self.derives(expr.item, i, i, scope, woven)
        # Peel one non-empty copy; empty copies can pad up to the minimum when the item is
        # nullable, which the i == j case accounts for.
        return any(
            self.derives(expr.item, i, k, scope, woven)
            and self._repeat(
                expr, max(lo - 1, 0), None if hi is None else hi - 1, k, j, scope, woven
            )
            for k in range(i + 1, j + 1)
        )


@given(st.data())
def test_random_grammars_agree_with_the_span_decider(data: st.DataObject) -> None:
    from gramkiln.testing import strategies

    ir = data.draw(strategies.grammars(subgrammars=True))
    oracle = ReferenceMatcher(ir)
    texts = data.draw(st.lists(strategies.probe_strings(ir), min_size=3, max_size=8))
    for text in texts:
        raw = text.encode()[:9]
        expected = SpanDecider(ir, raw).accepts()
        assert oracle.accepts(raw) == expected, (raw, print_grammar(ir))
        if expected:
            assert all(oracle.is_prefix(raw[:end]) for end in range(len(raw) + 1))


def test_masks_along_equal_allowed_tokens_at_every_position() -> None:
    m = matcher('%ignore [ ]\nrule start = "x" <[5,7-9]> INT\nterm INT = [0-9]+\n')
    vocab = [b"x", b"1", b"12", b" ", b"", b"t", b"x1", b"t", b"t", b"t", b" 3"]
    units = [ord("x"), ord(" "), TokenUnit(8, b"t"), ord("1"), ord(" "), ord("a"), ord("2")]
    masks = m.masks_along(units, vocab, special_ids={5}, eos_ids=[4])
    assert len(masks) == len(units) + 1
    for end, mask in enumerate(masks):
        assert mask == m.allowed_tokens(units[:end], vocab, special_ids={5}, eos_ids=[4]), end
    assert masks[4][4] and not any(masks[6]) and not any(masks[7])
    with pytest.raises(TypeError, match="not bytes"):
        m.allowed_tokens(b"", ["x"])  # type: ignore[list-item]


def test_absurd_nesting_is_a_clear_error() -> None:
    expr = Literal(text="a")
    for _ in range(3000):
        expr = Seq(items=(expr, Literal(text="b")))
    with pytest.raises(CompileError, match="too deep"):
        ReferenceMatcher(GrammarIR(rules=(Rule(name="start", body=expr),)))


def test_nested_subgrammars_resolve_in_their_own_scope() -> None:
    text = (
        'rule start = "<" @a ">"\n'
        "%subgrammar a {\n"
        "  %ir 1\n"
        "  %start start\n"
        '  %ignore "_"\n'
        '  rule start = "a" @b "a"\n'
        "  %subgrammar b {\n"
        "    %ir 1\n"
        "    %start start\n"
        '    rule start = "b"+\n'
        "  }\n"
        "}\n"
    )
    m = ReferenceMatcher(grammar(text))
    assert m.accepts("<abba>") and m.accepts("<a_bbb_a_>")
    assert not m.accepts("<ab_ba>")  # the middle grammar's ignore does not reach inside b
    assert not m.accepts("<a>") and m.is_prefix("<ab")


MASK_VOCAB = [b"a", b"b", b"(", b")", b",", b" ", b"ab", b"(a", b"),", b"", b"a)", b"<s>", b"</s>"]
MASK_SPECIALS = {11}
MASK_EOS = [12]


def _units_for(token_id: int) -> TokenUnit:
    text = MASK_VOCAB[token_id]
    return TokenUnit(token_id, None if token_id in MASK_SPECIALS else text)


def _assert_mask_matches_direct_checks(oracle: ReferenceMatcher, prefix: list) -> None:  # type: ignore[type-arg]
    mask = oracle.allowed_tokens(prefix, MASK_VOCAB, MASK_SPECIALS, MASK_EOS)
    for token_id, allowed in enumerate(mask):
        if token_id in MASK_EOS:
            expected = oracle.accepts_units(prefix)
        else:
            # A text-less unit (special or empty token) can only be read as a token.
            expected = oracle.is_prefix_units(prefix + [_units_for(token_id)])
        assert allowed == expected, (prefix, token_id)


@given(st.data())
def test_random_masks_equal_direct_prefix_checks(data: st.DataObject) -> None:
    from gramkiln.testing import strategies

    ir = data.draw(strategies.grammars(subgrammars=True))
    oracle = ReferenceMatcher(ir)
    text = data.draw(strategies.probe_strings(ir)).encode()[:8]
    cut = data.draw(st.integers(0, len(text)))
    _assert_mask_matches_direct_checks(oracle, list(text[:cut]))


@given(st.lists(st.sampled_from(range(len(MASK_VOCAB))), max_size=6))
def test_masks_with_token_elements_equal_direct_prefix_checks(token_ids: list[int]) -> None:
    oracle = matcher(
        '%ignore " "\nrule start = (item <[6-8,11]>)* item <[12]>?\n'
        'rule item = "a"+ | "(" start ")" | <"<s>">\n',
        special_texts={11: "<s>"},
    )
    prefix = [_units_for(token_id) for token_id in token_ids]
    if oracle.is_prefix_units(prefix):
        _assert_mask_matches_direct_checks(oracle, prefix)


@given(st.data())
def test_viable_prefixes_never_dead_end_and_extensions_are_found(data: st.DataObject) -> None:
    from gramkiln.testing import strategies

    ir = data.draw(strategies.grammars(subgrammars=True))
    oracle = ReferenceMatcher(ir)
    text = data.draw(strategies.probe_strings(ir)).encode()[:6]
    for end in range(len(text) + 1):
        prefix = text[:end]
        if not oracle.is_prefix(prefix):
            # Prefix-closed: nothing longer can be viable either.
            assert not oracle.is_prefix(text[: end + 1]) and not oracle.accepts(text)
            break
        # No dead ends: a viable prefix is accepted or some next byte keeps it viable.
        assert oracle.accepts(prefix) or any(
            oracle.is_prefix(prefix + bytes((byte,))) for byte in range(256)
        ), prefix
    # Any accepted extension found by search proves the prefix viable.
    extensions = ["", *strategies.ALPHABET, " ", "a)", "),", "(a", "ab"]
    for extension in extensions:
        if oracle.accepts(text + extension.encode()):
            assert oracle.is_prefix(text)


@settings(max_examples=80, deadline=None)
@given(regular_rule_bodies())
def test_lexeme_facts_agree_with_the_automaton(body: str) -> None:
    from gramkiln.testing._nfa import DEAD, ExpressionResolver, LexemeAutomaton

    expr = grammar(f"term start = {body}\n").rule("start").body
    for lazy in (False, True):
        lexeme = LexemeAutomaton(expr, ExpressionResolver({}, {}), lazy, 100_000)
        assert lexeme.productive == (lexeme.dfa.start != DEAD)
        assert lexeme.nullable == lexeme.dfa.nullable


def test_describe_lists_the_translated_grammar() -> None:
    text = matcher('%ignore " "\nrule start = INT ("," INT)?\nterm INT = [0-9]+\n').describe()
    assert "start#1 -> 'INT' '%ignore'" in text
    assert "'\",\"' '%ignore' 'INT' '%ignore'" in text
    assert "(empty language)" in matcher("rule start = []\n").describe()


def test_utf8_prefix_intervals_are_exact() -> None:
    # Exhaustive: the interval of code points (surrogates included, as documented) whose
    # encoding starts with every 1- and 2-byte prefix, and 3-byte prefixes continuing a
    # 3- or 4-byte lead with each boundary byte of the continuation ranges.
    from gramkiln.testing._nfa import possible_code_points

    truth: dict[bytes, tuple[int, int]] = {}
    for cp in range(0x110000):
        encoded = chr(cp).encode("utf-8", "surrogatepass")
        for length in range(1, min(len(encoded), 3) + 1):
            prefix = encoded[:length]
            lo, hi = truth.get(prefix, (cp, cp))
            truth[prefix] = (min(lo, cp), max(hi, cp))
    for first in range(256):
        assert possible_code_points(bytes((first,))) == truth.get(bytes((first,)))
        for second in range(256):
            prefix = bytes((first, second))
            assert possible_code_points(prefix) == truth.get(prefix), prefix
    for prefix in [p for p in truth if len(p) == 2 and p[0] >= 0xE0]:
        for third in (0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF):
            longer = prefix + bytes((third,))
            assert possible_code_points(longer) == truth.get(longer), longer


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_queries_through_the_kept_parse_equal_fresh_parses(data: st.DataObject) -> None:
    """A matcher keeps its last live parse and answers the next query from the prefix the two
    share: prefixes of several strings in any order (longer, shorter, another string, past a
    dead end) give what a fresh matcher parsing from scratch gives."""
    from gramkiln.testing.strategies import grammars, mutated_strings

    ir = data.draw(grammars())
    texts = [data.draw(mutated_strings(ir)).encode("utf-8") for _ in range(2)]
    kept = ReferenceMatcher(ir)
    tokens = [b"a", b"b", b"(", b")", b",", b" ", b"ab", b"a(", b"),"]
    for _ in range(8):
        text = texts[data.draw(st.integers(0, 1))]
        prefix = text[: data.draw(st.integers(0, len(text)))]
        fresh = ReferenceMatcher(ir)
        assert kept.is_prefix(prefix) == fresh.is_prefix(prefix)
        assert kept.accepts(prefix) == fresh.accepts(prefix)
        assert kept.allowed_tokens(prefix, tokens) == fresh.allowed_tokens(prefix, tokens)
