"""Numbers and integers: exact bounds and ``multipleOf`` by digit-automaton construction.

A JSON number is read left to right by a deterministic step function whose state records,
for each bound, how the digits read so far compare with the bound's digits (``-1/0/+1``), and
for ``multipleOf`` the remainder so far. The reachable states form a small DFA that is emitted
as grammar rules, so bounds such as ``minimum: 0.25`` or ``exclusiveMaximum: 100`` are exact
for every spelling without exponent, with no sampling and no approximation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from gramkiln.frontend.json_schema.automaton import Dfa, explore
from gramkiln.frontend.json_schema.exprs import char_class, choice, lit, optional, repeat, seq
from gramkiln.ir import Expr

DIGIT = char_class([(0x30, 0x39)])
NONZERO = char_class([(0x31, 0x39)])
INT_PART = choice(lit("0"), seq(NONZERO, repeat(DIGIT)))
FRACTION = seq(lit("."), repeat(DIGIT, 1))
EXPONENT = seq(
    char_class([(0x45, 0x45), (0x65, 0x65)]),
    optional(char_class([(0x2B, 0x2B), (0x2D, 0x2D)])),
    repeat(DIGIT, 1),
)
# Integers may be written with a zero fraction: JSON Schema calls 1.0 an integer.
ZERO_FRACTION = seq(lit("."), repeat(lit("0"), 1))

NUMBER_EXPR = seq(optional(lit("-")), INT_PART, optional(FRACTION), optional(EXPONENT))
INTEGER_EXPR = seq(optional(lit("-")), INT_PART, optional(ZERO_FRACTION))
# Draft 4 and earlier: an integer has no fraction part at all (1.0 is a number).
STRICT_INTEGER_EXPR = seq(optional(lit("-")), INT_PART)

# Remainder marker: a non-zero digit beyond the multiple's precision was read.
NOT_A_MULTIPLE = -1
ALPHABET = [ord(c) for c in "-0123456789.eE+"]


class NumberSpecError(ValueError):
    """A numeric keyword has a value the construction cannot use."""


@dataclass(frozen=True)
class Bound:
    """``x <op> value`` with op one of ge, gt, le, lt, ne (ne: the negation of ``const``)."""

    op: str
    value: Decimal


def to_decimal(value: object, keyword: str) -> Decimal:
    """A JSON number as an exact Decimal (floats via their shortest repr)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NumberSpecError(f"{keyword} must be a number")
    try:
        result = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:  # pragma: no cover - repr of a float always parses
        raise NumberSpecError(f"{keyword} is not a usable number") from exc
    if not result.is_finite():
        raise NumberSpecError(f"{keyword} must be finite")
    return result


def _digits(value: Decimal) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Integer digits (no leading zeros, '0' for zero) and fraction digits (no trailing 0)."""
    text = format(value, "f")
    whole, _, frac = text.partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    return tuple(int(c) for c in whole), tuple(int(c) for c in frac)


class _Comparator:
    """Compares a non-negative decimal being read digit by digit with a constant."""

    def __init__(self, constant: Decimal) -> None:
        self.int_digits, self.frac_digits = _digits(constant)

    # int phase state: (digits read capped at len+1, comparison of the common prefix)
    def step_int(self, state: tuple[int, int], digit: int) -> tuple[int, int]:
        """Read one integer-part digit."""
        read, cmp = state
        if read < len(self.int_digits) and cmp == 0:
            ref = self.int_digits[read]
            cmp = (digit > ref) - (digit < ref)
        return min(read + 1, len(self.int_digits) + 1), cmp

    def int_result(self, state: tuple[int, int]) -> int:
        """How the integer part compares with the constant's integer part."""
        read, cmp = state
        if read < len(self.int_digits):
            return -1
        if read > len(self.int_digits):
            return 1
        return cmp

    def final_int_result(self, state: tuple[int, int]) -> int:
        """The comparison when the number ends after its integer part."""
        cmp = self.int_result(state)
        return -1 if cmp == 0 and self.frac_digits else cmp

    # fraction phase state: (comparison so far, fraction digits of the constant consumed)
    def step_frac(self, state: tuple[int, int], digit: int) -> tuple[int, int]:
        """Read one fraction digit."""
        cmp, used = state
        if cmp != 0:
            return cmp, 0
        ref = self.frac_digits[used] if used < len(self.frac_digits) else 0
        if digit != ref:
            return (1 if digit > ref else -1), 0
        return 0, min(used + 1, len(self.frac_digits))

    def frac_result(self, state: tuple[int, int]) -> int:
        """The comparison when the number ends inside its fraction."""
        cmp, used = state
        if cmp == 0 and used < len(self.frac_digits):
            return -1
        return cmp


