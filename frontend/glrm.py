"""GLRM front end: GLRMask's native grammar format (seed ``003``) to IR.

A GLRM grammar starts with ``glrm 1;`` and a ``start NAME;`` declaration, then declares
terminals (``t NAME = expr;``), nonterminals (``nt NAME = expr;``), ignored terminals
(``ignore expr;``), inline subgrammars (``g NAME = { ... };``, or ``grammar NAME { ... }``
as GLRMask 0.5 writes them), externally bound subgrammars and special tokens
(``extern grammar NAME;``, ``extern token NAME;``) and finite automata as bodies
(``fa { start S; accept A, B; S -> A: expr; }``, edges also written ``edge S -> A: expr;``).

Expressions: names, double- or single-quoted strings, ``/regex/flags`` (full match), ``eps``,
``( )``, ``|``, juxtaposition, and the postfix ``*``, ``+``, ``?``, ``{m}``, ``{m,}``,
``{m,n}``. A terminal is one lexeme: it may name other terminals but no nonterminal, and no
ignored text goes inside it. Several definitions of one name are alternatives of one rule.

Semantics are gramkiln's (exact context-free membership, no greedy lexing), so ``nt a = D D;``
with ``t D = /[0-9]+/;`` accepts ``12``. Ignored text may also precede the first lexeme, as in
GLRMask (the IR option ``allow_initial_skip``). Externs are left as placeholders that
``Grammar.bind`` replaces; compiling with one unbound is an error that names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gramkiln.frontend._lark_scan import Source, read_regex, read_unicode_escape
from gramkiln.frontend._regex_exprs import flat_choice, merged_seq
from gramkiln.frontend._regular_ops import byte_set, compute_operations, eliminate_states
from gramkiln.frontend.regex import MAX_REPEAT
from gramkiln.ir import (
    Bytes,
    CharClass,
    Embed,
    Empty,
    Expr,
    GrammarIR,
    GrammarOptions,
    Literal,
    Ref,
    Repeat,
    Rule,
    Seq,
    SpecialToken,
    Subgrammar,
)
from gramkiln.ir.grammar import reference_cycles
from gramkiln.ir.memo import operation

from gramkiln.errors import GrammarError

LANGUAGE = "GLRM"
SUPPORTED_VERSION = 1
# Bounds a malicious or generated source cannot pass: deep nesting would exhaust the stack,
# and a finite automaton's state elimination can grow its expression exponentially.
MAX_NESTING = 200

# Names of the IR subgrammars that stand for GLRM subgrammars; GLRM names have no dots, so
# these never collide with a user's name.
INLINE_PREFIX = "g."
EXTERN_PREFIX = "extern."
_EXTERN_TOKEN_TEXT = "<|gramkiln.extern:{}|>"

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER_RE = re.compile(r"[0-9]+")
_PUNCTUATION = ("->", ";", "=", "|", "&", "-", "(", ")", "*", "+", "?", "{", "}", ",", ":")
_STRING_ESCAPES = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "0": "\0",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}
_KEYWORDS = frozenset({"glrm", "start", "t", "nt", "ignore", "extern", "g", "grammar", "fa"})


def extern_token_placeholder(name: str) -> SpecialToken:
    """The IR element an unbound ``extern token NAME`` stands as until it is bound."""
    return SpecialToken(text=_EXTERN_TOKEN_TEXT.format(name))


def unbound_grammar_placeholder() -> GrammarIR:
    """The IR of an unbound ``extern grammar``: the empty language, never compiled."""
    return GrammarIR(rules=(Rule(name="start", body=CharClass(ranges=())),))


@dataclass(frozen=True)
class GlrmParse:
    """A parsed GLRM grammar: its IR and the externs it declares (name -> "grammar"/"token")."""

    ir: GrammarIR
    externs: dict[str, str]


@operation()
def parse_glrm(source: str) -> GlrmParse:
    """Parse GLRM source into IR; raises ``GrammarError`` with line, column and a caret."""
    if not isinstance(source, str):
        raise GrammarError(
            f"grammar source must be a str, not {type(source).__name__}", language=LANGUAGE
        )
    scanner = _Scanner(source)
    scanner.expect_keyword("glrm", "a GLRM grammar starts with 'glrm 1;'")
    version = scanner.next()
    if version.kind != "number":
        raise scanner.error("expected the format version after 'glrm'", version.start)
    if int(version.text) != SUPPORTED_VERSION:
        raise scanner.error(
            f"unsupported GLRM version {version.text} (this reads version {SUPPORTED_VERSION})",
            version.start,
        )
    scanner.expect(";")
    parser = _GrammarParser(scanner, nested=False, depth=0)
    ir = parser.parse_declarations(closing=None)
    return GlrmParse(ir=ir, externs=dict(parser.externs))


# ---------------------------------------------------------------------------------------------
# lexical layer


@dataclass(frozen=True)
class _Token:
    kind: str  # name, number, string, regex, op, eof
    text: str
    start: int
    end: int
    value: object = None

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of input"
        return f"'{self.text}'"


class _Scanner:
    """Tokens on demand, with one token of lookahead."""

    def __init__(self, text: str) -> None:
        self.text = text
        # For the readers shared with the Lark scanner (regexes, \\uXXXX escapes).
        self.source = Source(text, language=LANGUAGE)
        self.pos = 0
        self._peeked: _Token | None = None

    def error(self, message: str, offset: int) -> GrammarError:
        return GrammarError.at(LANGUAGE, message, self.text, offset)

    def peek(self) -> _Token:
        if self._peeked is None:
            self._peeked = self._read()
        return self._peeked

    def next(self) -> _Token:
        token = self.peek()
        self._peeked = None
        return token

    def at_op(self, op: str) -> bool:
        token = self.peek()
        return token.kind == "op" and token.text == op

    def at_keyword(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "name" and token.text == word

    def expect(self, op: str) -> _Token:
        token = self.next()
        if token.kind != "op" or token.text != op:
            raise self.error(f"expected '{op}', found {token.describe()}", token.start)
        return token

    def expect_keyword(self, word: str, message: str | None = None) -> _Token:
        token = self.next()
        if token.kind != "name" or token.text != word:
            raise self.error(message or f"expected '{word}'", token.start)
        return token

    def expect_name(self, what: str) -> _Token:
        token = self.next()
        if token.kind != "name":
            raise self.error(f"expected {what}, found {token.describe()}", token.start)
        return token

    def _skip_blank(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text):
            char = text[pos]
            if char in " \t\r\n\f\v\ufeff":
                pos += 1
            elif text.startswith("//", pos):
                end = text.find("\n", pos)
                pos = len(text) if end < 0 else end
            elif text.startswith("/*", pos):
                end = text.find("*/", pos + 2)
                if end < 0:
                    raise self.error("unterminated comment", pos)
                pos = end + 2
            else:
                break
        self.pos = pos

    def _read(self) -> _Token:
        self._skip_blank()
        text, pos = self.text, self.pos
        if pos >= len(text):
            return _Token("eof", "", pos, pos)
        char = text[pos]
        if char == "b" and text[pos + 1 : pos + 2] in ('"', "'", "/"):
            # b"..." and b/.../: byte strings and byte regexes (GLRMask's byte literals).
            inner = (
                self._read_string(pos + 1) if text[pos + 1] != "/" else self._read_regex(pos + 1)
            )
            token = _Token(
                "bytes_" + inner.kind, text[pos : inner.end], pos, inner.end, inner.value
            )
        elif char in "\"'":
            token = self._read_string(pos)
        elif char == "/":
            token = self._read_regex(pos)
        elif (match := _NAME_RE.match(text, pos)) is not None:
            token = _Token("name", match.group(), pos, match.end())
        elif (match := _NUMBER_RE.match(text, pos)) is not None:
            token = _Token("number", match.group(), pos, match.end())
        else:
            for op in _PUNCTUATION:
                if text.startswith(op, pos):
                    token = _Token("op", op, pos, pos + len(op))
                    break
            else:
                raise self.error(f"unexpected character {char!r}", pos)
        self.pos = token.end
        return token

    def _read_string(self, start: int) -> _Token:
        text = self.text
        quote = text[start]
        pos = start + 1
        out: list[str] = []
        while True:
            if pos >= len(text) or text[pos] == "\n":
                raise self.error("unterminated string", start)
            char = text[pos]
            if char == quote:
                pos += 1
                break
            if char != "\\":
                out.append(char)
                pos += 1
                continue
            escape = text[pos + 1 : pos + 2]
            if escape in _STRING_ESCAPES:
                out.append(_STRING_ESCAPES[escape])
                pos += 2
            elif escape == "x":
                digits = text[pos + 2 : pos + 4]
                if len(digits) != 2 or not _is_hex(digits):
                    raise self.error("\\x must be followed by two hex digits", pos)
                out.append(chr(int(digits, 16)))
                pos += 4
            elif escape == "u":
                code, pos = self._read_unicode_escape(pos)
                out.append(chr(code))
            elif escape == "U":
                digits = text[pos + 2 : pos + 10]
                if len(digits) != 8 or not _is_hex(digits):
                    raise self.error("\\U must be followed by eight hex digits", pos)
                code = int(digits, 16)
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise self.error(f"\\U{digits} is not a Unicode scalar value", pos)
                out.append(chr(code))
                pos += 10
            elif escape in ("", "\n"):
                raise self.error("unterminated string", start)
            else:
                raise self.error(f"invalid escape '\\{escape}' in string", pos)
        return _Token("string", text[start:pos], start, pos, "".join(out))

    def _read_unicode_escape(self, pos: int) -> tuple[int, int]:
        text = self.text
        if text[pos + 2 : pos + 3] != "{":
            return read_unicode_escape(self.source, pos)  # \uXXXX, surrogate pairs joined
        close = text.find("}", pos + 3)
        digits = text[pos + 3 : close] if close > 0 else ""
        if not 1 <= len(digits) <= 6 or not _is_hex(digits):
            raise self.error("\\u{...} must hold one to six hex digits", pos)
        code = int(digits, 16)
        if 0xD800 <= code <= 0xDFFF:
            raise self.error("unpaired surrogate in \\u escape", pos)
        if code > 0x10FFFF:
            raise self.error("\\u{...} is beyond U+10FFFF", pos)
        return code, close + 1

    def _read_regex(self, start: int) -> _Token:
        # As GLRMask and Lark read it: the first unescaped '/' ends the pattern; flags i, s.
        token = read_regex(self.source, start)
        return _Token("regex", token.text, token.start, token.end, token.value)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


# ---------------------------------------------------------------------------------------------
# declarations


@dataclass
class _Definition:
    kind: str  # "t" or "nt"
    name: str
    offset: int
    bodies: list[Expr] = field(default_factory=list)
    # Every name the bodies reference, with its offset, for checks once all are declared.
    refs: list[tuple[str, int]] = field(default_factory=list)


class _GrammarParser:
    """One grammar scope: the top level or an inline ``g NAME = { ... }``."""

    def __init__(self, scanner: _Scanner, nested: bool, depth: int) -> None:
        self.scanner = scanner
        self.nested = nested
        self.depth = depth
        self.start: tuple[str, int] | None = None
        self.definitions: dict[str, _Definition] = {}
        # Where each name was first declared, whatever its kind (one namespace).
        self.kinds: dict[str, tuple[str, int]] = {}
        self.ignore: list[Expr] = []
        self.ignore_refs: list[tuple[str, int]] = []
        self.inline: dict[str, GrammarIR] = {}
        self.externs: dict[str, str] = {}
        self.helper_rules: list[Rule] = []
        # Set while a body is read: the kind of rule it belongs to ("t", "nt", "ignore").
        self.context = "nt"
        self.current_refs: list[tuple[str, int]] = []
        # Intersections and differences: (helper terminal, operator, left, right, offset).
        self.set_operations: list[tuple[str, str, Expr, Expr, int]] = []
        self.nesting = 0

    def error(self, message: str, offset: int) -> GrammarError:
        return self.scanner.error(message, offset)

    def declare(self, name: _Token, kind: str) -> None:
        if name.text in _KEYWORDS or name.text == "eps":
            raise self.error(f"'{name.text}' is a keyword and cannot name a {kind}", name.start)
        known = self.kinds.get(name.text)
        if known is not None and known[0] != kind:
            raise self.error(
                f"'{name.text}' is already declared as {_kind_words(known[0])}", name.start
            )
        if known is not None and kind in ("grammar", "extern grammar", "extern token"):
            raise self.error(f"{_kind_words(kind)} '{name.text}' is declared twice", name.start)
        if known is None:
            self.kinds[name.text] = (kind, name.start)

    def parse_declarations(self, closing: str | None) -> GrammarIR:
        scanner = self.scanner
        while True:
            token = scanner.peek()
            if token.kind == "eof":
                if closing is not None:
                    raise self.error(
                        f"expected '{closing}' to close the inline grammar", token.start
                    )
                break
            if closing is not None and scanner.at_op(closing):
                break
            if token.kind != "name":
                raise self.error(f"expected a declaration, found {token.describe()}", token.start)
            scanner.next()
            word = token.text
            if word == "start":
                self.parse_start(token)
            elif word in ("t", "nt"):
                self.parse_rule(word)
            elif word == "ignore":
                self.parse_ignore()
            elif word == "extern":
                self.parse_extern(token)
            elif word == "g":
                self.parse_inline_grammar(token, seed_form=True)
            elif word == "grammar":
                self.parse_inline_grammar(token, seed_form=False)
            elif word == "glrm":
                raise self.error("'glrm 1;' may only open the grammar", token.start)
            else:
                raise self.error(
                    f"expected a declaration (start, t, nt, ignore, extern, g), found '{word}'",
                    token.start,
                )
        return self.finish(scanner.peek().start)

    def parse_start(self, keyword: _Token) -> None:
        name = self.scanner.expect_name("the start symbol's name")
        if self.start is not None:
            raise self.error("the start symbol is declared twice", keyword.start)
        self.start = (name.text, name.start)
        self.scanner.expect(";")

    def parse_rule(self, kind: str) -> None:
        name = self.scanner.expect_name(f"the {_kind_words(kind)}'s name")
        self.declare(name, kind)
        self.scanner.expect("=")
        definition = self.definitions.setdefault(
            name.text, _Definition(kind=kind, name=name.text, offset=name.start)
        )
        self.context = kind
        self.current_refs = definition.refs
        if self.scanner.at_keyword("fa"):
            body = self.parse_automaton(name.text, kind)
        else:
            body = self.parse_expr()
        definition.bodies.append(body)
        self.scanner.expect(";")

    def parse_ignore(self) -> None:
        self.context = "ignore"
        self.current_refs = self.ignore_refs
        self.ignore.append(self.parse_expr())
        self.scanner.expect(";")

    def parse_extern(self, keyword: _Token) -> None:
        what = self.scanner.expect_name("'grammar' or 'token' after 'extern'")
        if what.text not in ("grammar", "token"):
            raise self.error("expected 'grammar' or 'token' after 'extern'", what.start)
        name = self.scanner.expect_name(f"the extern {what.text}'s name")
        if self.nested:
            raise self.error(
                "externs are declared at the top level of a grammar, not inside an inline one",
                keyword.start,
            )
        self.declare(name, f"extern {what.text}")
        self.externs[name.text] = what.text
        self.scanner.expect(";")

    def parse_inline_grammar(self, keyword: _Token, seed_form: bool) -> None:
        name = self.scanner.expect_name("the inline grammar's name")
        self.declare(name, "grammar")
        if seed_form:
            self.scanner.expect("=")
        self.scanner.expect("{")
        if self.depth >= MAX_NESTING:
            raise self.error("inline grammars are nested too deeply", keyword.start)
        child = _GrammarParser(self.scanner, nested=True, depth=self.depth + 1)
        self.inline[name.text] = child.parse_declarations(closing="}")
        self.scanner.expect("}")
        if seed_form or self.scanner.at_op(";"):
            self.scanner.expect(";")

    # -- expressions ----------------------------------------------------------------------
    def parse_expr(self) -> Expr:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.error("expression is nested too deeply", self.scanner.peek().start)
        alternatives = [self.parse_set_operations()]
        while self.scanner.at_op("|"):
            self.scanner.next()
            alternatives.append(self.parse_set_operations())
        self.nesting -= 1
        return flat_choice(alternatives)

    def parse_set_operations(self) -> Expr:
        """``seq (("&" | "-") seq)*``: intersection and difference of regular operands,
        left to right, binding looser than a sequence and tighter than ``|``."""
        left = self.parse_sequence()
        while self.scanner.at_op("&") or self.scanner.at_op("-"):
            operator = self.scanner.next()
            right = self.parse_sequence()
            # Operands may name terminals declared later, so the automaton is built in
            # finish(); until then a helper terminal stands for the result.
            name = f"op.{len(self.set_operations)}"
            self.set_operations.append((name, operator.text, left, right, operator.start))
            self.kinds[name] = ("t", operator.start)
            left = Ref(name=name)
        return left

    def parse_sequence(self) -> Expr:
        items: list[Expr] = []
        while True:
            token = self.scanner.peek()
            if token.kind in ("name", "string", "regex", "bytes_string", "bytes_regex") or (
                token.kind == "op" and token.text == "("
            ):
                items.append(self.parse_postfix(self.parse_atom()))
            else:
                break
        if not items:
            token = self.scanner.peek()
            raise self.error(
                f"expected an expression (a name, a string, a regex, eps or '('), found "
                f"{token.describe()}",
                token.start,
            )
        if self.context == "nt":
            return _lexeme_seq(items)
        return merged_seq(items)

    def parse_atom(self) -> Expr:
        token = self.scanner.next()
        if token.kind == "string":
            text = token.value
            assert isinstance(text, str)
            return Empty() if text == "" else Literal(text=text)
        if token.kind == "regex":
            return self.make_regex(token)
        if token.kind == "bytes_string":
            text = token.value
            assert isinstance(text, str)
            if any(ord(c) > 0xFF for c in text):
                raise self.error(
                    "a byte string holds bytes: use \\xNN escapes, not characters above U+00FF",
                    token.start,
                )
            return Empty() if text == "" else Bytes(data=text.encode("latin-1"))
        if token.kind == "bytes_regex":
            return self.make_byte_regex(token)
        if token.kind == "op":  # "("
            inner = self.parse_expr()
            self.scanner.expect(")")
            return inner
        if token.text == "eps":
            return Empty()
        if token.text in _KEYWORDS:
            raise self.error(f"'{token.text}' is a keyword, not a symbol", token.start)
        self.current_refs.append((token.text, token.start))
        # Resolved in finish(): the name may be declared later, and only then is its kind known.
        return Ref(name=token.text)

    def parse_postfix(self, atom: Expr) -> Expr:
        while True:
            token = self.scanner.peek()
            if token.kind != "op" or token.text not in ("*", "+", "?", "{"):
                return atom
            self.scanner.next()
            if token.text == "*":
                atom = Repeat(item=atom, min=0, max=None)
            elif token.text == "+":
                atom = Repeat(item=atom, min=1, max=None)
            elif token.text == "?":
                atom = Repeat(item=atom, min=0, max=1)
            else:
                atom = self.parse_count(atom, token)

    def parse_count(self, atom: Expr, brace: _Token) -> Expr:
        low_token = self.scanner.next()
        if low_token.kind != "number":
            raise self.error("expected a repetition count after '{'", low_token.start)
        low = int(low_token.text)
        high: int | None = low
        if self.scanner.at_op(","):
            self.scanner.next()
            if self.scanner.peek().kind == "number":
                high_token = self.scanner.next()
                high = int(high_token.text)
                if high < low:
                    raise self.error(
                        f"repetition {{{low},{high}}}: the maximum is below the minimum",
                        high_token.start,
                    )
            else:
                high = None
        self.scanner.expect("}")
        if max(low, high or 0) > MAX_REPEAT:
            raise self.error(
                f"repetition counts above {MAX_REPEAT:,} are not supported", brace.start
            )
        return Repeat(item=atom, min=low, max=high)

    def make_regex(self, token: _Token) -> Expr:
        from gramkiln.frontend.regex import RegexError, parse_regex

        value = token.value
        assert isinstance(value, tuple)  # read_regex's (pattern, flags, offsets)
        pattern: str = value[0]
        flags: str = value[1]
        offsets: list[int] = value[2]
        try:
            return parse_regex(pattern, flags, lazy_as_greedy=True)
        except RegexError as error:
            offset = getattr(error, "offset", None)
            if isinstance(offset, int) and 0 <= offset < len(offsets):
                where = offsets[offset]
            else:
                where = token.start
            raise self.error(f"invalid regex: {error.message}", where) from None
        except GrammarError as error:
            raise self.error(f"invalid regex: {error.message}", token.start) from None

    def make_byte_regex(self, token: _Token) -> Expr:
        """``b/.../``: the regex read over bytes, so ``[\\x80-\\xff]`` and ``.`` match single
        bytes (not UTF-8 encoded characters)."""
        if "i" in token.value[1]:  # type: ignore[index]
            raise self.error("byte regexes do not take the 'i' flag", token.start)
        text_regex = self.make_regex(token)
        try:
            return _as_bytes(text_regex)
        except ValueError as error:
            raise self.error(f"invalid byte regex: {error}", token.start) from None

    # -- finite automata ------------------------------------------------------------------
    def parse_automaton(self, owner: str, kind: str) -> Expr:
        """``fa { start S; accept A, ...; S -> T: expr; ... }`` as an expression.

        A terminal's automaton becomes one regular expression (state elimination), since
        terminals cannot reference each other in cycles; a nonterminal's becomes one helper
        rule per state (right-linear), which keeps its size linear."""
        fa_token = self.scanner.next()
        self.scanner.expect("{")
        start: tuple[str, int] | None = None
        accepting: dict[str, int] = {}
        edges: list[tuple[str, str, Expr]] = []
        states: dict[str, int] = {}
        while not self.scanner.at_op("}"):
            token = self.scanner.next()
            if token.kind == "eof":
                raise self.error("expected '}' to close the automaton", token.start)
            if token.kind != "name":
                raise self.error(
                    f"expected 'start', 'accept' or an edge, found {token.describe()}",
                    token.start,
                )
            if token.text == "start" and not self.scanner.at_op("->"):
                name = self.scanner.expect_name("the start state")
                if start is not None:
                    raise self.error("the automaton's start state is declared twice", token.start)
                start = (name.text, name.start)
                states.setdefault(name.text, name.start)
                self.scanner.expect(";")
            elif token.text == "accept" and not self.scanner.at_op("->"):
                while True:
                    name = self.scanner.expect_name("an accepting state")
                    accepting.setdefault(name.text, name.start)
                    states.setdefault(name.text, name.start)
                    if not self.scanner.at_op(","):
                        break
                    self.scanner.next()
                self.scanner.expect(";")
            else:
                source = token
                if token.text == "edge" and not self.scanner.at_op("->"):
                    source = self.scanner.expect_name("the edge's source state")
                self.scanner.expect("->")
                target = self.scanner.expect_name("the edge's target state")
                self.scanner.expect(":")
                label = self.parse_expr()
                self.scanner.expect(";")
                states.setdefault(source.text, source.start)
                states.setdefault(target.text, target.start)
                edges.append((source.text, target.text, label))
        self.scanner.expect("}")
        if start is None:
            raise self.error("the automaton has no 'start STATE;'", fa_token.start)
        if not accepting:
            raise self.error("the automaton has no 'accept STATE;'", fa_token.start)
        if kind == "t":
            return self.eliminate_states(start[0], set(accepting), edges, fa_token.start)
        return self.automaton_rules(owner, start[0], set(accepting), edges, list(states))

    def automaton_rules(
        self,
        owner: str,
        start: str,
        accepting: set[str],
        edges: list[tuple[str, str, Expr]],
        states: list[str],
    ) -> Expr:
        index = len([r for r in self.helper_rules if r.name.startswith(f"{owner}.fa")])
        prefix = f"{owner}.fa{index}."
        outgoing: dict[str, list[Expr]] = {state: [] for state in states}
        for source, target, label in edges:
            outgoing[source].append(_lexeme_seq([label, Ref(name=prefix + target)]))
        for state in states:
            alternatives = list(outgoing[state])
            if state in accepting:
                alternatives.append(Empty())
            # A state with no way out and no acceptance is dead: the empty class says so.
            body = flat_choice(alternatives) if alternatives else CharClass(ranges=())
            self.helper_rules.append(Rule(name=prefix + state, body=body))
        return Ref(name=prefix + start)

    def eliminate_states(
        self, start: str, accepting: set[str], edges: list[tuple[str, str, Expr]], where: int
    ) -> Expr:
        expression = eliminate_states(start, accepting, edges)
        if expression is None:
            raise self.error(
                "the terminal's automaton is too large to turn into one regular expression "
                "(declare it with 'nt' instead)",
                where,
            )
        return expression

    # -- the whole scope ------------------------------------------------------------------
    def finish(self, end_offset: int) -> GrammarIR:
        if self.start is None:
            # The top level's error points at the grammar's first line, like Lark's missing
            # start rule; an inline grammar's at its closing brace.
            where = end_offset if self.nested else 0
            raise self.error("the grammar has no 'start NAME;' declaration", where)
        start_name, start_offset = self.start
        if start_name not in self.definitions:
            known = self.kinds.get(start_name)
            if known is not None:
                raise self.error(
                    f"the start symbol must be a t or nt rule, not {_kind_words(known[0])}",
                    start_offset,
                )
            raise self.error(f"start symbol '{start_name}' is not defined", start_offset)
        for definition in self.definitions.values():
            for name, offset in definition.refs:
                self.check_reference(name, offset, definition.kind)
        for name, offset in self.ignore_refs:
            self.check_reference(name, offset, "ignore")
        self.check_terminal_cycles()
        rules: list[Rule] = self.set_operation_rules()
        for definition in self.definitions.values():
            body = flat_choice(definition.bodies)
            rules.append(
                Rule(
                    name=definition.name,
                    body=self.resolve(body),
                    terminal=definition.kind == "t",
                )
            )
        for rule in self.helper_rules:
            rules.append(rule.model_copy(update={"body": self.resolve(rule.body)}))
        subgrammars = [
            Subgrammar(name=INLINE_PREFIX + name, grammar=grammar)
            for name, grammar in self.inline.items()
        ]
        subgrammars += [
            Subgrammar(name=EXTERN_PREFIX + name, grammar=unbound_grammar_placeholder())
            for name, kind in self.externs.items()
            if kind == "grammar"
        ]
        return GrammarIR(
            start=start_name,
            rules=tuple(rules),
            ignore=tuple(self.ignore),
            options=GrammarOptions(allow_initial_skip=True),
            subgrammars=tuple(subgrammars),
        ).verify()

    def set_operation_rules(self) -> list[Rule]:
        """One terminal per ``&`` / ``-``: the product automaton of its operands, written
        back as a regular expression."""
        for _, operator, left, right, offset in self.set_operations:
            for operand in (left, right):
                for ref in _ref_names(operand):
                    kind = self.kinds.get(ref, ("",))[0]
                    if kind != "t":
                        what = "undefined symbol" if not kind else _kind_words(kind)
                        raise self.error(
                            f"the operands of '{operator}' must be regular (strings, regexes and "
                            f"terminals), not {what} '{ref}'",
                            offset,
                        )
        terminals: dict[str, Expr] = {
            d.name: flat_choice(d.bodies) for d in self.definitions.values() if d.kind == "t"
        }
        operations = {
            name: (op, left, right, at) for name, op, left, right, at in self.set_operations
        }
        bodies = compute_operations(operations, terminals, self.error)
        return [Rule(name=name, body=body, terminal=True) for name, body in bodies.items()]

    def check_reference(self, name: str, offset: int, context: str) -> None:
        known = self.kinds.get(name)
        if known is None:
            raise self.error(f"undefined symbol '{name}'", offset)
        kind = known[0]
        if context in ("t", "ignore") and kind != "t":
            where = "a terminal" if context == "t" else "ignore"
            raise self.error(
                f"{where} can only use terminals, strings and regexes, not "
                f"{_kind_words(kind)} '{name}'",
                offset,
            )

    def resolve(self, expr: Expr) -> Expr:
        """Refs to subgrammars and extern tokens become the elements that stand for them."""
        from gramkiln.passes._common import map_expr

        def rewrite(node: Expr) -> Expr:
            if not isinstance(node, Ref):
                return node
            kind = self.kinds.get(node.name, ("",))[0]
            if kind == "grammar":
                return Embed(name=INLINE_PREFIX + node.name)
            if kind == "extern grammar":
                return Embed(name=EXTERN_PREFIX + node.name)
            if kind == "extern token":
                return extern_token_placeholder(node.name)
            return node

        return map_expr(expr, rewrite)

    def check_terminal_cycles(self) -> None:
        terminal_refs = {
            d.name: [(n, o) for n, o in d.refs if self.kinds.get(n, ("",))[0] == "t"]
            for d in self.definitions.values()
            if d.kind == "t"
        }
        edges = {name: [t for t, _ in refs] for name, refs in terminal_refs.items()}
        for cycle in reference_cycles(edges):
            target = cycle[-1]
            offset = next(o for t, o in terminal_refs[cycle[-2]] if t == target)
            raise self.error(
                f"terminal '{target}' is defined in terms of itself (terminals are "
                "regular; use 'nt' for recursion)",
                offset,
            )


def _kind_words(kind: str) -> str:
    return {
        "t": "a terminal",
        "nt": "a nonterminal",
        "grammar": "an inline grammar",
        "extern grammar": "an extern grammar",
        "extern token": "an extern token",
    }.get(kind, kind)


def _lexeme_seq(items: list[Expr]) -> Expr:
    """The concatenation of a nonterminal's items, each string kept as its own lexeme.

    Ignored text may go between a nonterminal's strings, so neighbouring literals are not
    merged into one as they are inside a terminal (``merged_seq``)."""
    flat = [part for item in items for part in (item.items if isinstance(item, Seq) else (item,))]
    parts = [part for part in flat if not isinstance(part, Empty)]
    if not parts:
        return Empty()
    return parts[0] if len(parts) == 1 else Seq(items=tuple(parts))


# ---------------------------------------------------------------------------------------------
# binding externs


@operation()
def bind_externs(
    ir: GrammarIR, externs: dict[str, str], pairs: list[tuple[str, object]]
) -> tuple[GrammarIR, dict[str, str]]:
    """``ir`` with the externs named in ``pairs`` bound, and the externs still unbound.

    A grammar extern takes a gramkiln ``Grammar`` (or ``GrammarIR``) with no unbound externs
    of its own; a token extern takes a token id, an IR ``TokenSet`` (what ``vocab.token(id)``
    returns) or a special token's text. Raises ``TypeError`` / ``KeyError`` / ``ValueError``
    for a value of the wrong kind, an unknown name or a name bound twice in one call.
    """
    from gramkiln.ir import TokenSet
    from gramkiln.passes._common import map_expr

    remaining = dict(externs)
    subgrammars = {sub.name: sub for sub in ir.subgrammars}
    token_values: dict[str, Expr] = {}
    seen: set[str] = set()
    for name, value in pairs:
        if name in seen:
            raise ValueError(f"extern {name!r} is bound twice in one call")
        seen.add(name)
        kind = remaining.get(name)
        if kind is None:
            if name in externs:
                raise ValueError(f"extern {name!r} is already bound")
            known = ", ".join(sorted(remaining)) or "none"
            raise KeyError(f"no unbound extern named {name!r} (unbound: {known})")
        if kind == "grammar":
            child = _grammar_value(name, value)
            subgrammars[EXTERN_PREFIX + name] = Subgrammar(name=EXTERN_PREFIX + name, grammar=child)
        else:
            if isinstance(value, bool):
                raise TypeError(f"extern token {name!r} takes a token id, not a bool")
            if isinstance(value, int):
                if value < 0:
                    raise ValueError(f"extern token {name!r}: token id {value} is negative")
                token_values[name] = TokenSet(ranges=((value, value),))
            elif isinstance(value, TokenSet):
                token_values[name] = value
            elif isinstance(value, str) and value:
                token_values[name] = SpecialToken(text=value)
            else:
                raise TypeError(
                    f"extern token {name!r} takes a token id, vocab.token(id) or a special "
                    f"token's text, not {type(value).__name__}"
                )
        del remaining[name]
    placeholders = {
        extern_token_placeholder(name).text: element for name, element in token_values.items()
    }

    def rewrite(node: Expr) -> Expr:
        if isinstance(node, SpecialToken) and node.text in placeholders:
            return placeholders[node.text]
        return node

    rules = ir.rules
    if placeholders:
        rules = tuple(
            rule.model_copy(update={"body": map_expr(rule.body, rewrite)}) for rule in ir.rules
        )
    bound = ir.model_copy(
        update={"rules": rules, "subgrammars": tuple(subgrammars.values())}
    ).verify()
    return bound, remaining


def _grammar_value(name: str, value: object) -> GrammarIR:
    if isinstance(value, GrammarIR):
        return value
    ir = getattr(value, "ir", None)
    if not isinstance(ir, GrammarIR):
        hint = ""
        if type(value).__name__ == "CompiledGrammar":
            hint = " (bind compiled children through grammar.compile_unlinked(vocab))"
        raise TypeError(
            f"extern grammar {name!r} takes a Grammar, not {type(value).__name__}{hint}"
        )
    unbound = getattr(value, "externs", {})
    if unbound:
        raise ValueError(
            f"extern grammar {name!r}: the child grammar has unbound externs of its own "
            f"({', '.join(sorted(unbound))}); bind them first"
        )
    return ir


# ---------------------------------------------------------------------------------------------
# helpers


def _as_bytes(expr: Expr) -> Expr:
    """A text regex's expression read over bytes: every character stands for one byte."""
    from gramkiln.passes._common import map_expr

    def rewrite(node: Expr) -> Expr:
        if isinstance(node, CharClass):
            members: set[int] = set()
            for low, high in node.ranges:
                members.update(range(min(low, 256), min(high, 255) + 1))
            if node.negated:
                members = set(range(256)) - members
            return byte_set(sorted(members)) if members else CharClass(ranges=())
        if isinstance(node, Literal):
            if any(ord(c) > 0xFF for c in node.text):
                raise ValueError("characters above U+00FF are not bytes (use \\xNN)")
            return Bytes(data=node.text.encode("latin-1"))
        return node

    return map_expr(expr, rewrite)


def _ref_names(expr: Expr) -> list[str]:
    from gramkiln.ir.grammar import walk

    return [node.name for node in walk(expr) if isinstance(node, Ref)]
