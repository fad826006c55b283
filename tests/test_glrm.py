"""GLRM front end (seed 003): every example of the seed, the syntax, binding and linking,
errors by exact text, and masks against brute force.

Membership expectations marked "as GLRMask 0.5.0" were checked against that engine for the
forms its syntax shares; gramkiln's semantics differ on purpose only where GLRMask lexes
greedily (``nt a = D D;`` with ``t D = /[0-9]+/;`` accepts ``12`` here, DESIGN.md section 2).
"""

from __future__ import annotations

import pytest
from gramkiln.runtime.compiled import bitmask_to_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import (
    CompiledGrammar,
    CompileError,
    Grammar,
    GrammarError,
    Vocab,
    VocabError,
    allocate_token_bitmask,
)
from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.vocabularies import substring_vocab

SEED_VALUE = r"""glrm 1;
start value;

t WS = /[ \t\r\n]+/;
ignore WS;

t NUMBER = /-?(0|[1-9][0-9]*)/;
nt value = NUMBER | "null";
"""

SEED_TOOL_CALL = """glrm 1;
start message;
extern token TOOL_CALL;
nt message = TOOL_CALL call;
nt call = "lookup()";
"""

SEED_FA = """glrm 1;
start word;
t WORD = fa {
    start begin;
    accept done;
    begin -> middle: "a";
    middle -> done: "b";
};
nt word = WORD;
"""

PARENT = 'glrm 1; start doc; extern grammar payload; nt doc = "<" payload ">";'


def runtime_accepts(compiled: CompiledGrammar, text: str) -> bool:
    matcher = compiled.matcher()
    return bool(matcher.accept_string(text) and matcher.is_accepting())


def check(source: str, accepted: list[str], rejected: list[str]) -> Grammar:
    """Membership by the reference matcher and by the compiled runtime."""
    grammar = Grammar.from_glrm(source)
    compiled = grammar.compile()
    for text in accepted:
        assert grammar.accepts(text), text
        assert runtime_accepts(compiled, text), text
    for text in rejected:
        assert not grammar.accepts(text), text
        assert not runtime_accepts(compiled, text), text
    return grammar


# -- the seed's examples -----------------------------------------------------------------------


def test_seed_value_grammar() -> None:
    check(
        SEED_VALUE,
        accepted=["1", "-12", "0", "null", " null", "null \n", "\t-7 "],
        rejected=["", "01", "nul", "- 1", "1 2", "nullnull"],
    )


def test_seed_explicit_eps() -> None:
    check(
        'glrm 1; start a; nt a = "a" | eps;',
        accepted=["", "a"],
        rejected=["aa", " "],
    )


def test_seed_regex_terminals_match_whole_lexemes() -> None:
    # Full-match semantics: /ab|a/ is the lexeme "ab" or "a", never a prefix of a longer one.
    check(
        "glrm 1; start a; t A = /ab|a/; t B = /bc|c/; nt a = A B;",
        accepted=["abc", "ac", "abbc"],
        rejected=["ab", "abcc", "a"],
    )


def test_seed_extern_grammar_bound_to_a_source_grammar() -> None:
    parent = Grammar.from_glrm(PARENT)
    assert parent.externs == {"payload": "grammar"}
    payload = Grammar.from_json_schema({"type": "object", "properties": {"n": {"type": "integer"}}})
    document = parent.bind("payload", payload).compile(Vocab.byte_level())
    assert runtime_accepts(document, '<{"n": 3}>')
    assert runtime_accepts(document, "<{}>")
    assert not runtime_accepts(document, '<{"n": "x"}>')
    assert not runtime_accepts(document, '{"n": 3}')
    # Grammars are immutable: the parent still waits for its payload.
    assert parent.externs == {"payload": "grammar"}


def test_seed_extern_grammar_bound_to_a_compiled_child() -> None:
    vocab = Vocab.byte_level()
    child = Grammar.from_json_schema({"type": "integer"}).compile(vocab)
    parent = Grammar.from_glrm(PARENT)
    unlinked = parent.compile_unlinked(vocab)
    assert unlinked.externs == {"payload": "grammar"}
    linked = unlinked.bind("payload", child).link()
    assert runtime_accepts(linked, "<42>")
    assert not runtime_accepts(linked, "<4.5>")
    # The child can come from a saved artifact: its IR travels in it.
    reloaded = CompiledGrammar.load(child.to_bytes(), vocab=vocab)
    assert runtime_accepts(unlinked.bind(payload=reloaded).link(), "<-1>")


