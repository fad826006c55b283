"""The ``%import common`` library of the Lark dialect, built directly as IR expressions.

Every entry is a self-contained terminal body: terminals that Lark's ``common.lark`` defines
in terms of each other (``INT`` uses ``DIGIT``, ``FLOAT`` uses ``_EXP`` ...) are expanded
here, so importing ``FLOAT`` does not silently define ``DIGIT`` or ``_EXP`` in the user's
namespace (where they could clash with the user's own definitions).

The bodies are written with ``Literal``/``CharClass``/``Seq``/``Choice``/``Repeat`` only, so
this module does not depend on the regex front end. Lark writes a few entries with lazy
regexes (``ESCAPED_STRING``, ``C_COMMENT``); those are expressed here by their exact,
equivalent regular languages (see the comments on each).
"""

from __future__ import annotations

from collections.abc import Callable

from gramkiln.ir import CharClass, Choice, Expr, Literal, Repeat, Seq

__all__ = ["COMMON_NAMES", "common_terminal"]


def _chars(*ranges: tuple[str, str] | str, negated: bool = False) -> CharClass:
    """A character class from single characters and ``(lo, hi)`` character pairs."""
    pairs: list[tuple[int, int]] = []
    for item in ranges:
        if isinstance(item, str):
            pairs.extend((ord(c), ord(c)) for c in item)
        else:
            pairs.append((ord(item[0]), ord(item[1])))
    return CharClass.of(pairs, negated=negated)


def _opt(expr: Expr) -> Repeat:
    return Repeat(item=expr, min=0, max=1)


def _plus(expr: Expr) -> Repeat:
    return Repeat(item=expr, min=1)


def _star(expr: Expr) -> Repeat:
    return Repeat(item=expr, min=0)


def _seq(*items: Expr) -> Seq:
    return Seq(items=items)


def _choice(*alternatives: Expr) -> Choice:
    return Choice(alternatives=alternatives)


def _digit() -> Expr:
    return _chars(("0", "9"))


def _hexdigit() -> Expr:
    return _chars(("a", "f"), ("A", "F"), ("0", "9"))


def _int() -> Expr:
    return _plus(_digit())


def _sign() -> Expr:
    return _chars("+-")


def _signed_int() -> Expr:
    return _seq(_opt(_sign()), _int())


def _decimal() -> Expr:
    # Lark: INT "." INT? | "." INT
    return _choice(
        _seq(_int(), Literal(text="."), _opt(_int())),
        _seq(Literal(text="."), _int()),
    )


def _exp() -> Expr:
    # Lark: ("e"|"E") SIGNED_INT
    return _seq(_chars("eE"), _signed_int())


def _float() -> Expr:
    # Lark: INT _EXP | DECIMAL _EXP?
    return _choice(_seq(_int(), _exp()), _seq(_decimal(), _opt(_exp())))


def _signed_float() -> Expr:
    return _seq(_opt(_sign()), _float())


def _number() -> Expr:
    return _choice(_float(), _int())


def _signed_number() -> Expr:
    return _seq(_opt(_sign()), _number())


def _escaped_string() -> Expr:
    # Lark: "\"" /.*?/ /(?<!\\)(\\\\)*?/ "\"" -- the content stops at the first quote that
    # is not escaped and never contains a newline ('.' excludes it). That is exactly a run of
    # (any character but quote, backslash or newline) or (a backslash and any non-newline).
    plain = _chars('"\\\n', negated=True)
    escape = _seq(Literal(text="\\"), _chars("\n", negated=True))
    return _seq(Literal(text='"'), _star(_choice(plain, escape)), Literal(text='"'))


def _lcase_letter() -> Expr:
    return _chars(("a", "z"))


def _ucase_letter() -> Expr:
    return _chars(("A", "Z"))


def _letter() -> Expr:
    return _chars(("A", "Z"), ("a", "z"))


def _word() -> Expr:
    return _plus(_letter())


def _cname() -> Expr:
    # Lark: ("_"|LETTER) ("_"|LETTER|DIGIT)*
    return _seq(
        _chars("_", ("A", "Z"), ("a", "z")), _star(_chars("_", ("A", "Z"), ("a", "z"), ("0", "9")))
    )


def _ws_inline() -> Expr:
    return _plus(_chars(" \t"))


def _ws() -> Expr:
    return _plus(_chars(" \t\f\r\n"))


def _cr() -> Expr:
    return Literal(text="\r")


def _lf() -> Expr:
    return Literal(text="\n")


def _newline() -> Expr:
    # Lark: (CR? LF)+
    return _plus(_seq(_opt(_cr()), _lf()))


def _line_comment(opener: str) -> Expr:
    return _seq(Literal(text=opener), _star(_chars("\n", negated=True)))


def _c_comment() -> Expr:
    # Lark: "/*" /(.|\n)*?/ "*/" -- the lazy body ends at the first "*/", so the language is
    # "/*", then text without "*/", then "*/". Standard unambiguous form:
    #   "/*" ( [^*] | "*"+ [^*/] )* "*"+ "/"
    not_star = _chars("*", negated=True)
    stars = _plus(Literal(text="*"))
    not_star_or_slash = _chars("*/", negated=True)
    return _seq(
        Literal(text="/*"),
        _star(_choice(not_star, _seq(stars, not_star_or_slash))),
        _plus(Literal(text="*")),
        Literal(text="/"),
    )


_LIBRARY: dict[str, Callable[[], Expr]] = {
    # Numbers
    "DIGIT": _digit,
    "HEXDIGIT": _hexdigit,
    "INT": _int,
    "SIGNED_INT": _signed_int,
    "DECIMAL": _decimal,
    "_EXP": _exp,
    "FLOAT": _float,
    "SIGNED_FLOAT": _signed_float,
    "NUMBER": _number,
    "SIGNED_NUMBER": _signed_number,
    # Strings and names
    "ESCAPED_STRING": _escaped_string,
    "LCASE_LETTER": _lcase_letter,
    "UCASE_LETTER": _ucase_letter,
    "LETTER": _letter,
    "WORD": _word,
    "CNAME": _cname,
    # Whitespace
    "WS_INLINE": _ws_inline,
    "WS": _ws,
    "CR": _cr,
    "LF": _lf,
    "NEWLINE": _newline,
    # Comments
    "SH_COMMENT": lambda: _line_comment("#"),
    "CPP_COMMENT": lambda: _line_comment("//"),
    "C_COMMENT": _c_comment,
    "SQL_COMMENT": lambda: _line_comment("--"),
}

#: Every name that ``%import common.NAME`` accepts, in the seed's table order.
COMMON_NAMES: tuple[str, ...] = tuple(_LIBRARY)


def common_terminal(name: str) -> Expr | None:
    """The terminal body that ``%import common.<name>`` defines, or None for an unknown name."""
    builder = _LIBRARY.get(name)
    return None if builder is None else builder()
