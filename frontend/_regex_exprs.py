"""Expression builders shared by the regex and EBNF front ends.

They flatten nested sequences and choices and merge neighbouring literals, so that the IR a
front end emits stays small and reads like its source. Both rewrites preserve the language.
"""

from __future__ import annotations

from gramkiln.ir import Choice, Empty, Expr, Literal, Seq


def merged_seq(items: list[Expr]) -> Expr:
    """The concatenation of ``items``: nested ``Seq`` flattened, ``Empty`` dropped, adjacent
    literals with the same case flag merged; a single item is returned as is."""
    flat: list[Expr] = []
    for item in items:
        parts = item.items if isinstance(item, Seq) else (item,)
        for part in parts:
            if isinstance(part, Empty):
                continue
            previous = flat[-1] if flat else None
            if (
                isinstance(part, Literal)
                and isinstance(previous, Literal)
                and previous.case_insensitive == part.case_insensitive
            ):
                flat[-1] = Literal(
                    text=previous.text + part.text, case_insensitive=part.case_insensitive
                )
            else:
                flat.append(part)
    if not flat:
        return Empty()
    if len(flat) == 1:
        return flat[0]
    return Seq(items=tuple(flat))


def flat_choice(alternatives: list[Expr]) -> Expr:
    """The union of ``alternatives`` with nested ``Choice`` flattened; one alternative is
    returned as is."""
    flat: list[Expr] = []
    for alternative in alternatives:
        flat.extend(alternative.alternatives if isinstance(alternative, Choice) else (alternative,))
    if len(flat) == 1:
        return flat[0]
    return Choice(alternatives=tuple(flat))