def test_seed_inline_subgrammar_behaves_like_a_bound_one() -> None:
    inline = check(
        'glrm 1; start a; g inner = { start value; nt value = "null"; }; nt a = "[" inner "]";',
        accepted=["[null]"],
        rejected=["[]", "[nul]", "null"],
    )
    external = Grammar.from_glrm(
        'glrm 1; start a; extern grammar inner; nt a = "[" inner "]";'
    ).bind("inner", Grammar.from_glrm('glrm 1; start value; nt value = "null";'))
    for text in ["[null]", "[]", "[nul]", "null"]:
        assert inline.accepts(text) == external.accepts(text), text


def test_seed_special_token_bound_outside_the_grammar() -> None:
    tokens = [bytes([b]) for b in range(256)] + [b"<tool_call>", b""]
    vocab = Vocab(tokens, eos_ids=[257])
    tool_call_token_id = 256
    grammar = Grammar.from_glrm(SEED_TOOL_CALL)
    assert grammar.externs == {"TOOL_CALL": "token"}
    constraint = grammar.bind("TOOL_CALL", vocab.token(tool_call_token_id)).compile(vocab)
    matcher = constraint.matcher()
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    # Only the bound token starts the message: not its text spelled in bytes.
    assert bitmask_to_ids(bitmask[0], vocab.vocab_size) == [tool_call_token_id]
    assert matcher.accept_token(tool_call_token_id)
    assert matcher.accept_string("lookup()")
    assert matcher.is_accepting()
    # A plain id binds the same way.
    by_id = grammar.bind(TOOL_CALL=tool_call_token_id).compile(vocab).matcher()
    assert by_id.accept_token(tool_call_token_id)


def test_seed_direct_finite_automaton() -> None:
    grammar = check(SEED_FA, accepted=["ab"], rejected=["a", "b", "abab", ""])
    assert 'term WORD = "ab"' in str(grammar)


def test_seed_end_tokens_only_where_the_body_accepts() -> None:
    vocab = Vocab.byte_level()
    eos_id = vocab.eos_ids[0]
    constraint = Grammar.from_glrm(SEED_VALUE).compile(vocab, end_tokens=[eos_id])
    matcher = constraint.matcher()
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    assert eos_id not in bitmask_to_ids(bitmask[0], vocab.vocab_size)
    assert matcher.accept_string("nul")
    matcher.fill_next_token_bitmask(bitmask, 0)
    assert eos_id not in bitmask_to_ids(bitmask[0], vocab.vocab_size)
    assert matcher.accept_string("l")
    matcher.fill_next_token_bitmask(bitmask, 0)
    assert eos_id in bitmask_to_ids(bitmask[0], vocab.vocab_size)
    assert matcher.accept_token(eos_id)
    assert matcher.is_terminated()


# -- syntax --------------------------------------------------------------------------------


def test_operators_counts_comments_and_quotes() -> None:
    check(
        """glrm 1;
        // a line comment
        start a; /* a block
        comment */
        nt a = ("a" | 'b')* "c"+ "d"? "e"{2} "f"{1,2} "g"{0,};
        """,
        accepted=["ceeff", "abccdeef", "ceefggg"],
        rejected=["cef", "cdeeeff", "eeff", "ceefff"],
    )


def test_string_escapes() -> None:
    check(
        r"""glrm 1; start a; nt a = "\n\t\\\"\x41\u00e9\u{1F600}" '\'';""",
        accepted=["\n\t\\\"A\u00e9\U0001f600'"],
        rejected=["ntA"],
    )


def test_regex_flags_and_slashes() -> None:
    check(
        r"glrm 1; start a; t A = /x+/i; t B = /[\/]\/y/; nt a = A B;",
        accepted=["xX//y", "X//y"],
        rejected=["x/y", "xx"],
    )


def test_terminals_keep_ignored_text_out_nonterminals_take_it_between_items() -> None:
    # As GLRMask 0.5.0: "x y" is not the terminal "x" "y", but is the nonterminal's sequence.
    check(
        'glrm 1; start a; t WS = / +/; ignore WS; t A = "x" "y"; nt a = A A;',
        accepted=["xyxy", "xy xy", " xyxy", "xyxy "],
        rejected=["x yxy", "xy x y"],
    )
    check(
        'glrm 1; start a; t WS = / +/; ignore WS; nt a = "x" "y";',
        accepted=["xy", "x y", " xy", "xy "],
        rejected=["x  z"],
    )