def _holds(op: str, cmp: int) -> bool:
    return {"ge": cmp >= 0, "gt": cmp > 0, "le": cmp <= 0, "lt": cmp < 0, "ne": cmp != 0}[op]


@dataclass(frozen=True)
class NumberSpec:
    """Everything that constrains a number: integer-ness, bounds and a multiple."""

    integer: bool
    zero_fraction: bool = True  # whether an integer may be written 1.0 (draft 6 and later)
    bounds: tuple[Bound, ...] = ()
    multiple_of: Decimal | None = None
    non_integer: bool = False  # only numbers with a non-zero fraction digit (not integers)
    non_multiples: tuple[Decimal, ...] = ()  # numbers must NOT be multiples of these

    def is_plain(self) -> bool:
        """True when no bound or multiple applies (the simple regular expression suffices)."""
        return (
            not self.bounds
            and self.multiple_of is None
            and not self.non_multiples
            and not self.non_integer
        )

    def is_empty_interval(self) -> bool:
        """True when the bounds admit no number at all."""
        lows = [b for b in self.bounds if b.op in ("ge", "gt")]
        highs = [b for b in self.bounds if b.op in ("le", "lt")]
        for low in lows:
            for high in highs:
                if low.value > high.value:
                    return True
                if low.value == high.value and (low.op == "gt" or high.op == "lt"):
                    return True
        return False


def plain_number_expr(integer: bool, zero_fraction: bool = True) -> Expr:
    """The regular expression for an unconstrained number or integer."""
    if integer:
        return INTEGER_EXPR if zero_fraction else STRICT_INTEGER_EXPR
    return NUMBER_EXPR


