"""gramkiln: an ahead-of-time grammar compiler for constrained LLM decoding."""

from gramkiln._grammar import Grammar
from gramkiln.errors import (
    ArtifactError,
    AutomatonSizeError,
    CompileError,
    EmptyLanguageWarning,
    EndTokenWarning,
    GramkilnError,
    GrammarError,
    IRError,
    VocabError,
)
from gramkiln.runtime.compiled import (
    CompiledGrammar,
    GrammarMatcher,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    batch_fill_temperature,
    fill_next_token_bitmask_batch,
)
from gramkiln.runtime.vocab import Vocab

__version__ = "0.1.0"

__all__ = [
    "ArtifactError",
    "AutomatonSizeError",
    "CompileError",
    "CompiledGrammar",
    "EmptyLanguageWarning",
    "EndTokenWarning",
    "GramkilnError",
    "Grammar",
    "GrammarError",
    "GrammarMatcher",
    "IRError",
    "Vocab",
    "VocabError",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "batch_fill_temperature",
    "fill_next_token_bitmask_batch",
]
