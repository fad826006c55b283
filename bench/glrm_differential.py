"""Membership of random GLRM grammars: gramkiln against GLRMask 0.5.0 (the format's owner).

Grammars are drawn so that GLRMask's greedy lexing and gramkiln's exact membership agree
(fixed lexemes with distinct first bytes, an optional ignored blank run), so every
disagreement is a difference in how the format is read. GLRMask runs in a child process with
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


def random_grammar(rng: random.Random) -> str:
    """A GLRM grammar of one to three nonterminals, with or without an ignored blank run."""
    names = [f"n{i}" for i in range(rng.randint(1, 3))]
    source = "glrm 1; start n0; " + TERMINALS
    if rng.random() < 0.5:
        source += " t WS = / +/; ignore WS;"
    for name in names:
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
    compared = disagreements = skipped = 0
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
        compiled = gk.Grammar.from_glrm(source).compile()
        for text, theirs in zip(texts, verdicts, strict=True):
            matcher = compiled.matcher()
            ours = bool(matcher.accept_string(text) and matcher.is_accepting())
            compared += 1
            if ours != theirs:
                disagreements += 1
                print(f"DIFF {text!r}: glrmask {theirs}, gramkiln {ours}\n    {source}")
    print(f"{compared} texts compared, {disagreements} disagreements, {skipped} grammars skipped")
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