def number_dfa(spec: NumberSpec) -> Dfa:
    """The exact automaton for numbers satisfying ``spec`` (see the module docstring)."""
    allow_exponent = (
        not spec.integer
        and not spec.non_integer
        and spec.multiple_of is None
        and not spec.non_multiples
        and all(b.value == 0 for b in spec.bounds)
    )
    # Per sign, bounds on the magnitude y = |x|.
    per_sign: dict[int, list[tuple[str, Decimal]] | None] = {}
    for sign in (1, -1):
        constraints: list[tuple[str, Decimal]] | None = []
        for bound in spec.bounds:
            op, value = bound.op, bound.value
            if sign == -1:
                op = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt", "ne": "ne"}[op]
                value = -value
            if value < 0 and op == "ne":
                continue  # a magnitude always differs from a negative constant
            if value < 0:
                if op in ("ge", "gt"):
                    continue  # every magnitude exceeds a negative constant
                constraints = None  # no magnitude is below a negative constant
                break
            assert constraints is not None  # reset to None only right before a break
            constraints.append((op, value))
        per_sign[sign] = constraints
    comparators = {
        sign: tuple(_Comparator(v) for _, v in cons)
        for sign, cons in per_sign.items()
        if cons is not None
    }
    ops = {sign: tuple(op for op, _ in cons) for sign, cons in per_sign.items() if cons is not None}
    # One remainder modulo the lcm of every (scaled) multiple decides them all.
    divisors = ([spec.multiple_of] if spec.multiple_of is not None else []) + list(
        spec.non_multiples
    )
    scale = max((_multiple_parts(d)[1] for d in divisors), default=0)
    scaled = [_multiple_parts(d)[0] * 10 ** (scale - _multiple_parts(d)[1]) for d in divisors]
    modulus = math.lcm(*scaled) if scaled else None
    positive = scaled[0] if spec.multiple_of is not None else None
    negatives = scaled[1:] if spec.multiple_of is not None else scaled

    # state: (phase, sign, comparator states, remainder, fraction digits used)
    def step(state, symbol):  # type: ignore[no-untyped-def]
        phase, sign, comps, rem, used = state
        char = chr(symbol)
        if phase == "start":
            if char == "-":
                return ("sign", -1, comps, rem, used) if -1 in comparators else None
            if 1 not in comparators:
                return None
            phase = "sign"
            sign = 1
        if phase == "sign":
            if not char.isdigit():
                return None
            digit = int(char)
            comps = tuple(c.step_int((0, 0), digit) for c in comparators[sign])
            return (
                "zero" if digit == 0 else "int",
                sign,
                comps,
                _mod_step(rem, digit, modulus),
                used,
            )
        if phase in ("zero", "int"):
            if char.isdigit() and phase == "int":
                digit = int(char)
                comps = tuple(
                    c.step_int(s, digit) for c, s in zip(comparators[sign], comps, strict=False)
                )
                return ("int", sign, comps, _mod_step(rem, digit, modulus), used)
            if char == "." and (spec.zero_fraction or not spec.integer):
                comps = tuple(
                    (c.int_result(s), 0) for c, s in zip(comparators[sign], comps, strict=False)
                )
                return ("dot", sign, comps, rem, used)
            if char in "eE" and allow_exponent:
                comps = tuple(
                    c.final_int_result(s) for c, s in zip(comparators[sign], comps, strict=False)
                )
                return ("e", sign, comps, rem, used)
            return None
        if phase in ("dot", "frac"):
            if char.isdigit():
                digit = int(char)
                if spec.integer and digit != 0:
                    return None
                comps = tuple(
                    c.step_frac(s, digit) for c, s in zip(comparators[sign], comps, strict=False)
                )
                if spec.non_integer and modulus is None:
                    # without a modulus, `rem` records whether a non-zero fraction digit was seen
                    return ("frac", sign, comps, 1 if (rem or digit) else 0, used)
                if rem == NOT_A_MULTIPLE:
                    pass
                elif used < scale:
                    rem, used = _mod_step(rem, digit, modulus), used + 1
                elif digit != 0 and modulus is not None:
                    if positive is not None:
                        return None  # a digit beyond the multiple's precision must be zero
                    rem = NOT_A_MULTIPLE
                return ("frac", sign, comps, rem, used)
            if char in "eE" and allow_exponent and phase == "frac":
                comps = tuple(
                    c.frac_result(s) for c, s in zip(comparators[sign], comps, strict=False)
                )
                return ("e", sign, comps, rem, used)
            return None
        if phase == "e":
            if char in "+-":
                return ("esign", sign, comps, rem, used)
            if char.isdigit():
                return ("exp", sign, comps, rem, used)
            return None
        if phase in ("esign", "exp"):
            return ("exp", sign, comps, rem, used) if char.isdigit() else None
        return None

    def accepting(state) -> bool:  # type: ignore[no-untyped-def]
        phase, sign, comps, rem, used = state
        if phase in ("zero", "int"):
            results = [
                c.final_int_result(s) for c, s in zip(comparators[sign], comps, strict=False)
            ]
        elif phase == "frac":
            results = [c.frac_result(s) for c, s in zip(comparators[sign], comps, strict=False)]
        elif phase == "exp":
            results = list(comps)
        else:
            return False
        if not all(_holds(op, r) for op, r in zip(ops[sign], results, strict=False)):
            return False
        if spec.non_integer and (phase != "frac" or not rem):
            return False
        if modulus is not None:
            if rem == NOT_A_MULTIPLE:
                return positive is None
            value = (rem * 10 ** (scale - used)) % modulus
            if positive is not None and value % positive != 0:
                return False
            return all(value % n != 0 for n in negatives)
        return True

    start = ("start", 0, (), 0, 0)
    return explore(start, step, ALPHABET, accepting)


def _multiple_parts(multiple: Decimal | None) -> tuple[int | None, int]:
    """``multiple = modulus / 10**scale`` with integers, or (None, 0) when absent."""
    if multiple is None:
        return None, 0
    sign, digits, exponent = multiple.normalize().as_tuple()
    mantissa = int("".join(map(str, digits)))
    if isinstance(exponent, int) and exponent >= 0:
        return mantissa * 10**exponent, 0
    return mantissa, -int(exponent)


def _mod_step(rem: int, digit: int, modulus: int | None) -> int:
    if modulus is None:
        return 0
    return (rem * 10 + digit) % modulus
