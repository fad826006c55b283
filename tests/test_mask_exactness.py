"""The C++ masks equal the reference matcher's brute force, position by position.

Random small grammars (gramkiln.testing.strategies) and random strings sampled from them and
mutated; a small vocabulary with multi-byte tokens (so tokens cross lexeme boundaries), a
special token and EOS. Plus the non-greedy, ignore, lazy and special-token cases by hand.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy as np
import pytest
from gramkiln.ir import GrammarIR, parse_grammar
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import allocate_token_bitmask, bitmask_to_ids
from gramkiln.runtime.vocab import Vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar
from gramkiln.errors import CompileError
from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.strategies import grammars, mutated_strings

TEXT_TOKENS = [
    b"a",
    b"b",
    b"(",
    b")",
    b",",
    b" ",
    b"ab",
    b"ba",
    b"aa",
    b"a(",
    b"(a",
    b"a)",
    b")(",
    b"),",
    b"))",
    b", ",
    b" a",
    b"a,b",
    b"(ab)",
    b"<s>",
    b"\xc3\xa9",
    b"x",
]
SPECIAL = b"<|sp|>"
TOKENS = [*TEXT_TOKENS, SPECIAL, b"</s>"]
SPECIAL_ID = len(TEXT_TOKENS)
EOS_ID = len(TEXT_TOKENS) + 1
VOCAB = Vocab(TOKENS, eos_ids=[EOS_ID], special_ids=[SPECIAL_ID, EOS_ID], vocab_size=40)


@pytest.fixture(autouse=True)
def future_keys_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every grammar here uses the future-language key (by default only a prewarm that finds
    it pays turns it on), so that every mask below is also a check of that key."""
    monkeypatch.setenv("GRAMKILN_FUTURE_KEYS", "on")  # read when a grammar is loaded


def oracle_for(ir: GrammarIR) -> ReferenceMatcher:
    texts = {i: t.decode("utf-8") for i, t in enumerate(TOKENS) if i != EOS_ID}
    return ReferenceMatcher(ir, special_texts=texts)


def expected_ids(oracle: ReferenceMatcher, prefix: bytes) -> list[int]:
    allowed = oracle.allowed_tokens(prefix, TOKENS, VOCAB.special_ids, VOCAB.eos_ids)
    return [i for i, ok in enumerate(allowed) if ok]


def mask_ids(matcher, vocab_size: int) -> list[int]:
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return bitmask_to_ids(bitmask[0], vocab_size)


def check_string(ir: GrammarIR, text: bytes, compiled=None) -> None:
    """Masks agree at every byte position while the prefix is viable; acceptance agrees.

    `compiled` lets several strings share one compiled grammar, and so its run-time caches.
    """
    oracle = oracle_for(ir)
    compiled = compiled if compiled is not None else compile_grammar(ir, VOCAB)
    matcher = compiled.matcher()
    assert mask_ids(matcher, compiled.vocab_size) == expected_ids(oracle, b"")
    for end in range(1, len(text) + 1):
        viable = oracle.is_prefix(text[:end])
        assert matcher.accept_string(text[end - 1 : end]) == viable, text[:end]
        if not viable:
            # The rejected byte left the matcher unchanged.
            assert mask_ids(matcher, compiled.vocab_size) == expected_ids(oracle, text[: end - 1])
            break
        assert mask_ids(matcher, compiled.vocab_size) == expected_ids(oracle, text[:end]), text[
            :end
        ]
        assert matcher.is_accepting() == oracle.accepts(text[:end])
    whole = compiled.matcher()
    assert (whole.accept_string(text) and whole.is_accepting()) == oracle.accepts(text)


def test_a_thread_in_dfa_state_zero_is_part_of_the_mask_key() -> None:
    """Found by a stress run (random grammars, several strings through one runtime): after
    `aa` the mask was stored under the bounded-depth key of depth 0, which hashes only the
    thread states; `,,a` has the same thread plus one in DFA state 0, whose term in the key
    was zero, so it took `aa`'s mask and lost the `a` that starts `"a,a"` after `T0`."""
    ir = grammar(
        'term T0 = ",,a"\nterm T1 = "," ","\n'
        'rule start = r2 T0* "a,a" r1 | start\nrule r1 [lazy] = "a" | "a"\n'
        "rule r2 = [a] | () | T1*\n"
    )
    compiled = compile_grammar(ir, VOCAB)
    check_string(ir, b"aa", compiled)
    check_string(ir, b",,a", compiled)


