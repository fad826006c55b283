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
    # Text of the literal run being collected and its case flag; each run becomes one
    # Literal, built once (building one per merge step would be quadratic).
    run: list[str] = []
    run_case_insensitive = False

    def close_run() -> None:
        if run:
            flat.append(Literal(text="".join(run), case_insensitive=run_case_insensitive))
            run.clear()

    for item in items:
        for part in item.items if isinstance(item, Seq) else (item,):
            if isinstance(part, Empty):
                continue
            if isinstance(part, Literal):
                if run and part.case_insensitive != run_case_insensitive:
                    close_run()
                if not run:
                    run_case_insensitive = part.case_insensitive
                run.append(part.text)
                continue
            close_run()
            flat.append(part)
    close_run()
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
