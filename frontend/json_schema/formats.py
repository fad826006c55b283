"""``format``: regular languages (over decoded code points) for the formats enforced here.

Formats are written as ECMA-262 patterns parsed by the regex front end (full match). Where a
format's RFC grammar is not regular or too large, the expression is a documented superset
(see docs/json-schema.md), so a valid value is never rejected.
"""

from __future__ import annotations

from functools import lru_cache

from gramkiln.frontend.json_schema.automaton import Dfa, dfa_from_expr, minimize
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
# RFC 3339 Appendix A: each unit may only be followed by the next smaller one (years, then
# months, then days; hours, then minutes, then seconds), so "P1Y2D" and "PT1H2S" are invalid.
_DURATION_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = (
    rf"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{_DURATION_TIME})?"
    rf"|{_DURATION_TIME}|[0-9]+W)"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# RFC 1123 labels; no trailing dot (the test suite's "trailing dot" case is invalid).
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
# RFC 5321 mailbox: a dot-string or a quoted string (printable ASCII, quoted pairs), at a
# domain or an address literal. Only the IPv4 and IPv6 literals are defined: no other tag
# of the general address-literal form is registered.
_QUOTED_LOCAL = r'"(?:[ !#-\[\]-~]|\\[ -~])*"'
_ADDRESS_LITERAL = rf"\[(?:{_IPV4}|IPv6:{_ipv6()})\]"
_EMAIL = rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|{_QUOTED_LOCAL})@(?:{_HOSTNAME}|{_ADDRESS_LITERAL})"


# RFC 3987 ucschar (non-ASCII allowed in IRIs and URI templates, noncharacters excluded) and
# iprivate (private-use planes), as regex class contents.
_PLANES = "".join(f"{chr(p << 16)}-{chr((p << 16) | 0xFFFD)}" for p in range(1, 14))
_UCSCHAR = f"\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef{_PLANES}{chr(0xE1000)}-{chr(0xEFFFD)}"
_IPRIVATE = f"\ue000-\uf8ff{chr(0xF0000)}-{chr(0xFFFFD)}{chr(0x100000)}-{chr(0x10FFFD)}"


def _uri_patterns(international: bool) -> tuple[str, str]:
    """RFC 3986 ``URI`` and ``URI-reference`` (RFC 3987 ``IRI`` / ``IRI-reference`` when
    ``international``: non-ASCII ``ucschar`` wherever unreserved characters may stand, and
    private-use characters in the query)."""
    ucschar = _UCSCHAR if international else ""
    private = _IPRIVATE if international else ""
    pct = r"%[0-9A-Fa-f]{2}"
    unreserved = rf"A-Za-z0-9\-._~{ucschar}"
    sub_delims = r"!$&'()*+,;="

    def chars(extra: str) -> str:
        return rf"(?:[{unreserved}{sub_delims}{extra}]|{pct})"

    segment = f"{chars(':@')}*"
    segment_nz = f"{chars(':@')}+"
    segment_nz_nc = f"{chars('@')}+"
    ip_literal = rf"\[(?:{_ipv6()}|[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~{sub_delims}:]+)\]"
    authority = rf"(?:{chars(':')}*@)?(?:{ip_literal}|{chars('')}*)(?::[0-9]*)?"
    path_abempty = f"(?:/{segment})*"
    path_absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    query = rf"(?:\?(?:{chars(':@/?' + private)})*)?"
    fragment = rf"(?:#{chars(':@/?')}*)?"
    absolute = (
        rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{authority}{path_abempty}|{path_absolute}"
        rf"|{segment_nz}(?:/{segment})*|){query}{fragment}"
    )
    relative = (
        rf"(?://{authority}{path_abempty}|{path_absolute}|{segment_nz_nc}(?:/{segment})*|)"
        rf"{query}{fragment}"
    )
    return absolute, f"(?:{absolute}|{relative})"


_URI, _URI_REFERENCE = _uri_patterns(international=False)
_IRI, _IRI_REFERENCE = _uri_patterns(international=True)


def _uri_template() -> str:
    """RFC 6570 level 4: literals (apostrophe included, as the test suite reads it) and
    ``{operator? varspec,...}`` expressions; a prefix length is 1-9999."""
    pct = r"%[0-9A-Fa-f]{2}"
    literal = rf"(?:[!#$&'()*+,\-./0-9:;=?@A-Z\[\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{pct})"
    varchar = rf"(?:[A-Za-z0-9_]|{pct})"
    varspec = rf"{varchar}(?:\.?{varchar})*(?::[1-9][0-9]{{0,3}}|\*)?"
    expression = rf"\{{[+#./;?&=,!@|]?{varspec}(?:,{varspec})*\}}"
    return f"(?:{literal}|{expression})*"


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
    "iri": _IRI,
    "uri-reference": _URI_REFERENCE,
    "iri-reference": _IRI_REFERENCE,
    "uri-template": _uri_template(),
    "json-pointer": r"(?:/(?:[^/~]|~[01])*)*",
    "relative-json-pointer": r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^/~]|~[01])*)*)",
    "regex": _regex_syntax(10),
}

# Coarser regular supersets of the formats whose exact automata are large (an IPv6 literal
# alone is ~150 states, so an exact URI times a length bound of 100 is ~18,000 states and
# as many rules). With a length bound, the exact format is tried within a small product
# budget and otherwise this superset is used with a warning (Compiler.string_content).
# The URI supersets were the URI formats' only enforcement until 2026-11-30; the e-mail
# one differs from the exact format in the address literal only ("[...]" with any text).
_NOT_URI_CHARS = r"\x00-\x20<>\"{}|\\^`\x7f"
FORMAT_SUPERSETS: dict[str, str] = {
    "uri": rf"[A-Za-z][A-Za-z0-9+.\-]*:[^{_NOT_URI_CHARS}]*",
    "iri": rf"[A-Za-z][A-Za-z0-9+.\-]*:[^{_NOT_URI_CHARS}]*",
    "uri-reference": rf"[^{_NOT_URI_CHARS}]*",
    "iri-reference": rf"[^{_NOT_URI_CHARS}]*",
    "email": rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|{_QUOTED_LOCAL})@(?:{_HOSTNAME}|\[[^\[\]\\]*\])",
}

# Formats accepted as annotations only: no regular language describes them usefully.
UNENFORCED_FORMATS = frozenset({"idn-hostname", "binary", "byte", "password"})


@lru_cache(maxsize=64)
def format_expr(name: str, superset: bool = False) -> Expr | None:
    """The expression for a known format, or None for formats treated as annotations.

    With ``superset``, the coarse superset of ``FORMAT_SUPERSETS`` where there is one.
    """
    pattern = (superset and FORMAT_SUPERSETS.get(name)) or FORMAT_PATTERNS.get(name)
    if pattern is None:
        return None
    return parse_regex(pattern, dialect="ecma")


@lru_cache(maxsize=64)
def format_dfa(name: str, superset: bool = False) -> Dfa:
    """The minimal automaton of a known format (``superset`` as in ``format_expr``)."""
    expr = format_expr(name, superset)
    if expr is None:
        raise ValueError(f"format {name!r} is not enforced")
    return minimize(dfa_from_expr(expr))