def test_mask_keys_share_a_class_of_states_but_not_across_lexemes() -> None:
    """Mask keys hash each thread's lexeme and class of DFA states (states that agree on every
    string up to the longest token), not its state: along a bounded run (one DFA state per
    character) the positions more than a token from the bound share one key, so few fills
    compute; and `(ab` and `xab`, whose states fall in one class of two lexemes (A, B) at the
    same origin, keep their own masks (`),` may follow A only). The masks are also checked
    against brute force at every position."""
    ir = grammar(
        'term A = "(" [ab]{1,30} ")"\nterm B = "x" [ab]{1,30} ")"\n'
        'rule start = A tail_a | B tail_b\nrule tail_a = "," | "(" tail_a ")"\n'
        'rule tail_b = " " | "(" tail_b ")"\n'
    )
    compiled = compile_grammar(ir, VOCAB)
    check_string(ir, b"(" + b"ab" * 15 + b"),", compiled)
    computed_along_the_run = compiled.cache_stats()["fills_computed"]
    # 35 fills: the start, 31 in A (the last few near the bound each differ), the rest.
    assert computed_along_the_run <= 14
    check_string(ir, b"x" + b"ab" * 15 + b") ", compiled)
    check_string(ir, b"(a)(,)", compiled)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(1, 24)), min_size=2, max_size=3),
    st.data(),
)
def test_bounded_runs_sharing_classes_of_states_match_brute_force(
    bounds: list[tuple[int, int]], data: st.DataObject
) -> None:
    """Several bounded runs (`[ab]{m,m+k}` then `)`), each a lexeme of its own behind its own
    opener and followed by its own rule: their states fall into shared classes wherever the
    bound is more than a token away, across positions and across the lexemes, so mask keys
    must tell the lexemes apart (`),` may follow the first only). Texts of runs of every
    length, through one runtime; masks against brute force."""
    openers = ["(", "x", "a("]
    tails = ['","', '" "', '"b"']
    lines = []
    for index, (low, extra) in enumerate(bounds):
        opener = openers[index]
        lines.append(f'term R{index} = "{opener}" [ab]{{{low},{low + extra}}} ")"')
        lines.append(f'rule t{index} = {tails[index]} | "(" t{index} ")"')
    alternatives = " | ".join(f"R{i} t{i}" for i in range(len(bounds)))
    ir = grammar("\n".join(lines) + f"\nrule start = ({alternatives})+\n")
    compiled = compile_grammar(ir, VOCAB)
    for _ in range(4):
        index = data.draw(st.integers(0, len(bounds) - 1))
        low, extra = bounds[index]
        run = data.draw(st.text("ab", min_size=low, max_size=low + extra + 1))
        tail = [b",", b" ", b"b"][index]
        check_string(ir, openers[index].encode() + run.encode() + b")" + tail, compiled)


@st.composite
def grammar_and_string(draw: st.DrawFn) -> tuple[GrammarIR, str]:
    ir = draw(grammars(subgrammars=True))  # may embed one sub-grammar with its own ignore
    text = draw(mutated_strings(ir))
    return ir, text


@settings(max_examples=60)
@given(grammar_and_string())
def test_random_grammars_masks_equal_brute_force(case: tuple[GrammarIR, str]) -> None:
    ir, text = case
    check_string(ir, text.encode("utf-8"))


@settings(max_examples=60)
@given(st.data())
def test_random_grammars_masks_equal_brute_force_with_shared_caches(data: st.DataObject) -> None:
    """Several strings through one compiled grammar, so that later masks come from the caches
    earlier ones filled (a wrong cache key only shows then: see
    test_a_thread_in_dfa_state_zero_is_part_of_the_mask_key)."""
    ir = data.draw(grammars(subgrammars=True))
    texts = [data.draw(mutated_strings(ir)).encode("utf-8") for _ in range(4)]
    compiled = compile_grammar(ir, VOCAB)
    for text in texts + texts[:2]:
        check_string(ir, text, compiled)


def grammar(text: str) -> GrammarIR:
    return parse_grammar("%ir 1\n%start start\n" + text)


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("term INT = [0-9]+\nrule start = INT INT\n", "123"),
        ('%ignore " "\nterm INT = [0-9]+\nrule start = INT INT\n', "1 23 "),
        ('rule start = "<" name ">" rest\nrule name [lazy] = [a-z]+\nrule rest = [a-z]*\n', "<a>b"),
        (
            'rule start = "<" name ">" rest\nrule name [lazy] = [a-z]+\nrule rest = [a-z]*\n',
            "<ab>c",
        ),
        ('rule start = start "a" | "b" | ()\n', "baaa"),
        ('rule start = "(" start ")" start | ()\n', "(()())"),
        ('rule start = "a"{2,4} ("," "b")*\n', "aaa,b,b"),
        # Past the linear limit: blocks of 2**i copies (lower_repeats).
        ('rule start = ("a" | "b" "a"){1030,1100} ","\n', "ab" * 520 + "a" * 70 + ","),
        ('rule start = ("a" | "(" start ")"){0,5000}\n', "a(a)(aa((a)))" * 40),
        ("rule start = [^a]+\n", "b\u00e9x"),
        ('rule start = "a" <"<|sp|>"> "b" <[0-2]>\n', "a"),
        ('rule start = "ab"i "x"\n', "aBx"),
        # A lexeme may end at any byte, so a thread starts at every position; threads whose
        # origin sets are equivalent are merged (Matcher::merge_equivalent_threads).
        ('term W = [ab]+\nrule start = w+ "," w\nrule w = W\n', "abba" * 12 + ",ab"),
        (
            'term W = [ab(]+\nterm N = [a)]+\nrule start = (w | n | " ")*\n'
            "rule w = W\nrule n = N\n",
            "a(b) a)" * 8 + "x",
        ),
        ('term R = [^x]{3,}\nrule start = r r r+ "x"\nrule r = R\n', "ab(" * 15 + "x"),
    ],
)
def test_hand_written_cases(source: str, text: str) -> None:
    check_string(grammar(source), text.encode("utf-8"))


