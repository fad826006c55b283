"""The Python examples of the README and the user guide run as written (the README's is the
first thing a user copies)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(relative: str) -> list[str]:
    """The fenced ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", (ROOT / relative).read_text(), re.S)


def test_readme_python_example_runs(tmp_path, monkeypatch) -> None:
    (block,) = python_blocks("README.md")
    monkeypatch.chdir(tmp_path)  # it saves ids.gkc in the working directory
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert (tmp_path / "ids.gkc").is_file()
    bitmask = namespace["bitmask"]
    assert isinstance(bitmask, np.ndarray)
    # At the start of `item: "id=" INT` (whitespace ignored) only "i" and whitespace bytes go.
    allowed = {token for token in range(257) if (int(bitmask[0, token >> 5]) >> (token & 31)) & 1}
    assert ord("i") in allowed and ord(",") not in allowed and ord("1") not in allowed


def test_user_guide_grammar_example_runs(monkeypatch, capsys) -> None:
    block = python_blocks("docs/user-guide.md")[0]
    monkeypatch.chdir(ROOT)  # it reads examples/ids.lark
    # Each commented result ("# True: ...") is what the line gives.
    checked = re.sub(r"^(g\.\w+\(.*?\))\s+# True\b.*$", r"assert \1", block, flags=re.M)
    assert checked.count("assert ") == 2
    exec(compile(checked, "docs/user-guide.md", "exec"), {})
    assert "start" in capsys.readouterr().out


def test_json_schema_guide_example_runs() -> None:
    block = python_blocks("docs/json-schema.md")[0]
    # The last line names a `schema` the reader brings; given one, every line runs.
    namespace: dict[str, object] = {"schema": {"type": "integer"}}
    checked = re.sub(r"^(g\.\w+\(.*?\))\s+# True\b.*$", r"assert \1", block, flags=re.M)
    assert checked.count("assert ") == 1
    exec(compile(checked, "docs/json-schema.md", "exec"), namespace)
    assert namespace["ir"] is not None


def test_glrm_guide_examples_run() -> None:
    # Both blocks are whole programs (the seed's value grammar; binding and linking).
    blocks = python_blocks("docs/glrm.md")
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/glrm.md", "exec"), {})


@pytest.mark.parametrize(
    "relative",
    ["README.md", "docs/user-guide.md", "docs/json-schema.md", "docs/vocab.md", "docs/glrm.md"],
)
def test_documented_examples_compile(relative: str) -> None:
    # Every block is valid Python, the illustrative ones (placeholders like `logits`) too.
    for block in python_blocks(relative):
        compile(block, relative, "exec")
