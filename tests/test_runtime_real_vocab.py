"""Seed-text examples with the real Llama 3 vocabulary: C++ masks equal the reference matcher,
at a few chosen positions of each grammar: the start, mid-lexeme and after a complete sentence
(where EOS must be allowed). The oracle prepares the 128,256-token vocabulary once (about two
seconds) and then brute-forces a mask in milliseconds.
"""

from __future__ import annotations

import pytest
from gramkiln.runtime.compiled import allocate_token_bitmask, bitmask_to_ids
from gramkiln.runtime.vocab import load_vocab

from gramkiln import Grammar
from gramkiln.testing import ReferenceMatcher

SEED_CASES = [
    (
        """
        %import common.INT
        %import common.WS
        %ignore WS
        start: item ("," item)*
        item: "id=" INT
        """,
        ["", "id=4", "id=1, id=42"],
    ),
    ("%import common.INT\nstart: INT INT\n", ["", "1", "123"]),
    ('start: "<" name ">" rest\nname[lazy]: /[a-z]+/\nrest: /[a-z]*/\n', ["<", "<a", "<a>b"]),
    ('start: expr\nexpr: expr "+" NUM | NUM\nNUM: /[0-9]+/\n', ["1+", "12+3"]),
]


@pytest.fixture(scope="module")
def llama3():
    try:
        return load_vocab("llama3")
    except Exception as exc:  # the vocabulary ships in an optional package
        pytest.skip(f"Llama 3 vocabulary not available: {exc}")


@pytest.mark.parametrize(("source", "prefixes"), SEED_CASES)
def test_seed_masks_with_llama3(llama3, source: str, prefixes: list[str]) -> None:
    grammar = Grammar.from_lark(source)
    oracle = ReferenceMatcher(grammar.ir)
    compiled = grammar.compile(llama3)
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    for prefix in prefixes:
        matcher = compiled.matcher()
        assert matcher.accept_string(prefix)
        matcher.fill_next_token_bitmask(bitmask)
        allowed = oracle.allowed_tokens(
            prefix.encode(), llama3.tokens, llama3.special_ids, llama3.eos_ids
        )
        expected = [i for i, ok in enumerate(allowed) if ok]
        assert bitmask_to_ids(bitmask[0], compiled.vocab_size) == expected, prefix
