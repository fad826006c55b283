"""Tests for the `gramkiln` command line (gramkiln.cli)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gramkiln.cli import main

IDS_GRAMMAR = """\
%import common.INT
%import common.WS
%ignore WS
start: item ("," item)*
item: "id=" INT
"""


@pytest.fixture
def ids_file(tmp_path: Path) -> Path:
    path = tmp_path / "ids.lark"
    path.write_text(IDS_GRAMMAR, encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- check -----------------------------------------------------------------------------------


def test_check_grammar_only(capsys: pytest.CaptureFixture[str], ids_file: Path) -> None:
    assert run(capsys, "check", ids_file) == (0, "grammar OK: 4 rules, start start\n", "")


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("id=1 ,id=2 , id=3", 0, "accepted"),
        ("id=1,", 1, "rejected: incomplete (all 5 bytes are a valid prefix)"),
        ("id=1,ix", 1, "fails at byte 6, after 'id=1,i', at 'x'"),
        ("x", 1, "fails at byte 0, after '', at 'x'"),
    ],
)
def test_check_text(
    capsys: pytest.CaptureFixture[str], ids_file: Path, text: str, code: int, message: str
) -> None:
    result, out, _ = run(capsys, "check", ids_file, "--text", text)
    assert result == code and message in out


def test_check_file_bytes(
    capsys: pytest.CaptureFixture[str], ids_file: Path, tmp_path: Path
) -> None:
    good = tmp_path / "good.txt"
    good.write_bytes(b"id=1\n,\tid=22")
    assert run(capsys, "check", ids_file, "--file", good)[:2] == (0, "accepted\n")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"id=\xff")
    code, out, _ = run(capsys, "check", ids_file, "--file", bad)
    assert code == 1 and "fails at byte 3" in out


def test_check_grammar_error_has_line_column_and_caret(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.lark"
    path.write_text('start: "a" b\nb "x"\n', encoding="utf-8")
    code, out, err = run(capsys, "check", path, "--text", "ax")
    assert code == 2 and out == ""
    assert err == "Lark error at line 2, column 3: expected ':' after rule name\nb \"x\"\n  ^\n"


def test_check_other_formats(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pattern = tmp_path / "num.regex"
    pattern.write_text("[0-9]+(\\.[0-9]+)?\n", encoding="utf-8")
    assert run(capsys, "check", pattern, "--text", "3.14")[0] == 0
    assert run(capsys, "check", pattern, "--text", "3.")[0] == 1
    as_text = tmp_path / "num.txt"
    as_text.write_text("[0-9]+", encoding="utf-8")
    assert run(capsys, "check", as_text, "--format", "regex", "--text", "42")[0] == 0
    ir_text = tmp_path / "g.gkir"
    ir_text.write_text('%ir 1\n%start start\nrule start = "a" "b"*\n', encoding="utf-8")
    assert run(capsys, "check", ir_text, "--text", "abbb")[0] == 0
    glrm = tmp_path / "value.glrm"
    glrm.write_text(
        'glrm 1;\nstart value;\nt NUMBER = /[0-9]+/;\nnt value = NUMBER | "null";\n',
        encoding="utf-8",
    )
    assert run(capsys, "check", glrm, "--text", "42")[0] == 0
    assert run(capsys, "check", glrm, "--text", "nul")[0] == 1


def test_glrm_with_an_unbound_extern_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    parent = tmp_path / "parent.glrm"
    parent.write_text(
        'glrm 1; start doc; extern grammar payload; nt doc = "<" payload ">";', encoding="utf-8"
    )
    code, out, err = run(capsys, "compile", parent, "-o", tmp_path / "parent.gkc")
    assert code == 2 and out == ""
    assert "extern grammar payload not bound" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "missing.lark"], "cannot read grammar file missing.lark"),
        (["check", "grammar.txt"], "cannot tell the grammar language from '.txt'"),
        (["check", "g.lark", "--file", "missing.txt"], "cannot read text file missing.txt"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    (tmp_path / "grammar.txt").write_text("x")
    (tmp_path / "g.lark").write_text('start: "a"\n')
    code, _, err = run(capsys, *[str(tmp_path / a) if "." in a else a for a in argv])
    assert code == 2 and message.split(" ")[0] in err and message.split(" ")[-1] in err


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str], ids_file: Path) -> None:
    assert run(capsys, "check", ids_file, "--text", "a", "--file", "b")[0] == 2
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys, "--help")[0] == 0


def test_non_utf8_text_argument(capsys: pytest.CaptureFixture[str], ids_file: Path) -> None:
    # A command-line argument that is not UTF-8 reaches Python with surrogate escapes.
    code, out, _ = run(capsys, "check", ids_file, "--text", "id=\udcff")
    assert code == 1 and "fails at byte 3, after 'id=', at '\\\\xff'" in out


def test_non_utf8_grammar_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "g.lark"
    path.write_bytes(b'start: "\xff"\n')
    code, _, err = run(capsys, "check", path)
    assert code == 2 and "not UTF-8" in err


# -- ir --------------------------------------------------------------------------------------


def test_ir_prints_canonical_text(capsys: pytest.CaptureFixture[str], ids_file: Path) -> None:
    from gramkiln import Grammar

    code, out, _ = run(capsys, "ir", ids_file)
    assert code == 0 and out.startswith("%ir 1\n%start start\n")
    # The printed text reads back to the same grammar.
    assert str(Grammar.from_ir_text(out)) == out == str(Grammar.from_lark(IDS_GRAMMAR))


def test_ir_after_a_pass(capsys: pytest.CaptureFixture[str], ids_file: Path) -> None:
    pytest.importorskip("gramkiln.passes.pipeline", reason="the pass pipeline is not built yet")
    code, out, _ = run(capsys, "ir", ids_file, "--after", "list")
    assert code == 0 and "weave_ignore" in out
    code, out, _ = run(capsys, "ir", ids_file, "--after", "weave_ignore")
    assert code == 0 and "__ignore" in out and "%ignore" not in out
    assert run(capsys, "ir", ids_file, "--after", "all")[0] == 0
    code, _, err = run(capsys, "ir", ids_file, "--after", "no_such_pass")
    assert code == 2 and "no pass 'no_such_pass' in the compile pipeline" in err
    code, _, err = run(capsys, "ir", ids_file, "--after", "weave_ignore#9")
    assert code == 2 and "runs 1 time(s)" in err
    code, _, err = run(capsys, "ir", ids_file, "--after", "weave_ignore#x")
    assert code == 2 and "NAME#N" in err


# -- compile and mask ------------------------------------------------------------------------


def test_compile_then_mask(
    capsys: pytest.CaptureFixture[str], ids_file: Path, tmp_path: Path
) -> None:
    pytest.importorskip("gramkiln.runtime.compiled", reason="the runtime back end is not built yet")
    artifact = tmp_path / "ids.gkc"
    code, out, err = run(capsys, "compile", ids_file, "-o", artifact)
    assert code == 0, err
    assert out.startswith(f"wrote {artifact} (") and artifact.stat().st_size > 0
    first = artifact.read_bytes()
    assert run(capsys, "compile", ids_file, "-o", artifact)[0] == 0
    assert artifact.read_bytes() == first  # deterministic

    code, out, _ = run(capsys, "mask", artifact, "--text", "id=1")
    lines = out.splitlines()
    # After "id=1": more digits, ignored whitespace, a comma, or the end.
    allowed = {int(line.split("\t")[0]) for line in lines[1:]}
    expected = {ord(c) for c in "0123456789, \t\n\r\f"} | {256}
    assert code == 0 and lines[0] == f"{len(expected)} of 257 tokens allowed"
    assert allowed == expected
    assert "256\tEOS special </s>" in lines

    # After "id=": a digit or ignored whitespace (ignore may follow every lexeme).
    code, out, _ = run(capsys, "mask", artifact, "--text", "id=", "--limit", "2")
    assert code == 0 and out.splitlines() == [
        "15 of 257 tokens allowed",
        "9\tb'\\t'",
        "10\tb'\\n'",
        "... and 13 more",
    ]
    code, out, _ = run(capsys, "mask", artifact, "--text", "id=x")
    assert code == 1 and "not a prefix" in out


def test_mask_errors(capsys: pytest.CaptureFixture[str], ids_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("gramkiln.runtime.compiled", reason="the runtime back end is not built yet")
    artifact = tmp_path / "ids.gkc"
    assert run(capsys, "compile", ids_file, "-o", artifact)[0] == 0
    other_vocab = tmp_path / "v.tiktoken"
    other_vocab.write_text("YQ== 0\nYg== 1\n", encoding="ascii")
    code, _, err = run(capsys, "mask", artifact, "--vocab", other_vocab)
    assert code == 2 and "compiled for a different vocabulary" in err
    broken = tmp_path / "broken.gkc"
    broken.write_bytes(artifact.read_bytes()[:-7])
    code, _, err = run(capsys, "mask", broken)
    assert code == 2 and "truncated" in err
    code, _, err = run(capsys, "mask", artifact, "--text", "id=\udcff")
    assert code == 2 and "--text is not valid UTF-8" in err
    code, _, err = run(capsys, "mask", artifact, "--limit", "-1")
    assert code == 2 and "--limit must be >= 0" in err
    code, _, err = run(capsys, "mask", tmp_path / "absent.gkc")
    assert code == 2 and "no such artifact" in err
    code, _, err = run(capsys, "compile", ids_file, "-o", artifact, "--vocab", "nonsense")
    assert code == 2 and "neither a file nor one of" in err


def test_console_entry_point(ids_file: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gramkiln.cli", "check", str(ids_file), "--text", "id=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout == "accepted\n"


def test_compile_several_grammars_into_a_folder(
    capsys: pytest.CaptureFixture[str], ids_file: Path, tmp_path: Path
) -> None:
    pytest.importorskip("gramkiln.runtime.compiled", reason="the runtime back end is not built yet")
    digits = tmp_path / "digits.regex"
    digits.write_text("[0-9]+\n", encoding="utf-8")
    broken = tmp_path / "broken.lark"
    broken.write_text('start: "a" b\nb "x"\n', encoding="utf-8")
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "compile", ids_file, broken, digits, "-o", out_dir)
    # The broken grammar is reported with its file name; the others are still compiled.
    assert code == 2
    assert sorted(p.name for p in out_dir.iterdir()) == ["digits.gkc", "ids.gkc"]
    assert out.splitlines()[-1] == "compiled 2 of 3 grammars"
    assert f"{broken}: Lark error at line 2, column 3: expected ':' after rule name" in err
    single = (out_dir / "ids.gkc").read_bytes()
    assert run(capsys, "compile", ids_file, digits, "-o", out_dir, "--jobs", "2")[0] == 0
    assert (out_dir / "ids.gkc").read_bytes() == single  # same bytes from a worker process
    clash = tmp_path / "ids.regex"
    clash.write_text("x", encoding="utf-8")
    code, _, err = run(capsys, "compile", ids_file, clash, "-o", out_dir)
    assert code == 2 and "several grammars would write ids.gkc" in err
    assert run(capsys, "compile", ids_file, "-o", out_dir, "--jobs", "0")[0] == 2
