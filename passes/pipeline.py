"""The pass registry, the named pipelines and the runner that checks the IR between passes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

from gramkiln.ir import GrammarIR, print_grammar
from gramkiln.ir.memo import operation
from gramkiln.passes.eliminate_dead_rules import eliminate_dead_rules
from gramkiln.passes.fuse_terminals import fuse_terminals
from gramkiln.passes.inline_subgrammars import inline_subgrammars
from gramkiln.passes.lower_repeats import lower_repeats
from gramkiln.passes.lower_suffix_stop import lower_suffix_stop
from gramkiln.passes.normalise_expressions import normalise_expressions
from gramkiln.passes.weave_ignore import weave_ignore

from gramkiln.errors import IRError

PassFunction = Callable[[GrammarIR], GrammarIR]


@dataclass(frozen=True)
class Pass:
    """A named IR-to-IR transformation; ``run`` is a pure function."""

    name: str
    run: PassFunction

    @property
    def description(self) -> str:
        """The pass's docstring: what it does and what it preserves."""
        return (self.run.__doc__ or "").strip()

    def __call__(self, grammar: GrammarIR) -> GrammarIR:
        return self.run(grammar)


PASSES: dict[str, Pass] = {}


def register(function: PassFunction) -> Pass:
    """Add ``function`` to the registry under its own name and return its ``Pass``."""
    name = function.__name__
    if name in PASSES:
        raise ValueError(f"a pass named {name!r} is already registered")
    if not function.__doc__:
        raise ValueError(f"pass {name!r} needs a docstring stating what it preserves")
    PASSES[name] = Pass(name, function)
    return PASSES[name]


def get_pass(name: str) -> Pass:
    """The registered pass called ``name``; ``KeyError`` listing the known names otherwise."""
    try:
        return PASSES[name]
    except KeyError:
        raise KeyError(
            f"unknown pass {name!r}; known passes: {', '.join(sorted(PASSES))}"
        ) from None


NORMALISE_EXPRESSIONS = register(normalise_expressions)
ELIMINATE_DEAD_RULES = register(eliminate_dead_rules)
WEAVE_IGNORE = register(weave_ignore)
INLINE_SUBGRAMMARS = register(inline_subgrammars)
LOWER_SUFFIX_STOP = register(lower_suffix_stop)
FUSE_TERMINALS = register(fuse_terminals)
LOWER_REPEATS = register(lower_repeats)

# After a front end: tidy the IR but keep it close to the source (ignore, sub-grammars,
# repeats and options stay as written) so that it prints readably and round-trips.
FRONTEND_PIPELINE: tuple[Pass, ...] = (NORMALISE_EXPRESSIONS, ELIMINATE_DEAD_RULES)

# What the runtime compiler runs before building tables. Order matters:
# - lower_suffix_stop before weave_ignore, so that the markers end up inside the lazy rule
#   (no ignore between body and marker);
# - weave_ignore before inline_subgrammars (each grammar's ignore applies only inside it)
#   and before fuse_terminals (fusing "a" "b" would remove the lexeme boundary where ignore
#   was allowed);
# - normalise again after inlining: weaving and inlining leave nested Seq and, without
#   ignore, adjacent literals may now merge;
# - lower_repeats after fusion, so that repeats of text become DFA loops inside terminals
#   and only repeats over rules need helper rules;
# - a last normalise flattens the x | () choices and sequences the lowering produced;
# - eliminate_dead_rules last: the ignore terminals of unused sub-grammars, raw copies and
#   the fused-away literals' users may all have become unreachable.
COMPILE_PIPELINE: tuple[Pass, ...] = (
    NORMALISE_EXPRESSIONS,
    LOWER_SUFFIX_STOP,
    WEAVE_IGNORE,
    INLINE_SUBGRAMMARS,
    NORMALISE_EXPRESSIONS,
    FUSE_TERMINALS,
    LOWER_REPEATS,
    NORMALISE_EXPRESSIONS,
    ELIMINATE_DEAD_RULES,
)


@operation()
def run_pipeline(
    grammar: GrammarIR,
    pipeline: Iterable[Pass | PassFunction | str],
    *,
    verify: bool = True,
    print_after: str | set[str] | None = None,
    out: TextIO | None = None,
) -> GrammarIR:
    """Run the passes of ``pipeline`` in order and return the final IR.

    Passes may be given as ``Pass`` objects, registered names or plain functions. With
    ``verify`` the input and every intermediate IR are checked with ``GrammarIR.verify()``;
    a failure raises ``IRError`` naming the pass that broke the invariant. ``print_after``
    names one or more passes after which the canonical IR text is written to ``out``
    (default ``sys.stderr``), headed by ``# after <pass> (step <n>)``.
    """
    steps = [_as_pass(step) for step in pipeline]
    wanted = {print_after} if isinstance(print_after, str) else set(print_after or ())
    unknown = wanted - {step.name for step in steps}
    if unknown:
        raise KeyError(
            f"print_after names passes not in this pipeline: {', '.join(sorted(unknown))}"
        )
    stream = out if out is not None else sys.stderr
    if verify:
        _verify(grammar, "in the pipeline input")
    for number, step in enumerate(steps, start=1):
        grammar = step.run(grammar)
        if verify:
            _verify(grammar, f"after pass {step.name} (step {number})")
        if step.name in wanted:
            stream.write(f"# after {step.name} (step {number})\n{print_grammar(grammar)}")
    return grammar


def _as_pass(step: Pass | PassFunction | str) -> Pass:
    if isinstance(step, Pass):
        return step
    if isinstance(step, str):
        return get_pass(step)
    if callable(step):
        registered = PASSES.get(getattr(step, "__name__", ""))
        if registered is not None and registered.run is step:
            return registered
        return Pass(getattr(step, "__name__", repr(step)), step)
    raise TypeError(f"not a pass: {step!r}")


def _verify(grammar: GrammarIR, where: str) -> None:
    try:
        grammar.verify()
    except IRError as exc:
        raise IRError(f"invalid IR {where}: {exc}") from exc
