"""Testing aids: the reference matcher (the oracle), hypothesis strategies (strategies.py) and
small vocabularies of multi-lexeme tokens with a greedy tokenizer (vocabularies.py).

``ReferenceMatcher(ir).accepts(text)`` / ``.is_prefix(text)`` decide exact membership and
viable prefixes straight from the IR; ``allowed_tokens`` / :func:`brute_force_mask` give the
exact next-token mask that the runtime's masks are compared with.
"""

from gramkiln.testing.reference import ReferenceMatcher, TokenUnit, Unit, brute_force_mask

__all__ = ["ReferenceMatcher", "TokenUnit", "Unit", "brute_force_mask"]
