"""``format``: regular languages (over decoded code points) for the formats enforced here.

Formats are written as ECMA-262 patterns parsed by the regex front end (full match). Where a
format's RFC grammar is not regular or too large, the expression is a documented superset
(see docs/json-schema.md), so a valid value is never rejected.
"""

from __future__ import annotations

from functools import lru_cache

from gramkiln.frontend.regex import parse_regex
from gramkiln.ir import Expr

_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    forms = [
        rf"(?:{_H16}:){{6}}{_LS32}",
        rf"::(?:{_H16}:){{5}}{_LS32}",
        rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
    return "(?:" + "|".join(forms) + ")"


_DATE = (
    r"[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DURATION_TIME = r"T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = (
    rf"P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DURATION_TIME})?"
    rf"|{_DURATION_TIME}|[0-9]+W)"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*\.?"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_EMAIL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_HOSTNAME}|\[[^\[\]\\]*\])"
# URI characters: anything but controls, space and the characters RFC 3986 never allows raw.
_URI_CHAR = r"[^\x00-\x20<>\"{}|\\^`\x7f]"
_URI = rf"[A-Za-z][A-Za-z0-9+.\-]*:{_URI_CHAR}*"


def _regex_syntax(depth: int) -> str:
    """A regular superset of regex syntax (ECMA-262 and Python's): parentheses balanced up
    to ``depth`` levels (any ``(?...`` prefix), classes closed, escapes complete, and no
    quantifier where nothing precedes it. It refuses what no engine compiles (``*``, a
    trailing backslash, ``a(``, ``[a-``) and accepts every one of the 919 distinct
    ``pattern`` / ``patternProperties`` regexes of the MaskBench schemas (the test keeps that
    corpus check on a sample). Alternation bars may stand anywhere (empty alternatives are
    valid), which keeps the expression linear in ``depth``. The ``(?...`` prefix excludes
    ``[`` and ``\\``: were it to overlap a class or an escape of the group's body, the two
    readings would close groups at different places and the automaton would grow ~4x per
    level (measured)."""
    escape = r"\\[\s\S]"
    klass = r"\[(?:\\[\s\S]|[^\]\\])*\]"
    plain = r"[^\\()\[|*+?]"
    quantifier = r"(?:[*+?]|\{[0-9]*(?:,[0-9]*)?\})"
    body = f"(?:(?:{escape}|{klass}|{plain}){quantifier}*|\\|)*"
    for _ in range(depth):
        group = r"\((?:\?[^()\[\\]*)?" + body + r"\)"
        body = f"(?:(?:{escape}|{klass}|{plain}|{group}){quantifier}*|\\|)*"
    return body


FORMAT_PATTERNS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "duration": _DURATION,
    "email": _EMAIL,
    "idn-email": r"[^@\s]+@[^@\s]+",
    "hostname": _HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _ipv6(),
    "uuid": r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "uri": _URI,
    "iri": r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20<>\"{}|\\^`\x7f]*",
    "uri-reference": rf"{_URI_CHAR}*",
    "iri-reference": r"[^\x00-\x20<>\"{}|\\^`\x7f]*",
    "uri-template": r"(?:[^\x00-\x20<>\"{}|\\^`\x7f]|\{[^\x00-\x20{}]*\})*",
    "json-pointer": r"(?:/(?:[^/~]|~[01])*)*",
    "relative-json-pointer": r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^/~]|~[01])*)*)",
    "regex": _regex_syntax(10),
}

# Formats accepted as annotations only: no regular language describes them usefully.
UNENFORCED_FORMATS = frozenset({"idn-hostname", "binary", "byte", "password"})


@lru_cache(maxsize=64)
def format_expr(name: str) -> Expr | None:
    """The expression for a known format, or None for formats treated as annotations."""
    pattern = FORMAT_PATTERNS.get(name)
    if pattern is None:
        return None
    return parse_regex(pattern, dialect="ecma")