def test_terminals_compose_other_terminals() -> None:
    check(
        "glrm 1; start a; t D = /[0-9]+/; t I = D D; nt a = I;",
        accepted=["12", "123"],
        rejected=["1", ""],
    )


def test_lexing_is_not_greedy() -> None:
    # GLRMask 0.5.0 rejects "12" here (it lexes "12" as one D); gramkiln's semantics are
    # exact context-free membership.
    check(
        "glrm 1; start a; nt a = D D; t D = /[0-9]+/;",
        accepted=["12", "123"],
        rejected=["1"],
    )


def test_repeated_definitions_are_alternatives() -> None:
    check(
        'glrm 1; start a; nt a = "x"; nt a = "y";',
        accepted=["x", "y"],
        rejected=["xy", ""],
    )


def test_glrmask_05_spellings_of_inline_grammars_and_edges() -> None:
    check(
        'glrm 1; start a; grammar inner { start value; nt value = "null"; } nt a = "[" inner "]";',
        accepted=["[null]"],
        rejected=["[]"],
    )
    check(
        """glrm 1; start a;
        t WORD = fa { start begin; accept done; edge begin -> middle: "a";
                      edge middle -> done: "b"; edge done -> begin: eps; };
        nt a = WORD;""",
        accepted=["ab", "abab"],
        rejected=["a", "aba", ""],
    )


def test_inline_grammars_have_their_own_ignore_set() -> None:
    check(
        """glrm 1; start a;
        g inner = { start value; t WS = / /; ignore WS; nt value = "n" "l"; };
        nt a = "[" inner "]";""",
        accepted=["[nl]", "[n l]", "[ nl]"],
        rejected=["[ nl ]x", " [nl]"],
    )


def test_nonterminal_automaton_edges_name_nonterminals() -> None:
    check(
        'glrm 1; start a; nt a = fa { start s; accept e; s -> e: "a"; e -> s: b; }; nt b = "b";',
        accepted=["a", "aba", "ababa"],
        rejected=["ab", "", "b"],
    )


def test_a_state_called_start_or_accept_can_have_edges() -> None:
    check(
        'glrm 1; start a; t A = fa { start start; accept accept; start -> accept: "x"; };'
        " nt a = A;",
        accepted=["x"],
        rejected=["", "xx"],
    )


def test_terminal_start_symbol() -> None:
    check('glrm 1; start A; t A = "x"+;', accepted=["x", "xxx"], rejected=["", "y"])


# -- finite automata: both lowerings against a direct simulation ------------------------------

ALPHABET = "ab"


@st.composite
def automata(draw: st.DrawFn) -> tuple[int, set[int], list[tuple[int, int, str]]]:
    states = draw(st.integers(1, 5))
    edges = draw(
        st.lists(
            st.tuples(
                st.integers(0, states - 1),
                st.integers(0, states - 1),
                st.sampled_from(["a", "b", "ab", ""]),
            ),
            max_size=10,
        )
    )
    accepting = draw(st.sets(st.integers(0, states - 1), min_size=1))
    return states, accepting, edges


def simulate(accepting: set[int], edges: list[tuple[int, int, str]], text: str) -> bool:
    # Configurations (state, position); labels are literal strings (empty = epsilon).
    seen = {(0, 0)}
    stack = [(0, 0)]
    while stack:
        state, pos = stack.pop()
        for source, target, label in edges:
            if source == state and text.startswith(label, pos):
                nxt = (target, pos + len(label))
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    return any(state in accepting and pos == len(text) for state, pos in seen)


