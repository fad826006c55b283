"""The `gramkiln` command line: check, ir, compile and mask.

Exit codes: 0 success (text accepted), 1 text rejected, 2 error (bad grammar, bad file,
bad usage). Errors go to stderr; grammar errors keep the front end's rendering with line,
column, the source line and a caret.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from gramkiln.errors import GramkilnError, GrammarError

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_ERROR = 2

# Grammar file formats by extension; `--format` overrides.
FORMATS_BY_SUFFIX = {
    ".lark": "lark",
    ".ebnf": "ebnf",
    ".gbnf": "ebnf",
    ".json": "json",
    ".glrm": "glrm",
    ".regex": "regex",
    ".re": "regex",
    ".gkir": "ir",
    ".ir": "ir",
}
FORMATS = ("lark", "ebnf", "json", "glrm", "regex", "ir")


class CliError(Exception):
    """A user-facing failure: printed as `gramkiln: <message>`, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`); return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.handler(args, sys.stdout))
    except GrammarError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_ERROR
    except (CliError, GramkilnError) as exc:
        print(f"gramkiln: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gramkiln mask ... | head`): stop quietly, as Unix tools do.
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - a bug must still end in a message, not a trace
        if os.environ.get("GRAMKILN_DEBUG"):
            raise
        print(
            f"gramkiln: internal error ({type(exc).__name__}: {exc}); "
            "rerun with GRAMKILN_DEBUG=1 for the traceback",
            file=sys.stderr,
        )
        return EXIT_ERROR


# --------------------------------------------------------------------------------------------
# argument parsing


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gramkiln", description="Ahead-of-time grammar compiler for constrained decoding."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = commands.add_parser(
        "check", help="parse a grammar and test whether a text is in its language"
    )
    _grammar_arguments(check)
    source = check.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text to test")
    source.add_argument("--file", type=Path, help="a file whose bytes are the text to test")
    check.set_defaults(handler=_check)

    show_ir = commands.add_parser("ir", help="print a grammar's canonical IR")
    _grammar_arguments(show_ir)
    show_ir.add_argument(
        "--after",
        metavar="PASS",
        help="run the compile pipeline and print the IR after PASS (PASS#N for its Nth run; "
        "'all' for the end of the pipeline; 'list' shows the pipeline)",
    )
    show_ir.set_defaults(handler=_ir)

    compile_cmd = commands.add_parser(
        "compile",
        help="compile grammars into artifacts",
        description="Compile one grammar to the artifact -o, or several into the folder -o "
        "(one <name>.gkc each; a failing grammar is reported and the others still compile).",
    )
    compile_cmd.add_argument(
        "grammar",
        type=Path,
        nargs="+",
        help="grammar file(s) (.lark .ebnf .gbnf .json .glrm .regex)",
    )
    compile_cmd.add_argument(
        "--format", choices=FORMATS, help="grammar language (default: from the file extension)"
    )
    compile_cmd.add_argument(
        "-o", "--output", type=Path, required=True, help="artifact path, or folder for several"
    )
    compile_cmd.add_argument(
        "-j", "--jobs", type=int, default=1, help="grammars compiled in parallel (processes)"
    )
    _vocab_arguments(compile_cmd)
    compile_cmd.set_defaults(handler=_compile)

    mask = commands.add_parser("mask", help="show the tokens an artifact allows after a prefix")
    mask.add_argument("artifact", type=Path, help="artifact written by `gramkiln compile`")
    mask.add_argument("--text", default="", help="the prefix generated so far")
    _vocab_arguments(mask)
    mask.add_argument(
        "--limit", type=int, default=50, help="most allowed tokens to list (default 50)"
    )
    mask.set_defaults(handler=_mask)
    return parser


def _grammar_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "grammar", type=Path, help="grammar file (.lark .ebnf .gbnf .json .glrm .regex)"
    )
    parser.add_argument(
        "--format", choices=FORMATS, help="grammar language (default: from the file extension)"
    )


def _vocab_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vocab",
        default="byte",
        help="vocabulary: byte (built-in, default), llama3, qwen2, tekken, gpt2, or a "
        "tokenizer.json / .tiktoken / quicktok .vocab / Tekken json file",
    )
    parser.add_argument(
        "--eos",
        action="append",
        metavar="TOKEN",
        help="end-of-sequence token name or id (repeatable; default from the vocabulary)",
    )


# --------------------------------------------------------------------------------------------
# commands


