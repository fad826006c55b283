"""Unicode tables for the regex front end: general categories, case folding, white space.

Every table is built lazily on first use from :mod:`unicodedata` and cached for the life of
the process, so importing the regex front end stays cheap and a pattern that never uses
``\\p{..}`` or the ``i`` flag never pays for the scan.
"""

from __future__ import annotations

import bisect
import unicodedata
from functools import cache, lru_cache
from typing import Any

from gramkiln.ir.nodes import MAX_CODEPOINT, complement_ranges, normalise_ranges

Ranges = list[tuple[int, int]]

# Python's ASCII meanings of the shorthand classes (the spec fixes these, not Unicode ones).
ASCII_DIGIT: Ranges = [(0x30, 0x39)]
ASCII_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
ASCII_SPACE: Ranges = [(0x09, 0x0D), (0x20, 0x20)]

# ECMA-262 WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP, every Zs) plus LineTerminator
# (LF, CR, LS, PS). Zs is listed explicitly because ECMA pins it to the Unicode version of the
# engine, and these code points have been stable for many versions.
ECMA_SPACE: Ranges = normalise_ranges(
    [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ]
)
# ECMA-262 LineTerminator: what '.' excludes without the s flag.
ECMA_LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]

# Long (and a few traditional short) aliases of the general-category values, as accepted by
# ECMA-262's \p{...}; each maps to the two-letter categories it covers.
_CATEGORY_GROUPS: dict[str, tuple[str, ...]] = {
    "L": ("Lu", "Ll", "Lt", "Lm", "Lo"),
    "LC": ("Lu", "Ll", "Lt"),
    "M": ("Mn", "Mc", "Me"),
    "N": ("Nd", "Nl", "No"),
    "P": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
    "S": ("Sm", "Sc", "Sk", "So"),
    "Z": ("Zs", "Zl", "Zp"),
    "C": ("Cc", "Cf", "Cs", "Co", "Cn"),
}
_TWO_LETTER = tuple(c for key in "LMNPSZC" for c in _CATEGORY_GROUPS[key])
_LONG_NAMES: dict[str, str] = {
    "Letter": "L",
    "Cased_Letter": "LC",
    "Uppercase_Letter": "Lu",
    "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm",
    "Other_Letter": "Lo",
    "Mark": "M",
    "Combining_Mark": "M",
    "Nonspacing_Mark": "Mn",
    "Spacing_Mark": "Mc",
    "Enclosing_Mark": "Me",
    "Number": "N",
    "Decimal_Number": "Nd",
    "digit": "Nd",
    "Letter_Number": "Nl",
    "Other_Number": "No",
    "Punctuation": "P",
    "punct": "P",
    "Connector_Punctuation": "Pc",
    "Dash_Punctuation": "Pd",
    "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe",
    "Initial_Punctuation": "Pi",
    "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po",
    "Symbol": "S",
    "Math_Symbol": "Sm",
    "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk",
    "Other_Symbol": "So",
    "Separator": "Z",
    "Space_Separator": "Zs",
    "Line_Separator": "Zl",
    "Paragraph_Separator": "Zp",
    "Other": "C",
    "Control": "Cc",
    "cntrl": "Cc",
    "Format": "Cf",
    "Surrogate": "Cs",
    "Private_Use": "Co",
    "Unassigned": "Cn",
}


@lru_cache(maxsize=1)
def _category_table() -> dict[str, tuple[tuple[int, int], ...]]:
    """Ranges of every two-letter general category, from one scan of the code space."""
    table: dict[str, list[tuple[int, int]]] = {name: [] for name in _TWO_LETTER}
    category = unicodedata.category
    run_start = 0
    run_category = category(chr(0))
    for cp in range(1, MAX_CODEPOINT + 1):
        current = category(chr(cp))
        if current != run_category:
            table[run_category].append((run_start, cp - 1))
            run_start, run_category = cp, current
    table[run_category].append((run_start, MAX_CODEPOINT))
    return {name: tuple(ranges) for name, ranges in table.items()}


