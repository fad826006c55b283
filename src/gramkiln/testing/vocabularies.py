"""Small vocabularies for tests: real-looking tokens (spanning several lexemes, whitespace
included) without a tokenizer download, and a greedy tokenization over them."""

from __future__ import annotations

from gramkiln.runtime.vocab import Vocab


def substring_vocab(texts: list[bytes], limit: int = 3000) -> Vocab:
    """Every byte, plus the most frequent 2-6 byte substrings of `texts` (tokens that span
    several lexemes, whitespace included, as in real vocabularies), plus ``</s>`` as EOS."""
    counts: dict[bytes, int] = {}
    for text in texts:
        for size in range(2, 7):
            for i in range(len(text) - size + 1):
                piece = text[i : i + size]
                counts[piece] = counts.get(piece, 0) + 1
    frequent = sorted(counts, key=lambda piece: (-counts[piece], piece))[:limit]
    tokens = [bytes([b]) for b in range(256)] + sorted(frequent) + [b"</s>"]
    return Vocab(tokens, eos_ids=[len(tokens) - 1], special_ids=[len(tokens) - 1])


def greedy_tokens(vocab: Vocab, text: bytes, longest: int = 6) -> list[int]:
    """`text` as token ids, longest token first (at most `longest` bytes), special tokens
    never used."""
    ids = {token: i for i, token in enumerate(vocab.tokens) if i not in vocab.special_ids}
    out, i = [], 0
    while i < len(text):
        size = min(longest, len(text) - i)
        while text[i : i + size] not in ids:
            size -= 1
        out.append(ids[text[i : i + size]])
        i += size
    return out
