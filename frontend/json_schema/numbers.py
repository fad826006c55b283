"""Numbers and integers: exact bounds and ``multipleOf`` by digit-automaton construction.

A JSON number is read left to right by a deterministic step function whose state records,
for each bound, how the digits read so far compare with the bound's digits (``-1/0/+1``), and
for ``multipleOf`` the remainder so far. The reachable states form a small DFA that is emitted
as grammar rules, so bounds such as ``minimum: 0.25`` or ``exclusiveMaximum: 100`` are exact
for every spelling without exponent, with no sampling and no approximation.

Exponents: with bounds that are all zero any spelling is exact (the sign decides). Under other
bounds an exponent is accepted in scientific form, one integer digit (``1e-05``, ``1.5e+22``,
``0e3``: what Python's ``json.dumps`` and JavaScript's ``JSON.stringify`` write), exactly:
with a mantissa m in [1, 10), m * 10**e compares with a bound b by the exponent alone unless
e is b's own order of magnitude, where it compares as m does with b's digits, so the
automaton compares the mantissa with each bound's digits and counts the exponent only up to
one past the largest order. Other exponent spellings (``12e3``, ``0.5e1``) would need the
exponent compared with the mantissa's length, which no finite automaton does: they are
rejected under non-zero bounds, as every exponent is under ``multipleOf`` and for integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

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
    # Scientific notation under non-zero bounds (see the module docstring): per sign, a
    # comparator against each bound's digits scaled into [1, 10), and the bound's order.
    scientific = (
        not allow_exponent
        and not spec.integer
        and not spec.non_integer
        and spec.multiple_of is None
        and not spec.non_multiples
    )
    sci_comparators = {
        sign: tuple(_Comparator(v.scaleb(-v.adjusted()) if v else Decimal(1)) for _, v in cons)
        for sign, cons in per_sign.items()
        if cons is not None
    }
    sci_orders = {
        sign: tuple(v.adjusted() if v else None for _, v in cons)
        for sign, cons in per_sign.items()
        if cons is not None
    }
    # Exponent magnitudes are counted up to one past the largest order, where every exponent
    # compares the same way with every bound.
    exponent_cap = (
        max((abs(o) for orders in sci_orders.values() for o in orders if o is not None), default=0)
        + 2
    )
    # One remainder modulo the lcm of every (scaled) multiple decides them all.
    divisors = ([spec.multiple_of] if spec.multiple_of is not None else []) + list(
        spec.non_multiples
    )
    scale = max((_multiple_parts(d)[1] for d in divisors), default=0)
    scaled = [_multiple_parts(d)[0] * 10 ** (scale - _multiple_parts(d)[1]) for d in divisors]
    modulus = math.lcm(*scaled) if scaled else None
    positive = scaled[0] if spec.multiple_of is not None else None
    negatives = scaled[1:] if spec.multiple_of is not None else scaled

    def sci_exponent(sign, sci, results):  # type: ignore[no-untyped-def]
        """The state after 'e' of a scientific mantissa: its comparison with each bound's
        digits, or "zero" for a zero mantissa."""
        if sci is None:
            return None
        if sci == "zero":
            return ("se", sign, "zero", 0, 0, None)
        return (
            "se",
            sign,
            tuple(results(c, st) for c, st in zip(sci_comparators[sign], sci, strict=True)),
            0,
            0,
            None,
        )

    # state: (phase, sign, comparator states, remainder, fraction digits used, scientific
    # mantissa: None when the mantissa cannot be scientific, "zero" for 0(.0*), else the
    # states of sci_comparators[sign])
    def step(state, symbol):  # type: ignore[no-untyped-def]
        phase, sign, comps, rem, used, sci = state
        char = chr(symbol)
        if phase in ("se", "sesign", "sexp"):
            # Exponent of a scientific mantissa: rem holds its sign, used its magnitude
            # (capped where every larger exponent compares alike).
            if phase == "se" and char in "+-":
                return ("sesign", sign, comps, -1 if char == "-" else 1, 0, None)
            if not char.isdigit():
                return None
            exponent_sign = rem if phase != "se" else 1
            magnitude = min(used * 10 + int(char), exponent_cap)
            return ("sexp", sign, comps, exponent_sign, magnitude, None)
        if phase == "start":
            if char == "-":
                return ("sign", -1, comps, rem, used, sci) if -1 in comparators else None
            if 1 not in comparators:
                return None
            phase = "sign"
            sign = 1
        if phase == "sign":
            if not char.isdigit():
                return None
            digit = int(char)
            comps = tuple(c.step_int((0, 0), digit) for c in comparators[sign])
            if scientific:
                sci = (
                    "zero"
                    if digit == 0
                    else tuple(c.step_int((0, 0), digit) for c in sci_comparators[sign])
                )
            return (
                "zero" if digit == 0 else "int",
                sign,
                comps,
                _mod_step(rem, digit, modulus),
                used,
                sci,
            )
        if phase in ("zero", "int"):
            if char.isdigit() and phase == "int":
                digit = int(char)
                comps = tuple(
                    c.step_int(s, digit) for c, s in zip(comparators[sign], comps, strict=False)
                )
                # A second integer digit: no longer scientific.
                return ("int", sign, comps, _mod_step(rem, digit, modulus), used, None)
            if char == "." and (spec.zero_fraction or not spec.integer):
                comps = tuple(
                    (c.int_result(s), 0) for c, s in zip(comparators[sign], comps, strict=False)
                )
                if sci is not None and sci != "zero":
                    sci = tuple(
                        (c.int_result(st), 0)
                        for c, st in zip(sci_comparators[sign], sci, strict=True)
                    )
                return ("dot", sign, comps, rem, used, sci)
            if char in "eE" and allow_exponent:
                comps = tuple(
                    c.final_int_result(s) for c, s in zip(comparators[sign], comps, strict=False)
                )
                return ("e", sign, comps, rem, used, None)
            if char in "eE":
                return sci_exponent(sign, sci, lambda c, st: c.final_int_result(st))
            return None
        if phase in ("dot", "frac"):
            if char.isdigit() and sci is not None:
                digit = int(char)
                if sci == "zero":
                    sci = "zero" if digit == 0 else None
                else:
                    sci = tuple(
                        c.step_frac(st, digit)
                        for c, st in zip(sci_comparators[sign], sci, strict=True)
                    )
            if char.isdigit():
                digit = int(char)
                if spec.integer and digit != 0:
                    return None
                comps = tuple(
                    c.step_frac(s, digit) for c, s in zip(comparators[sign], comps, strict=False)
                )
                if spec.non_integer and modulus is None:
                    # without a modulus, `rem` records whether a non-zero fraction digit was seen
                    return ("frac", sign, comps, 1 if (rem or digit) else 0, used, None)
                if rem == NOT_A_MULTIPLE:
                    pass
                elif used < scale:
                    rem, used = _mod_step(rem, digit, modulus), used + 1
                elif digit != 0 and modulus is not None:
                    if positive is not None:
                        return None  # a digit beyond the multiple's precision must be zero
                    rem = NOT_A_MULTIPLE
                return ("frac", sign, comps, rem, used, sci)
            if char in "eE" and allow_exponent and phase == "frac":
                comps = tuple(
                    c.frac_result(s) for c, s in zip(comparators[sign], comps, strict=False)
                )
                return ("e", sign, comps, rem, used, None)
            if char in "eE" and phase == "frac":
                return sci_exponent(sign, sci, lambda c, st: c.frac_result(st))
            return None
        if phase == "e":
            if char in "+-":
                return ("esign", sign, comps, rem, used, None)
            if char.isdigit():
                return ("exp", sign, comps, rem, used, None)
            return None
        if phase in ("esign", "exp"):
            return ("exp", sign, comps, rem, used, None) if char.isdigit() else None
        return None

    def scientific_holds(sign, mantissa, exponent):  # type: ignore[no-untyped-def]
        """Whether mantissa * 10**exponent (mantissa in [1, 10), or "zero") meets the bounds."""
        results = []
        for index, order in enumerate(sci_orders[sign]):
            if mantissa == "zero":
                results.append(-1 if order is not None else 0)  # 0 against b > 0, or b = 0
            elif order is None:
                results.append(1)  # a non-zero magnitude against 0
            elif exponent != order:
                results.append(1 if exponent > order else -1)
            else:
                results.append(mantissa[index])
        return all(_holds(op, r) for op, r in zip(ops[sign], results, strict=False))

    def accepting(state) -> bool:  # type: ignore[no-untyped-def]
        phase, sign, comps, rem, used, _ = state
        if phase == "sexp":
            return scientific_holds(sign, comps, rem * used)
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

    start = ("start", 0, (), 0, 0, None)
    return explore(start, step, ALPHABET, accepting)


# Bounded numbers on a lattice (integers, or multiples of ``multipleOf``) whose automaton is too
# large (several multiples and non-multiples: the remainder is taken modulo their lcm) are
# written out value by value when there are at most this many lattice points in the bounds,
# and at most MAX_ENUMERATED_VALUES of them satisfy every constraint.
MAX_ENUMERATED_CANDIDATES = 20_000
MAX_ENUMERATED_VALUES = 1_000


def enumerated_values(spec: NumberSpec) -> list[Decimal] | None:
    """Every number ``spec`` admits, ascending, when they are few: ``spec`` bounds them on both
    sides and they lie on a lattice (integers, or multiples of ``multipleOf``) with at most
    ``MAX_ENUMERATED_CANDIDATES`` points between the bounds, of which at most
    ``MAX_ENUMERATED_VALUES`` satisfy it. None otherwise."""
    lows = [b.value for b in spec.bounds if b.op in ("ge", "gt")]
    highs = [b.value for b in spec.bounds if b.op in ("le", "lt")]
    if not lows or not highs:
        return None
    if spec.multiple_of is None and not spec.integer:
        return None  # the reals between two bounds are not a finite set
    step = Fraction(spec.multiple_of) if spec.multiple_of is not None else Fraction(1)
    low, high = Fraction(max(lows)), Fraction(min(highs))
    first, last = math.ceil(low / step), math.floor(high / step)
    if last - first + 1 > MAX_ENUMERATED_CANDIDATES:
        return None
    non_multiples = [Fraction(d) for d in spec.non_multiples]
    bounds = [(bound.op, Fraction(bound.value)) for bound in spec.bounds]
    values: list[Decimal] = []
    for k in range(first, last + 1):
        value = k * step
        if spec.integer and value.denominator != 1:
            continue
        if spec.non_integer and value.denominator == 1:
            continue
        if any(value % d == 0 for d in non_multiples):
            continue
        if not all(_holds(op, (value > limit) - (value < limit)) for op, limit in bounds):
            continue
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        if Fraction(exact) != value:
            return None  # past Decimal's precision: not written out
        values.append(exact)
        if len(values) > MAX_ENUMERATED_VALUES:
            return None
    return values


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
