"""Open parents: a grammar with ``extern grammar`` slots filled by compiled children.

GLRM's compiled-binding form (seed ``003``): ``parent.compile_unlinked(vocab)`` gives an
:class:`UnlinkedGrammar`; ``.bind("payload", child)`` takes a ``CompiledGrammar`` compiled
for the same vocabulary; ``.link()`` gives the runnable ``CompiledGrammar``. An artifact
carries its source IR, so linking composes the grammars' IR and compiles the whole; the end
tokens are the root's (given to ``compile_unlinked``), never a child's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gramkiln.runtime.artifact import check_vocab

from gramkiln.errors import CompileError, VocabError

if TYPE_CHECKING:
    from gramkiln.runtime.compiled import CompiledGrammar

    from gramkiln._grammar import Grammar


class UnlinkedGrammar:
    """A parent grammar and a vocabulary, waiting for its externs to be bound."""

    __slots__ = ("_grammar", "_vocab", "_end_tokens")

    def __init__(self, grammar: Grammar, vocab: Any, end_tokens: Sequence[int] | None) -> None:
        from gramkiln.runtime.vocab import Vocab

        self._grammar = grammar
        self._vocab = Vocab.byte_level() if vocab is None else vocab
        self._end_tokens = None if end_tokens is None else list(end_tokens)

    @property
    def externs(self) -> dict[str, str]:
        """The externs still to bind, by name: ``"grammar"`` or ``"token"``."""
        return self._grammar.externs

    def bind(
        self, name: str | None = None, value: Any = None, /, **bindings: Any
    ) -> UnlinkedGrammar:
        """A copy with externs bound; grammar externs take compiled children.

        A child must have been compiled for this vocabulary (its fingerprint is checked);
        token externs take what ``Grammar.bind`` takes.
        """
        from gramkiln.runtime.compiled import CompiledGrammar

        from gramkiln._grammar import Grammar, _binding_pairs

        converted: dict[str, Any] = {}
        for extern, child in _binding_pairs(name, value, bindings):
            if self.externs.get(extern) == "grammar":
                if not isinstance(child, CompiledGrammar):
                    raise TypeError(
                        f"extern grammar {extern!r} of a compiled parent takes a "
                        f"CompiledGrammar, not {type(child).__name__} (bind source grammars "
                        "with Grammar.bind)"
                    )
                try:
                    check_vocab(child.header, self._vocab)
                except VocabError as error:
                    raise VocabError(f"extern grammar {extern!r}: {error}") from None
                child = Grammar(child.source_ir)
            converted[extern] = child
        return UnlinkedGrammar(self._grammar.bind(**converted), self._vocab, self._end_tokens)

    def link(self) -> CompiledGrammar:
        """Compile the parent with every child in place (all externs must be bound)."""
        if self.externs:
            names = ", ".join(sorted(self.externs))
            raise CompileError(f"cannot link: extern {names} not bound")
        return self._grammar.compile(self._vocab, end_tokens=self._end_tokens)

    def __repr__(self) -> str:
        return f"<UnlinkedGrammar unbound={sorted(self.externs)}>"