def automaton_source(kind: str, accepting: set[int], edges: list[tuple[int, int, str]]) -> str:
    """The automaton as a GLRM ``t`` or ``nt`` body named A, under ``start a; nt a = A;``."""
    lines = [f"glrm 1; start a; {kind} A = fa {{ start q0;"]
    lines.append("accept " + ", ".join(f"q{s}" for s in sorted(accepting)) + ";")
    for source, target, label in edges:
        lines.append(f"q{source} -> q{target}: {f'{chr(34)}{label}{chr(34)}' if label else 'eps'};")
    lines.append("}; nt a = A;")
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(automata(), st.lists(st.text(ALPHABET, max_size=6), min_size=1, max_size=6))
def test_automaton_lowerings_match_a_direct_simulation(
    automaton: tuple[int, set[int], list[tuple[int, int, str]]], texts: list[str]
) -> None:
    _, accepting, edges = automaton
    as_terminal = Grammar.from_glrm(automaton_source("t", accepting, edges))
    as_rules = Grammar.from_glrm(automaton_source("nt", accepting, edges))
    for text in texts:
        expected = simulate(accepting, edges, text)
        assert as_terminal.accepts(text) == expected, (text, str(as_terminal))
        assert as_rules.accepts(text) == expected, (text, str(as_rules))


# -- masks against brute force ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "texts"),
    [
        (SEED_VALUE, ["-12", " null ", "0"]),
        (
            """glrm 1; start list;
            t WS = / +/; ignore WS;
            t NUM = /[0-9]+/;
            nt list = "[" items? "]";
            nt items = item | items "," item;
            nt item = NUM | list;""",
            ["[1, [2 ,3]]", "[[]]", "[ 7 ]"],
        ),
        (SEED_FA, ["ab"]),
    ],
)
def test_masks_equal_brute_force(source: str, texts: list[str]) -> None:
    grammar = Grammar.from_glrm(source)
    vocab = substring_vocab([text.encode() for text in texts] + [b"null", b"[1,"])
    compiled = grammar.compile(vocab)
    oracle = ReferenceMatcher(grammar.ir)
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    for text in texts:
        data = text.encode()
        matcher = compiled.matcher()
        for end in range(len(data) + 1):
            matcher.fill_next_token_bitmask(bitmask, 0)
            allowed = oracle.allowed_tokens(
                data[:end], vocab.tokens, vocab.special_ids, vocab.eos_ids
            )
            expected = [i for i, ok in enumerate(allowed) if ok]
            assert bitmask_to_ids(bitmask[0], vocab.vocab_size) == expected, (text, end)
            if end < len(data):
                assert matcher.accept_string(data[end : end + 1].decode("latin-1"))


# -- binding -------------------------------------------------------------------------------


def test_unbound_externs_cannot_compile_or_run() -> None:
    parent = Grammar.from_glrm(PARENT)
    with pytest.raises(CompileError, match="extern grammar payload not bound"):
        parent.compile()
    with pytest.raises(GrammarError, match="extern grammar payload not bound"):
        parent.accepts("<>")
    with pytest.raises(CompileError, match="cannot link: extern payload not bound"):
        parent.compile_unlinked().link()


def test_binding_errors_name_the_problem() -> None:
    parent = Grammar.from_glrm(PARENT)
    with pytest.raises(KeyError, match="no unbound extern named 'pay'"):
        parent.bind("pay", Grammar.from_regex("x"))
    with pytest.raises(TypeError, match="takes a Grammar, not int"):
        parent.bind("payload", 3)
    compiled_child = Grammar.from_regex("x").compile()
    with pytest.raises(TypeError, match="compile_unlinked"):
        parent.bind("payload", compiled_child)
    bound = parent.bind("payload", Grammar.from_regex("x"))
    with pytest.raises(KeyError, match="no unbound extern named 'payload'"):
        bound.bind("payload", Grammar.from_regex("y"))
    with pytest.raises(ValueError, match="unbound externs of its own"):
        parent.bind("payload", parent)
    tokens = Grammar.from_glrm(SEED_TOOL_CALL)
    with pytest.raises(TypeError, match="takes a token id"):
        tokens.bind("TOOL_CALL", 1.5)
    with pytest.raises(ValueError, match="negative"):
        tokens.bind("TOOL_CALL", -1)
    with pytest.raises(TypeError, match="needs a name and a value"):
        tokens.bind()


def test_special_token_bound_by_text() -> None:
    tokens = [bytes([b]) for b in range(256)] + [b"<|tool|>", b""]
    vocab = Vocab(tokens, eos_ids=[257], special_ids=[256])
    compiled = Grammar.from_glrm(SEED_TOOL_CALL).bind("TOOL_CALL", "<|tool|>").compile(vocab)
    matcher = compiled.matcher()
    assert matcher.accept_token(256)
    assert matcher.accept_string("lookup()") and matcher.is_accepting()


