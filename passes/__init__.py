"""IR-to-IR passes: each a pure function `GrammarIR -> GrammarIR` in its own module."""

from gramkiln.passes.eliminate_dead_rules import eliminate_dead_rules
from gramkiln.passes.fuse_terminals import fuse_terminals
from gramkiln.passes.inline_subgrammars import inline_subgrammars
from gramkiln.passes.lower_repeats import lower_repeats
from gramkiln.passes.lower_suffix_stop import lower_suffix_stop
from gramkiln.passes.normalise_expressions import normalise_expressions
from gramkiln.passes.pipeline import (
    COMPILE_PIPELINE,
    FRONTEND_PIPELINE,
    PASSES,
    Pass,
    get_pass,
    register,
    run_pipeline,
)
from gramkiln.passes.weave_ignore import weave_ignore

__all__ = [
    "COMPILE_PIPELINE",
    "FRONTEND_PIPELINE",
    "PASSES",
    "Pass",
    "eliminate_dead_rules",
    "fuse_terminals",
    "get_pass",
    "inline_subgrammars",
    "lower_repeats",
    "lower_suffix_stop",
    "normalise_expressions",
    "register",
    "run_pipeline",
    "weave_ignore",
]
