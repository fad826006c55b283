"""The C++ core under ThreadSanitizer, with no Python in the process.

`tests/native/concurrent_decode.cpp` is built with the core's sources and `-fsanitize=thread`,
then decodes the bench grammars from four threads at once while the runtime's prewarm runs in
the background, plus `fill_masks_parallel` batches; every mask must equal a serial decode's and
the sanitizer must report nothing (a data race in the shared caches would be the kind of bug
that corrupts a mask once in a million fills). Skipped where the toolchain cannot build and run
a ThreadSanitizer program.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gramkiln.frontend.lark import parse_lark
from gramkiln.runtime.compile import compile_grammar
from gramkiln.runtime.compiled import RUNTIME_SECTION, CompiledGrammar

from gramkiln.testing.vocabularies import greedy_tokens, substring_vocab

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "native" / "concurrent_decode.cpp"
FLAGS = ["-std=c++17", "-O1", "-g", "-fsanitize=thread", "-pthread"]


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness binary, built against the core's sources with ThreadSanitizer."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ is not installed")
    work = tmp_path_factory.mktemp("tsan")
    probe = work / "probe.cpp"
    probe.write_text("int main() { return 0; }\n")
    built = _run([compiler, *FLAGS, str(probe), "-o", str(work / "probe")])
    if built.returncode != 0 or _run([str(work / "probe")]).returncode != 0:
        pytest.skip("this toolchain cannot build and run ThreadSanitizer programs")
    includes = ["-I", str(ROOT / "cpp" / "include"), "-I", str(ROOT / "cpp" / "src")]
    sources = [HARNESS, *sorted((ROOT / "cpp" / "src").glob("*.cpp"))]

    def compile_one(source: Path) -> Path:
        target = work / f"{source.stem}.o"
        done = _run([compiler, *FLAGS, *includes, "-c", str(source), "-o", str(target)])
        assert done.returncode == 0, done.stderr[-4000:]
        return target

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, sources))
    binary = work / "concurrent_decode"
    linked = _run([compiler, *FLAGS, *map(str, objects), "-o", str(binary)])
    assert linked.returncode == 0, linked.stderr[-4000:]
    return binary


@pytest.mark.parametrize("search", [False, True], ids=["walks", "trie-search"])
@pytest.mark.parametrize("name", ["json", "clike", "toolcall"])
def test_concurrent_decodes_with_a_background_prewarm_are_race_free_and_exact(
    harness: Path, name: str, search: bool, tmp_path: Path
) -> None:
    """`trie-search`: no walk budget, so every computed fill is the trie search (the fallback
    for tokens with too many lexeme segmentations), from all threads at once."""
    grammar = (ROOT / "bench" / "grammars" / f"{name}.lark").read_text(encoding="utf-8")
    paths = sorted((ROOT / "bench" / "instances" / name).glob("*.txt"))
    instances = [path.read_bytes().removesuffix(b"\n") for path in paths]
    vocab = substring_vocab(instances, limit=400)
    data = compile_grammar(parse_lark(grammar), vocab).to_bytes()
    blob = CompiledGrammar.load(data, vocab, prewarm=False)._sections[RUNTIME_SECTION]
    (tmp_path / "runtime.bin").write_bytes(bytes(blob))
    lines = [" ".join(map(str, greedy_tokens(vocab, text))) for text in instances]
    (tmp_path / "tokens.txt").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1 exitcode=66"}
    if search:
        env["GRAMKILN_FILL_WALK_BUDGET"] = "0"  # read when the harness loads the runtime
    done = _run(
        [str(harness), str(tmp_path / "runtime.bin"), str(tmp_path / "tokens.txt")],
        env=env,
        timeout=900,
    )
    assert "ThreadSanitizer" not in done.stderr, done.stderr[-6000:]
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    counts = re.fullmatch(r"fills=(\d+) bad=(\d+)\s*", done.stdout)
    assert counts is not None, done.stdout
    # Three rounds of four threads plus the batches: 15 decodes of every instance.
    assert int(counts[1]) == 15 * sum(len(line.split()) for line in lines)
    assert int(counts[2]) == 0
