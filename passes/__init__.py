"""IR-to-IR passes: each a pure function `GrammarIR -> GrammarIR` in its own module."""