NESTED = (
    'rule start = item ("," item)*\n'
    'rule item = "a" | "b" "a"* | "(" item ")" | "(" item "," item ")" | "a" "(" item ")"\n'
)


@pytest.mark.parametrize("item_walks", ["on", "off"])
def test_walk_cache_reused_under_different_stacks(item_walks: str) -> None:
    """Exit walks are cached by a bounded-depth structural hash of their origin set (by
    sets), or by group and pending item (by items): the same local shape under different
    enclosing parentheses (so different stacks below) must still give the brute-force mask,
    including tokens like `))` and `),` that close several levels. The strings share one
    compiled grammar so later ones hit entries earlier ones stored."""
    ir = grammar(NESTED)
    with environment("GRAMKILN_ITEM_WALKS", item_walks):
        compiled = compile_grammar(ir, VOCAB)
    for text in [
        "(a),((a)),(((a),a))",
        "a((a)),(a,(b)),ba",
        "((a,(a)),a),(a,a(a))",
        "(((a))),a(((a),b)),a",
    ]:
        check_string(ir, text.encode("utf-8"), compiled)


@contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` inside (runtime settings are read when a grammar is loaded)."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


def fill_walk_budget(walks: int) -> AbstractContextManager[None]:
    """Grammars loaded inside get `walks` as the exit walks a computed fill may compute before
    it falls back to the trie search (GRAMKILN_FILL_WALK_BUDGET, read at load; 0: every
    computed fill with an exit walk to compute is searched)."""
    return environment("GRAMKILN_FILL_WALK_BUDGET", str(walks))


@settings(max_examples=40)
@given(st.data())
def test_random_grammars_masks_equal_brute_force_by_trie_search(data: st.DataObject) -> None:
    """With no walk budget every computed fill is the trie search (the fallback for tokens
    with too many lexeme segmentations to walk one by one): it gives the brute-force masks
    too, through shared caches (masks it computed are stored like any other)."""
    ir = data.draw(grammars(subgrammars=True))
    texts = [data.draw(mutated_strings(ir)).encode("utf-8") for _ in range(2)]
    with fill_walk_budget(0):
        compiled = compile_grammar(ir, VOCAB)
    for text in texts + texts[:1]:
        check_string(ir, text, compiled)


@pytest.mark.parametrize("walks", [0, 1, 3])
def test_trie_search_after_part_of_the_walks(walks: int) -> None:
    """A fill that runs out of walks part-way has emitted some walk results into the mask
    already (and stored none of the unfinished ones): the search completes it exactly, and
    later fills that hit the walks stored before the budget ran out stay exact."""
    ir = grammar(NESTED)
    with fill_walk_budget(walks):
        compiled = compile_grammar(ir, VOCAB)
    for text in ["(a),((a)),(((a),a))", "a((a)),(a,(b)),ba", "((a,(a)),a),(a,a(a))"]:
        check_string(ir, text.encode("utf-8"), compiled)
    assert compiled.cache_stats()["fills_searched"] > 0


def test_a_fill_past_its_walk_time_falls_back_to_the_trie_search() -> None:
    """A computed fill also stops walking once it has spent its walk time (200 ms by default,
    GRAMKILN_FILL_WALK_MS, read at load; checked every 64 walks, counted from the first check):
    a token of twelve `=` has Fibonacci(12) = 233 segmentations into `=` and `==` here, each a
    walk of its own. With no time the fill is searched after 128 walks, whatever is left of
    the walk budget, and the masks still equal brute force."""
    ir = Grammar.from_lark('start: s\ns: A s A | B s B | C\nA: "="\nB: "=="\nC: "!"\n').ir
    tokens = [b"=", b"==", b"!", b"=" * 12, b"=!", b"!=", b"</s>"]
    vocab = Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])
    oracle = ReferenceMatcher(ir)
    with environment("GRAMKILN_FILL_WALK_MS", "0"):
        compiled = compile_grammar(ir, vocab)
    for text in [b"", b"===", b"==!=", b"=====!==="]:
        matcher = compiled.matcher()
        assert matcher.accept_string(text)
        allowed = oracle.allowed_tokens(text, tokens, vocab.special_ids, vocab.eos_ids)
        expected = [i for i, ok in enumerate(allowed) if ok]
        assert mask_ids(matcher, compiled.vocab_size) == expected, text
    assert compiled.cache_stats()["fills_searched"] >= 1


@settings(max_examples=60)
@given(st.data(), st.sampled_from(["on", "off"]), st.sampled_from(["20000", "0"]))
def test_random_grammars_masks_equal_brute_force_with_items_merged_by_futures(
    data: st.DataObject, future_keys: str, walks: str
) -> None:
    """A closed Earley set keeps one of its pending items of one dotted id whose futures are
    equal; by default only once a set repeats dotted ids 16 times (nested ambiguous repeats),
    here from the first repeat, so random grammars take the path. With future keys off the
    chart has no anchors of its own and computes them for every earlier set when merging
    starts. With no walk budget every fill is the trie search, whose copy of a merging chart
    merges too."""
    ir = data.draw(grammars(subgrammars=True))
    texts = [data.draw(mutated_strings(ir)).encode("utf-8") for _ in range(3)]
    with (
        environment("GRAMKILN_MERGE_AFTER", "1"),
        environment("GRAMKILN_FUTURE_KEYS", future_keys),
        fill_walk_budget(int(walks)),
    ):
        compiled = compile_grammar(ir, VOCAB)
    for text in texts + texts[:1]:
        check_string(ir, text, compiled)


@settings(max_examples=60)
@given(st.data(), st.sampled_from(["on", "off"]), st.sampled_from(["20000", "3"]))
def test_random_grammars_masks_equal_brute_force_walking_by_items_or_sets(
    data: st.DataObject, item_walks: str, walks: str
) -> None:
    """Computed fills follow their exits either by pending items (completions followed down
    the matcher's chart, each item's continuation cached by group and dotted id) or by
    hypothetical sets (walks keyed by the neighbourhood of the set they start from): both
    give the brute-force masks, through shared caches, and with a walk budget that runs out
    part-way (the trie search completes those fills)."""
    ir = data.draw(grammars(subgrammars=True))
    texts = [data.draw(mutated_strings(ir)).encode("utf-8") for _ in range(3)]
    with environment("GRAMKILN_ITEM_WALKS", item_walks), fill_walk_budget(int(walks)):
        compiled = compile_grammar(ir, VOCAB)
    for text in texts + texts[:1]:
        check_string(ir, text, compiled)


@pytest.mark.parametrize(
    ("future_keys", "item_walks", "by_items"),
    [
        ("on", "auto", True),
        ("off", "auto", True),
        ("off", "on", True),
        ("on", "off", False),
        ("off", "off", False),
    ],
)
def test_fills_walk_by_items_unless_told_otherwise(
    future_keys: str, item_walks: str, by_items: bool
) -> None:
    """Computed fills walk by items whether or not the matcher uses future keys;
    GRAMKILN_ITEM_WALKS=off makes them walk by sets."""
    ir = grammar(NESTED)
    with (
        environment("GRAMKILN_FUTURE_KEYS", future_keys),
        environment("GRAMKILN_ITEM_WALKS", item_walks),
    ):
        compiled = compile_grammar(ir, VOCAB)
    check_string(ir, b"(a,(b)),((a))", compiled)
    stats = compiled.cache_stats()
    assert stats["fills_computed"] > 0
    assert (stats["fills_by_items"] > 0) == by_items
    assert (stats["item_walk_entries"] > 0) == by_items
    assert (stats["walk_entries"] > 0) != by_items


def test_item_walks_are_finitely_many_whatever_the_nesting() -> None:
    """Item walks are keyed by (group, dotted item) and their closures over a set by (group,
    symbol, the set's kernel items): the same statement nested ever deeper needs no new entry
    once the shapes have been seen, where walks by sets key each new neighbourhood."""
    ir = grammar(NESTED)
    with environment("GRAMKILN_ITEM_WALKS", "on"):
        compiled = compile_grammar(ir, VOCAB)
    entries = []
    for depth in range(1, 13):
        text = ("(" * depth + "a,b" + ")" * depth).encode()
        check_string(ir, text, compiled)
        stats = compiled.cache_stats()
        entries.append((stats["item_walk_entries"], stats["local_walk_entries"]))
    assert entries[5][0] > 0 and entries[5][1] > 0, entries
    assert entries[-1] == entries[5], entries


def test_local_walks_share_closure_walks_across_kernels() -> None:
    """A completion's way up through a set's predicted items is looked up per predicted
    nonterminal (closure walks, keyed by group, symbol and nonterminal), so statements nested
    under different kernels share them: nesting deeper adds local walks, not closure walks."""
    ir = grammar(NESTED)
    with environment("GRAMKILN_ITEM_WALKS", "on"):
        compiled = compile_grammar(ir, VOCAB)
    entries = []
    for depth in range(1, 9):
        check_string(ir, b"a(" * depth + b"(a,b)" + b")" * depth, compiled)
        stats = compiled.cache_stats()
        entries.append((stats["closure_walk_entries"], stats["local_walk_entries"]))
    assert entries[0][0] > 0, entries
    assert entries[-1][0] == entries[2][0], entries


@pytest.mark.parametrize("future_keys", ["on", "off"])
def test_masks_stored_by_depth_are_found_under_other_stacks(future_keys: str) -> None:
    """A mask stored under a bounded-depth key is found when the same statement recurs under a
    stack that differs below what the mask depends on, and every mask still equals brute
    force."""
    ir = grammar(NESTED)
    with environment("GRAMKILN_FUTURE_KEYS", future_keys):
        compiled = compile_grammar(ir, VOCAB)
    check_string(ir, b"(a,b)", compiled)
    for depth in range(2, 9):
        check_string(ir, b"a(" * depth + b"(a,b)" + b")" * depth, compiled)
    stats = compiled.cache_stats()
    assert stats["hits_depth"] > 0, stats


def test_futures_under_new_stacks_are_combined_by_the_shape_of_their_anchors() -> None:
    """The same statement nested under new stacks gives its sets new anchors (their futures
    hash the stack below) of the same shape: the futures computed from them are combined by
    the recipe kept for that shape, and every mask still equals brute force."""
    ir = grammar(NESTED)
    compiled = compile_grammar(ir, VOCAB)
    check_string(ir, b"(a,b)", compiled)
    before = compiled.cache_stats()["future_recipe_hits"]
    for depth in range(2, 7):
        check_string(ir, b"a(" * depth + b"(a,b)" + b")" * depth, compiled)
        check_string(ir, b"(" * depth + b"a,(b,a)" + b")" * depth, compiled)
    assert compiled.cache_stats()["future_recipe_hits"] > before


@pytest.mark.parametrize("future_keys", ["on", "off"])
def test_items_of_one_dotted_id_with_different_futures_are_both_kept(future_keys: str) -> None:
    """After `aa`, `p -> w . "z"` is in the set twice: `p` from 0 (then `1` follows) and from
    1 (then `2`). Merging must compare their futures, not only their dotted ids."""
    ir = grammar('rule start = p "1" | "a" p "2"\nrule p = w "z"\nrule w = "a" | "a" "a"\n')
    with environment("GRAMKILN_MERGE_AFTER", "1"), environment("GRAMKILN_FUTURE_KEYS", future_keys):
        compiled = compile_grammar(ir, VOCAB)
    for text in [b"aaz2", b"aaz1", b"az1", b"aaaz2"]:
        check_string(ir, text, compiled)


# Grammars whose Earley sets grew with the text: ambiguous ones (each set held one item per
# earlier position that a nested repeat could have started at) until items were merged, and
# right-recursive ones (each set completed an item at every level of the recursion) until
# completions took Leo's transitive items. Grammar, and the unit the text repeats.
GROWING_SETS = {
    "nested repeats": (
        'term T = "a"\nrule start = g g g+\nrule g = sub sub? sub?\nrule sub = r*\n'
        "rule r = T T T+\n",
        b"a",
    ),
    "repeats of a lexeme that ends anywhere": (
        "term R = [^x]{3,}\nrule start = r r r+\nrule r = R\n",
        b"a",
    ),
    "optional repeats of it": (
        "term R = [^x]{3,}\nrule start = s s? s?\nrule s = r r r+\nrule r = R\n",
        b"a",
    ),
    # Growth inside a set's closure: completing `s` cascaded through every earlier set, each
    # holding the `s -> s . s` item of the set before it, until merging kept the earliest
    # origin and its anchors were computed with the merge budget.
    "binary recursion": ('rule start = s\nrule s = s s | "a"\n', b"a"),
    "binary and ternary recursion": ('rule start = s\nrule s = s s s | s s | "a"\n', b"a"),
    "right recursion": (
        'rule start = list\nrule list = item "," list | item\nrule item = "a"\n',
        b"a,",
    ),
    "right recursion through a wrapper rule": (
        'rule start = list\nrule list = item tail?\nrule tail = "," list\nrule item = "a"\n',
        b"a,",
    ),
    "right recursion with a nullable tail": (
        'rule start = s\nrule s = "a" s | "a" t\nrule t = "b"?\n',
        b"a",
    ),
}


@pytest.mark.parametrize("name", sorted(GROWING_SETS))
def test_ambiguous_repeats_keep_sets_from_growing(name: str) -> None:
    """The items added per byte stop growing (before: one more every few bytes, without
    bound, and fills and commits grew with them; the slowest of 1,500 random grammars took
    70 s for three strings, now 5 s; a right-recursive list of 3,000 items held 9 million
    items), and the masks stay exact."""
    source, unit = GROWING_SETS[name]
    ir = grammar(source)
    check_string(ir, unit * 40)
    matcher = compile_grammar(ir, VOCAB).matcher()
    added = []
    for _ in range(160):
        before = matcher.chart_items
        assert matcher.accept_string(unit)
        added.append(matcher.chart_items - before)
    assert sum(added[120:]) <= sum(added[80:120]), added


RIGHT_RECURSIVE_LISTS = [
    "rule list = item {sep} list | item\n",
    "rule list = item tail?\nrule tail = {sep} list\n",
    "rule list = item | item {sep} more\nrule more = list\n",
]
RIGHT_RECURSIVE_ITEMS = ['"a"', '"a" | "(" list ")"', '"a" | "b" "a"? | "(" list ")"', '"ab" | "a"']


@settings(max_examples=60)
@given(
    st.sampled_from(RIGHT_RECURSIVE_LISTS),
    st.sampled_from(RIGHT_RECURSIVE_ITEMS),
    st.sampled_from(['","', '", "', '","?']),
    st.lists(st.sampled_from(["a", "b", "(", ")", ",", " ", "ab", "),", "))"]), max_size=24),
)
def test_random_right_recursive_lists_match_brute_force(
    lists: str, items: str, sep: str, pieces: list[str]
) -> None:
    """Right recursion in several shapes (direct, through a wrapper rule, through a unit
    rule), items that nest lists, separators that may be absent (then the lists are ambiguous
    and no chain is deterministic): masks at every position equal brute force, with Leo's
    transitive items in the matcher's chart and in the exit walks' hypothetical sets. Strings
    are drawn from the grammar's alphabet, valid ones mostly by the nesting below."""
    ir = grammar("rule start = list\n" + lists.format(sep=sep) + f"rule item = {items}\n")
    text = "".join(pieces)
    separator = ", " if sep == '", "' else ","
    inner = separator.join(["a"] * 9 + ["(a)"]) if "(" in items else "a"
    valid = separator.join(["a"] * 12 + [f"({inner})" if "(" in items else inner])
    compiled = compile_grammar(ir, VOCAB)
    for candidate in (text, valid):
        check_string(ir, candidate.encode("utf-8"), compiled)


@pytest.mark.parametrize(
    "text",
    [
        b"a,a,a,a,a,a,a,a,a,a,a,a,a",
        b"(a,(a,a,(a,a,a,a,a,a,a,a,a,(a,a)),a,a,a,a,a,a,a,a,a,a),a)",
        b"((((((((((a))))))))),(a,a,a,a,a,a,a,a,a,a,(a)))",
        b"a,a,a,a,a,a,a,a,a,a,a,a,a,a,(a,a,a,a,a,a,a,a,a,a))",
    ],
)
def test_right_recursion_masks_equal_brute_force(text: bytes) -> None:
    """Completions in right-recursive lists take Leo's transitive items: one step for a chain
    through every level. Tokens such as `),` and `))` end a lexeme inside the token, so the
    hypothetical sets of exit walks complete such chains too (past eight levels through the
    transitive item, whose walk is then never stored under a depth key: it depends on every
    set of the chain). Masks at every position against brute force, with rollback to every
    position and forward again."""
    ir = grammar(
        'rule start = list\nrule list = item "," list | item\nrule item = "a" | "(" list ")"\n'
    )
    compiled = compile_grammar(ir, VOCAB)
    check_string(ir, text, compiled)
    oracle = oracle_for(ir)
    matcher = compiled.matcher()
    for end in range(1, len(text) + 1):
        assert matcher.accept_string(text[end - 1 : end]) == oracle.is_prefix(text[:end])
        if not oracle.is_prefix(text[:end]):
            break
        if end % 7 == 0:
            matcher.rollback(3)
            assert matcher.accept_string(text[end - 3 : end])
            assert mask_ids(matcher, compiled.vocab_size) == expected_ids(oracle, text[:end])


CLOSERS_TOKENS = [b"a", b"x", b"y", b"(", b")", b",", b"ay", b"y)", b"y,", b"y))", b"y)),", b"))"]
CLOSERS_EOS = len(CLOSERS_TOKENS)
CLOSERS_VOCAB = Vocab([*CLOSERS_TOKENS, b"</s>"], eos_ids=[CLOSERS_EOS], special_ids=[CLOSERS_EOS])


def test_bounded_depth_mask_cache_is_exact_under_different_stacks() -> None:
    """Whole masks are also cached under a bounded-depth key: the thread states with H_D of
    their origin sets (and of the last set), D the deepest dependency of the fill's exit walks.
    Mid-lexeme (`W` cannot end before its `y`), the mask depends on the stack through the
    origin only: `y)` is allowed inside one parenthesis, `y))` inside two, neither at the top;
    and where the input may end, the end token comes from the current stack, not the entry.
    Many strings share one compiled grammar, so later positions hit entries stored by earlier
    ones (checked by mutation: keys without the origin hashes, or hits without the end
    tokens, fail here)."""
    texts = {i: t.decode("utf-8") for i, t in enumerate(CLOSERS_TOKENS)}
    tokens = [*CLOSERS_TOKENS, b"</s>"]
    strings = ["xaay", "(xaay)", "((xaay))", "xay,(xaay),((xay,xaay))", "((xy,(xaay)),xaay)"]
    # Iterative lists, and right-recursive ones: there the stack below an accepting position
    # grows with every item, so the whole-stack key misses and the bounded one hits.
    for lists in ['item ("," item)*', 'item | item "," list']:
        ir = grammar(
            'term W = "x" [a]* "y"\n'
            f"rule start = list\nrule list = {lists}\n"
            'rule item = W | "(" list ")"\n'
        )
        compiled = compile_grammar(ir, CLOSERS_VOCAB)
        oracle = ReferenceMatcher(ir, special_texts=texts)
        for text in [*strings, "xay,xay,xaay"]:
            matcher = compiled.matcher()
            data = text.encode("utf-8")
            for end in range(len(data) + 1):
                if end:
                    assert matcher.accept_string(data[end - 1 : end])
                allowed = oracle.allowed_tokens(data[:end], tokens, [CLOSERS_EOS], [CLOSERS_EOS])
                expected = [i for i, ok in enumerate(allowed) if ok]
                assert mask_ids(matcher, compiled.vocab_size) == expected, (text, data[:end])


def test_future_key_merges_contexts_with_equal_futures() -> None:
    """Masks are also cached under a hash of the future language (see cpp/src/future.cpp):
    inside `a(...)` and `b(...)` the same strings may follow (`a`s, `)`, then more items), so
    the second context's masks come from the first one's entries although their charts differ;
    inside `(...)item` the future differs (`)(` may follow) and must not. Masks equal brute
    force at every byte (checked by mutation: a future key that ignores the rest of a
    production fails here; one that drops a concatenation or a union fails in the
    random-grammar test)."""
    ir = Grammar.from_lark(
        'start: item ("," item)*\n'
        'item: "a" "(" e ")" | "b" "(" e ")" | "(" e ")" item\n'
        'e: e "a" | "b"\n'
    ).ir
    compiled = compile_grammar(ir, VOCAB)
    # Languages are canonicalised by the prewarm and by commits (one each), never inside a fill.
    # The prewarm's configurations with equal futures are answered by the key; the strings'
    # masks then come from its entries (or from the key) and must equal brute force.
    compiled.prewarm()
    for text in ["a(baa),b(baa)", "b(ba),(baa)a(b)", "(b)(ba)b(b),a(baa)"]:
        check_string(ir, text.encode("utf-8"), compiled)
    stats = compiled.cache_stats()
    assert stats["hits_future"] > 0
    # Most future keys come from the memo by the configuration's anchors (one probe).
    assert stats["future_keys_by_anchors"] > 0


def test_special_tokens_and_eos() -> None:
    ir = grammar('rule start = "a" <"<|sp|>"> "b" <[0-2]>\n')
    compiled = compile_grammar(ir, VOCAB)
    oracle = oracle_for(ir)
    matcher = compiled.matcher()
    assert matcher.accept_token(0)  # "a"
    assert mask_ids(matcher, compiled.vocab_size) == [SPECIAL_ID]
    assert not matcher.accept_token(EOS_ID)
    assert matcher.accept_token(SPECIAL_ID)
    assert matcher.accept_token(1)  # "b"
    units = [97, oracle_tokenunit(SPECIAL_ID), 98]
    allowed = oracle.allowed_tokens(units, TOKENS, VOCAB.special_ids, VOCAB.eos_ids)
    assert mask_ids(matcher, compiled.vocab_size) == [i for i, ok in enumerate(allowed) if ok]
    assert matcher.accept_token(2)  # "(" as the token set <[0-2]>
    assert matcher.is_accepting()
    assert mask_ids(matcher, compiled.vocab_size) == [EOS_ID]
    assert matcher.accept_token(EOS_ID)
    assert matcher.is_terminated()
    # After the end only end tokens, as no-ops: a finished row is never all masked.
    assert mask_ids(matcher, compiled.vocab_size) == [EOS_ID]
    assert not matcher.accept_token(0)
    assert matcher.accept_token(EOS_ID)
    assert matcher.is_terminated()
    matcher.rollback(2)
    assert not matcher.is_terminated()
    assert mask_ids(matcher, compiled.vocab_size) == [EOS_ID]


def test_initial_set_key_differs_from_a_finished_set() -> None:
    # Set hashes cover a set's kernel (items from earlier sets); the initial set has none, so it
    # must hash all its items, or its bounded-depth mask key (no threads, H_1 of the last set)
    # would equal that of the finished set after the token and offer the token again.
    ir = grammar('rule start = <"<|sp|>">\n')
    compiled = compile_grammar(ir, VOCAB)
    matcher = compiled.matcher()
    assert mask_ids(matcher, compiled.vocab_size) == [SPECIAL_ID]
    assert matcher.accept_token(SPECIAL_ID)
    assert mask_ids(matcher, compiled.vocab_size) == [EOS_ID]
    assert not matcher.accept_token(SPECIAL_ID)


def test_special_token_missing_from_the_vocabulary_is_a_located_error() -> None:
    # Compiling it away would silently drop the branch that names it.
    ir = Grammar.from_lark('start: "a" | <|absent|> "b"\n').ir
    with pytest.raises(CompileError, match=r"<\|absent\|> is not in the vocabulary \(line 1"):
        compile_grammar(ir, VOCAB)


def oracle_tokenunit(token_id: int):
    from gramkiln.testing import TokenUnit

    data = TOKENS[token_id]
    return TokenUnit(token_id, None if token_id in VOCAB.special_ids else data)


def test_padding_ids_never_allowed_and_out_of_range_raises() -> None:
    compiled = compile_grammar(grammar("rule start = [a-z]*\n"), VOCAB)
    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    ids = bitmask_to_ids(bitmask[0], compiled.vocab_size)
    assert all(i < len(TOKENS) for i in ids)
    assert not matcher.accept_token(len(TOKENS) + 1)
    with pytest.raises(IndexError):
        matcher.accept_token(compiled.vocab_size)
    with pytest.raises(IndexError):
        matcher.accept_token(-1)
    assert np.all(bitmask[0][len(TOKENS) // 32 + 1 :] == 0)


DEEP_TOKENS = [b"(", b")", b"a", b"b", b",", b"a)", b"a))", b"a)))", b"))", b")))", b"),"]
DEEP_TOKENS += [b")),", b"a,", b"(a", b"((", b"</s>"]
DEEP_VOCAB = Vocab(DEEP_TOKENS, eos_ids=[len(DEEP_TOKENS) - 1], vocab_size=len(DEEP_TOKENS))


def random_nested_item(rng: random.Random, depth: int) -> str:
    """A random `item` of NESTED, at most six brackets deep."""
    roll = rng.random()
    if depth > 5 or roll < 0.3:
        return rng.choice(["a", "ba", "b"])
    if roll < 0.6:
        return "(" + random_nested_item(rng, depth + 1) + ")"
    if roll < 0.8:
        inner = random_nested_item(rng, depth + 1) + "," + random_nested_item(rng, depth + 1)
        return "(" + inner + ")"
    return "a(" + random_nested_item(rng, depth + 1) + ")"


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("item_walks", ["on", "off"])
def test_walk_cache_parents_of_cached_nested_walks(seed: int, item_walks: str) -> None:
    """Tokens such as `a)))` cross several lexemes, so their exit walks nest; a walk whose nested
    walk came from the cache depends on everything that cached result depends on (the stack
    down to its depth). Many strings nesting at varying depths share one compiled grammar, so
    parents are computed on top of cached nested results and looked up under other stacks.
    (Fails if a cache hit does not pass its dependencies up: checked by mutation.)"""
    ir = grammar(NESTED)
    with environment("GRAMKILN_ITEM_WALKS", item_walks):
        compiled = compile_grammar(ir, DEEP_VOCAB)
    oracle = ReferenceMatcher(ir)
    rng = random.Random(seed)
    for _ in range(30):
        count = rng.randint(1, 2)
        text = ",".join(random_nested_item(rng, 0) for _ in range(count)).encode()
        matcher = compiled.matcher()
        for end in range(len(text) + 1):
            if end:
                assert matcher.accept_string(text[end - 1 : end])
            allowed = oracle.allowed_tokens(text[:end], DEEP_TOKENS, [], DEEP_VOCAB.eos_ids)
            expected = [i for i, ok in enumerate(allowed) if ok]
            assert mask_ids(matcher, compiled.vocab_size) == expected, text[:end]


# "a " followed by every two-letter word over a-q: the trie node "a " has 290 descendants, more
# than the size from which subtree walks are memoised per (node, state) (kMemoMinNodes in
# matcher.cpp), so the exit groups entered there are assembled from a memo entry.
LETTERS = "abcdefghijklmnopq"
WIDE_TOKENS = [b"a", b"b", b"1", b" ", b"a ", b"ab", b" a", b" ab", b"1 a"]
WIDE_TOKENS += [f"a {x}{y}".encode() for x in LETTERS for y in LETTERS]
WIDE_TOKENS += [b"</s>"]
WIDE_VOCAB = Vocab(WIDE_TOKENS, eos_ids=[len(WIDE_TOKENS) - 1], vocab_size=len(WIDE_TOKENS))


def test_memoised_subtree_walks() -> None:
    """Masks stay exact when exit groups are assembled from memoised subtree walks, at every
    position of several strings on one compiled grammar. (Reuse of one memo entry by a second
    parent group is exercised by the real-vocabulary tests, where such subtrees abound.)"""
    ir = grammar('term WORD = [a-q][0-9a-q]*\nrule start = WORD (" " WORD)*\n')
    compiled = compile_grammar(ir, WIDE_VOCAB)
    oracle = ReferenceMatcher(ir)
    for text in [b"a ab a", b"ba1 a abq a", b"qa b1 a", b"a a1 a ab"]:
        matcher = compiled.matcher()
        for end in range(len(text) + 1):
            if end:
                assert matcher.accept_string(text[end - 1 : end])
            allowed = oracle.allowed_tokens(text[:end], WIDE_TOKENS, [], WIDE_VOCAB.eos_ids)
            expected = [i for i, ok in enumerate(allowed) if ok]
            assert mask_ids(matcher, compiled.vocab_size) == expected, text[:end]


def test_threads_at_the_last_set_past_its_end_keep_their_own_descents() -> None:
    """Where the future key stands for the threads that start at the last set by its anchors,
    their descents are kept as one by those anchors only while that set ends at the current
    position (every thread there at the start of its lexeme). Past its end the same anchors
    hold other threads: after `(a` the thread of `aa`, which `a)` ends and goes on from,
    after `(b` the one of `ba`, which `a,b` does (a first version kept them as one there too,
    and gave `(b` the exits of `(a`)."""
    # Nonterminals between the lexemes keep terminal fusion from making the text one lexeme.
    ir = grammar(
        'rule start = "(" x\nrule x = "aa" y | "ba" "," z\n'
        'rule y = ")" | "(" x\nrule z = "b" | "(" x\n'
    )
    compiled = compile_grammar(ir, VOCAB)
    check_string(ir, b"(aa)", compiled)
    check_string(ir, b"(ba,b", compiled)
