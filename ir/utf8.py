"""UTF-8 helpers for building byte automata from code point classes."""

from __future__ import annotations

from gramkiln.ir.nodes import MAX_CODEPOINT, SURROGATES

# The code points each UTF-8 sequence length can encode (index = length - 1).
ENCODED_LENGTH_RANGES = ((0x00, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODEPOINT))


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Split the code points ``lo..hi`` (inclusive) into UTF-8 byte-range sequences.

    Each sequence is a list of inclusive byte ranges, one per byte of the encoding; a byte
    string matches the union of the sequences exactly when it is the UTF-8 encoding of a
    scalar value in the range. Surrogates (U+D800..U+DFFF) are never produced. The result is
    in ascending code point order and the sequences are disjoint. This is the classic
    construction: cut the range where the encoded length changes, then wherever a range does
    not cover whole blocks of continuation bytes, until every byte position is an
    independent range.
    """
    if not (0 <= lo <= MAX_CODEPOINT and 0 <= hi <= MAX_CODEPOINT):
        raise ValueError(f"code point range {lo:#x}-{hi:#x} is outside 0..{MAX_CODEPOINT:#x}")
    out: list[list[tuple[int, int]]] = []
    if lo > hi:
        return out
    surrogate_lo, surrogate_hi = SURROGATES
    pieces = [(lo, min(hi, surrogate_lo - 1)), (max(lo, surrogate_hi + 1), hi)]
    for piece_lo, piece_hi in pieces:
        for length_lo, length_hi in ENCODED_LENGTH_RANGES:
            a, b = max(piece_lo, length_lo), min(piece_hi, length_hi)
            if a <= b:
                _split_same_length(a, b, out)
    return out


def _split_same_length(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    """Sequences for a range whose ends encode to the same number of bytes."""
    length = len(chr(lo).encode("utf-8"))
    # Find the first trailing block of continuation bits that lo..hi does not cover whole:
    # then the range must be cut there so that each part has independent byte ranges.
    for continuation in range(1, length):
        block_mask = (1 << (6 * continuation)) - 1
        if lo & ~block_mask != hi & ~block_mask:
            if lo & block_mask != 0:
                _split_same_length(lo, lo | block_mask, out)
                _split_same_length((lo | block_mask) + 1, hi, out)
                return
            if hi & block_mask != block_mask:
                _split_same_length(lo, (hi & ~block_mask) - 1, out)
                _split_same_length(hi & ~block_mask, hi, out)
                return
    lo_bytes = chr(lo).encode("utf-8")
    hi_bytes = chr(hi).encode("utf-8")
    out.append([(lo_bytes[i], hi_bytes[i]) for i in range(length)])
