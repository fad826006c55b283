"""Train the C++ core's build profile (profile-guided optimisation) and store it here.

GCC lays out and inlines the core by what a training run executed. This script builds an
instrumented copy of the package in a scratch directory, runs the training corpus
(corpus.py) through it, and writes what the run counted to ``profile.tar.gz`` beside it, with
the compiler that made it (``compiler.txt``) and a digest of the C++ sources it was made from
(``sources.sha256``). A normal build (CMakeLists.txt, ``GRAMKILN_PGO=USE``) compiles with the
profile when the compiler and the sources are the ones it was made with; otherwise it builds
without one.

Run it after changing the C++ sources (until then builds go without the profile, and
``tests/test_pgo_profile.py`` fails)::

    python cpp/pgo/train.py

It needs the Llama 3 vocabulary (``quicktok-v1``, DESIGN.md section 8) and takes a few minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROFILE = HERE / "profile.tar.gz"
COMPILER = HERE / "compiler.txt"
DIGEST = HERE / "sources.sha256"


def sources_digest(root: Path = ROOT) -> str:
    """The digest of the C++ sources and the build file, as cpp/pgo/digest.cmake computes it.

    sha256 over a listing with one line "<sha256 of the file>  <path>" per file, sorted by path.
    """
    paths = [p for p in (root / "cpp").rglob("*") if p.suffix in {".cpp", ".hpp", ".h"}]
    names = sorted([p.relative_to(root).as_posix() for p in paths] + ["CMakeLists.txt"])
    listing = "".join(
        f"{hashlib.sha256((root / name).read_bytes()).hexdigest()}  {name}\n" for name in names
    )
    return hashlib.sha256(listing.encode()).hexdigest()


def build_instrumented(scratch: Path) -> tuple[Path, Path]:
    """pip-install an instrumented build into `scratch`; returns (package dir, profile dir)."""
    package, profile = scratch / "package", scratch / "profile"
    profile.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        str(ROOT),
        "--no-deps",
        "--quiet",
        "--target",
        str(package),
        "-C",
        f"build-dir={scratch / 'build'}",
        "-C",
        "cmake.define.GRAMKILN_PGO=GENERATE",
        "-C",
        f"cmake.define.GRAMKILN_PGO_DIR={profile}",
    ]
    subprocess.run(command, check=True)
    return package, profile


def pack_profile(profile: Path) -> int:
    """Write the counted files to profile.tar.gz (sorted, no times or owners); returns count."""
    files = sorted(p for p in profile.iterdir() if p.suffix == ".gcda")
    if not files:
        raise SystemExit(f"the training run wrote no profile under {profile}")

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(PROFILE, "w:gz", compresslevel=9) as archive:
        for path in files:
            archive.add(path, arcname=path.name, filter=clean)
    compiler = (profile / "compiler.txt").read_text().strip()
    COMPILER.write_text(compiler + "\n")
    DIGEST.write_text(sources_digest() + "\n")
    return len(files)


def run_workload(vocab_spec: str) -> None:
    """The training run itself (in the instrumented build's process)."""
    sys.path.insert(0, str(HERE))
    from workload import run  # noqa: PLC0415 - only in the instrumented process

    run(vocab_spec)


def main() -> None:
    """Build, train, pack; or, with --workload, only run the corpus (the inner process)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", default="llama3")
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    if args.workload:
        run_workload(args.vocab)
        return
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="gramkiln-pgo-"))
    try:
        package, profile = build_instrumented(scratch)
        environment = dict(os.environ, PYTHONPATH=str(package))
        subprocess.run(
            [sys.executable, __file__, "--workload", "--vocab", args.vocab],
            check=True,
            env=environment,
            cwd=str(scratch),
        )
        count = pack_profile(profile)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    size = PROFILE.stat().st_size
    print(
        f"{count} profile files, {size / 1024:.0f} KiB -> {PROFILE.relative_to(ROOT)} "
        f"({COMPILER.read_text().strip()}; {time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