def test_vocab_token_checks_the_id() -> None:
    vocab = Vocab.byte_level()
    with pytest.raises(VocabError, match="outside the vocabulary"):
        vocab.token(vocab.vocab_size)
    with pytest.raises(TypeError):
        vocab.token("3")  # type: ignore[arg-type]


def test_linking_refuses_a_child_of_another_vocabulary() -> None:
    other = Vocab([bytes([b]) for b in range(256)] + [b"xyz", b""], eos_ids=[257])
    child = Grammar.from_regex("x").compile(other)
    unlinked = Grammar.from_glrm(PARENT).compile_unlinked(Vocab.byte_level())
    with pytest.raises(VocabError, match="extern grammar 'payload'"):
        unlinked.bind("payload", child)
    with pytest.raises(TypeError, match="takes a CompiledGrammar"):
        unlinked.bind("payload", Grammar.from_regex("x"))


def test_end_tokens_belong_to_the_root() -> None:
    vocab = Vocab.byte_level()
    eos_id = vocab.eos_ids[0]
    child = Grammar.from_regex("x").compile(vocab, end_tokens=[])
    linked = Grammar.from_glrm(PARENT).compile_unlinked(vocab, end_tokens=[eos_id])
    matcher = linked.bind("payload", child).link().matcher()
    assert matcher.accept_string("<x>")
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    assert bitmask_to_ids(bitmask[0], vocab.vocab_size) == [eos_id]


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "start a;",
            "GLRM error at line 1, column 1: a GLRM grammar starts with 'glrm 1;'\nstart a;\n^",
        ),
        (
            "glrm 2; start a;",
            "GLRM error at line 1, column 6: unsupported GLRM version 2 (this reads version 1)\n"
            "glrm 2; start a;\n     ^",
        ),
        (
            "glrm 1;\nstart a;\nnt a = b;",
            "GLRM error at line 3, column 8: undefined symbol 'b'\nnt a = b;\n       ^",
        ),
        (
            'glrm 1;\nstart a;\nt A = b;\nnt b = "x";\nnt a = A;',
            "GLRM error at line 3, column 7: a terminal can only use terminals, strings and "
            "regexes, not a nonterminal 'b'\nt A = b;\n      ^",
        ),
        (
            'glrm 1; start a; nt a = "x"',
            "GLRM error at line 1, column 28: expected ';', found end of input\n"
            'glrm 1; start a; nt a = "x"\n                           ^',
        ),
        (
            "glrm 1; start a;\nnt a = /x(/;",
            "GLRM error at line 2, column 10: invalid regex: missing ')': this group is never "
            "closed\nnt a = /x(/;\n         ^",
        ),
        (
            'glrm 1;\nnt a = "x";',
            "GLRM error at line 1, column 1: the grammar has no 'start NAME;' declaration\n"
            "glrm 1;\n^",
        ),
        (
            'glrm 1; start a;\nt A = A "x";\nnt a = A;',
            "GLRM error at line 2, column 7: terminal 'A' is defined in terms of itself "
            "(terminals are regular; use 'nt' for recursion)\nt A = A \"x\";\n      ^",
        ),
        (
            'glrm 1; start a;\nnt a = "x";\nt a = "y";',
            "GLRM error at line 3, column 3: 'a' is already declared as a nonterminal\n"
            't a = "y";\n  ^',
        ),
        (
            'glrm 1; start a;\nnt a = "x" # no\n;',
            "GLRM error at line 2, column 12: unexpected character '#'\n"
            'nt a = "x" # no\n           ^',
        ),
        (
            'glrm 1; start a;\nnt a = "\\q";',
            "GLRM error at line 2, column 9: invalid escape '\\q' in string\n"
            'nt a = "\\q";\n        ^',
        ),
    ],
)
def test_error_messages(source: str, message: str) -> None:
    with pytest.raises(GrammarError) as caught:
        Grammar.from_glrm(source)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ('glrm 1; start a; nt a = fa { start s; s -> t: "x"; };', "no 'accept STATE;'"),
        ('glrm 1; start a; nt a = fa { accept s; s -> s: "x"; };', "no 'start STATE;'"),
        ('glrm 1; start a; ignore a; nt a = "x";', "ignore can only use terminals"),
        ('glrm 1; start a; nt a = "x"{3,2};', "the maximum is below the minimum"),
        ('glrm 1; start a; nt a = "x"{2000000};', "repetition counts above"),
        ("glrm 1; start a; nt a = ;", "expected an expression"),
        ('glrm 1; start a; start b; nt a = "x";', "start symbol is declared twice"),
        ("glrm 1; start a; extern grammar a; extern grammar a;", "declared twice"),
        ('glrm 1; start g1; g g1 = { start x; nt x = "x"; };', "must be a t or nt rule"),
        (
            "glrm 1; start a; g in = { start v; extern token T; nt v = T; }; nt a = in;",
            "externs are declared at the top level",
        ),
        ('glrm 1; start a; nt a = "x"; glrm 1;', "may only open the grammar"),
        ('glrm 1; start a; nt eps = "x";', "keyword"),
        ("glrm 1; start a; nt a = /x/q;", "unsupported regex flag 'q'"),
        ("glrm 1; start a; nt a = //;", "expected an expression"),
        # The first unescaped '/' ends a regex, even inside a class (as GLRMask reads it).
        ("glrm 1; start a; nt a = /[/]/;", "invalid regex"),
        ("glrm 1; start a; /* open", "unterminated comment"),
        ('glrm 1; start a; g i = { start v; nt v = "x";', "to close the inline grammar"),
        (
            "glrm 1; start a; nt a = (((((" + "(" * 300 + '"x"' + ")" * 305 + ";",
            "nested too deeply",
        ),
    ],
)
def test_error_fragments(source: str, fragment: str) -> None:
    with pytest.raises(GrammarError, match=None) as caught:
        Grammar.from_glrm(source)
    assert fragment in str(caught.value)


