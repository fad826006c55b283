"""Canonical text form of the IR: a printer and the parser that reads it back.

The format (one definition per line, spans omitted)::

    %ir 1
    %start start
    %options allow_initial_skip
    %ignore [\\t\\n ]+
    rule start = item ("," item)*
    rule name [lazy, max_tokens=5] = [a-z]+
    term INT = [0-9]+
    %subgrammar lark.1 {
      ...the nested grammar, indented...
    }

Expressions: ``"text"`` and ``"text"i`` literals (JSON escapes), ``b"\\x00"`` bytes,
``[a-z\\u{10000}]`` / ``[^...]`` classes, names, ``@sub`` embeds, ``<[1,3-8]>`` /
``<[^1]>`` / ``<[*]>`` token sets, ``<"<|tool|>">`` named special tokens, ``()`` empty, postfix
``* + ? {m} {m,} {m,n}``, juxtaposition for sequences and ``|`` for choices. Degenerate
sequences and choices with fewer than two members print as ``(& ...)`` and ``(| ...)`` so that
printing and parsing round-trip exactly. Parentheses always produce the node they enclose.
"""

from __future__ import annotations

import json
import re

from gramkiln.ir.grammar import IR_VERSION, GrammarIR, GrammarOptions, Rule, RuleOptions, Subgrammar
from gramkiln.ir.nodes import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    Literal,
    Ref,
    Repeat,
    Seq,
    SpecialToken,
    TokenSet,
    normalise_ranges,
)

from gramkiln.errors import IRError

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.:]*")
_CLASS_LITERAL = {chr(c) for c in range(0x21, 0x7F)} - set("\\]-^[")

# ---------------------------------------------------------------------------------------------
# printing


def print_grammar(grammar: GrammarIR, indent: str = "") -> str:
    """Render a grammar in the canonical text form (ends with a newline)."""
    lines = [f"%ir {grammar.ir_version}", f"%start {grammar.start}"]
    if grammar.options != GrammarOptions():
        flags = [name for name, on in grammar.options.model_dump().items() if on]
        lines.append("%options " + " ".join(flags))
    lines.extend(f"%ignore {print_expr(expr)}" for expr in grammar.ignore)
    for rule in grammar.rules:
        lines.append(print_rule(rule))
    out = "".join(f"{indent}{line}\n" for line in lines)
    for sub in grammar.subgrammars:
        out += f"{indent}%subgrammar {sub.name} {{\n"
        out += print_grammar(sub.grammar, indent + "  ")
        out += f"{indent}}}\n"
    return out


def print_rule(rule: Rule) -> str:
    """Render one definition as a single line."""
    keyword = "term" if rule.terminal else "rule"
    options = _print_options(rule.options)
    return f"{keyword} {rule.name}{options} = {print_expr(rule.body)}"


def _print_options(options: RuleOptions) -> str:
    parts: list[str] = []
    if options.lazy:
        parts.append("lazy")
    if options.suffix is not None:
        parts.append(f"suffix=({print_expr(options.suffix)})")
    if options.stop is not None:
        parts.append(f"stop=({print_expr(options.stop)})")
    for key in ("stop_capture", "capture"):
        value = getattr(options, key)
        if value is not None:
            parts.append(f"{key}={json.dumps(value)}")
    for key in ("max_tokens", "max_chars"):
        value = getattr(options, key)
        if value is not None:
            parts.append(f"{key}={value}")
    if options.temperature is not None:
        parts.append(f"temperature={options.temperature!r}")
    return f" [{', '.join(parts)}]" if parts else ""


