"""Lexical layer of the Lark front end: source positions and on-demand tokens.

The Lark dialect is line-oriented (items end at a newline, a line starting with ``|``
continues the previous alternative) and embeds other languages (``%json {...}`` JSON,
``%lark {...}`` nested grammars), so tokens are read lazily from a position instead of
tokenising the whole text up front: the parser hands the raw text to the JSON decoder or to
a nested grammar parser and continues where they stopped.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from gramkiln.ir import Span

from gramkiln.errors import GrammarError

LANGUAGE = "Lark"

# A name may contain hyphens, but "a->b" is the name "a", then "->".
NAME_RE = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_]|-(?!>))*")
NUMBER_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
DIRECTIVE_RE = re.compile(r"%[A-Za-z_]+")
SPECIAL_RE = re.compile(r"<[^<>\s]+>")
REGEX_FLAG_RE = re.compile(r"[A-Za-z]*")
ASCII_DIGITS = frozenset("0123456789")
SINGLE_CHAR_OPS = frozenset("()[]|?*+~{},:=!^.")

# JSON string escapes (the seed: \", \\, \/, \b, \f, \n, \r, \t and \uXXXX).
STRING_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


@dataclass(frozen=True)
class Token:
    """One lexical token: ``kind`` is a category, ``text`` the raw source slice.

    Kinds: ``name``, ``number``, ``string``, ``regex``, ``special``, ``directive``, ``at``,
    ``op`` (punctuation, ``text`` is the operator), ``newline`` and ``eof``. ``value`` holds
    the decoded payload (string contents, regex pattern and flags, ...).
    """

    kind: str
    text: str
    start: int
    end: int
    value: object = None

    def describe(self) -> str:
        """How the token reads in an error message."""
        if self.kind == "eof":
            return "end of input"
        if self.kind == "newline":
            return "end of line"
        if self.kind == "string":
            return "string " + self.text
        return f"'{self.text}'"


class Source:
    """The grammar text with fast offset -> line/column conversion and error building."""

    def __init__(self, text: str, language: str = LANGUAGE) -> None:
        self.text = text
        # The name errors start with ("Lark error at ..."); GLRM reuses the readers.
        self.language = language
        self._line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def line_column(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a 0-based character offset."""
        index = bisect.bisect_right(self._line_starts, offset) - 1
        return index + 1, offset - self._line_starts[index] + 1

    def span(self, start: int, end: int) -> Span:
        """The span of characters ``[start, end)``; an empty range is a point span."""
        line, column = self.line_column(start)
        if end <= start:
            return Span(line=line, column=column)
        end_line, end_column = self.line_column(end - 1)
        return Span(line=line, column=column, end_line=end_line, end_column=end_column)

    def error(self, message: str, offset: int) -> GrammarError:
        """A located GrammarError in the seed's format."""
        return GrammarError.at(self.language, message, self.text, offset)


LINE_CONTINUATION_RE = re.compile(r"\\[ \t\f]*\r?\n")


def skip_blank(text: str, pos: int, newlines: bool) -> int:
    """Skip spaces, tabs, carriage returns and comments; also newlines when ``newlines``."""
    length = len(text)
    while pos < length:
        char = text[pos]
        # U+FEFF: a byte-order mark left at the start of a file read as text.
        if char in " \t\r\f\v\ufeff" or (newlines and char == "\n"):
            pos += 1
        elif char == "#" or text.startswith("//", pos):
            end = text.find("\n", pos)
            pos = length if end < 0 else end
        elif char == "\\" and (continuation := LINE_CONTINUATION_RE.match(text, pos)):
            # Lark's line continuation: a backslash ending a line joins it to the next one.
            pos = continuation.end()
        else:
            break
    return pos


def read_token(source: Source, pos: int) -> Token:
    """The token starting exactly at ``pos`` (blanks must already be skipped)."""
    text = source.text
    if pos >= len(text):
        return Token("eof", "", pos, pos)
    char = text[pos]
    if char == "\n":
        return Token("newline", "\n", pos, pos + 1)
    if char == '"':
        return _read_string(source, pos)
    if char == "/":
        return read_regex(source, pos)
    if char == "<":
        match = SPECIAL_RE.match(text, pos)
        if match is None:
            line_end = text.find("\n", pos)
            rest = text[pos + 1 : len(text) if line_end < 0 else line_end]
            if ">" not in rest:
                raise source.error("unterminated special token: expected '>'", pos)
            raise source.error(
                "invalid special token: expected <|name|>, <name> or <[ids]> without blanks",
                pos,
            )
        return Token("special", match.group(), pos, match.end())
    if char == "%":
        match = DIRECTIVE_RE.match(text, pos)
        if match is None:
            raise source.error("expected a directive name after '%'", pos)
        return Token("directive", match.group(), pos, match.end())
    if char == "@":
        match = NAME_RE.match(text, pos + 1)
        if match is None:
            raise source.error("expected a grammar name after '@'", pos)
        return Token("at", match.group(), pos, match.end(), match.group())
    if char in ASCII_DIGITS or (char == "-" and text[pos + 1 : pos + 2] in ASCII_DIGITS):
        match = NUMBER_RE.match(text, pos)
        assert match is not None  # a digit (or '-' and a digit) always starts a number
        return Token("number", match.group(), pos, match.end())
    if text.startswith("->", pos):
        return Token("op", "->", pos, pos + 2)
    if text.startswith("..", pos):
        return Token("op", "..", pos, pos + 2)
    match = NAME_RE.match(text, pos)
    if match is not None:
        return Token("name", match.group(), pos, match.end())
    if char in SINGLE_CHAR_OPS:
        return Token("op", char, pos, pos + 1)
    if char == "&":
        # llguidance's intersection of terminals; the parser says where it may appear.
        return Token("op", "&", pos, pos + 1)
    raise source.error(f"unexpected character {char!r}", pos)