@cache
def property_ranges(name: str) -> tuple[tuple[int, int], ...] | None:
    """Code point ranges of the Unicode property ``name`` (the text inside ``\\p{...}``).

    Accepts general categories by short or long name, optionally written
    ``General_Category=X`` or ``gc=X``, plus ``Any``, ``ASCII`` and ``Assigned``. Returns None
    for a name it does not know.
    """
    for prefix in ("General_Category=", "gc="):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    else:
        if name == "Any":
            return ((0, MAX_CODEPOINT),)
        if name == "ASCII":
            return ((0, 0x7F),)
        if name == "Assigned":
            return complement_ranges(_category_table()["Cn"])
    short = _LONG_NAMES.get(name, name)
    if short in _CATEGORY_GROUPS:
        members = _CATEGORY_GROUPS[short]
    elif short in _TWO_LETTER:
        members = (short,)
    else:
        return None
    table = _category_table()
    return tuple(normalise_ranges([r for member in members for r in table[member]]))


def _python_case_tables() -> tuple[Any, dict[int, tuple[int, ...]]]:
    """CPython re's simple lower-case function and extra case pairs, where available (they
    are internals of CPython's re; elsewhere the str methods alone decide)."""
    try:
        import _sre

        simple_lower = _sre.unicode_tolower
    except (ImportError, AttributeError):
        return None, {}
    try:
        from re._casefix import _EXTRA_CASES  # CPython 3.11+

        return simple_lower, {int(k): tuple(v) for k, v in _EXTRA_CASES.items()}
    except ImportError:
        return simple_lower, {}


@lru_cache(maxsize=1)
def _case_groups() -> tuple[list[int], list[tuple[int, ...]]]:
    """Code points that have case partners, sorted, with the partner group of each.

    Two code points are partners when one is the simple (single code point) lower or upper
    case of the other, or when CPython's re pairs them; groups are the transitive closure,
    which joins e.g. k, K and the Kelvin sign, or s, S and long s, as regex engines do.
    """
    parent: dict[int, int] = {}

    def find(cp: int) -> int:
        root = cp
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(cp, cp) != root:
            parent[cp], cp = root, parent[cp]
        return root

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    simple_lower, extra_cases = _python_case_tables()
    # Every cased code point lies below U+20000, so the scan can stop there.
    for cp in range(0x20000):
        char = chr(cp)
        for mapped in (char.lower(), char.upper()):
            if len(mapped) == 1 and mapped != char:
                union(cp, ord(mapped))
        # Python's re folds by the simple lower-case mapping, which has one code point where
        # str.lower() has two (U+0130 -> i), and links a few more pairs (i and dotless i).
        if simple_lower is not None:
            union(cp, simple_lower(cp))
    for lower, partners in extra_cases.items():
        for partner in partners:
            union(lower, partner)
    members: dict[int, list[int]] = {}
    touched = set(parent) | {find(cp) for cp in list(parent)}
    for cp in touched:
        members.setdefault(find(cp), []).append(cp)
    groups: dict[int, tuple[int, ...]] = {}
    for group in members.values():
        if len(group) > 1:
            ordered = tuple(sorted(group))
            for cp in ordered:
                groups[cp] = ordered
    keys = sorted(groups)
    return keys, [groups[cp] for cp in keys]


def case_variants(cp: int) -> tuple[int, ...]:
    """Every code point equal to ``cp`` ignoring case (``cp`` itself included), sorted."""
    keys, groups = _case_groups()
    index = bisect.bisect_left(keys, cp)
    if index < len(keys) and keys[index] == cp:
        return groups[index]
    return (cp,)


def fold_ranges(ranges: Ranges | tuple[tuple[int, int], ...]) -> Ranges:
    """Close a set of code point ranges under case equivalence."""
    keys, groups = _case_groups()
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        start = bisect.bisect_left(keys, lo)
        stop = bisect.bisect_right(keys, hi)
        for index in range(start, stop):
            extra.extend((partner, partner) for partner in groups[index])
    return normalise_ranges(list(ranges) + extra)
