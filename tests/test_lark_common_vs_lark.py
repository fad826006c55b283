"""The ``%import common`` library against Lark's own ``common.lark`` (differential test).

Lark compiles each common terminal to a Python regex; our library writes the same languages
as IR. For each name, random strings over that terminal's interesting characters must get
the same verdict from both. Lark writes ``ESCAPED_STRING`` and ``C_COMMENT`` with lazy
quantifiers, which only mean something to a lexer: there the verdict is "the lexer's
(shortest) match is the whole string", the semantics our library documents.
"""

from __future__ import annotations

import functools
import re

import pytest
from gramkiln.frontend.lark_common import COMMON_NAMES
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln import Grammar

lark = pytest.importorskip(
    "lark", reason="the lark package (the differential oracle) is not installed"
)

ALPHABETS = {
    "DIGIT": "09a",
    "HEXDIGIT": "09afAFgG",
    "INT": "019a-",
    "SIGNED_INT": "01+-",
    "DECIMAL": "01.e",
    "_EXP": "01eE+-",
    "FLOAT": "01.eE+-",
    "SIGNED_FLOAT": "01.eE+-",
    "NUMBER": "01.eE+-",
    "SIGNED_NUMBER": "01.eE+-",
    "ESCAPED_STRING": 'a"\\\n',
    "LCASE_LETTER": "azAZ0",
    "UCASE_LETTER": "azAZ0",
    "LETTER": "azAZ0_",
    "WORD": "azAZ0_",
    "CNAME": "aZ0_-",
    "WS_INLINE": " \t\na",
    "WS": " \t\n\r\fa",
    "CR": "\r\n",
    "LF": "\r\n",
    "NEWLINE": "\r\na",
    "SH_COMMENT": "#a\n\r",
    "CPP_COMMENT": "/a\n",
    "C_COMMENT": "/*a\n",
    "SQL_COMMENT": "-a\n",
}
LAZY = {"ESCAPED_STRING", "C_COMMENT"}


@functools.cache
def lark_regex(name: str) -> re.Pattern[str]:
    parser = lark.Lark(f"start: {name}\n%import common.{name}", parser="earley", lexer="dynamic")
    (terminal,) = [t for t in parser.terminals if t.name == name]
    return re.compile(terminal.pattern.to_regexp())


@functools.cache
def ours(name: str) -> Grammar:
    return Grammar.from_lark(f"%import common.{name}\nstart: {name}")


def lark_accepts(name: str, text: str) -> bool:
    pattern = lark_regex(name)
    if name in LAZY:
        match = pattern.match(text)
        return match is not None and match.end() == len(text)
    return pattern.fullmatch(text) is not None


def test_every_name_has_an_alphabet() -> None:
    assert set(ALPHABETS) == set(COMMON_NAMES)


@pytest.mark.parametrize("name", COMMON_NAMES)
def test_common_terminal_agrees_with_lark(name: str) -> None:
    @settings(max_examples=60, deadline=None, database=None)
    @given(st.text(alphabet=ALPHABETS[name], max_size=7))
    def agrees(text: str) -> None:
        assert ours(name).accepts(text) == lark_accepts(name, text), repr(text)

    agrees()
