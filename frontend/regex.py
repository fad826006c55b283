"""Regex front end: a hand-written parser from a regular expression to an IR expression.

Two dialects share one parser:

* ``"python"`` (Lark ``/.../`` terminals, ``Grammar.from_regex``): Python ``re`` syntax with
  ASCII meanings for ``\\d \\w \\s``, plus XGrammar's ``\\e`` (ESC) and ``\\cX`` (control
  character), which Python rejects. ``Grammar.from_regex`` reads lazy quantifiers as greedy
  ones (a full match has the same strings either way); embedded patterns reject them.
* ``"ecma"`` (JSON Schema ``pattern``): ECMA-262 with the ``u`` flag; ``\\s`` is ECMA white
  space, ``.`` excludes every line terminator, lazy quantifiers are read as greedy ones
  (the same language).

Patterns are regular languages matched as a whole (full-match semantics). ``^`` and ``$`` are
accepted only at the edges of the pattern: where nothing can precede ``^`` / follow ``$`` in
a top-level alternative, possibly inside (unrepeated) groups, as in ``^(a|$)``. There they
are no-ops for :func:`parse_regex`, and for :func:`search_regex` they decide whether a match
may float inside the string. Constructs that are not regular or whose meaning depends on
match order (look-around, backreferences, possessive quantifiers, word boundaries, and lazy
quantifiers where not read as greedy) are rejected with a :class:`RegexError` naming the
construct and its position.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field, replace
from functools import lru_cache

from gramkiln.frontend._regex_exprs import flat_choice, merged_seq
from gramkiln.frontend._regex_unicode import (
    ASCII_DIGIT,
    ASCII_SPACE,
    ASCII_WORD,
    ECMA_LINE_TERMINATORS,
    ECMA_SPACE,
    case_variants,
    fold_ranges,
    property_ranges,
)
from gramkiln.ir import Bytes, CharClass, Choice, Empty, Expr, GrammarIR, Literal, Repeat, Rule, Seq
from gramkiln.ir.memo import operation
from gramkiln.ir.nodes import MAX_CODEPOINT, SURROGATES, complement_ranges, normalise_ranges

from gramkiln.errors import GrammarError

__all__ = ["MAX_REPEAT", "RegexError", "parse_regex", "regex_grammar", "search_regex"]

DIALECTS = ("python", "ecma")
# Counted repetitions stay `Repeat` nodes, but a bound this large is almost surely a mistake
# and would make any automaton built from it unusable, so it is rejected up front.
MAX_REPEAT = 1_000_000
# Group nesting is bounded so that recursion stays far from Python's stack limit.
MAX_NESTING = 100
_SUPPORTED_FLAGS = "is"
_HEX_DIGITS = "0123456789abcdefABCDEF"
_OCTAL_DIGITS = "01234567"
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_ANY: list[tuple[int, int]] = [(0, MAX_CODEPOINT)]
_NEWLINE: list[tuple[int, int]] = [(0x0A, 0x0A)]


class RegexError(GrammarError):
    """A regular expression could not be parsed or uses an unsupported construct.

    ``offset`` is the 0-based position in the pattern, so that a front end embedding the
    pattern (Lark ``/.../``, JSON Schema ``pattern``) can re-locate the error in its source.
    """

    def __init__(
        self,
        message: str,
        *,
        language: str = "Regex",
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
        offset: int = 0,
    ) -> None:
        self.offset = offset
        super().__init__(
            message, language=language, line=line, column=column, source_line=source_line
        )

    @classmethod
    def in_pattern(cls, message: str, pattern: str, offset: int) -> RegexError:
        """An error at ``offset`` of ``pattern``, rendered with the pattern line and a caret."""
        error = cls.at("Regex", message, pattern, offset)
        assert isinstance(error, RegexError)
        error.offset = max(0, min(offset, len(pattern)))
        return error


@dataclass(frozen=True)
class _Flags:
    """The flags in force at one point of the pattern (inline groups scope them)."""

    ignore_case: bool = False
    dot_all: bool = False


@dataclass(frozen=True)
class _Branch:
    """An alternative and where its ``^`` / ``$`` anchors are (None: not anchored there)."""

    expr: Expr
    start_at: int | None
    end_at: int | None
    # Python dialect: ``expr`` ends with the newline that Python's '$' may precede at the
    # end of the string, so nothing more may follow this alternative.
    final_newline: bool = False

    @property
    def anchored_start(self) -> bool:
        return self.start_at is not None

    @property
    def anchored_end(self) -> bool:
        return self.end_at is not None


def _matches_empty(expr: Expr) -> bool | None:
    """Whether ``expr`` can match the empty string (None: not decided for this node)."""
    if isinstance(expr, Empty):
        return True
    if isinstance(expr, Literal):
        return expr.text == ""
    if isinstance(expr, Bytes):
        return expr.data == b""
    if isinstance(expr, CharClass):
        return False
    if isinstance(expr, Repeat):
        return True if expr.min == 0 else _matches_empty(expr.item)
    if isinstance(expr, Seq | Choice):
        parts = [
            _matches_empty(e) for e in (expr.items if isinstance(expr, Seq) else expr.alternatives)
        ]
        if isinstance(expr, Seq):
            return False if False in parts else (None if None in parts else True)
        return True if True in parts else (None if None in parts else False)
    return None


def _matches_newline(expr: Expr) -> bool | None:
    """Whether ``expr`` can match exactly ``"\\n"`` (None: not decided for this node)."""
    if isinstance(expr, Empty):
        return False
    if isinstance(expr, Literal):
        return expr.text == "\n"
    if isinstance(expr, Bytes):
        return expr.data == b"\n"
    if isinstance(expr, CharClass):
        return any(lo <= 0x0A <= hi for lo, hi in expr.positive_ranges())
    if isinstance(expr, Repeat):
        if expr.max == 0:
            return False
        newline = _matches_newline(expr.item)
        if expr.min <= 1 or newline is False:
            return newline
        # Several copies: one gives the newline, the others must match the empty string.
        empty = _matches_empty(expr.item)
        return None if empty is None else newline and empty
    if isinstance(expr, Seq):
        return _sequence_matches_newline(list(expr.items))
    if isinstance(expr, Choice):
        parts = [_matches_newline(e) for e in expr.alternatives]
        return True if True in parts else (None if None in parts else False)
    return None


def _sequence_matches_newline(items: list[Expr]) -> bool | None:
    """Whether the concatenation of ``items`` can match exactly ``"\\n"``: one item gives
    the newline and every other one matches the empty string."""
    empties = [_matches_empty(item) for item in items]
    newlines = [_matches_newline(item) for item in items]
    if None in empties or None in newlines:
        return None
    return any(
        newlines[index] and all(empties[:index] + empties[index + 1 :])
        for index in range(len(items))
    )


@dataclass
class _Partial:
    """A sequence being parsed, for one combination of anchors (see ``_sequence``)."""

    items: list[Expr] = field(default_factory=list)
    start_at: int | None = None
    end_at: int | None = None
    # Mid-pattern anchors: the items before a '^' (after a '$') must match the empty string
    # for the anchor to hold; checked, and those items dropped, when the sequence ends.
    empty_before: int = 0
    empty_after: int | None = None
    # An appended group already ends with the newline a Python '$' may precede (_Branch).
    final_newline: bool = False


@dataclass(frozen=True)
class _ClassAtom:
    """One element inside ``[...]``: a single code point or a whole set (``\\d``, ``\\p{L}``)."""

    ranges: tuple[tuple[int, int], ...]
    single: int | None
    offset: int
    text: str
    negated: bool = False

    def positive(self) -> tuple[tuple[int, int], ...]:
        """The code points of a set atom, with its negation applied."""
        return complement_ranges(self.ranges) if self.negated else self.ranges


def _is_shorthand(atom: _ClassAtom) -> bool:
    r"""``\d \D \w \W \s \S`` (as opposed to a Unicode property or a code point)."""
    return len(atom.text) == 2 and atom.text[1] in "dDwWsS"


def parse_regex(
    pattern: str, flags: str = "", *, dialect: str = "python", lazy_as_greedy: bool | None = None
) -> Expr:
    """Parse ``pattern`` into an IR expression whose language is the pattern's full matches.

    ``flags`` may contain ``i`` (case-insensitive) and ``s`` (``.`` matches newlines).
    ``dialect`` is ``"python"`` or ``"ecma"``. ``lazy_as_greedy`` says whether a lazy
    quantifier (``*?``, ``{m,n}?``) is read as the greedy one or is an error; None means the
    dialect's default (greedy for ``"ecma"``, an error for ``"python"``, whose callers may
    embed the pattern where a lexer would stop at the shortest match). Raises
    :class:`RegexError` on bad or unsupported syntax.
    """
    branches = _Parser(pattern, flags, dialect, lazy_as_greedy).parse()
    return _alternatives([branch.expr for branch in branches])


@operation()
def regex_grammar(pattern: str, flags: str = "") -> GrammarIR:
    """A grammar with one rule ``start`` matching exactly the full matches of ``pattern``.

    Lazy quantifiers are read as greedy ones: a full match must consume the whole string,
    so ``re.fullmatch`` accepts the same strings either way (as XGrammar's ``from_regex``).
    """
    body = parse_regex(pattern, flags, lazy_as_greedy=True)
    return GrammarIR(start="start", rules=(Rule(name="start", body=body),))


def search_regex(pattern: str) -> Expr:
    """The language of strings that contain a match of the ECMA-262 ``pattern`` (JSON Schema).

    JSON Schema patterns are unanchored: ``ab`` accepts ``xaby``. A top-level alternative
    starting with ``^`` must match at the start of the string, one ending with ``$`` at its
    end, so ``^ab|c$`` accepts strings starting with ``ab`` or ending with ``c``.
    """
    branches = _Parser(pattern, "", "ecma").parse()
    anything = Repeat(item=CharClass.of(_ANY), min=0, max=None)
    shapes = {(branch.anchored_start, branch.anchored_end) for branch in branches}
    if len(shapes) == 1:
        # All alternatives share their anchoring: keep one choice wrapped once.
        anchored_start, anchored_end = shapes.pop()
        body = _alternatives([branch.expr for branch in branches])
        return _wrap_unanchored(body, anchored_start, anchored_end, anything)
    return flat_choice(
        [
            _wrap_unanchored(branch.expr, branch.anchored_start, branch.anchored_end, anything)
            for branch in branches
        ]
    )


def _merge_by_anchoring(branches: list[_Branch]) -> list[_Branch]:
    """Unite the alternatives that share an anchoring, keeping at most eight variants."""
    grouped: dict[tuple[bool, bool, bool], list[_Branch]] = {}
    for branch in branches:
        key = (branch.anchored_start, branch.anchored_end, branch.final_newline)
        grouped.setdefault(key, []).append(branch)
    return [
        _Branch(
            _alternatives([member.expr for member in members]),
            members[0].start_at,
            members[0].end_at,
            members[0].final_newline,
        )
        for members in grouped.values()
    ]


def _wrap_unanchored(body: Expr, anchored_start: bool, anchored_end: bool, anything: Expr) -> Expr:
    """``body`` with any text allowed before it unless anchored at the start, and after it
    unless anchored at the end."""
    if isinstance(body, Empty) and not (anchored_start or anchored_end):
        return anything  # an empty pattern is found in every string
    items: list[Expr] = []
    if not anchored_start:
        items.append(anything)
    items.append(body)
    if not anchored_end:
        items.append(anything)
    return merged_seq(items)


def _alternatives(alternatives: list[Expr]) -> Expr:
    """The union of regex alternatives; when every one is a single character, one class.

    Folding ``a|b`` into ``[ab]`` keeps automata small and gives every spelling of "any
    character" (``.|\\n``, ``[\\s\\S]``, ``(?s:.)``) the same IR, so that later passes can
    recognise any-text terminals by one shape.
    """
    merged = flat_choice(alternatives)
    if not isinstance(merged, Choice):
        return merged
    ranges: list[tuple[int, int]] = []
    for alternative in merged.alternatives:
        if isinstance(alternative, CharClass):
            # Complement over the whole code space (surrogates included) so that a class and
            # its complement unite into exactly the "any code point" class.
            base = alternative.ranges
            ranges.extend(complement_ranges(base) if alternative.negated else base)
        elif isinstance(alternative, Literal) and len(alternative.text) == 1:
            cp = ord(alternative.text)
            variants = case_variants(cp) if alternative.case_insensitive else (cp,)
            ranges.extend((v, v) for v in variants)
        else:
            return merged
    return _class(normalise_ranges(ranges))


@lru_cache(maxsize=4096)
def _plain_literal(cp: int) -> Literal:
    """A one-character literal; IR nodes are immutable, so one instance serves every use."""
    return Literal(text=chr(cp))


def _class(
    ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...], negated: bool = False
) -> CharClass:
    return CharClass.of(list(ranges), negated=negated)


# ---------------------------------------------------------------------------------------------
# the parser


class _Parser:
    """Recursive-descent parser over the pattern text; ``pos`` is the next unread offset."""

    def __init__(
        self, pattern: str, flags: str, dialect: str, lazy_as_greedy: bool | None = None
    ) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown regex dialect {dialect!r}; expected one of {DIALECTS}")
        if not isinstance(pattern, str):
            raise TypeError(f"a regex pattern must be a str, not {type(pattern).__name__}")
        self.pattern = pattern
        self.dialect = dialect
        self.lazy_as_greedy = dialect == "ecma" if lazy_as_greedy is None else lazy_as_greedy
        self.pos = 0
        self.group_names: set[str] = set()
        self.depth = 0
        for flag in flags:
            if flag not in _SUPPORTED_FLAGS:
                raise self.error(f"unsupported regex flag {flag!r} (supported: i, s)", 0)
        self.flags = _Flags(ignore_case="i" in flags, dot_all="s" in flags)

    # -- helpers --------------------------------------------------------------------------
    def error(self, message: str, offset: int | None = None) -> RegexError:
        """A RegexError at ``offset`` (default: the current position)."""
        return RegexError.in_pattern(message, self.pattern, self.pos if offset is None else offset)

    def peek(self, delta: int = 0) -> str:
        index = self.pos + delta
        return self.pattern[index] if index < len(self.pattern) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.pattern)

    # -- structure ------------------------------------------------------------------------
    def parse(self) -> list[_Branch]:
        """Parse the whole pattern into its top-level alternatives."""
        flags = self._leading_global_flags(self.flags)
        branches = self._alternation(flags)
        if not self.at_end():
            # Only an unmatched ')' stops the top-level alternation early.
            raise self.error("unbalanced ')': no group is open")
        return branches

    def _leading_global_flags(self, flags: _Flags) -> _Flags:
        """Consume ``(?i)`` / ``(?s)`` groups at the very start, returning the new flags."""
        while self.pattern.startswith("(?", self.pos):
            end = self.pos + 2
            while end < len(self.pattern) and self.pattern[end].isalpha():
                end += 1
            if end == self.pos + 2 or self.peek(end - self.pos) != ")":
                break
            for index in range(self.pos + 2, end):
                flags = self._apply_flag(flags, self.pattern[index], True, index)
            self.pos = end + 1
        return flags

    def _apply_flag(self, flags: _Flags, flag: str, on: bool, offset: int) -> _Flags:
        if flag == "i":
            return replace(flags, ignore_case=on)
        if flag == "s":
            return replace(flags, dot_all=on)
        raise self.error(f"unsupported inline flag {flag!r} (supported: i, s)", offset)

    def _alternation(self, flags: _Flags) -> list[_Branch]:
        branches = self._sequence(flags)
        while self.peek() == "|":
            self.pos += 1
            branches.extend(self._sequence(flags))
        return branches

    def _sequence(self, flags: _Flags) -> list[_Branch]:
        """One alternative, as the variants its anchors split it into.

        Usually a single variant. A group whose alternatives carry anchors (``^([^,]|$)``)
        splits the sequence into one variant per anchoring, so that anchors stay exact at
        the edges of the pattern while anywhere else they are an error.
        """
        partials = [_Partial()]
        # Whether a following quantifier has something to apply to (the last item of every
        # partial), whether it already has one, and whether that item carried anchors.
        quantifiable = quantified = anchored_atom = False
        while not self.at_end() and self.peek() not in "|)":
            char = self.peek()
            start = self.pos
            if char in "*+?" or (char == "{" and self._brace_quantifier_ahead()):
                if not quantifiable:
                    raise self.error(f"nothing to repeat before {self._quantifier_text()!r}")
                if quantified:
                    raise self.error(
                        f"multiple repeat: {self._quantifier_text()!r} follows another quantifier"
                    )
                if anchored_atom:
                    raise self.error("a group containing an anchor cannot be repeated")
                low, high = self._quantifier()
                for partial in partials:
                    partial.items[-1] = Repeat(item=partial.items[-1], min=low, max=high)
                quantified = True
                continue
            if char == "^":
                if any(partial.end_at is not None for partial in partials):
                    raise self.error("anchor '^' is only supported at the start of the pattern")
                self.pos += 1
                for partial in partials:
                    partial.start_at = start if partial.start_at is None else partial.start_at
                    partial.empty_before = len(partial.items)
                quantifiable = False
                continue
            if char == "$":
                self.pos += 1
                for partial in partials:
                    partial.end_at = start if partial.end_at is None else partial.end_at
                    if partial.empty_after is None:
                        partial.empty_after = len(partial.items)
                quantifiable = False
                continue
            if char == "(":
                variants = self._group(flags)
                if variants is None:  # a comment: transparent for quantifiers, like Python
                    continue
            else:
                variants = [_Branch(self._atom(flags), None, None)]
            partials = self._extend(partials, variants)
            quantifiable, quantified = True, False
            anchored_atom = any(v.start_at is not None or v.end_at is not None for v in variants)
        branches = [
            _Branch(merged_seq(items), partial.start_at, partial.end_at, final_newline)
            for partial in partials
            for items, final_newline in self._anchored_items(partial)
        ]
        if not branches:
            # Every reading needs a non-empty match before a '^' or after a '$': nothing
            # matches (an empty class), which is what the pattern means.
            return [_Branch(CharClass(ranges=()), None, None)]
        return branches

    def _anchored_items(self, partial: _Partial) -> list[tuple[list[Expr], bool]]:
        """The readings of a sequence with mid-pattern anchors applied, each with whether it
        ends with the newline a Python '$' may precede (see ``_Branch.final_newline``).

        The items before its last '^' and after its first '$' can only match the empty
        string there, so they are dropped when they can, and the sequence matches nothing
        (no reading) when they cannot. In the python dialect '$' also holds before a newline
        that ends the string (``re.fullmatch("a$\\n?", "a\\n")``), so the items after it
        may instead match exactly that newline, once for the whole pattern.
        """
        after = len(partial.items) if partial.empty_after is None else partial.empty_after
        before, rest = partial.items[: partial.empty_before], partial.items[after:]
        if not all(self._can_be_empty(item) for item in before):
            return []
        middle = partial.items[partial.empty_before : after]
        readings: list[tuple[list[Expr], bool]] = []
        if all(self._can_be_empty(item) for item in rest):
            readings.append((middle, partial.final_newline))
        if self.dialect == "python" and rest and not partial.final_newline:
            newline = _sequence_matches_newline(rest)
            if newline is None:
                raise self.error("an anchor inside the pattern next to this construct")
            if newline:
                readings.append(([*middle, _plain_literal(0x0A)], True))
        return readings

    def _can_be_empty(self, item: Expr) -> bool:
        empty = _matches_empty(item)
        if empty is None:
            raise self.error("an anchor inside the pattern next to this construct")
        return empty

    def _extend(self, partials: list[_Partial], variants: list[_Branch]) -> list[_Partial]:
        """Append each variant of an atom to each partial sequence, checking its anchors."""
        if len(variants) == 1 and variants[0].start_at is None and variants[0].end_at is None:
            for partial in partials:
                partial.items.append(variants[0].expr)
            return partials
        extended: list[_Partial] = []
        for partial in partials:
            for variant in variants:
                if variant.start_at is not None and partial.end_at is not None:
                    raise self.error(
                        "anchor '^' is only supported at the start of the pattern",
                        variant.start_at,
                    )
                empty_before = partial.empty_before
                if variant.start_at is not None:
                    empty_before = len(partial.items)  # what precedes the group must be empty
                empty_after = partial.empty_after
                if empty_after is None and variant.end_at is not None:
                    empty_after = len(partial.items) + 1  # what follows the group must be empty
                extended.append(
                    _Partial(
                        [*partial.items, variant.expr],
                        partial.start_at if partial.start_at is not None else variant.start_at,
                        partial.end_at if partial.end_at is not None else variant.end_at,
                        empty_before,
                        empty_after,
                        partial.final_newline or variant.final_newline,
                    )
                )
        return extended

    # -- quantifiers ------------------------------------------------------------------------
    def _brace_quantifier_ahead(self) -> bool:
        """Whether the ``{`` at ``pos`` starts ``{m}``, ``{m,}``, ``{m,n}`` or ``{,n}``."""
        index = self.pos + 1
        digits_before = digits_after = 0
        while self.peek(index - self.pos).isdigit() and self.peek(index - self.pos).isascii():
            index += 1
            digits_before += 1
        comma = self.peek(index - self.pos) == ","
        if comma:
            index += 1
            while self.peek(index - self.pos).isdigit() and self.peek(index - self.pos).isascii():
                index += 1
                digits_after += 1
        if self.peek(index - self.pos) != "}":
            return False  # like Python and ECMA's web-compatibility grammar: literal text
        return digits_before > 0 or comma  # "{}" is literal text too

    def _quantifier_text(self) -> str:
        if self.peek() != "{":
            return self.peek()
        end = self.pattern.find("}", self.pos)
        return self.pattern[self.pos : end + 1]

    def _quantifier(self) -> tuple[int, int | None]:
        start = self.pos
        char = self.peek()
        if char == "{":
            end = self.pattern.index("}", self.pos)
            text = self.pattern[self.pos + 1 : end]
            low_text, comma, high_text = text.partition(",")
            self.pos = end + 1
            low = int(low_text) if low_text else 0
            high: int | None = int(high_text) if high_text else (None if comma else low)
            spelled = self.pattern[start : self.pos]
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
        else:
            self.pos += 1
            spelled = char
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        follower = self.peek()
        if follower == "?":
            if self.lazy_as_greedy:
                # A lazy quantifier changes which match a search finds, never whether one
                # exists, so for a searched or fully matched pattern it is the greedy one.
                # Real JSON Schema patterns use it (e.g. "^(.*?)\\.json$").
                self.pos += 1
                return low, high
            raise self.error(f"lazy quantifier '{spelled}?' is not supported", start)
        if follower == "+":
            raise self.error(f"possessive quantifier '{spelled}+' is not supported", start)
        return low, high

    # -- atoms ------------------------------------------------------------------------------
    def _atom(self, flags: _Flags) -> Expr:
        """One atom other than a group: a class, ``.``, an escape or a literal character."""
        char = self.peek()
        if char == "[":
            return self._char_class(flags)
        if char == ".":
            self.pos += 1
            if flags.dot_all:
                return _class(_ANY)
            excluded = ECMA_LINE_TERMINATORS if self.dialect == "ecma" else _NEWLINE
            return _class(excluded, negated=True)
        if char == "\\":
            return self._escape(flags)
        self.pos += 1
        return self._literal(ord(char), flags, self.pos - 1)

    def _literal(self, cp: int, flags: _Flags, offset: int) -> Expr:
        """One code point as a literal, folded to its case partners under the ``i`` flag."""
        if SURROGATES[0] <= cp <= SURROGATES[1]:
            raise self.error(f"surrogate code point U+{cp:04X} cannot be matched", offset)
        if not flags.ignore_case:
            return _plain_literal(cp)
        variants = case_variants(cp)
        if all(v < 0x80 for v in variants):
            # ASCII letters (and uncased ASCII characters) fold exactly like Literal's flag.
            return Literal(text=chr(cp), case_insensitive=True)
        if len(variants) == 1:
            return Literal(text=chr(cp))
        return _class([(v, v) for v in variants])

    def _group(self, flags: _Flags) -> list[_Branch] | None:
        """A parenthesised group as its anchoring variants (None for a comment)."""
        open_at = self.pos
        if self.depth >= MAX_NESTING:
            raise self.error(f"groups are nested more than {MAX_NESTING} deep", open_at)
        self.pos += 1
        if self.peek() == "?":
            flags, is_comment = self._group_extension(flags, open_at)
            if is_comment:
                return None
        self.depth += 1
        branches = self._alternation(flags)
        self.depth -= 1
        if self.peek() != ")":
            raise self.error("missing ')': this group is never closed", open_at)
        self.pos += 1
        return _merge_by_anchoring(branches)

    def _group_extension(self, flags: _Flags, open_at: int) -> tuple[_Flags, bool]:
        """Read what follows ``(?``; returns the flags inside the group and whether it is a
        comment (already consumed, closing parenthesis included)."""
        head = self.pattern[open_at : open_at + 4]
        rejected = (
            ("(?<=", "lookbehind '(?<=' is not supported"),
            ("(?<!", "negative lookbehind '(?<!' is not supported"),
            ("(?=", "lookahead '(?=' is not supported"),
            ("(?!", "negative lookahead '(?!' is not supported"),
            ("(?>", "atomic group '(?>' is not supported"),
            ("(?(", "conditional group '(?(' is not supported"),
        )
        for prefix, message in rejected:
            if head.startswith(prefix):
                raise self.error(message, open_at)
        self.pos += 1  # the '?'
        char = self.peek()
        if char == ":":
            self.pos += 1
            return flags, False
        if char == "#":
            end = self.pattern.find(")", self.pos)
            if end < 0:
                raise self.error("missing ')': this comment is never closed", open_at)
            self.pos = end + 1
            return flags, True
        if char == "P" and self.peek(1) == "=":
            end = self.pattern.find(")", self.pos)
            spelled = self.pattern[open_at : end + 1] if end >= 0 else self.pattern[open_at:]
            raise self.error(f"backreference '{spelled}' is not supported", open_at)
        if char == "P" and self.peek(1) == "<":
            self.pos += 2
            self._group_name(open_at)
            return flags, False
        if char == "P":
            raise self.error(f"unknown group syntax '(?P{self.peek(1)}'", open_at)
        if char == "<":
            self.pos += 1
            self._group_name(open_at)
            return flags, False
        if char.isalpha() or char == "-":
            return self._scoped_flags(flags, open_at), False
        raise self.error(f"unknown group syntax '(?{char}'", open_at)

    def _group_name(self, open_at: int) -> None:
        end = self.pattern.find(">", self.pos)
        if end < 0:
            raise self.error("missing '>' after the group name", open_at)
        name = self.pattern[self.pos : end]
        if not name.isidentifier():
            raise self.error(f"bad group name {name!r}", self.pos)
        if name in self.group_names:
            raise self.error(f"duplicate group name {name!r}", self.pos)
        self.group_names.add(name)
        self.pos = end + 1

    def _scoped_flags(self, flags: _Flags, open_at: int) -> _Flags:
        """Read ``on-off:`` of ``(?on-off:...)``; a flags-only group here is misplaced."""
        on = True
        while not self.at_end() and self.peek() not in ":)":
            char = self.peek()
            if char == "-" and on:
                on = False
            elif char.isalpha():
                flags = self._apply_flag(flags, char, on, self.pos)
            else:
                raise self.error(f"unknown group syntax: unexpected {char!r} in inline flags")
            self.pos += 1
        if self.peek() == ")":
            spelled = self.pattern[open_at : self.pos + 1]
            raise self.error(
                f"global flags {spelled!r} must be at the start of the pattern", open_at
            )
        if self.at_end():
            raise self.error("missing ')': this group is never closed", open_at)
        self.pos += 1  # the ':'
        return flags

    # -- escapes ----------------------------------------------------------------------------
    def _escape(self, flags: _Flags) -> Expr:
        start = self.pos
        self.pos += 1
        if self.at_end():
            raise self.error("pattern ends with a lone backslash", start)
        char = self.peek()
        rejected = {
            "b": "word boundary '\\b' is not supported",
            "B": "non-word-boundary '\\B' is not supported",
            "A": "anchor '\\A' is not supported",
            "Z": "anchor '\\Z' is not supported",
            "z": "anchor '\\z' is not supported",
        }
        if char in rejected:
            raise self.error(rejected[char], start)
        if char == "k" and self.peek(1) == "<":
            end = self.pattern.find(">", self.pos)
            spelled = self.pattern[start : end + 1] if end >= 0 else self.pattern[start:]
            raise self.error(f"backreference '{spelled}' is not supported", start)
        if char in "123456789":
            if self.dialect == "python" and self._three_octal_digits():
                return self._literal(self._octal(), flags, start)
            end = self.pos
            while end < len(self.pattern) and self.pattern[end].isdigit():
                end += 1
            raise self.error(f"backreference '{self.pattern[start:end]}' is not supported", start)
        atom = self._common_escape(start)
        if atom.single is None:
            if flags.ignore_case and not _is_shorthand(atom):
                # A property under `i` matches the case partners of its members (as in
                # Rust's regex, the regex package and ECMA's `iu`): `(?i)\p{Ll}` matches "A".
                # Folded before it is negated, as there: `(?i)\P{Ll}` matches neither "a" nor
                # "A" (folding the complement matched nearly every letter).
                return _class(fold_ranges(atom.ranges), negated=atom.negated)
            return _class(atom.ranges, negated=atom.negated)
        return self._literal(atom.single, flags, start)

    def _three_octal_digits(self) -> bool:
        return all(self.peek(k) in _OCTAL_DIGITS and self.peek(k) for k in range(3))

    def _octal(self) -> int:
        """Read up to three octal digits (Python ``\\0``, ``\\012``, ``\\101``)."""
        digits = ""
        while len(digits) < 3 and self.peek() and self.peek() in _OCTAL_DIGITS:
            digits += self.peek()
            self.pos += 1
        value = int(digits, 8)
        if value > 0o377:
            raise self.error(
                f"octal escape '\\{digits}' is out of range", self.pos - len(digits) - 1
            )
        return value

    def _common_escape(self, start: int) -> _ClassAtom:
        """Escapes valid both inside and outside classes; ``pos`` is just after the ``\\``."""
        char = self.peek()
        self.pos += 1
        spelled = "\\" + char

        def single(cp: int) -> _ClassAtom:
            return _ClassAtom((), cp, start, self.pattern[start : self.pos])

        def multi(
            ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...], negated: bool = False
        ) -> _ClassAtom:
            return _ClassAtom(tuple(ranges), None, start, self.pattern[start : self.pos], negated)

        space = ECMA_SPACE if self.dialect == "ecma" else ASCII_SPACE
        shorthand = {"d": ASCII_DIGIT, "w": ASCII_WORD, "s": space}
        if char in shorthand:
            return multi(shorthand[char])
        if char.lower() in shorthand:
            return multi(shorthand[char.lower()], negated=True)
        if char in _SIMPLE_ESCAPES:
            return single(ord(_SIMPLE_ESCAPES[char]))
        if char == "0":
            if self.dialect == "python":
                self.pos -= 1
                return single(self._octal())
            if self.peek().isdigit():
                raise self.error("invalid escape '\\0' followed by a digit", start)
            return single(0)
        if char == "a" and self.dialect == "python":
            return single(0x07)
        if char == "e" and self.dialect == "python":
            # ESC, as in PCRE and XGrammar; Python's re has no meaning for it (an error there).
            return single(0x1B)
        if char == "x":
            return single(self._hex_digits(2, start, spelled))
        if char == "u":
            if self.peek() == "{":
                return single(self._braced_code_point(start))
            return single(self._utf16_escape(start))
        if char == "U" and self.dialect == "python":
            return single(self._hex_digits(8, start, spelled))
        if char == "N" and self.dialect == "python":
            return single(self._named_character(start))
        if char == "c" and self.peek().isascii() and self.peek().isalpha():
            # A control character (\cJ is LF): ECMA's, and XGrammar's in every dialect;
            # Python's re has no meaning for it (an error there).
            self.pos += 1
            return single(ord(self.pattern[self.pos - 1]) % 32)
        if char in "pP":
            return multi(self._property(start), negated=char == "P")
        if char.isascii() and char.isalnum():
            raise self.error(f"unknown escape '{spelled}'", start)
        # Any other escaped character (punctuation, space, non-ASCII) stands for itself.
        return single(ord(char))

    def _hex_digits(self, count: int, start: int, spelled: str) -> int:
        digits = self.pattern[self.pos : self.pos + count]
        if len(digits) != count or any(d not in _HEX_DIGITS for d in digits):
            raise self.error(f"invalid escape '{spelled}': expected {count} hex digits", start)
        self.pos += count
        value = int(digits, 16)
        if value > MAX_CODEPOINT:
            raise self.error(f"code point U+{value:X} is out of range", start)
        return value

    def _utf16_escape(self, start: int) -> int:
        """``\\uHHHH``; in ECMA a surrogate pair ``\\uD83D\\uDE00`` is one code point."""
        value = self._hex_digits(4, start, "\\u")
        if 0xD800 <= value <= 0xDBFF and self.pattern.startswith("\\u", self.pos):
            saved = self.pos
            self.pos += 2
            low = self._hex_digits(4, saved, "\\u")
            if 0xDC00 <= low <= 0xDFFF:
                return 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
            self.pos = saved
        return value

    def _braced_code_point(self, start: int) -> int:
        end = self.pattern.find("}", self.pos)
        digits = self.pattern[self.pos + 1 : end] if end >= 0 else ""
        if end < 0 or not digits or any(d not in _HEX_DIGITS for d in digits):
            raise self.error("invalid escape '\\u{': expected hex digits and '}'", start)
        self.pos = end + 1
        value = int(digits, 16)
        if value > MAX_CODEPOINT:
            raise self.error(f"code point \\u{{{digits}}} is out of range", start)
        return value

    def _named_character(self, start: int) -> int:
        end = self.pattern.find("}", self.pos)
        if self.peek() != "{" or end < 0:
            raise self.error("invalid escape '\\N': expected '{NAME}'", start)
        name = self.pattern[self.pos + 1 : end]
        try:
            char = unicodedata.lookup(name)
        except KeyError:
            raise self.error(f"unknown Unicode character name {name!r}", start) from None
        self.pos = end + 1
        return ord(char)

    def _property(self, start: int) -> tuple[tuple[int, int], ...]:
        letter = self.pattern[start + 1]
        end = self.pattern.find("}", self.pos)
        if self.peek() != "{" or end < 0:
            raise self.error(f"invalid escape '\\{letter}': expected '{{Property}}'", start)
        name = self.pattern[self.pos + 1 : end]
        self.pos = end + 1
        ranges = property_ranges(name)
        if ranges is None:
            raise self.error(f"unknown Unicode property '\\{letter}{{{name}}}'", start)
        return ranges

    # -- classes ------------------------------------------------------------------------------
    def _char_class(self, flags: _Flags) -> Expr:
        open_at = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        # \d \w \s and their negations keep their own members under `i`: ASCII \W holds the
        # Kelvin sign, whose case partner k would otherwise join it.
        shorthand_ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.at_end():
                raise self.error("unterminated character class: missing ']'", open_at)
            if self.peek() == "]" and not (first and self.dialect == "python"):
                self.pos += 1
                break
            low = self._class_atom(first)
            first = False
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self._class_atom(False)
                if low.single is None or high.single is None:
                    raise self.error(
                        f"bad character range '{low.text}-{high.text}': "
                        "a class escape cannot be a range endpoint",
                        low.offset,
                    )
                if low.single > high.single:
                    raise self.error(
                        f"bad character range '{low.text}-{high.text}': the start is after the end",
                        low.offset,
                    )
                ranges.append((low.single, high.single))
            elif low.single is None:
                if _is_shorthand(low):
                    shorthand_ranges.extend(low.positive())
                elif flags.ignore_case and low.negated:
                    # A negated property under `i` is folded before its negation, as outside a
                    # class; the result holds whole groups of case partners, so the class's own
                    # folding below leaves it as it is.
                    ranges.extend(complement_ranges(fold_ranges(low.ranges)))
                else:
                    ranges.extend(low.positive())
            else:
                ranges.append((low.single, low.single))
        for lo, hi in ranges:
            if lo == hi and SURROGATES[0] <= lo <= SURROGATES[1]:
                raise self.error(f"surrogate code point U+{lo:04X} cannot be matched", open_at)
        merged = normalise_ranges(ranges)
        if flags.ignore_case:
            merged = fold_ranges(merged)
        if shorthand_ranges:
            merged = normalise_ranges([*merged, *shorthand_ranges])
        return _class(merged, negated=negated)

    def _class_atom(self, first: bool) -> _ClassAtom:
        start = self.pos
        char = self.peek()
        if char != "\\":
            self.pos += 1
            return _ClassAtom((), ord(char), start, char)
        self.pos += 1
        if self.at_end():
            raise self.error("pattern ends with a lone backslash", start)
        escaped = self.peek()
        if escaped == "b":
            self.pos += 1
            return _ClassAtom((), 0x08, start, "\\b")
        if escaped == "-":
            self.pos += 1
            return _ClassAtom((), ord("-"), start, "\\-")
        if escaped in "123456789":
            if self.dialect == "python" and escaped in _OCTAL_DIGITS:
                digits_start = self.pos
                value = self._octal()
                return _ClassAtom((), value, start, self.pattern[start : digits_start + 3])
            raise self.error(f"backreference '\\{escaped}' is not supported inside a class", start)
        if escaped in "BAZz":
            raise self.error(f"unknown escape '\\{escaped}' inside a class", start)
        return self._common_escape(start)