def _read_string(source: Source, start: int) -> Token:
    """A double-quoted literal with JSON escapes and an optional adjacent ``i`` flag."""
    text = source.text
    pos = start + 1
    out: list[str] = []
    while True:
        if pos >= len(text) or text[pos] == "\n":
            raise source.error("unterminated string", start)
        char = text[pos]
        if char == '"':
            pos += 1
            break
        if char != "\\":
            out.append(char)
            pos += 1
            continue
        escape = text[pos + 1 : pos + 2]
        if escape in STRING_ESCAPES:
            out.append(STRING_ESCAPES[escape])
            pos += 2
        elif escape == "u":
            code, pos = read_unicode_escape(source, pos)
            out.append(chr(code))
        elif escape in ("", "\n"):
            raise source.error("unterminated string", start)
        else:
            raise source.error(f"invalid escape '\\{escape}' in string", pos)
    insensitive = text[pos : pos + 1] == "i"
    if insensitive:
        pos += 1
    return Token("string", text[start:pos], start, pos, ("".join(out), insensitive))


def read_unicode_escape(source: Source, pos: int) -> tuple[int, int]:
    """Decode ``\\uXXXX`` at ``pos`` (joining a surrogate pair); return (code point, end)."""
    text = source.text
    digits = text[pos + 2 : pos + 6]
    if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise source.error("\\u must be followed by four hex digits", pos)
    code = int(digits, 16)
    end = pos + 6
    if 0xD800 <= code <= 0xDBFF:
        low = text[end : end + 6]
        if (
            len(low) == 6
            and low.startswith("\\u")
            and all(c in "0123456789abcdefABCDEF" for c in low[2:])
            and 0xDC00 <= int(low[2:], 16) <= 0xDFFF
        ):
            return 0x10000 + ((code - 0xD800) << 10) + (int(low[2:], 16) - 0xDC00), end + 6
        raise source.error("unpaired surrogate in \\u escape", pos)
    if 0xDC00 <= code <= 0xDFFF:
        raise source.error("unpaired surrogate in \\u escape", pos)
    return code, end


def read_regex(source: Source, start: int) -> Token:
    """A ``/pattern/flags`` literal.

    The value is ``(pattern, flags, offsets)``: ``pattern`` has each ``\\/`` unescaped to
    ``/`` and ``offsets[i]`` is the source offset of pattern character ``i`` (plus one entry
    for the end), so regex errors can be located in the Lark source exactly.
    """
    text = source.text
    pos = start + 1
    pattern: list[str] = []
    offsets: list[int] = []
    while True:
        if pos >= len(text) or text[pos] == "\n":
            raise source.error("unterminated regex", start)
        char = text[pos]
        if char == "/":
            break
        if char == "\\":
            following = text[pos + 1 : pos + 2]
            if following in ("", "\n"):
                raise source.error("unterminated regex", start)
            if following == "/":
                pattern.append("/")
                offsets.append(pos)
            else:
                pattern.extend((char, following))
                offsets.extend((pos, pos + 1))
            pos += 2
            continue
        pattern.append(char)
        offsets.append(pos)
        pos += 1
    offsets.append(pos)
    pos += 1
    flags_match = REGEX_FLAG_RE.match(text, pos)
    assert flags_match is not None  # the pattern also matches the empty string
    flags = flags_match.group()
    for index, flag in enumerate(flags):
        if flag not in "is":
            raise source.error(
                f"unsupported regex flag '{flag}' (only 'i' and 's' are supported)", pos + index
            )
        if flag in flags[:index]:
            raise source.error(f"repeated regex flag '{flag}'", pos + index)
    end = flags_match.end()
    return Token("regex", text[start:end], start, end, ("".join(pattern), flags, offsets))