def _check(args: argparse.Namespace, out: TextIO) -> int:
    grammar = load_grammar(args.grammar, args.format)
    if args.text is None and args.file is None:
        rules = len(grammar.ir.rules)
        out.write(
            f"grammar OK: {rules} rule{'s' if rules != 1 else ''}, start {grammar.ir.start}\n"
        )
        return EXIT_OK
    text: str | bytes
    if args.file is not None:
        text = _read_bytes(args.file, "text file")
    else:
        # Arguments that are not valid UTF-8 arrive with surrogate escapes; fsencode gives
        # back the exact bytes the user passed.
        text = os.fsencode(args.text)
    if grammar.accepts(text):
        out.write("accepted\n")
        return EXIT_OK
    data = text.encode("utf-8") if isinstance(text, str) else text
    viable = _longest_viable_prefix(grammar, data)
    if viable == len(data):
        out.write(f"rejected: incomplete (all {len(data)} bytes are a valid prefix)\n")
    else:
        before = data[max(0, viable - 20) : viable].decode("utf-8", "backslashreplace")
        at = data[viable : viable + 1].decode("utf-8", "backslashreplace")
        out.write(
            f"rejected: no string of the language starts with the first {viable + 1} bytes "
            f"(fails at byte {viable}, after {before!r}, at {at!r})\n"
        )
    return EXIT_REJECTED


def _longest_viable_prefix(grammar: Any, data: bytes) -> int:
    """Length of the longest prefix of `data` that some accepted string starts with.

    Viable prefixes are closed under taking prefixes, so a binary search needs only
    log2(len) oracle calls.
    """
    low, high = 0, len(data)
    if grammar.is_prefix(data):
        return high
    while low < high:
        middle = (low + high + 1) // 2
        if grammar.is_prefix(data[:middle]):
            low = middle
        else:
            high = middle - 1
    return low


def _ir(args: argparse.Namespace, out: TextIO) -> int:
    from gramkiln.ir import print_grammar

    grammar = load_grammar(args.grammar, args.format)
    if args.after is None:
        out.write(print_grammar(grammar.ir))
        return EXIT_OK
    try:
        from gramkiln.passes.pipeline import COMPILE_PIPELINE, run_pipeline
    except ImportError as exc:
        raise CliError(f"the pass pipeline is not available in this build ({exc})") from exc
    names = [step.name for step in COMPILE_PIPELINE]
    if args.after == "list":
        for number, name in enumerate(names, start=1):
            out.write(f"{number}. {name}\n")
        return EXIT_OK
    stop = _pipeline_stop(args.after, names)
    result = run_pipeline(grammar.ir, COMPILE_PIPELINE[:stop], verify=True)
    out.write(print_grammar(result))
    return EXIT_OK


def _pipeline_stop(after: str, names: list[str]) -> int:
    """How many pipeline steps to run for `--after NAME`, `NAME#N` or `all`."""
    if after == "all":
        return len(names)
    name, _, occurrence_text = after.partition("#")
    occurrence = 1
    if occurrence_text:
        if not occurrence_text.isdigit() or int(occurrence_text) < 1:
            raise CliError(f"bad pass occurrence {after!r}: expected NAME#N with N >= 1")
        occurrence = int(occurrence_text)
    positions = [index for index, step in enumerate(names) if step == name]
    if not positions:
        raise CliError(f"no pass {name!r} in the compile pipeline; it runs: {', '.join(names)}")
    if occurrence > len(positions):
        raise CliError(
            f"pass {name!r} runs {len(positions)} time(s) in the pipeline, not {occurrence}"
        )
    return positions[occurrence - 1] + 1


def _compile(args: argparse.Namespace, out: TextIO) -> int:
    from gramkiln.runtime.vocab import load_vocab

    if args.jobs < 1:
        raise CliError("--jobs must be >= 1")
    grammars: list[Path] = args.grammar
    if len(grammars) == 1 and not args.output.is_dir():
        targets = [args.output]
    else:
        targets = [args.output / f"{path.stem}.gkc" for path in grammars]
        clashing = sorted({t.name for t in targets if targets.count(t) > 1})
        if clashing:
            raise CliError(f"several grammars would write {', '.join(clashing)}; rename them")
        try:
            args.output.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(f"cannot create output folder {args.output}: {exc.strerror}") from exc
    # Load the vocabulary once up front, so that a bad --vocab is one clear error.
    vocab = load_vocab(args.vocab, eos_tokens=_eos(args.eos))
    jobs = [(path, target) for path, target in zip(grammars, targets, strict=True)]
    settings = (args.format, args.vocab, _eos(args.eos))
    if args.jobs > 1 and len(jobs) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(args.jobs, len(jobs))) as pool:
            outcomes = list(pool.map(_compile_one_in_worker, jobs, [settings] * len(jobs)))
    else:
        outcomes = [_compile_one(path, target, args.format, vocab) for path, target in jobs]
    failed = 0
    for (path, _), (ok, message) in zip(jobs, outcomes, strict=True):
        if ok:
            out.write(message + "\n")
        else:
            failed += 1
            print(message if len(jobs) == 1 else f"{path}: {message}", file=sys.stderr)
    if len(jobs) > 1:
        out.write(f"compiled {len(jobs) - failed} of {len(jobs)} grammars\n")
    return EXIT_OK if not failed else EXIT_ERROR