def test_source_must_be_text() -> None:
    with pytest.raises(GrammarError, match="must be a str"):
        Grammar.from_glrm(b"glrm 1;")  # type: ignore[arg-type]


# -- GLRMask's byte literals and set operations ---------------------------------------------------


def test_byte_strings_and_byte_regexes_match_raw_bytes() -> None:
    # As GLRMask 0.5.0: b"\xff" is the byte 0xFF, not U+00FF in UTF-8; b/./s is any byte.
    grammar = Grammar.from_glrm(r'glrm 1; start a; nt a = b"\xff" b/[\x80-\xbf]+/ b/./s;')
    compiled = grammar.compile()
    for data, expected in [
        (b"\xff\x80\n", True),
        (b"\xff\xbf\xbf\xff", True),
        (b"\xc3\xbf\x80\n", False),
        (b"\xff\n", False),
    ]:
        assert grammar.accepts(data) == expected, data
        matcher = compiled.matcher()
        ok = all(matcher.accept_token(byte) for byte in data) and matcher.is_accepting()
        assert ok == expected, data


@pytest.mark.parametrize(
    ("source", "accepted", "rejected"),
    [
        # Identifiers minus keywords, the usual use (checked against GLRMask 0.5.0).
        (
            'glrm 1; start a; t ID = /[a-zA-Z_][a-zA-Z0-9_]*/ - KW; t KW = "if" | "while";'
            " nt a = ID;",
            ["iffy", "i", "_w", "whil"],
            ["if", "while", "9a"],
        ),
        ("glrm 1; start a; t A = /[a-z]+/ & /.*x.*/; nt a = A;", ["abx", "x"], ["ab", "aXb"]),
        ('glrm 1; start a; nt a = ("x" | "y") - "x";', ["y"], ["x"]),
        # '-' binds looser than a sequence, '&' tighter than '|'.
        ('glrm 1; start a; t A = "a" "b" - "ab" | "c"; nt a = A;', ["c"], ["ab", "a"]),
        ('glrm 1; start a; t A = "a" | "b" & "b"; nt a = A;', ["a", "b"], ["ab"]),
        ("glrm 1; start a; t A = /[^x]+/ - /.*é.*/; nt a = A;", ["abc", "ü"], ["aéb", "x"]),
        # The right operand is the whole sequence "if" "!".
        ('glrm 1; start a; nt a = /[a-z]+/ - "if" "!";', ["iff", "if"], ["if!", "a!"]),
    ],
)
def test_intersection_and_difference(source: str, accepted: list[str], rejected: list[str]) -> None:
    check(source, accepted, rejected)


