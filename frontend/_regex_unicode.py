"""Unicode tables for the regex front end: properties, case folding, white space.

Every table is built lazily on first use and cached for the life of the process, so importing
the regex front end stays cheap and a pattern that never uses ``\\p{..}`` or the ``i`` flag
never pays for it. General categories come from :mod:`unicodedata`; scripts, script
extensions and binary properties, which :mod:`unicodedata` lacks, from the table
``_unicode_properties.json.zlib`` next to this module (written by
``tools/gen_unicode_properties.py`` from the ``regex`` package's Unicode data).
"""

from __future__ import annotations

import bisect
import json
import unicodedata
import zlib
from functools import cache, lru_cache
from pathlib import Path
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
    ``General_Category=X`` or ``gc=X``; ``Any``, ``ASCII`` and ``Assigned``; scripts as
    ``Script=X`` / ``sc=X`` and script extensions as ``Script_Extensions=X`` / ``scx=X``
    (ECMA-262), or a script alone (``Greek``, ``Grek``: Rust's regex and the ``regex``
    package); and ECMA-262's binary properties (``Alphabetic``, ``Emoji``, ``White_Space``,
    ``ID_Start``, ...) by name or alias. Exact names are read first; otherwise names compare
    without regard to case, spaces, hyphens and underscores, a general category before a
    binary property before a script. Returns None for a name it does not know.
    """
    ranges = _exact_property(name)
    if ranges is not None:
        return ranges
    key, equals, value = name.partition("=")
    if equals:
        kind = _VALUED_PROPERTIES.get(_loose(key))
        if kind == "gc":
            return _category_ranges(_loose_categories().get(_loose(value)))
        return _table_ranges(f"{kind}:{_loose(value)}") if kind else None
    loose = _loose(name)
    if loose in _loose_categories():
        return _category_ranges(_loose_categories()[loose])
    for kind in ("bin", "sc"):
        ranges = _table_ranges(f"{kind}:{loose}")
        if ranges is not None:
            return ranges
    return None


def _exact_property(name: str) -> tuple[tuple[int, int], ...] | None:
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
    return _category_ranges(_LONG_NAMES.get(name, name))


def _category_ranges(short: str | None) -> tuple[tuple[int, int], ...] | None:
    if short in _CATEGORY_GROUPS:
        members = _CATEGORY_GROUPS[short]
    elif short in _TWO_LETTER:
        members = (short,)
    else:
        return None
    table = _category_table()
    return tuple(normalise_ranges([r for member in members for r in table[member]]))


# Property names before '=' that take a value, compared loosely (see _loose).
_VALUED_PROPERTIES = {
    "GENERALCATEGORY": "gc",
    "GC": "gc",
    "SCRIPT": "sc",
    "SC": "sc",
    "SCRIPTEXTENSIONS": "scx",
    "SCX": "scx",
}


def _loose(name: str) -> str:
    """``name`` as loose matching compares it (Unicode's UAX44-LM3, as Rust's regex does)."""
    return "".join(c for c in name if c not in " _-").upper()


@lru_cache(maxsize=1)
def _loose_categories() -> dict[str, str]:
    """Every general-category name, short or long, by its loose form."""
    names = {_loose(long): short for long, short in _LONG_NAMES.items()}
    names.update({_loose(short): short for short in (*_CATEGORY_GROUPS, *_TWO_LETTER)})
    return names


@lru_cache(maxsize=1)
def _property_table() -> dict[str, Any]:
    """The scripts and binary properties table (see tools/gen_unicode_properties.py)."""
    path = Path(__file__).with_name("_unicode_properties.json.zlib")
    table: dict[str, Any] = json.loads(zlib.decompress(path.read_bytes()))
    return table


@cache
def _table_ranges(key: str) -> tuple[tuple[int, int], ...] | None:
    table = _property_table()
    index = table["names"].get(key)
    if index is None:
        return None
    flat = table["sets"][index]
    ranges: list[tuple[int, int]] = []
    end = -1
    for at in range(0, len(flat), 2):
        start = end + flat[at]
        end = start + flat[at + 1]
        ranges.append((start, end))
    return tuple(ranges)


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
