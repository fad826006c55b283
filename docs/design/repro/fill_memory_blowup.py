"""Reproduction of the session-16 memory blow-up (docs/design/runtime.md, Open problems 0).

Fixed in session 17: this prints "not reproduced" now; the test
`test_lexeme_ending_at_every_byte[found-by-stress]` checks the grammar's first mask against
brute force. Before the fix the first mask of a fresh matcher for this random grammar,
compiled against the Llama 3 vocabulary, allocated without bound (24 GB before the OOM
killer; MemoryError under the 3 GB address-space limit set here): repeated exit nodes were
walked once per copy, and the copies doubled at every lexeme boundary inside a long token.
Run: python docs/design/repro/fill_memory_blowup.py (needs the Llama 3 vocabulary package of
the test extras).
"""

import resource

from gramkiln.ir import (  # noqa: F401  (names used by the IR below)
    CharClass,
    Choice,
    Embed,
    Empty,
    GrammarIR,
    GrammarOptions,
    Literal,
    Ref,
    Repeat,
    Rule,
    RuleOptions,
    Seq,
    Subgrammar,
)
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.vocab import load_vocab

import gramkiln

IR = GrammarIR(
    ir_version=1,
    start="start",
    rules=(
        Rule(
            name="start",
            body=Choice(
                kind="choice",
                alternatives=(
                    Ref(kind="ref", name="r1", span=None),
                    Empty(kind="empty", span=None),
                ),
                span=None,
            ),
            terminal=False,
            options=RuleOptions(
                lazy=False,
                suffix=None,
                stop=None,
                stop_capture=None,
                max_tokens=None,
                max_chars=None,
                capture=None,
                temperature=None,
            ),
            span=None,
        ),
        Rule(
            name="r1",
            body=Seq(
                kind="seq",
                items=(
                    Choice(
                        kind="choice",
                        alternatives=(
                            Empty(kind="empty", span=None),
                            Embed(kind="embed", name="sub", span=None),
                            Embed(kind="embed", name="sub", span=None),
                        ),
                        span=None,
                    ),
                    Repeat(
                        kind="repeat",
                        item=Empty(kind="empty", span=None),
                        min=2,
                        max=None,
                        span=None,
                    ),
                ),
                span=None,
            ),
            terminal=False,
            options=RuleOptions(
                lazy=False,
                suffix=None,
                stop=None,
                stop_capture=None,
                max_tokens=None,
                max_chars=None,
                capture=None,
                temperature=None,
            ),
            span=None,
        ),
    ),
    ignore=(CharClass(kind="class", ranges=((32, 32),), negated=False, span=None),),
    options=GrammarOptions(allow_initial_skip=False),
    subgrammars=(
        Subgrammar(
            name="sub",
            grammar=GrammarIR(
                ir_version=1,
                start="start",
                rules=(
                    Rule(
                        name="start",
                        body=Repeat(
                            kind="repeat",
                            item=Ref(kind="ref", name="r1", span=None),
                            min=3,
                            max=None,
                            span=None,
                        ),
                        terminal=False,
                        options=RuleOptions(
                            lazy=False,
                            suffix=None,
                            stop=None,
                            stop_capture=None,
                            max_tokens=None,
                            max_chars=None,
                            capture=None,
                            temperature=None,
                        ),
                        span=None,
                    ),
                    Rule(
                        name="r1",
                        body=Choice(
                            kind="choice",
                            alternatives=(
                                Seq(
                                    kind="seq",
                                    items=(
                                        Ref(kind="ref", name="r1", span=None),
                                        Seq(
                                            kind="seq",
                                            items=(
                                                Empty(kind="empty", span=None),
                                                CharClass(
                                                    kind="class",
                                                    ranges=((44, 44),),
                                                    negated=False,
                                                    span=None,
                                                ),
                                            ),
                                            span=None,
                                        ),
                                    ),
                                    span=None,
                                ),
                                Choice(
                                    kind="choice",
                                    alternatives=(
                                        Repeat(
                                            kind="repeat",
                                            item=CharClass(
                                                kind="class",
                                                ranges=((41, 41), (44, 44)),
                                                negated=True,
                                                span=None,
                                            ),
                                            min=0,
                                            max=None,
                                            span=None,
                                        ),
                                        Repeat(
                                            kind="repeat",
                                            item=Literal(
                                                kind="literal",
                                                text=")",
                                                case_insensitive=False,
                                                span=None,
                                            ),
                                            min=0,
                                            max=1,
                                            span=None,
                                        ),
                                    ),
                                    span=None,
                                ),
                            ),
                            span=None,
                        ),
                        terminal=False,
                        options=RuleOptions(
                            lazy=False,
                            suffix=None,
                            stop=None,
                            stop_capture=None,
                            max_tokens=None,
                            max_chars=None,
                            capture=None,
                            temperature=None,
                        ),
                        span=None,
                    ),
                ),
                ignore=(CharClass(kind="class", ranges=((44, 44),), negated=False, span=None),),
                options=GrammarOptions(allow_initial_skip=True),
                subgrammars=(),
            ),
        ),
    ),
)


def main() -> None:
    """Compile against Llama 3 and fill the first mask under a 3 GB address-space limit."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    compiled = compile_grammar(IR, load_vocab("llama3"))
    bitmask = gramkiln.allocate_token_bitmask(1, compiled.vocab_size)
    try:
        compiled.matcher().fill_next_token_bitmask(bitmask)
    except MemoryError as error:
        print(f"reproduced: the first fill ran out of memory ({error})")
        return
    print("not reproduced: the first fill finished")


if __name__ == "__main__":
    main()