def test_set_operations_may_use_terminals_declared_later() -> None:
    check(
        'glrm 1; start a; t ID = /[a-z]+/ - KW; t KW = "if" | ("in" & /i./); nt a = ID;',
        accepted=["int", "i", "iff"],
        rejected=["if", "in"],
    )
    with pytest.raises(GrammarError, match="terminal 'A' is defined in terms of itself"):
        Grammar.from_glrm('glrm 1; start a; t A = /x+/ - B; t B = A "y"; nt a = A;')


def test_set_operations_take_regular_operands_only() -> None:
    with pytest.raises(GrammarError, match="operands of '-' must be regular"):
        Grammar.from_glrm('glrm 1; start a; nt a = b - "x"; nt b = "y";')
    with pytest.raises(GrammarError, match="not characters above"):
        Grammar.from_glrm('glrm 1; start a; nt a = b"\\u0100";')
    with pytest.raises(GrammarError, match="do not take the 'i' flag"):
        Grammar.from_glrm("glrm 1; start a; nt a = b/x/i;")


# -- robustness: any input is a grammar or a located GrammarError -----------------------------

ROBUSTNESS_CORPUS = [
    SEED_VALUE,
    SEED_TOOL_CALL,
    SEED_FA,
    PARENT,
    'glrm 1; start a; g inner = { start v; t W = / /; ignore W; nt v = "n" "l"; }; nt a = inner;',
    'glrm 1; start a; t ID = /[a-z]+/ - KW; t KW = "if" & /i./; nt a = ID b"\\xff" b/./s;',
    'glrm 1; start a; nt a = fa { start s; accept e; s -> e: "a"{2,3}; e -> s: eps; };',
]
GLRM_FRAGMENTS = [
    "glrm 1;",
    "start a;",
    "t ",
    "nt ",
    "a",
    "A",
    " = ",
    ";",
    '"x"',
    "'y'",
    "/[a-z]+/",
    'b"\\xff"',
    "b/./s",
    "|",
    "&",
    "-",
    "(",
    ")",
    "*",
    "+",
    "?",
    "{2,3}",
    "{",
    "}",
    "eps",
    "fa",
    "->",
    ":",
    "accept",
    "edge",
    "g",
    "grammar",
    "extern",
    "token",
    "ignore",
    "//c\n",
    "/*",
    "*/",
    "\\",
    "😀",
    "\n",
    ",",
    "0",
    "99999999999",
]


def parse_or_glrm_error(source: str) -> None:
    """The contract for any input: a verified grammar or a located GrammarError."""
    try:
        grammar = Grammar.from_glrm(source)
    except GrammarError as error:
        assert error.message
        if error.line is not None:
            assert error.line >= 1 and error.column is not None and error.column >= 1
        return
    grammar.ir.verify()


@pytest.mark.parametrize("source", ROBUSTNESS_CORPUS)
def test_robustness_corpus_is_valid(source: str) -> None:
    Grammar.from_glrm(source).ir.verify()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(GLRM_FRAGMENTS), max_size=25))
def test_fragment_soup_never_crashes(fragments: list[str]) -> None:
    parse_or_glrm_error("".join(fragments))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(ROBUSTNESS_CORPUS),
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=0, max_value=3),
    st.text(alphabet="\"'/\\()[]{}|&-:;=*+?,.b ie\n", max_size=3),
)
def test_mutated_grammars_never_crash(source: str, at: int, delete: int, insert: str) -> None:
    at = min(at, len(source))
    parse_or_glrm_error(source[:at] + insert + source[at + delete :])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes(source: str) -> None:
    parse_or_glrm_error(source)


def test_the_example_file_compiles_and_masks() -> None:
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "examples" / "value.glrm").read_text()
    check(source, accepted=["[1, [null], -3]", " [ ] ", "7"], rejected=["[1,]", "[[1]", "01"])


def test_a_long_terminal_cycle_is_a_located_error() -> None:
    # 3,000 terminals each naming the next, the last the first: a RecursionError before.
    chain = " ".join(f"t T{i} = T{i + 1};" for i in range(3000))
    with pytest.raises(GrammarError, match="terminal 'T0' is defined in terms of itself"):
        Grammar.from_glrm(f"glrm 1; start v; {chain} t T3000 = T0; nt v = T0;")