def print_expr(expr: Expr) -> str:
    """Render an expression in the canonical text form."""
    if isinstance(expr, Choice):
        if len(expr.alternatives) < 2:
            return "(|" + "".join(" " + print_expr(a) for a in expr.alternatives) + ")"
        return " | ".join(_wrap(a, (Choice,)) for a in expr.alternatives)
    if isinstance(expr, Seq):
        if len(expr.items) < 2:
            return "(&" + "".join(" " + print_expr(i) for i in expr.items) + ")"
        return " ".join(_wrap(i, (Choice, Seq)) for i in expr.items)
    if isinstance(expr, Repeat):
        inner = _wrap(expr.item, (Choice, Seq))
        if (expr.min, expr.max) == (0, None):
            return inner + "*"
        if (expr.min, expr.max) == (1, None):
            return inner + "+"
        if (expr.min, expr.max) == (0, 1):
            return inner + "?"
        if expr.max is None:
            return f"{inner}{{{expr.min},}}"
        if expr.min == expr.max:
            return f"{inner}{{{expr.min}}}"
        return f"{inner}{{{expr.min},{expr.max}}}"
    if isinstance(expr, Empty):
        return "()"
    if isinstance(expr, Literal):
        return json.dumps(expr.text, ensure_ascii=True) + ("i" if expr.case_insensitive else "")
    if isinstance(expr, Bytes):
        body = "".join(
            chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\x{b:02x}"
            for b in expr.data
        )
        return f'b"{body}"'
    if isinstance(expr, CharClass):
        body = "".join(
            _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}"
            for lo, hi in expr.ranges
        )
        return f"[{'^' if expr.negated else ''}{body}]"
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Embed):
        return f"@{expr.name}"
    if isinstance(expr, TokenSet):
        if expr.wildcard:
            return "<[*]>"
        ids = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in expr.ranges)
        return f"<[{'^' if expr.negated else ''}{ids}]>"
    if isinstance(expr, SpecialToken):
        return f"<{json.dumps(expr.text, ensure_ascii=True)}>"
    raise TypeError(f"not an IR expression: {expr!r}")


def _wrap(expr: Expr, needs_parens: tuple[type, ...]) -> str:
    text = print_expr(expr)
    if isinstance(expr, needs_parens) and not text.startswith(("(&", "(|")):
        return f"({text})"
    return text


def _class_char(cp: int) -> str:
    char = chr(cp)
    return char if char in _CLASS_LITERAL else f"\\u{{{cp:x}}}"


# ---------------------------------------------------------------------------------------------
# parsing


def parse_grammar(text: str) -> GrammarIR:
    """Parse the canonical text form back into IR; raise IRError on malformed input."""
    lines = text.splitlines()
    grammar, end = _parse_block(lines, 0, top=True)
    for rest in lines[end:]:
        if rest.strip():
            raise IRError(f"unexpected text after grammar: {rest.strip()!r}")
    return grammar


def _parse_block(lines: list[str], index: int, top: bool) -> tuple[GrammarIR, int]:
    version = IR_VERSION
    start = "start"
    options = GrammarOptions()
    ignore: list[Expr] = []
    rules: list[Rule] = []
    subs: list[Subgrammar] = []
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not line:
            continue
        try:
            if line == "}":
                if top:
                    raise IRError("unbalanced '}'")
                break
            if line.startswith("%ir "):
                version = int(line[4:])
            elif line.startswith("%start "):
                start = line[7:].strip()
            elif line.startswith("%options"):
                flags = line[8:].split()
                options = GrammarOptions(**{flag: True for flag in flags})
            elif line.startswith("%ignore "):
                ignore.append(parse_expr(line[8:]))
            elif line.startswith("%subgrammar "):
                name = line[12:].rstrip("{").strip()
                sub, index = _parse_block(lines, index, top=False)
                subs.append(Subgrammar(name=name, grammar=sub))
            elif line.startswith(("rule ", "term ")):
                rules.append(_parse_rule(line))
            else:
                raise IRError(f"cannot read line {line!r}")
        except IRError:
            raise
        except Exception as exc:  # pydantic and int() errors, reported with the line
            raise IRError(f"cannot read line {line!r}: {exc}") from exc
    grammar = GrammarIR(
        ir_version=version,
        start=start,
        rules=tuple(rules),
        ignore=tuple(ignore),
        options=options,
        subgrammars=tuple(subs),
    )
    return grammar, index


