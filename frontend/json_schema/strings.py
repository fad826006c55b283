"""JSON string encoding: turning languages over decoded code points into languages over the
JSON text that encodes them.

JSON Schema constrains the *decoded* string (``pattern``, ``format``, ``minLength`` counting
code points) while the grammar matches the *encoded* text, where one character may be written
raw, as a short escape (``\\n``), as ``\\uXXXX`` (either hex case) or, above U+FFFF, as a
surrogate pair. Every construction here maps one decoded character to the choice of all its
encodings, so that lengths are counted in characters and no encoding is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache, lru_cache

from gramkiln.frontend.json_schema.exprs import (
    EMPTY,
    NEVER,
    char_class,
    choice,
    is_never,
    lit,
    repeat,
    seq,
)
from gramkiln.ir import CharClass, Choice, Empty, Expr, Literal, Repeat, Seq
from gramkiln.ir.nodes import MAX_CODEPOINT, normalise_ranges

Ranges = tuple[tuple[int, int], ...]

ALL_CHARS: Ranges = ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))
SHORT_ESCAPES = {
    0x22: '"',
    0x5C: "\\",
    0x2F: "/",
    0x08: "b",
    0x0C: "f",
    0x0A: "n",
    0x0D: "r",
    0x09: "t",
}
# Characters that may appear raw inside a JSON string: everything but '"', '\' and controls.
RAW_ALLOWED: Ranges = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, MAX_CODEPOINT))


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for alo, ahi in a:
        for blo, bhi in b:
            lo, hi = max(alo, blo), min(ahi, bhi)
            if lo <= hi:
                out.append((lo, hi))
    return tuple(normalise_ranges(out))


@cache  # at most 16 * 16 pairs
def _hex_digit_class(lo: int, hi: int) -> Expr:
    """One hex digit in [lo, hi] (0..15), accepting both letter cases."""
    ranges = []
    for value in range(lo, hi + 1):
        if value < 10:
            ranges.append((0x30 + value, 0x30 + value))
        else:
            ranges.append((0x61 + value - 10, 0x61 + value - 10))
            ranges.append((0x41 + value - 10, 0x41 + value - 10))
    return char_class(ranges)


def fixed_width_ranges(lo: int, hi: int, width: int, base: int) -> list[list[tuple[int, int]]]:
    """Decompose [lo, hi] of ``width``-digit numbers in ``base`` into digit-range sequences.

    Each result is one digit range per position; their union is exactly the numbers in
    [lo, hi]. The classic splitting keeps the result linear in ``width * base``.
    """
    if width == 0:
        return [[]]
    unit = base ** (width - 1)
    lo_head, lo_rest = divmod(lo, unit)
    hi_head, hi_rest = divmod(hi, unit)
    if lo_head == hi_head:
        return [
            [(lo_head, lo_head), *tail]
            for tail in fixed_width_ranges(lo_rest, hi_rest, width - 1, base)
        ]
    out: list[list[tuple[int, int]]] = []
    first_full = lo_head
    if lo_rest != 0:
        out.extend(
            [(lo_head, lo_head), *tail]
            for tail in fixed_width_ranges(lo_rest, unit - 1, width - 1, base)
        )
        first_full = lo_head + 1
    last_full = hi_head
    if hi_rest != unit - 1:
        last_full = hi_head - 1
    if first_full <= last_full:
        out.append([(first_full, last_full)] + [(0, base - 1)] * (width - 1))
    if hi_rest != unit - 1:
        out.extend(
            [(hi_head, hi_head), *tail] for tail in fixed_width_ranges(0, hi_rest, width - 1, base)
        )
    return out


@lru_cache(maxsize=4096)  # key automata ask for the same intervals at many trie states
def _hex4(lo: int, hi: int) -> Expr:
    """Four hex digits spelling a value in [lo, hi]."""
    return choice(
        *(
            seq(*(_hex_digit_class(a, b) for a, b in digits))
            for digits in fixed_width_ranges(lo, hi, 4, 16)
        )
    )


@lru_cache(maxsize=4096)
def encoded_char(ranges: Ranges) -> Expr:
    """Every JSON-string encoding of one code point from ``ranges`` (normalised)."""
    alternatives: list[Expr] = []
    raw = _intersect(ranges, RAW_ALLOWED)
    if raw:
        alternatives.append(char_class(raw))
    shorts = sorted(
        {letter for code, letter in SHORT_ESCAPES.items() if _intersect(ranges, ((code, code),))}
    )
    if shorts:
        alternatives.append(seq(lit("\\"), char_class((ord(c), ord(c)) for c in shorts)))
    bmp = _intersect(ranges, ((0, 0xD7FF), (0xE000, 0xFFFF)))
    if bmp:
        alternatives.append(seq(lit("\\u"), choice(*(_hex4(lo, hi) for lo, hi in bmp))))
    astral = _intersect(ranges, ((0x10000, MAX_CODEPOINT),))
    if astral:
        alternatives.append(_surrogate_pairs(astral))
    return choice(*alternatives)


def _surrogate_pairs(ranges: Ranges) -> Expr:
    """``\\uHHHH\\uLLLL`` surrogate-pair spellings of supplementary code points."""
    # Group high surrogates by the range of low surrogates they take: whole blocks of 1024
    # code points share the full low range, only the ends of a range are partial.
    by_low: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for lo, hi in ranges:
        first_high, last_high = (lo - 0x10000) >> 10, (hi - 0x10000) >> 10
        first_low, last_low = (lo - 0x10000) & 0x3FF, (hi - 0x10000) & 0x3FF
        if first_high == last_high:
            by_low.setdefault((first_low, last_low), []).append((first_high, first_high))
            continue
        full_from, full_to = first_high, last_high
        if first_low != 0:
            by_low.setdefault((first_low, 0x3FF), []).append((first_high, first_high))
            full_from += 1
        if last_low != 0x3FF:
            by_low.setdefault((0, last_low), []).append((last_high, last_high))
            full_to -= 1
        if full_from <= full_to:
            by_low.setdefault((0, 0x3FF), []).append((full_from, full_to))
    pieces: list[Expr] = []
    for (low_lo, low_hi), highs in by_low.items():
        high_expr = choice(*(_hex4(0xD800 + a, 0xD800 + b) for a, b in normalise_ranges(highs)))
        low_expr = _hex4(0xDC00 + low_lo, 0xDC00 + low_hi)
        pieces.append(seq(lit("\\u"), high_expr, lit("\\u"), low_expr))
    return choice(*pieces)


def encode_expr(expr: Expr, char: Callable[[Ranges], Expr] = encoded_char) -> Expr:
    """Map a regular expression over decoded code points to one over JSON-encoded text.

    ``char`` turns a set of code points into the expression for one encoded character (the
    compiler passes one that shares big character expressions as rules).
    """
    if isinstance(expr, Empty):
        return expr
    if isinstance(expr, Literal):
        items = []
        for letter in expr.text:
            if expr.case_insensitive and letter.isalpha():
                ranges = normalise_ranges([(ord(letter.lower()),) * 2, (ord(letter.upper()),) * 2])
            else:
                ranges = [(ord(letter), ord(letter))]
            items.append(char(tuple(ranges)))
        return seq(*items)
    if isinstance(expr, CharClass):
        ranges = expr.positive_ranges()
        return char(ranges) if ranges else NEVER
    if isinstance(expr, Seq):
        return seq(*(encode_expr(item, char) for item in expr.items))
    if isinstance(expr, Choice):
        return choice(*(encode_expr(item, char) for item in expr.alternatives))
    if isinstance(expr, Repeat):
        inner = encode_expr(expr.item, char)
        if is_never(inner):
            return EMPTY if expr.min == 0 else NEVER
        return repeat(inner, expr.min, expr.max)
    raise TypeError(f"{type(expr).__name__} cannot appear in a string pattern")


def json_string_literal(value: str) -> Expr:
    """The spellings of ``value`` that ``json.dumps`` writes (ASCII-escaped or not).

    Other escape spellings of the same string (``"\\u0061"`` for ``"a"``) are deliberately
    not included: keys and enum values stay single literals, which keeps grammars small.
    """
    spellings = {json.dumps(value), json.dumps(value, ensure_ascii=False)}
    # A lone surrogate ("\ud83d", which JSON text may hold) has no UTF-8 form: only its
    # escaped spelling can be written.
    return choice(*(lit(s) for s in sorted(spellings) if _encodable(s)))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
