"""EBNF front end: the ``::=`` grammar family of XGrammar and llama.cpp (GBNF) to IR.

Syntax (see docs/ebnf.md)::

    root ::= "{" ws pair ("," ws pair)* "}"     # a comment
    pair ::= [a-z]+ ws ":" ws value
    name[lazy] ::= [^>]+ ">"

A rule runs until the next ``name ::=`` (so rules may span lines). Every rule becomes a
non-terminal IR ``Rule``; EBNF has no terminals, the literal and class leaves are the lexemes.
Besides the core syntax, XGrammar's ``Regex("...")``, ``Token(ids...)``,
``ExcludeToken(ids...)``, ``TagDispatch(...)`` and ``TokenTagDispatch(...)`` macros are
accepted (the dispatch macros are lowered in ``ebnf_dispatch``); its lookahead assertions
``(= ...)`` are rejected with a clear error. XGrammar's EBNF has no ``/regex/``
terminals, so neither does this one.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gramkiln.frontend._regex_exprs import flat_choice, merged_seq
from gramkiln.frontend._regex_unicode import ASCII_DIGIT, ASCII_SPACE, ASCII_WORD
from gramkiln.frontend.ebnf_dispatch import (
    DispatchSpec,
    TokenDispatchSpec,
    lower_tag_dispatch,
    lower_token_dispatch,
)
from gramkiln.frontend.regex import MAX_REPEAT, RegexError, parse_regex
from gramkiln.ir import (
    CharClass,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    RuleOptions,
    Span,
    SpecialToken,
    TokenSet,
    walk,
)
from gramkiln.ir.memo import operation
from gramkiln.ir.nodes import (
    MAX_CODEPOINT,
    MAX_TOKEN_ID,
    SURROGATES,
    complement_ranges,
    normalise_ranges,
)
from pydantic import ValidationError

from gramkiln.errors import GrammarError

__all__ = ["parse_ebnf"]

LANGUAGE = "EBNF"
# Parenthesised groups are bounded so that recursion stays far from Python's stack limit.
MAX_NESTING = 100
# XGrammar names may also contain '.', which GBNF reads as "any character" after a name; see
# _EbnfParser._reference_name for how the two readings are told apart.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
# An IR name starts with a letter or '_' (as in XGrammar); GBNF (llama.cpp) also allows a
# digit or '-' first, which such rules keep in the source (see _ir_names).
_NAME_START_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_GBNF_NAME_START_CHARS = _NAME_START_CHARS | frozenset("0123456789-")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "e": "\x1b",
    # XGrammar also lets these stand for themselves in strings.
    "/": "/",
    "?": "?",
}
# '\x' takes any number of hex digits, as in XGrammar ('\x1F600' is one character; llama.cpp
# reads exactly two); '\u' and '\U' take exactly 4 and 8.
_HEX_ESCAPE_LENGTHS = {"u": 4, "U": 8}
# Inside classes these (XGrammar's list: regex metacharacters) stand for themselves when
# escaped.
_CLASS_ESCAPES = {char: char for char in "][-^/$.*+?(){}|"}
_CLASS_SHORTHANDS = {"d": ASCII_DIGIT, "w": ASCII_WORD, "s": ASCII_SPACE}
_MACROS = ("Regex", "Token", "ExcludeToken", "TagDispatch", "TokenTagDispatch")
_T = TypeVar("_T")
_DECIMAL = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _ir_names(names: set[str]) -> dict[str, str]:
    """IR names for the rule names that cannot be IR names (a leading digit or '-')."""
    taken = set(names)
    renamed: dict[str, str] = {}
    for name in sorted(names):
        if name[0] in _NAME_START_CHARS:
            continue
        candidate = "_" + name
        while candidate in taken:
            candidate = "_" + candidate
        taken.add(candidate)
        renamed[name] = candidate
    return renamed


@operation()
def parse_ebnf(source: str, root: str = "root") -> GrammarIR:
    """Parse an EBNF/GBNF grammar whose entry rule is ``root`` into a verified IR grammar.

    Raises :class:`GrammarError` (language ``EBNF``) with line, column, the source line and a
    caret for every syntax error, undefined or duplicate rule, and a missing root rule.
    """
    if not isinstance(source, str):
        raise TypeError(f"an EBNF grammar must be a str, not {type(source).__name__}")
    return _EbnfParser(source, root).parse()


def _cycle_reached(start: str, children: dict[str, list[str]]) -> list[str] | None:
    """A cycle of rule references reachable from ``start`` (as the names along it, first
    name repeated at the end), or None; iterative, so that long rule chains cannot overflow."""
    on_path: dict[str, int] = {}
    path: list[str] = []
    done: set[str] = set()
    stack: list[tuple[str, int]] = [(start, 0)]
    while stack:
        name, index = stack.pop()
        if index == 0:
            if name in on_path:
                return path[on_path[name] :] + [name]
            if name in done or name not in children:
                continue
            on_path[name] = len(path)
            path.append(name)
        if index < len(children[name]):
            stack.append((name, index + 1))
            stack.append((children[name][index], 0))
        else:
            path.pop()
            del on_path[name]
            done.add(name)
    return None


def _is_decimal(text: str) -> bool:
    """``12``, ``0.7``, ``.5``, ``1e-3``: a plain unsigned decimal number (no inf, no nan)."""
    return _DECIMAL.fullmatch(text) is not None


@dataclass
class _RuleHeader:
    name: str
    offset: int
    options: RuleOptions


class _EbnfParser:
    """Recursive-descent parser over the source text; ``pos`` is the next unread offset."""

    def __init__(self, source: str, root: str) -> None:
        self.source = source
        self.root = root
        self.pos = 0
        self.depth = 0
        self.line_starts = [0] + [i + 1 for i, char in enumerate(source) if char == "\n"]
        # Every rule reference with its offset, checked once all rules are known.
        self.references: list[tuple[str, int]] = []
        # Names of all rules: a macro name followed by '(' is a macro call unless a rule
        # of that name exists.
        self.defined_names = self._prescan_rule_names()
        # GBNF names may start with a digit or '-' (llama.cpp's schema converter writes
        # `-kv ::= ...`); IR names start with a letter or '_', so those rules get a fresh one.
        self.ir_names = _ir_names(self.defined_names)
        # Helper rules that macros expand to, added after the user's rules.
        self.macro_rules: list[Rule] = []
        self.macro_count = 0

    # -- helpers ----------------------------------------------------------------------------
    def error(self, message: str, offset: int | None = None) -> GrammarError:
        """A located EBNF error (default position: the current one)."""
        return GrammarError.at(
            LANGUAGE, message, self.source, self.pos if offset is None else offset
        )

    def peek(self, delta: int = 0) -> str:
        index = self.pos + delta
        return self.source[index] if index < len(self.source) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.source)

    def skip_space(self) -> None:
        """Skip white space (newlines included) and ``#`` comments."""
        while not self.at_end():
            char = self.peek()
            if char in " \t\r\n":
                self.pos += 1
            elif char == "#":
                end = self.source.find("\n", self.pos)
                self.pos = len(self.source) if end < 0 else end + 1
            else:
                return

    def span_at(self, offset: int) -> Span:
        """The 1-based line and column of ``offset``."""
        line = bisect.bisect_right(self.line_starts, offset)
        return Span(line=line, column=offset - self.line_starts[line - 1] + 1)

    def _name_end(self, start: int) -> int:
        end = start
        while end < len(self.source) and self.source[end] in _NAME_CHARS:
            end += 1
        return end

    def _header_end(self, start: int) -> int | None:
        """If ``start`` begins ``name ::=`` or ``name[...] ::=``, the offset of its ``::=``."""
        end = self._name_end(start)
        if end == start:
            return None
        index = end
        while index < len(self.source) and self.source[index] in " \t":
            index += 1
        if index < len(self.source) and self.source[index] == "[":
            close = self.source.find("]", index)
            newline = self.source.find("\n", index)
            if close < 0 or (0 <= newline < close):
                return None
            index = close + 1
            while index < len(self.source) and self.source[index] in " \t":
                index += 1
        return index if self.source.startswith("::=", index) else None

    def _prescan_rule_names(self) -> set[str]:
        """Names of all rules, found from each ``::=`` backwards (cheap: one pass of find)."""
        names: set[str] = set()
        index = self.source.find("::=")
        while index >= 0:
            name_end = index
            while name_end > 0 and self.source[name_end - 1] in " \t":
                name_end -= 1
            if name_end > 0 and self.source[name_end - 1] == "]":
                open_at = self.source.rfind("[", 0, name_end)
                name_end = open_at if open_at >= 0 else name_end
                while name_end > 0 and self.source[name_end - 1] in " \t":
                    name_end -= 1
            name_start = name_end
            while name_start > 0 and self.source[name_start - 1] in _NAME_CHARS:
                name_start -= 1
            if name_start < name_end and self._header_end(name_start) == index:
                names.add(self.source[name_start:name_end])
            index = self.source.find("::=", index + 3)
        return names

    # -- rules ------------------------------------------------------------------------------
    def parse(self) -> GrammarIR:
        rules: list[Rule] = []
        first_definition: dict[str, int] = {}
        self.skip_space()
        while not self.at_end():
            header = self._rule_header()
            if header.name in first_definition:
                line = self.span_at(first_definition[header.name]).line
                raise self.error(
                    f"rule '{header.name}' is defined more than once (first on line {line})",
                    header.offset,
                )
            first_definition[header.name] = header.offset
            body = self._alternation()
            self.skip_space()
            if self.peek() == ")":
                raise self.error("unbalanced ')': no group is open")
            if not self.at_end() and self._header_end(self.pos) is None:
                raise self.error(f"unexpected character {self.peek()!r}")
            rules.append(
                Rule(
                    name=self.ir_names.get(header.name, header.name),
                    body=body,
                    options=header.options,
                    span=self.span_at(header.offset),
                )
            )
        for name, offset in self.references:
            if name not in first_definition:
                raise self.error(f"undefined rule '{name}'", offset)
        if self.root not in first_definition:
            # At the first rule (not at a blank first line, where the caret would show nothing).
            first = min(first_definition.values(), default=len(self.source.rstrip()))
            raise self.error(f"the root rule '{self.root}' is not defined", first)
        rules.extend(self.macro_rules)
        self._refuse_recursive_lazy_bodies(rules, first_definition)
        start = self.ir_names.get(self.root, self.root)
        return GrammarIR(start=start, rules=tuple(rules)).verify()

    def _refuse_recursive_lazy_bodies(
        self, rules: list[Rule], first_definition: dict[str, int]
    ) -> None:
        """A lazy body compiles to one automaton (rules it names are inlined): it may not reach
        a recursive rule. Said here, at the lazy rule, rather than by the compiler."""
        children = {
            rule.name: sorted({n.name for n in walk(rule.body) if isinstance(n, Ref)})
            for rule in rules
        }
        source_names = {ir: source for source, ir in self.ir_names.items()}
        for rule in rules:
            if not rule.options.lazy:
                continue
            cycle = _cycle_reached(rule.name, children)
            if cycle:
                shown = " -> ".join(source_names.get(n, n) for n in cycle)
                name = source_names.get(rule.name, rule.name)
                raise self.error(
                    f"lazy rule '{name}' must compile to one automaton, but it reaches a "
                    f"recursive rule ({shown})",
                    first_definition.get(name, 0),
                )

    def _rule_header(self) -> _RuleHeader:
        start = self.pos
        end = self._name_end(start)
        if end == start:
            if self.source.startswith("::=", start):
                raise self.error("expected a rule name before '::='")
            raise self.error(f"expected a rule name, found {self.peek()!r}")
        name = self.source[start:end]
        if name[0] not in _GBNF_NAME_START_CHARS:
            raise self.error(
                f"rule name '{name}' must start with a letter, a digit, '_' or '-'", start
            )
        self.pos = end
        self._skip_blanks()
        options = RuleOptions()
        if self.peek() == "[":
            options = self._rule_options(name)
            self._skip_blanks()
        if not self.source.startswith("::=", self.pos):
            raise self.error(f"expected '::=' after rule name '{name}'")
        self.pos += 3
        return _RuleHeader(name, start, options)

    def _skip_blanks(self) -> None:
        while self.peek() in (" ", "\t") and self.peek():
            self.pos += 1

    def _rule_options(self, rule_name: str) -> RuleOptions:
        """``[lazy, max_tokens=N, capture, capture="x"]`` after a rule name."""
        open_at = self.pos
        close = self.source.find("]", self.pos)
        newline = self.source.find("\n", self.pos)
        if close < 0 or (0 <= newline < close):
            raise self.error("unterminated rule options: missing ']'", open_at)
        values: dict[str, object] = {}
        item_at = open_at + 1
        for raw in self.source[self.pos + 1 : close].split(","):
            item = raw.strip()
            key, has_value, value = (part.strip() for part in item.partition("="))
            # Point at the item itself, past any blanks before it.
            error_at = item_at + (len(raw) - len(raw.lstrip()))
            item_at += len(raw) + 1
            if key == "lazy" and not has_value:
                values["lazy"] = True
            elif key == "max_tokens" and has_value and value.isascii() and value.isdigit():
                values["max_tokens"] = int(value)
            elif key == "capture" and not has_value:
                values["capture"] = rule_name
            elif key == "capture" and len(value) >= 2 and value[0] == value[-1] == '"':
                values["capture"] = value[1:-1]
            elif key == "temperature" and has_value and _is_decimal(value):
                # A sampling setting carried in the IR, as the Lark front end does.
                values["temperature"] = float(value)
            elif key in ("lazy", "max_tokens", "capture", "temperature"):
                raise self.error(f"bad value for rule option '{key}': {item!r}", error_at)
            else:
                raise self.error(f"unknown rule option {item!r}", error_at)
        self.pos = close + 1
        try:
            return RuleOptions(**values)  # type: ignore[arg-type]
        except ValidationError as problem:
            reason = problem.errors()[0]["msg"].removeprefix("Value error, ")
            raise self.error(f"bad rule options: {reason}", open_at) from None

    # -- expressions --------------------------------------------------------------------------
    def _alternation(self) -> Expr:
        alternatives = [self._sequence()]
        while True:
            self.skip_space()
            if self.peek() != "|":
                break
            self.pos += 1
            alternatives.append(self._sequence())
        return flat_choice(alternatives)

    def _sequence(self) -> Expr:
        items: list[Expr] = []
        while True:
            self.skip_space()
            if self.at_end() or self.peek() in "|)":
                break
            if self._header_end(self.pos) is not None:
                break  # the next rule starts here
            items.append(self._postfix())
        return merged_seq(items)

    def _postfix(self) -> Expr:
        """An element with at most one quantifier (as in XGrammar: ``x*?`` is an error)."""
        element = self._element()
        if not self._skip_space_before(frozenset("*+?{")):
            return element
        char = self.peek()
        if char in "*+?":
            self.pos += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        else:
            low, high = self._bounds()
        if self._skip_space_before(frozenset("*+?{")):
            raise self.error(f"multiple repeat: {self.peek()!r} follows another quantifier")
        return Repeat(item=element, min=low, max=high)

    def _skip_space_before(self, wanted: frozenset[str]) -> bool:
        """Skip white space and comments if one of ``wanted`` follows them (XGrammar and
        llama.cpp allow blanks before a quantifier: ``"c" {0, 2}``); else move nothing."""
        start = self.pos
        self.skip_space()
        if self.peek() and self.peek() in wanted:
            return True
        self.pos = start
        return False

    def _bounds(self) -> tuple[int, int | None]:
        start = self.pos
        close = self.source.find("}", start)
        newline = self.source.find("\n", start)
        if close < 0 or (0 <= newline < close):
            raise self.error("unterminated repetition bounds: missing '}'", start)
        text = self.source[start + 1 : close]
        spelled = self.source[start : close + 1]
        low_text, comma, high_text = (part.strip() for part in text.partition(","))
        if comma and high_text == "-1":
            high_text = ""  # XGrammar prints an unbounded repetition as {m, -1}
        # At least one bound is written: `{,}` (and `{,-1}`) would be a star in disguise.
        if not (low_text or high_text) or not all(
            p.isascii() and p.isdigit() for p in (low_text, high_text) if p
        ):
            raise self.error(
                f"bad repetition bounds {spelled}: expected {{m}}, {{m,}}, {{m,n}} or {{,n}}",
                start,
            )
        low = int(low_text) if low_text else 0
        high = int(high_text) if high_text else (None if comma else low)
        for bound in (low, high):
            if bound is not None and bound > MAX_REPEAT:
                raise self.error(
                    f"bad repetition bounds {spelled}: {bound} exceeds the limit of {MAX_REPEAT:,}",
                    start,
                )
        if high is not None and high < low:
            raise self.error(
                f"bad repetition bounds {spelled}: the minimum is greater than the maximum",
                start,
            )
        self.pos = close + 1
        return low, high

    def _element(self) -> Expr:
        start = self.pos
        char = self.peek()
        if char == '"':
            text, _ = self._string()
            return Literal(text=text) if text else Empty()
        if char == "[":
            return self._char_class()
        if char == "(":
            return self._group()
        if char == ".":
            self.pos += 1
            return CharClass.of([(0, MAX_CODEPOINT)])
        if char in _GBNF_NAME_START_CHARS and (char != "-" or self.peek(1) in _NAME_CHARS):
            name = self._reference_name(start)
            self.pos = start + len(name)
            if name in _MACROS and name not in self.defined_names and self.peek() == "(":
                return self._macro(name, start)
            self.references.append((name, start))
            return Ref(name=self.ir_names.get(name, name))
        if char == "<" or (char == "!" and self.peek(1) == "<"):
            return self._token_element()
        if char in "*+?{":
            raise self.error(f"nothing to repeat before {char!r}")
        if char == "/":
            raise self.error("'/regex/' terminals are not part of EBNF; write Regex(\"...\")")
        if char == "'":
            raise self.error("strings use double quotes in EBNF")
        raise self.error(f"unexpected character {char!r}")

    def _reference_name(self, start: int) -> str:
        """The rule name that starts at ``start``. A dotted name (XGrammar) is taken whole when
        a rule of that name exists; otherwise, when the part before its first '.' names a
        rule, the name ends there and the '.' is GBNF's any-character element (``ws.``)."""
        name = self.source[start : self._name_end(start)]
        head = name.split(".", 1)[0]
        if name not in self.defined_names and head != name and head in self.defined_names:
            return head
        return name

    def _group(self) -> Expr:
        open_at = self.pos
        if self.peek(1) == "=":
            # XGrammar uses them as hints; an exact matcher would have to enforce them, which
            # a context-free grammar cannot express in general.
            raise self.error(
                "XGrammar lookahead assertions '(= ...)' are not supported: remove it (the "
                "language is unchanged when the grammar already implies it)",
                open_at,
            )
        if self.depth >= MAX_NESTING:
            raise self.error(f"groups are nested more than {MAX_NESTING} deep", open_at)
        self.pos += 1
        self.depth += 1
        body = self._alternation()
        self.depth -= 1
        self.skip_space()
        if self.peek() != ")":
            raise self.error("missing ')': this group is never closed", open_at)
        self.pos += 1
        return body

    # -- strings and classes --------------------------------------------------------------------
    def _string(self) -> tuple[str, list[int]]:
        """Read ``"..."``; returns the text and the source offset of each of its characters."""
        open_at = self.pos
        self.pos += 1
        chars: list[str] = []
        offsets: list[int] = []
        while True:
            char = self.peek()
            if char in ("", "\n", "\r"):
                raise self.error("unterminated string literal", open_at)
            if char == '"':
                self.pos += 1
                offsets.append(self.pos - 1)  # where an error at the end should point
                return "".join(chars), offsets
            offsets.append(self.pos)
            chars.append(chr(self._string_char({})))

    def _string_char(self, extra_escapes: dict[str, str]) -> int:
        """One possibly escaped character of a string or class, as a code point."""
        start = self.pos
        char = self.peek()
        if char != "\\":
            self.pos += 1
            return self._scalar(ord(char), start)
        escaped = self.peek(1)
        if escaped in _SIMPLE_ESCAPES or escaped in extra_escapes:
            self.pos += 2
            return ord(_SIMPLE_ESCAPES.get(escaped) or extra_escapes[escaped])
        if escaped == "x":
            end = self.pos + 2
            while end < len(self.source) and self.source[end] in _HEX_DIGITS:
                end += 1
            digits = self.source[self.pos + 2 : end]
            if not digits:
                raise self.error("invalid escape '\\x': expected hex digits", start)
            self.pos = end
            value = int(digits, 16)
            if value > MAX_CODEPOINT:
                raise self.error(f"code point U+{value:X} is out of range", start)
            return self._scalar(value, start)
        if escaped in _HEX_ESCAPE_LENGTHS:
            count = _HEX_ESCAPE_LENGTHS[escaped]
            digits = self.source[self.pos + 2 : self.pos + 2 + count]
            if len(digits) != count or not set(digits) <= _HEX_DIGITS:
                raise self.error(
                    f"invalid escape '\\{escaped}': expected {count} hex digits", start
                )
            self.pos += 2 + count
            value = int(digits, 16)
            if value > MAX_CODEPOINT:
                raise self.error(f"code point U+{value:X} is out of range", start)
            return self._scalar(value, start)
        if escaped == "":
            raise self.error("unterminated string literal", start)
        raise self.error(f"invalid escape '\\{escaped}'", start)

    def _class_char(self, open_at: int) -> int:
        """One character of a class; a backslash at the end of the line leaves it open."""
        if self.peek() in ("", "\n", "\r") or (
            self.peek() == "\\" and self.peek(1) in ("", "\n", "\r")
        ):
            raise self.error("unterminated character class: missing ']'", open_at)
        return self._string_char(_CLASS_ESCAPES)

    def _scalar(self, value: int, offset: int) -> int:
        if SURROGATES[0] <= value <= SURROGATES[1]:
            raise self.error(f"surrogate code point U+{value:04X} cannot be matched", offset)
        return value

    def _char_class(self) -> CharClass:
        open_at = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            char = self.peek()
            if char in ("", "\n", "\r"):
                raise self.error("unterminated character class: missing ']'", open_at)
            if char == "]":
                self.pos += 1
                return CharClass.of(normalise_ranges(ranges), negated=negated)
            if char == "\\" and self.peek(1).lower() in _CLASS_SHORTHANDS:
                letter = self.peek(1)
                self.pos += 2
                base = _CLASS_SHORTHANDS[letter.lower()]
                if letter.isupper():
                    ranges.extend(complement_ranges(tuple(base)))
                else:
                    ranges.extend(base)
                continue
            low_at = self.pos
            low = self._class_char(open_at)
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self._class_char(open_at)
                if low > high:
                    spelled = self.source[low_at : self.pos]
                    raise self.error(
                        f"bad character range '{spelled}': the start is after the end", low_at
                    )
                ranges.append((low, high))
            else:
                ranges.append((low, low))

    # -- llama.cpp token elements -------------------------------------------------------------
    def _token_element(self) -> Expr:
        """``<[id]>`` / ``!<[id]>`` (a token by id, or any other token) and ``<text>`` (the
        special token whose text is ``<text>``)."""
        start = self.pos
        negated = self.peek() == "!"
        if negated:
            self.pos += 1
        close = self.source.find(">", self.pos)
        newline = self.source.find("\n", self.pos)
        if close < 0 or (0 <= newline < close):
            raise self.error("unterminated token: missing '>'", start)
        inside = self.source[self.pos + 1 : close]
        self.pos = close + 1
        if inside.startswith("[") and inside.endswith("]"):
            digits = inside[1:-1].strip()
            if not (digits.isascii() and digits.isdigit()):
                raise self.error(f"bad token id {inside!r}: expected <[N]>", start)
            if int(digits) > MAX_TOKEN_ID:
                raise self.error(
                    f"token id {int(digits)} is beyond the largest token id ({MAX_TOKEN_ID:,})",
                    start,
                )
            return TokenSet(ranges=((int(digits), int(digits)),), negated=negated)
        if not inside:
            raise self.error("empty token '<>'", start)
        if negated:
            raise self.error(
                f"negated token text '!<{inside}>' is not supported; use its id: !<[N]>", start
            )
        return SpecialToken(text=f"<{inside}>")

    # -- XGrammar macros -----------------------------------------------------------------------
    def _macro(self, name: str, start: int) -> Expr:
        self.pos += 1  # the '('
        self.skip_space()
        if name == "Regex":
            return self._regex_macro(start)
        if name == "TagDispatch":
            return self._tag_dispatch(start)
        if name == "TokenTagDispatch":
            return self._token_tag_dispatch(start)
        ids: list[int] = []
        while True:
            self.skip_space()
            digits_at = self.pos
            while self.peek().isdigit() and self.peek().isascii():
                self.pos += 1
            if digits_at == self.pos:
                raise self.error(f"{name}() takes non-negative integer token ids")
            ids.append(int(self.source[digits_at : self.pos]))
            if ids[-1] > MAX_TOKEN_ID:
                raise self.error(
                    f"token id {ids[-1]} is beyond the largest token id ({MAX_TOKEN_ID:,})",
                    digits_at,
                )
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() == ")":
                self.pos += 1
                break
            raise self.error(f"expected ',' or ')' in {name}(...)")
        ranges = tuple(normalise_ranges([(i, i) for i in ids]))
        return TokenSet(ranges=ranges, negated=name == "ExcludeToken")

    def _fresh_rule_name(self, hint: str) -> str:
        """A name for a macro's helper rule that no rule of the grammar uses."""
        name = f"tag_dispatch_{self.macro_count}_{hint}"
        while name in self.defined_names:
            name = "_" + name
        self.defined_names.add(name)
        return name

    def _dispatch_arguments(self, macro: str, spec: DispatchSpec | TokenDispatchSpec) -> None:
        """Read ``arg, arg, ...)`` of a dispatch macro into ``spec``: positional ``(trigger,
        rule)`` pairs and ``name=value`` options, in any order, with an optional trailing
        comma."""
        seen: set[str] = set()
        while True:
            self.skip_space()
            if self.peek() == ")":
                self.pos += 1
                return
            at = self.pos
            if self.peek() == "(":
                self._dispatch_pair(macro, spec, at)
            elif self.peek() in _NAME_START_CHARS:
                end = self._name_end(at)
                keyword = self.source[at:end]
                self.pos = end
                self.skip_space()
                if self.peek() != "=":
                    raise self.error(f"expected '=' after '{keyword}' in {macro}(...)")
                self.pos += 1
                self.skip_space()
                if keyword in seen:
                    raise self.error(f"{macro}(...) option '{keyword}' is given twice", at)
                seen.add(keyword)
                self._dispatch_option(macro, spec, at, keyword)
            else:
                raise self.error(
                    f"{macro}(...) takes (trigger, rule) pairs and name=value options, "
                    f"found {self.peek()!r}"
                )
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != ")":
                raise self.error(f"expected ',' or ')' in {macro}(...)")

    def _dispatch_pair(self, macro: str, spec: DispatchSpec | TokenDispatchSpec, at: int) -> None:
        """``("tag", rule)`` (or ``(token_id, rule)``), appended to ``spec.pairs``."""
        token_level = isinstance(spec, TokenDispatchSpec)
        self.pos += 1  # the '('
        self.skip_space()
        trigger: int | str = self._token_id(macro) if token_level else self._dispatch_string("tag")
        self.skip_space()
        if self.peek() != ",":
            raise self.error(f"expected ',' after the {'token' if token_level else 'tag'}")
        self.pos += 1
        self.skip_space()
        rule_at = self.pos
        end = self._name_end(rule_at)
        if end == rule_at or not (
            self.source[rule_at] in _NAME_START_CHARS or self.source[rule_at:end] in self.ir_names
        ):
            raise self.error(f"expected a rule name in a {macro}(...) pair")
        rule_name = self.source[rule_at:end]
        self.references.append((rule_name, rule_at))
        self.pos = end
        self.skip_space()
        if self.peek() != ")":
            raise self.error(f"expected ')' to close the {macro}(...) pair")
        self.pos += 1
        if any(existing == trigger for existing, _ in spec.pairs):
            raise self.error(f"{macro}(...) lists the trigger {trigger!r} twice", at)
        spec.pairs.append((trigger, self.ir_names.get(rule_name, rule_name)))  # type: ignore[arg-type]

    def _dispatch_option(
        self, macro: str, spec: DispatchSpec | TokenDispatchSpec, at: int, keyword: str
    ) -> None:
        """The value of ``keyword=`` stored into ``spec``."""
        if isinstance(spec, TokenDispatchSpec):
            if keyword == "loop_after_dispatch":
                spec.loop_after_dispatch = self._boolean(keyword)
            elif keyword == "excludes":
                spec.excludes.extend(self._tuple(lambda: self._token_id(macro)))
            else:
                raise self.error(f"unknown {macro}(...) option '{keyword}'", at)
            return
        if keyword in ("loop_after_dispatch", "stop_eos"):
            setattr(spec, keyword, self._boolean(keyword))
        elif keyword == "excludes":
            spec.excludes.extend(self._tuple(lambda: self._dispatch_string("excluded string")))
        elif keyword in ("stops", "stop_str"):  # XGrammar reads the older name too
            spec.stops.extend(self._tuple(lambda: self._dispatch_string("stop string")))
        else:
            raise self.error(f"unknown {macro}(...) option '{keyword}'", at)

    def _boolean(self, keyword: str) -> bool:
        for word, value in (("true", True), ("false", False)):
            if self.source.startswith(word, self.pos) and self._name_end(self.pos) == (
                self.pos + len(word)
            ):
                self.pos += len(word)
                return value
        raise self.error(f"'{keyword}' takes true or false")

    def _tuple(self, read_item: Callable[[], _T]) -> list[_T]:
        """``(item, item, ...)`` with an optional trailing comma; ``()`` is empty."""
        if self.peek() != "(":
            raise self.error('expected a parenthesised tuple, e.g. ("a", "b")')
        self.pos += 1
        items: list[_T] = []
        while True:
            self.skip_space()
            if self.peek() == ")":
                self.pos += 1
                return items
            items.append(read_item())
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != ")":
                raise self.error("expected ',' or ')' in a tuple")

    def _dispatch_string(self, what: str) -> str:
        at = self.pos
        if self.peek() != '"':
            raise self.error(f"expected a {what} in double quotes")
        text, _ = self._string()
        if not text:
            raise self.error(f"a TagDispatch {what} must not be empty", at)
        return text

    def _token_id(self, macro: str) -> int:
        digits_at = self.pos
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        if digits_at == self.pos:
            raise self.error(f"{macro}(...) takes non-negative integer token ids")
        return int(self.source[digits_at : self.pos])

    def _tag_dispatch(self, start: int) -> Expr:
        """``TagDispatch(("tag", rule), ..., stop_eos=, stops=, loop_after_dispatch=,
        excludes=)``, lowered by :func:`lower_tag_dispatch`."""
        spec = DispatchSpec()
        self._dispatch_arguments("TagDispatch", spec)
        if not spec.stop_eos and not spec.stops:
            raise self.error("TagDispatch(...) needs stop_eos=true or some stops", start)
        for exclude in spec.excludes:
            for tag, _ in spec.pairs:
                if tag.startswith(exclude):
                    raise self.error(
                        f"TagDispatch(...) excluded string {exclude!r} is a prefix of the "
                        f"tag {tag!r}",
                        start,
                    )
        self.macro_count += 1
        expr, rules = lower_tag_dispatch(spec, self._fresh_rule_name, self.span_at(start))
        self.macro_rules.extend(rules)
        return expr

    def _token_tag_dispatch(self, start: int) -> Expr:
        """``TokenTagDispatch((token_id, rule), ..., loop_after_dispatch=, excludes=)``."""
        spec = TokenDispatchSpec()
        self._dispatch_arguments("TokenTagDispatch", spec)
        overlap = sorted({token for token, _ in spec.pairs} & set(spec.excludes))
        if overlap:
            raise self.error(
                f"TokenTagDispatch(...) token {overlap[0]} is both a trigger and excluded", start
            )
        return lower_token_dispatch(spec)

    def _regex_macro(self, start: int) -> Expr:
        if self.peek() != '"':
            raise self.error('Regex() takes one string argument: Regex("pattern")')
        pattern, offsets = self._string()
        self.skip_space()
        if self.peek() != ")":
            raise self.error('Regex() takes one string argument: Regex("pattern")')
        self.pos += 1
        try:
            return parse_regex(pattern, lazy_as_greedy=True)
        except RegexError as problem:
            # Point into the EBNF source at the character the pattern error names.
            raise self.error(problem.message, offsets[problem.offset]) from None
