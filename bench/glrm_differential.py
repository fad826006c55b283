"""Membership of random GLRM grammars: gramkiln against GLRMask 0.5.0 (the format's owner).

Grammars are drawn so that GLRMask's greedy lexing and gramkiln's exact membership agree
(fixed lexemes with distinct first bytes, an optional ignored blank run), so a disagreement
is a difference in how the format is read, or a bug on one side: gramkiln's reference
matcher (pure Python, independent of the runtime) decides which. Each disagreement is
printed with the grammar. GLRMask runs in a child process with
a 3 GB address-space limit: some random grammars make it allocate without bound, and those
are skipped.

    python bench/glrm_differential.py --seed 1 --grammars 200
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import resource
import warnings
from typing import Any

LEXEMES = ['"a"', '"b"', '"cd"', '"e"', "X", "Y"]
TERMINALS = 't X = "xy"; t Y = /z[0-9]/;'
TEXT_PIECES = ["a", "b", "cd", "e", "xy", "z1", " "]


def random_expression(rng: random.Random, depth: int, names: list[str]) -> str:
    """A random GLRM expression over the fixed lexemes and the nonterminals ``names``."""
    roll = rng.random()
    if depth <= 0 or roll < 0.3:
        leaf = rng.random()
        if leaf < 0.6:
            return rng.choice(LEXEMES)
        return rng.choice(names) if leaf < 0.8 else "eps"
    if roll < 0.55:
        return " ".join(random_expression(rng, depth - 1, names) for _ in range(rng.randint(2, 3)))
    if roll < 0.75:
        parts = [random_expression(rng, depth - 1, names) for _ in range(rng.randint(2, 3))]
        return "(" + " | ".join(parts) + ")"
    operator = rng.choice(["*", "+", "?", "{1,2}", "{2}"])
    return "(" + random_expression(rng, depth - 1, names) + ")" + operator


def random_automaton(rng: random.Random, names: list[str]) -> str:
    """An ``fa`` body of two or three states whose edges are small expressions."""
    states = [f"s{i}" for i in range(rng.randint(2, 3))]
    edges = [
        f"edge {rng.choice(states)} -> {rng.choice(states)}: {random_expression(rng, 1, names)};"
        for _ in range(rng.randint(1, 4))
    ]
    return f"fa {{ start s0; accept {rng.choice(states)}; {' '.join(edges)} }}"


def random_grammar(rng: random.Random) -> str:
    """A GLRM grammar of one to three nonterminals, with or without an ignored blank run, an
    inline grammar (``grammar g1 { ... }``) and nonterminals defined by automata."""
    names = [f"n{i}" for i in range(rng.randint(1, 3))]
    source = "glrm 1; start n0; " + TERMINALS
    if rng.random() < 0.5:
        source += " t WS = / +/; ignore WS;"
    if rng.random() < 0.3:
        inner = random_expression(rng, 2, ["v"])
        source += f" grammar g1 {{ start v; {TERMINALS} nt v = {inner}; }}"
        names = names + ["g1"]
    for name in [n for n in names if n != "g1"]:
        if rng.random() < 0.25:
            source += f" nt {name} = {random_automaton(rng, names)};"
        else:
            source += f" nt {name} = {random_expression(rng, 3, names)};"
    return source


def glrmask_membership(source: str, texts: list[str], queue: Any) -> None:
    """Child process: GLRMask's verdict per text, or None if it cannot compile the grammar."""
    resource.setrlimit(resource.RLIMIT_AS, (3_000_000_000, 3_000_000_000))
    import glrmask

    try:
        vocab = glrmask.Vocab.from_id_to_bytes({i: bytes([i]) for i in range(256)})
        constraint = glrmask.Grammar.from_glrm(source).compile(vocab)
        verdicts = []
        for text in texts:
            state = constraint.start()
            verdicts.append(bool(state.commit_bytes(text.encode()) and state.is_accepting()))
        queue.put(verdicts)
    except Exception:  # noqa: BLE001 - any failure means "no verdict" for this grammar
        queue.put(None)


def main() -> int:
    """Print each disagreement and the totals; exit 1 if there was any."""
    import gramkiln as gk

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grammars", type=int, default=200)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = random.Random(args.seed)
    compared = disagreements = skipped = runtime_bugs = 0
    for _ in range(args.grammars):
        source = random_grammar(rng)
        texts = [
            "".join(rng.choice(TEXT_PIECES) for _ in range(rng.randint(0, 6))) for _ in range(12)
        ]
        queue: Any = mp.Queue()
        child = mp.Process(target=glrmask_membership, args=(source, texts, queue))
        child.start()
        child.join(30)
        if child.is_alive():
            child.kill()
        verdicts = queue.get() if not queue.empty() else None
        if verdicts is None:
            skipped += 1
            continue
        grammar = gk.Grammar.from_glrm(source)
        compiled = grammar.compile()
        for text, theirs in zip(texts, verdicts, strict=True):
            matcher = compiled.matcher()
            ours = bool(matcher.accept_string(text) and matcher.is_accepting())
            # The reference matcher (pure Python, independent of the runtime) says which side
            # of a disagreement reads the grammar as a context-free language.
            reference = grammar.accepts(text)
            compared += 1
            if ours != reference:
                runtime_bugs += 1
                print(f"RUNTIME {text!r}: runtime {ours}, reference {reference}\n    {source}")
            if theirs != reference:
                disagreements += 1
                print(f"DIFF {text!r}: glrmask {theirs}, gramkiln {ours}\n    {source}")
    print(
        f"{compared} texts compared, {disagreements} where GLRMask differs from the reference "
        f"matcher, {runtime_bugs} where gramkiln's runtime does, {skipped} grammars skipped"
    )
    return 1 if disagreements or runtime_bugs else 0


if __name__ == "__main__":
    raise SystemExit(main())
