"""The C++ core's build profile (cpp/pgo): current, complete, and trained apart from the bench.

A build uses the profile only with the sources it was trained on (cpp/pgo/digest.cmake), so a
stale one builds without it: a performance regression nobody would notice, which the digest
test turns into a failure; `python cpp/pgo/train.py` refreshes the profile.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from gramkiln.runtime import _core

import gramkiln as gk

ROOT = Path(__file__).resolve().parents[1]
PGO = ROOT / "cpp" / "pgo"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gramkiln_pgo_{name}", PGO / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    sys.path.insert(0, str(PGO))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(PGO))
    return module


def test_the_build_profile_is_from_the_current_sources() -> None:
    train = _module("train")
    recorded = (PGO / "sources.sha256").read_text().strip()
    assert recorded == train.sources_digest(ROOT), (
        "the C++ sources changed since cpp/pgo's build profile was trained: "
        "run `python cpp/pgo/train.py` and commit what it writes"
    )


def test_cmake_and_python_compute_the_same_sources_digest() -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not on PATH")
    script = PGO / "digest.cmake"
    run = subprocess.run(
        [cmake, f"-DROOT={ROOT}", "-P", str(script)], capture_output=True, text=True, check=True
    )
    assert run.stderr.strip() == _module("train").sources_digest(ROOT)


def test_the_build_profile_holds_every_object() -> None:
    expected = {
        f"CMakeFiles#gramkiln_core.dir#cpp#src#{path.name}.gcda"
        for path in (ROOT / "cpp" / "src").glob("*.cpp")
    } | {"CMakeFiles#_core.dir#cpp#bindings.cpp.gcda"}
    with tarfile.open(PGO / "profile.tar.gz") as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert set(members) == expected
        for name in sorted(members):
            data = archive.extractfile(members[name])
            assert data is not None
            assert data.read(4) == b"adcg", name  # GCC's gcda magic, little-endian
    compiler, version = (PGO / "compiler.txt").read_text().split()
    assert compiler == "GNU" and version.count(".") == 2


def test_the_core_says_which_profile_it_was_built_with() -> None:
    profile = _core.core_build_profile()
    assert isinstance(profile, str)
    if profile:
        assert profile == (PGO / "compiler.txt").read_text().strip()


def test_the_training_corpus_is_valid_and_apart_from_the_benchmark() -> None:
    corpus = _module("corpus")
    workload = _module("workload")
    bench_sources = {path.read_text() for path in (ROOT / "bench" / "grammars").iterdir()}
    bench_texts = "\n".join(
        path.read_text(errors="replace")
        for path in (ROOT / "bench" / "instances").rglob("*")
        if path.is_file()
    )
    names = set()
    for entry in corpus.CORPUS:
        assert entry.name not in names
        names.add(entry.name)
        assert not isinstance(entry.source, str) or entry.source not in bench_sources, entry.name
        grammar = workload.grammar_of(entry)
        assert isinstance(grammar, gk.Grammar)
        assert entry.texts, entry.name
        for text in entry.texts:
            assert grammar.accepts(text), (entry.name, text)
            assert text not in bench_texts, (entry.name, text)
