"""gramkiln: an ahead-of-time grammar compiler for constrained LLM decoding."""

from gramkiln._grammar import Grammar
from gramkiln.errors import (
    ArtifactError,
    CompileError,
    GramkilnError,
    GrammarError,
    IRError,
    VocabError,
)

__version__ = "0.1.0"

__all__ = [
    "ArtifactError",
    "CompileError",
    "GramkilnError",
    "Grammar",
    "GrammarError",
    "IRError",
    "VocabError",
    "__version__",
]