def _parse_rule(line: str) -> Rule:
    reader = _Reader(line)
    terminal = reader.take_word() == "term"
    name = reader.take_name()
    options = RuleOptions()
    reader.skip_ws()
    if reader.peek() == "[":
        options = reader.take_options()
    reader.expect("=")
    body = reader.take_expr()
    reader.skip_ws()
    if not reader.at_end():
        reader.fail("unexpected text")
    return Rule(name=name, body=body, terminal=terminal, options=options)


def parse_expr(text: str) -> Expr:
    """Parse one expression in the canonical text form."""
    reader = _Reader(text)
    expr = reader.take_expr()
    reader.skip_ws()
    if not reader.at_end():
        reader.fail("unexpected text")
    return expr


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str) -> None:
        raise IRError(f"{message} at column {self.pos + 1} of {self.text!r}")

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def expect(self, token: str) -> None:
        self.skip_ws()
        if not self.text.startswith(token, self.pos):
            self.fail(f"expected {token!r}")
        self.pos += len(token)

    def take_word(self) -> str:
        self.skip_ws()
        match = re.compile(r"[a-z]+").match(self.text, self.pos)
        if not match:
            self.fail("expected a keyword")
        assert match
        self.pos = match.end()
        return match.group()

    def take_name(self) -> str:
        self.skip_ws()
        match = NAME_RE.match(self.text, self.pos)
        if not match:
            self.fail("expected a name")
        assert match
        self.pos = match.end()
        return match.group()

    def take_json_string(self) -> str:
        decoder = json.JSONDecoder()
        try:
            value, end = decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            self.fail("bad string")
            raise
        if not isinstance(value, str):
            self.fail("expected a string")
        self.pos = end
        return value

    def take_options(self) -> RuleOptions:
        self.expect("[")
        values: dict[str, object] = {}
        while True:
            key = self.take_name()
            self.skip_ws()
            if key == "lazy":
                values["lazy"] = True
            else:
                self.expect("=")
                self.skip_ws()
                if key in ("suffix", "stop"):
                    self.expect("(")
                    values[key] = self.take_expr()
                    self.expect(")")
                elif key in ("capture", "stop_capture"):
                    values[key] = self.take_json_string()
                elif key in ("max_tokens", "max_chars"):
                    values[key] = int(self._take_match(r"-?[0-9]+"))
                elif key == "temperature":
                    values[key] = float(self._take_match(r"[-+0-9.eEinfa]+"))
                else:
                    self.fail(f"unknown rule option {key!r}")
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return RuleOptions(**values)  # type: ignore[arg-type]

    def _take_match(self, pattern: str) -> str:
        match = re.compile(pattern).match(self.text, self.pos)
        if not match:
            self.fail("expected a value")
        assert match
        self.pos = match.end()
        return match.group()

    def take_expr(self) -> Expr:
        alternatives = [self.take_seq()]
        while True:
            self.skip_ws()
            if self.peek() == "|" and self.peek(2) != "|>":
                self.pos += 1
                alternatives.append(self.take_seq())
            else:
                break
        return (
            alternatives[0] if len(alternatives) == 1 else Choice(alternatives=tuple(alternatives))
        )

    def take_seq(self) -> Expr:
        items: list[Expr] = []
        while True:
            self.skip_ws()
            char = self.peek()
            if not char or char in "|)]":
                break
            items.append(self.take_postfix())
        if not items:
            self.fail("expected an expression")
        return items[0] if len(items) == 1 else Seq(items=tuple(items))

    def take_postfix(self) -> Expr:
        expr = self.take_atom()
        while True:
            char = self.peek()
            if char == "*":
                expr, self.pos = Repeat(item=expr, min=0, max=None), self.pos + 1
            elif char == "+":
                expr, self.pos = Repeat(item=expr, min=1, max=None), self.pos + 1
            elif char == "?":
                expr, self.pos = Repeat(item=expr, min=0, max=1), self.pos + 1
            elif char == "{":
                bounds = self._take_match(r"\{[0-9]+(,[0-9]*)?\}")[1:-1]
                if "," in bounds:
                    lo, hi = bounds.split(",")
                    expr = Repeat(item=expr, min=int(lo), max=int(hi) if hi else None)
                else:
                    expr = Repeat(item=expr, min=int(bounds), max=int(bounds))
            else:
                return expr

    def take_atom(self) -> Expr:
        self.skip_ws()
        char = self.peek()
        if char == "(":
            self.pos += 1
            self.skip_ws()
            if self.peek() == ")":
                self.pos += 1
                return Empty()
            if self.peek() in ("&", "|") and self.peek(2) != "|>":
                marker = self.peek()
                self.pos += 1
                members: list[Expr] = []
                while True:
                    self.skip_ws()
                    if self.peek() == ")":
                        self.pos += 1
                        break
                    members.append(self.take_postfix())
                if marker == "&":
                    return Seq(items=tuple(members))
                return Choice(alternatives=tuple(members))
            inner = self.take_expr()
            self.expect(")")
            return inner
        if char == '"':
            text = self.take_json_string()
            if self.peek() == "i":
                self.pos += 1
                return Literal(text=text, case_insensitive=True)
            return Literal(text=text)
        if self.peek(2) == 'b"':
            return self._take_bytes()
        if char == "[":
            return self._take_class()
        if self.peek(2) == "<[":
            return self._take_token_set()
        if self.peek(2) == '<"':
            self.pos += 1
            text = self.take_json_string()
            self.expect(">")
            return SpecialToken(text=text)
        if char == "@":
            self.pos += 1
            return Embed(name=self.take_name())
        return Ref(name=self.take_name())

    def _take_bytes(self) -> Bytes:
        self.pos += 2
        data = bytearray()
        while True:
            char = self.peek()
            if not char:
                self.fail("unterminated bytes")
            if char == '"':
                self.pos += 1
                return Bytes(data=bytes(data))
            if char == "\\":
                digits = self.text[self.pos + 2 : self.pos + 4]
                if self.peek(2) != "\\x" or len(digits) != 2 or not _is_hex(digits):
                    self.fail("bad escape in bytes (expected \\xNN)")
                data.append(int(digits, 16))
                self.pos += 4
            else:
                data.append(ord(char))
                self.pos += 1

    def _class_char(self) -> int:
        char = self.peek()
        if char == "\\":
            end = self.text.find("}", self.pos)
            digits = self.text[self.pos + 3 : end]
            if self.peek(3) != "\\u{" or end < 0 or not _is_hex(digits) or len(digits) > 6:
                self.fail("bad escape in class (expected \\u{hex})")
            value = int(digits, 16)
            if value > 0x10FFFF:
                self.fail("code point above U+10FFFF in class")
            self.pos = end + 1
            return value
        self.pos += 1
        return ord(char)

    def _take_class(self) -> CharClass:
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if not self.peek():
                self.fail("unterminated class")
            lo = self._class_char()
            hi = lo
            if self.peek() == "-":
                self.pos += 1
                hi = self._class_char()
                if hi < lo:
                    self.fail("class range out of order")
            ranges.append((lo, hi))
        self.pos += 1
        # Written by hand, `[ab]` lists adjacent ranges; the node holds them merged.
        return CharClass(ranges=tuple(normalise_ranges(ranges)), negated=negated)

    def _take_token_set(self) -> TokenSet:
        self.pos += 2
        end = self.text.find("]>", self.pos)
        if end < 0:
            self.fail("unterminated token set (expected ]>)")
        body = self.text[self.pos : end]
        if body == "*":
            self.pos = end + 2
            return TokenSet(wildcard=True)
        negated = body.startswith("^")
        ranges: list[tuple[int, int]] = []
        for part in body.lstrip("^").split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or not (hi or lo).isdigit():
                self.fail(f"bad token id range {part!r} in token set")
            ranges.append((int(lo), int(hi or lo)))
        self.pos = end + 2
        return TokenSet(ranges=tuple(ranges), negated=negated)
