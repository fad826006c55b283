"""Generate ``frontend/_unicode_properties.json.zlib``: Unicode scripts and binary properties.

Python's :mod:`unicodedata` has general categories but no Script, Script_Extensions or
binary properties, which ``\\p{..}`` in ECMA-262 (``\\p{Script=Greek}``, ``\\p{Alphabetic}``)
and in Rust's regex (``\\p{Greek}``) name. This script reads them from the ``regex`` package's
tables (a development-time dependency only) and writes, zlib-compressed JSON:

* ``regex``: the version of the ``regex`` package read, and ``unicode``: its Unicode version;
* ``sets``: each property's code points as a flat list of ``[gap, length - 1, ...]`` pairs,
  where ``gap`` is the distance from the end of the previous range (from -1 for the first);
* ``names``: ``"bin:ALPHABETIC"``, ``"sc:GREEK"``, ``"scx:GREEK"`` (every alias, written as
  the lookup writes a name: upper case, without spaces, hyphens and underscores) to a set.

Run from the repository root after upgrading ``regex`` (``pip install regex``)::

    python tools/gen_unicode_properties.py
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import regex
import regex._regex_core as regex_core

OUT = Path(__file__).resolve().parent.parent / "frontend" / "_unicode_properties.json.zlib"

# ECMA-262's binary properties (table "Binary Unicode property aliases") that the regex
# package knows, by its normalised name. Changes_When_NFKC_Casefolded is not among them.
BINARY = (
    "ALPHABETIC ASCIIHEXDIGIT BIDICONTROL BIDIMIRRORED CASED CASEIGNORABLE "
    "CHANGESWHENCASEFOLDED CHANGESWHENCASEMAPPED CHANGESWHENLOWERCASED CHANGESWHENTITLECASED "
    "CHANGESWHENUPPERCASED DASH DEFAULTIGNORABLECODEPOINT DEPRECATED DIACRITIC EMOJI "
    "EMOJICOMPONENT EMOJIMODIFIER EMOJIMODIFIERBASE EMOJIPRESENTATION EXTENDEDPICTOGRAPHIC "
    "EXTENDER GRAPHEMEBASE GRAPHEMEEXTEND HEXDIGIT IDSBINARYOPERATOR IDSTRINARYOPERATOR "
    "IDCONTINUE IDSTART IDEOGRAPHIC JOINCONTROL LOGICALORDEREXCEPTION LOWERCASE MATH "
    "NONCHARACTERCODEPOINT PATTERNSYNTAX PATTERNWHITESPACE QUOTATIONMARK RADICAL "
    "REGIONALINDICATOR SENTENCETERMINAL SOFTDOTTED TERMINALPUNCTUATION UNIFIEDIDEOGRAPH "
    "UPPERCASE VARIATIONSELECTOR WHITESPACE XIDCONTINUE XIDSTART"
).split()

# Code points first assigned in a Unicode version, newest first: the first that the regex
# package knows names the version of its tables.
VERSION_PROBES = ((0x16D40, "17.0"), (0x1FAE9, "16.0"), (0x1FAE8, "15.0"), (0x1FAE0, "14.0"))

ALL_CODE_POINTS = "".join(map(chr, range(0x110000)))


def ranges_of(pattern: str) -> list[int]:
    """The code points `pattern` (one class) matches, as flat [gap, length - 1] pairs."""
    flat: list[int] = []
    previous_end = -1
    for match in regex.finditer(pattern + "+", ALL_CODE_POINTS):
        start, end = match.start(), match.end() - 1
        flat += [start - previous_end, end - start]
        previous_end = end
    return flat


def main() -> None:
    """Read every property from the regex package and write the table."""
    properties = regex_core.PROPERTIES
    by_id: dict[int, list[str]] = {}
    for name, (prop_id, _values) in properties.items():
        by_id.setdefault(prop_id, []).append(name)
    sets: list[list[int]] = []
    names: dict[str, int] = {}
    for name in BINARY:
        prop_id = properties[name][0]
        names.update({f"bin:{alias}": len(sets) for alias in by_id[prop_id]})
        sets.append(ranges_of(rf"\p{{{name}=Yes}}"))
    for kind, prop in (("sc", "SCRIPT"), ("scx", "SCRIPTEXTENSIONS")):
        by_value: dict[int, list[str]] = {}
        for value, value_id in properties[prop][1].items():
            by_value.setdefault(value_id, []).append(value)
        for aliases in by_value.values():
            names.update({f"{kind}:{alias}": len(sets) for alias in aliases})
            sets.append(ranges_of(rf"\p{{{prop}={aliases[0]}}}"))
    unicode_version = next(v for cp, v in VERSION_PROBES if regex.match(r"\p{Assigned}", chr(cp)))
    table = {"regex": regex.__version__, "unicode": unicode_version, "sets": sets, "names": names}
    data = zlib.compress(json.dumps(table, separators=(",", ":")).encode(), 9)
    OUT.write_bytes(data)
    print(
        f"{OUT}: {len(sets)} sets, {len(names)} names, {len(data):,} bytes, Unicode {unicode_version}"
    )


if __name__ == "__main__":
    main()
