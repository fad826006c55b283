"""Expression nodes of the gramkiln IR.

Every node is a frozen pydantic model with a ``kind`` discriminator, so a tree validates,
hashes, compares by value and round-trips through msgpack without custom code. Spans are
optional and never take part in the canonical text form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, TypeVar
from typing import Literal as TypingLiteral

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_CODEPOINT = 0x10FFFF
# The largest token id any front end accepts: ids are int32 in every engine and tensor.
MAX_TOKEN_ID = 2**31 - 1
SURROGATES = (0xD800, 0xDFFF)


class Node(BaseModel):
    """Base of every IR model: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


NodeT = TypeVar("NodeT", bound=Node)


class Span(Node):
    """A 1-based source location range (end is inclusive of the last character)."""

    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None


class Empty(Node):
    """Matches the empty string."""

    kind: TypingLiteral["empty"] = "empty"
    span: Span | None = None


class Literal(Node):
    """A fixed Unicode string; ``case_insensitive`` folds ASCII letters only."""

    kind: TypingLiteral["literal"] = "literal"
    text: str
    case_insensitive: bool = False
    span: Span | None = None

    @model_validator(mode="after")
    def _ascii_only_folding(self) -> Literal:
        if self.case_insensitive and not self.text.isascii():
            raise ValueError("case-insensitive literals support ASCII characters only")
        return self


class Bytes(Node):
    """A fixed byte string (for byte-level grammars; need not be valid UTF-8)."""

    kind: TypingLiteral["bytes"] = "bytes"
    data: bytes
    span: Span | None = None


class CharClass(Node):
    """One Unicode code point from sorted, disjoint, non-adjacent inclusive ranges.

    ``negated`` complements the set over all scalar values (surrogates excluded). Use
    :meth:`of` to build a normalised class from arbitrary ranges.
    """

    kind: TypingLiteral["class"] = "class"
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False
    span: Span | None = None

    @field_validator("ranges")
    @classmethod
    def _normalised(cls, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        previous_hi = -2
        for lo, hi in ranges:
            if not (0 <= lo <= hi <= MAX_CODEPOINT):
                raise ValueError(f"bad code point range {lo:#x}-{hi:#x}")
            if lo <= previous_hi + 1:
                raise ValueError("class ranges must be sorted, disjoint and non-adjacent")
            previous_hi = hi
        return ranges

    @classmethod
    def of(
        cls,
        ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...],
        negated: bool = False,
        span: Span | None = None,
    ) -> CharClass:
        """Build a class from ranges in any order, merging overlaps and neighbours."""
        return cls(ranges=normalise_ranges(ranges), negated=negated, span=span)

    def positive_ranges(self) -> tuple[tuple[int, int], ...]:
        """The matched code points as ranges, with negation applied and surrogates removed."""
        base = complement_ranges(self.ranges) if self.negated else self.ranges
        return subtract_ranges(base, (SURROGATES,))


class Seq(Node):
    """Concatenation of its items."""

    kind: TypingLiteral["seq"] = "seq"
    items: tuple[Expr, ...]
    span: Span | None = None


class Choice(Node):
    """Union of its alternatives."""

    kind: TypingLiteral["choice"] = "choice"
    alternatives: tuple[Expr, ...]
    span: Span | None = None


class Repeat(Node):
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    kind: TypingLiteral["repeat"] = "repeat"
    item: Expr
    min: int = 0
    max: int | None = None
    span: Span | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Repeat:
        if self.min < 0:
            raise ValueError("repeat minimum must be >= 0")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"repeat upper bound {self.max} is below lower bound {self.min}")
        return self


class Ref(Node):
    """A reference to a rule or terminal by name."""

    kind: TypingLiteral["ref"] = "ref"
    name: str
    span: Span | None = None


class TokenSet(Node):
    """Exactly one vocabulary token whose id is in ``ranges`` (special-token element).

    ``negated`` takes every token not in the set; ``wildcard`` is any token at all.
    """

    kind: TypingLiteral["tokens"] = "tokens"
    ranges: tuple[tuple[int, int], ...] = ()
    negated: bool = False
    wildcard: bool = False
    span: Span | None = None

    @field_validator("ranges")
    @classmethod
    def _sorted(cls, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        for lo, hi in ranges:
            if not (0 <= lo <= hi):
                raise ValueError(f"bad token id range {lo}-{hi}")
        if list(ranges) != normalise_ranges(ranges):
            raise ValueError("token id ranges must be sorted, disjoint and non-adjacent")
        return ranges

    @model_validator(mode="after")
    def _consistent(self) -> TokenSet:
        if self.wildcard and (self.negated or self.ranges):
            raise ValueError("a wildcard token set takes no ranges and cannot be negated")
        if not self.wildcard and not self.ranges:
            raise ValueError("a token set needs at least one id")
        return self


class SpecialToken(Node):
    """Exactly one vocabulary token whose decoded text equals ``text`` (e.g. ``<|tool|>``)."""

    kind: TypingLiteral["special"] = "special"
    text: str
    span: Span | None = None


class Embed(Node):
    """A reference to a sub-grammar of the root (``%lark``, ``%json`` or ``@name``)."""

    kind: TypingLiteral["embed"] = "embed"
    name: str
    span: Span | None = None


Expr = Annotated[
    Empty
    | Literal
    | Bytes
    | CharClass
    | Seq
    | Choice
    | Repeat
    | Ref
    | TokenSet
    | SpecialToken
    | Embed,
    Field(discriminator="kind"),
]

for _model in (Seq, Choice, Repeat):
    _model.model_rebuild()


_new_object = object.__new__
_set_attribute = object.__setattr__


def copy_with(node: NodeT, update: Mapping[str, object]) -> NodeT:
    """``node.model_copy(update=update)``, at well under half the cost.

    Like ``model_copy`` it does not validate ``update`` (callers pass values of the fields'
    types). IR models forbid extra fields and have no private attributes, so a copy is the
    field dict plus the set of given fields; pydantic's generic ``__copy__`` copies four
    attributes through ``copy.copy``, which made it a fifth of ``fuse_terminals``.
    ``tests/test_ir.py`` checks the result equals ``model_copy``'s.
    """
    copy = _new_object(type(node))
    fields = node.__dict__.copy()
    fields.update(update)
    _set_attribute(copy, "__dict__", fields)
    _set_attribute(copy, "__pydantic_fields_set__", node.__pydantic_fields_set__ | update.keys())
    _set_attribute(copy, "__pydantic_extra__", None)
    _set_attribute(copy, "__pydantic_private__", None)
    return copy


def normalise_ranges(ranges) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Sort ranges and merge overlapping or adjacent ones."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def complement_ranges(
    ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]], top: int = MAX_CODEPOINT
) -> tuple[tuple[int, int], ...]:
    """Ranges of [0, top] not covered by normalised ``ranges``."""
    out: list[tuple[int, int]] = []
    next_lo = 0
    for lo, hi in ranges:
        if lo > next_lo:
            out.append((next_lo, lo - 1))
        next_lo = max(next_lo, hi + 1)
    if next_lo <= top:
        out.append((next_lo, top))
    return tuple(out)


def subtract_ranges(
    ranges: tuple[tuple[int, int], ...], removed: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    """Normalised ``ranges`` minus normalised ``removed``."""
    keep = complement_ranges(tuple(normalise_ranges(removed)))
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        for klo, khi in keep:
            a, b = max(lo, klo), min(hi, khi)
            if a <= b:
                out.append((a, b))
    return tuple(normalise_ranges(out))
