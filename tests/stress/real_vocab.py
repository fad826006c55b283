"""Stress run: random grammars decoded in a real vocabulary's tokens, outside the test suite.

Each example draws a grammar (`gramkiln.testing.strategies.grammars`, sub-grammars included)
and strings from it (mutated), compiles against the vocabulary, prewarms half the time, cuts
the strings greedily into long tokens and decodes them token by token through one runtime per
grammar. With `--oracle` every mask is compared with the reference matcher's brute force over
the whole vocabulary (grammars with negated classes or wildcard token sets are skipped there:
the Python oracle takes seconds per mask on them); without it, gramkiln alone runs, under an
address-space limit, and examples slower than `--slow-seconds` are appended to `--slow-log`
as `repr((seconds, ir, texts))` for replay. This is how the session-16 memory blow-up and the
session-17 exponential walks were found (docs/design/runtime.md, "Session 17").

    python tests/stress/real_vocab.py --vocab llama3 --examples 300 --oracle
    python tests/stress/real_vocab.py --vocab qwen2 --examples 1500 --limit-gb 8
"""

from __future__ import annotations

import argparse
import resource
import time

from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import allocate_token_bitmask, bitmask_to_ids
from gramkiln.runtime.vocab import load_vocab
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gramkiln.testing import ReferenceMatcher
from gramkiln.testing.strategies import admits_most_tokens, grammars, mutated_strings
from gramkiln.testing.vocabularies import greedy_tokens


def main() -> None:
    """Parse the options and run the examples; an assertion error is a wrong mask."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", default="llama3", help="a load_vocab spec (llama3, qwen2, ...)")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--oracle", action="store_true", help="compare with brute force")
    parser.add_argument("--longest", type=int, default=16, help="longest token used, in bytes")
    parser.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit")
    parser.add_argument("--slow-seconds", type=float, default=3.0)
    parser.add_argument("--slow-log", default="slow_examples.txt")
    args = parser.parse_args()
    limit = int(args.limit_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    vocab = load_vocab(args.vocab)
    counts = {"grammars": 0, "positions": 0}
    slowest = [0.0]

    @settings(max_examples=args.examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        ir = data.draw(grammars(subgrammars=True))
        if args.oracle:
            assume(not admits_most_tokens(ir))
        texts = [data.draw(mutated_strings(ir)).encode() for _ in range(2)]
        started = time.perf_counter()
        compiled = compile_grammar(ir, vocab)
        if data.draw(st.booleans()):
            compiled.prewarm()
        oracle = ReferenceMatcher(ir) if args.oracle else None
        bitmask = allocate_token_bitmask(1, compiled.vocab_size)
        for text in texts + texts[:1]:
            ids = greedy_tokens(vocab, text, longest=args.longest)
            masks = (
                oracle.masks_along(text, vocab.tokens, vocab.special_ids, vocab.eos_ids)
                if oracle
                else None
            )
            matcher = compiled.matcher()
            offset = 0
            for k in range(len(ids) + 1):
                matcher.fill_next_token_bitmask(bitmask)
                counts["positions"] += 1
                expected: set[int] = set()
                if masks is not None:
                    got = bitmask_to_ids(bitmask[0], compiled.vocab_size)
                    expected = {i for i, ok in enumerate(masks[offset]) if ok}
                    assert set(got) == expected, (text, ids[:k])
                if k == len(ids):
                    break
                accepted = matcher.accept_token(ids[k])
                if masks is not None:
                    assert accepted == (ids[k] in expected), (text, ids[: k + 1])
                if not accepted:
                    break
                offset += len(vocab.tokens[ids[k]])
        counts["grammars"] += 1
        seconds = time.perf_counter() - started
        slowest[0] = max(slowest[0], seconds)
        if seconds > args.slow_seconds:
            with open(args.slow_log, "a", encoding="utf-8") as log:
                log.write(repr((seconds, ir, [t.decode() for t in texts])) + "\n")

    started = time.perf_counter()
    run()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(
        f"{counts['grammars']} grammars, {counts['positions']} positions, "
        f"{time.perf_counter() - started:.0f} s, slowest example {slowest[0]:.1f} s, "
        f"peak RSS {peak_mb} MB"
    )


if __name__ == "__main__":
    main()