def _compile_one(path: Path, target: Path, language: str | None, vocab: Any) -> tuple[bool, str]:
    """Compile one grammar; (True, summary) or (False, the error as the user should see it)."""
    try:
        grammar = load_grammar(path, language)
        started = time.perf_counter()
        try:
            compiled = grammar.compile(vocab)
        except ImportError as exc:
            raise CliError(f"the compiler back end is not available in this build ({exc})") from exc
        elapsed_ms = (time.perf_counter() - started) * 1000
        compiled.save(target)
        size = target.stat().st_size
    except GrammarError as exc:
        return False, str(exc)
    except (CliError, GramkilnError, OSError) as exc:
        return False, f"gramkiln: {exc}"
    except Exception as exc:  # noqa: BLE001 - one grammar's crash must not stop a batch
        if os.environ.get("GRAMKILN_DEBUG"):
            raise
        return False, f"gramkiln: internal error ({type(exc).__name__}: {exc})"
    return True, (
        f"wrote {target} ({size:,} bytes; vocabulary {vocab.vocab_size:,} ids; "
        f"compiled in {elapsed_ms:.1f} ms)"
    )


_WORKER_VOCABS: dict[tuple[str, Any], Any] = {}


def _compile_one_in_worker(
    job: tuple[Path, Path], settings: tuple[str | None, str, list[str | int] | None]
) -> tuple[bool, str]:
    """`_compile_one` in a worker process, loading the vocabulary once per process."""
    from gramkiln.runtime.vocab import load_vocab

    language, spec, eos = settings
    key = (spec, tuple(eos) if eos else None)
    if key not in _WORKER_VOCABS:
        _WORKER_VOCABS[key] = load_vocab(spec, eos_tokens=eos)
    return _compile_one(job[0], job[1], language, _WORKER_VOCABS[key])


def _mask(args: argparse.Namespace, out: TextIO) -> int:
    import numpy as np

    from gramkiln.runtime.vocab import load_vocab

    if args.limit < 0:
        raise CliError("--limit must be >= 0")
    vocab = load_vocab(args.vocab, eos_tokens=_eos(args.eos))
    try:
        from gramkiln.runtime.compiled import CompiledGrammar
    except ImportError as exc:
        raise CliError(f"the runtime is not available in this build ({exc})") from exc
    if not args.artifact.is_file():
        raise CliError(f"{args.artifact}: no such artifact file")
    # One mask and exit: a background prewarm would only be stopped at exit.
    compiled = CompiledGrammar.load(args.artifact, vocab=vocab, prewarm=False)
    matcher = compiled.matcher()
    try:
        args.text.encode("utf-8")
    except UnicodeEncodeError:
        raise CliError("--text is not valid UTF-8") from None
    if args.text and not matcher.accept_string(args.text):
        out.write(f"rejected: {args.text!r} is not a prefix of the language\n")
        return EXIT_REJECTED
    words = (vocab.vocab_size + 31) // 32
    bitmask = np.zeros((1, words), dtype=np.int32)
    matcher.fill_next_token_bitmask(bitmask, 0)
    bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[: vocab.vocab_size]
    allowed = np.flatnonzero(bits).tolist()
    out.write(f"{len(allowed)} of {vocab.vocab_size} tokens allowed\n")
    for token_id in allowed[: args.limit]:
        out.write(f"{token_id}\t{_describe_token(vocab, token_id)}\n")
    if len(allowed) > args.limit:
        out.write(f"... and {len(allowed) - args.limit} more\n")
    return EXIT_OK


def _describe_token(vocab: Any, token_id: int) -> str:
    if token_id >= len(vocab.tokens):
        return "<padding>"
    token = vocab.tokens[token_id]
    label = "EOS " if token_id in vocab.eos_ids else ""
    if token_id in vocab.special_ids:
        return f"{label}special {token.decode('utf-8', 'backslashreplace')}"
    return f"{label}{token!r}"


def _eos(values: list[str] | None) -> list[str | int] | None:
    if not values:
        return None
    return [int(v) if v.isdigit() else v for v in values]


# --------------------------------------------------------------------------------------------
# grammar loading


def load_grammar(path: Path, language: str | None = None) -> Any:
    """Read a grammar file as a `gramkiln.Grammar`, choosing the front end by extension."""
    from gramkiln import Grammar

    if language is None:
        language = FORMATS_BY_SUFFIX.get(path.suffix.lower())
        if language is None:
            raise CliError(
                f"{path}: cannot tell the grammar language from {path.suffix!r}; "
                f"use --format {{{','.join(FORMATS)}}}"
            )
    source = _read_text(path)
    try:
        if language == "lark":
            return Grammar.from_lark(source)
        if language == "ebnf":
            return Grammar.from_ebnf(source)
        if language == "json":
            return Grammar.from_json_schema(source)
        if language == "glrm":
            return Grammar.from_glrm(source)
        if language == "regex":
            # A regex file holds one pattern; the final newline editors add is not part of it.
            return Grammar.from_regex(source[:-1] if source.endswith("\n") else source)
        return Grammar.from_ir_text(source)
    except (ImportError, ModuleNotFoundError) as exc:
        raise CliError(f"the {language} front end is not available in this build ({exc})") from exc


def _read_text(path: Path) -> str:
    data = _read_bytes(path, "grammar file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text ({exc})") from exc


def _read_bytes(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


if __name__ == "__main__":  # pragma: no cover - `python -m gramkiln.cli`
    sys.exit(main())
