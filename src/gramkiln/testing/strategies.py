"""Hypothesis strategies for gramkiln: random small grammars and strings to test them with.

``grammars()`` draws a :class:`~gramkiln.ir.GrammarIR` that always passes ``verify()`` and
that the reference matcher can run: a few rules and terminals over a small alphabet, with
sequences, choices, bounded and unbounded repeats, references (including direct and left
recursion), nullable rules, optional ``%ignore`` (with or without ``allow_initial_skip``),
lazy and suffix/stop rules with terminal bodies, and optionally one sub-grammar with its own
ignore set. ``rich_grammars()`` additionally uses every IR node kind, rule options and
spans, for IR round-trip tests (not all of it is matchable as text).

``grammar_strings(grammar)`` draws strings by random derivation (depth-limited, then the
cheapest way out), usually members of the language, and ``mutated_strings(grammar)`` edits
such samples (insert, delete, swap, truncate, duplicate) to probe near misses. Sampling is
plain Python driven by one drawn ``random.Random``, which keeps it fast.
"""

from __future__ import annotations

import functools
import math
import random
import string as string_module
from collections.abc import Sequence

from hypothesis import strategies as st

from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    GrammarIR,
    GrammarOptions,
    Literal,
    Ref,
    Repeat,
    Rule,
    RuleOptions,
    Seq,
    Span,
    SpecialToken,
    Subgrammar,
    TokenSet,
    walk,
)

ALPHABET = "ab(),"
IGNORE_ALPHABET = " ,"
SUBGRAMMAR_NAME = "sub"

# ---------------------------------------------------------------------------------------------
# grammars


def _chars(alphabet: str) -> st.SearchStrategy[str]:
    return st.sampled_from(alphabet)


@functools.lru_cache(maxsize=64)
def literals(alphabet: str = ALPHABET) -> st.SearchStrategy[Literal]:
    """A literal of one to three characters from ``alphabet``, sometimes ASCII-case-folded."""
    return st.builds(
        Literal,
        text=st.text(alphabet, min_size=1, max_size=3),
        case_insensitive=st.sampled_from([False, False, False, True])
        if alphabet.isascii()
        else st.just(False),
    )


@functools.lru_cache(maxsize=64)
def char_classes(alphabet: str = ALPHABET) -> st.SearchStrategy[CharClass]:
    """A class of some characters of ``alphabet``, sometimes negated."""
    return st.builds(
        lambda chars, negated: CharClass.of([(ord(c), ord(c)) for c in chars], negated=negated),
        st.sets(_chars(alphabet), min_size=1, max_size=3),
        st.sampled_from([False, False, False, True]),
    )


def repeat_bounds() -> st.SearchStrategy[tuple[int, int | None]]:
    """Repeat bounds: the common ``* + ?`` and small ``{m}``, ``{m,n}``, ``{m,}``."""
    return st.one_of(
        st.sampled_from([(0, None), (1, None), (0, 1)]),
        st.tuples(st.integers(0, 2), st.integers(0, 2)).map(lambda t: (t[0], t[0] + t[1])),
        st.integers(2, 3).map(lambda m: (m, None)),
    )


def _repeat(item: Expr, bounds: tuple[int, int | None]) -> Repeat:
    return Repeat(item=item, min=bounds[0], max=bounds[1])


def terminal_exprs(
    terminals: Sequence[str] = (), alphabet: str = ALPHABET, max_leaves: int = 4
) -> st.SearchStrategy[Expr]:
    """A terminal-only expression (text leaves and references to ``terminals``)."""
    return _terminal_exprs(tuple(terminals), alphabet, max_leaves)


# Strategies are cached: building (and validating) a fresh recursive strategy on every draw
# would cost more than the draws themselves.
@functools.lru_cache(maxsize=256)
def _terminal_exprs(
    terminals: tuple[str, ...], alphabet: str, max_leaves: int
) -> st.SearchStrategy[Expr]:
    leaves: list[st.SearchStrategy[Expr]] = [literals(alphabet), char_classes(alphabet)]
    if terminals:
        leaves.append(st.sampled_from(terminals).map(lambda name: Ref(name=name)))
    return _expressions(st.one_of(*leaves), max_leaves)


@functools.lru_cache(maxsize=256)
def _rule_exprs(
    alphabet: str, terminals: tuple[str, ...], rules: tuple[str, ...], embed: bool, max_leaves: int
) -> st.SearchStrategy[Expr]:
    """Expressions for ordinary rule bodies referencing ``terminals`` and ``rules``."""
    leaves: list[st.SearchStrategy[Expr]] = [
        literals(alphabet),
        char_classes(alphabet),
        st.just(Empty()),
    ]
    if terminals:
        leaves.append(st.sampled_from(terminals).map(lambda n: Ref(name=n)))
    if rules:
        leaves.append(st.sampled_from(rules).map(lambda n: Ref(name=n)))
    if embed:
        leaves.append(st.just(Embed(name=SUBGRAMMAR_NAME)))
    return _expressions(st.one_of(*leaves), max_leaves)


def _expressions(leaves: st.SearchStrategy[Expr], max_leaves: int) -> st.SearchStrategy[Expr]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: Seq(items=tuple(xs))),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: Choice(alternatives=tuple(xs))),
            st.builds(_repeat, inner, repeat_bounds()),
        ),
        max_leaves=max_leaves,
    )


@st.composite
def grammars(
    draw: st.DrawFn,
    *,
    max_rules: int = 4,
    max_terminals: int = 2,
    ignore: bool | None = None,
    lazy: bool = True,
    suffix_stop: bool = True,
    subgrammars: bool = False,
    alphabet: str = ALPHABET,
) -> GrammarIR:
    """A small random grammar that verifies and that the reference matcher can run.

    Rule ``i`` may always reference rules with a higher index, and the last rule references
    none, so every rule derives some string; references to any rule (itself or lower ones:
    recursion, including left recursion ``r: r x | y``) only appear in an extra alternative.
    Lazy and suffix/stop bodies use terminals and later non-recursive ordinary rules.
    ``ignore`` None draws whether to have an ignore set; ``subgrammars`` allows one embedded
    sub-grammar ``sub`` with its own (possibly different) ignore set.
    """
    terminal_names = [f"T{i}" for i in range(draw(st.integers(0, max_terminals)))]
    rules: list[Rule] = []
    for index, name in enumerate(terminal_names):
        terminal_body = draw(terminal_exprs(terminal_names[:index], alphabet, max_leaves=3))
        rules.append(Rule(name=name, body=terminal_body, terminal=True))

    rule_names = ["start"] + [f"r{i}" for i in range(1, draw(st.integers(1, max_rules)))]
    lexeme_like = set()
    for name in rule_names[1:]:
        if lazy and draw(st.integers(0, 4)) == 0:
            lexeme_like.add(name)
    sub_grammar = None
    if subgrammars and draw(st.booleans()):
        sub_grammar = draw(
            grammars(
                max_rules=2,
                max_terminals=1,
                ignore=None,
                lazy=False,
                suffix_stop=False,
                subgrammars=False,
                alphabet=alphabet,
            )
        )

    # Bodies are drawn from the last rule to the first so that we know which later rules
    # are "regular": ordinary, non-recursive, no embeds and no lazy rules inside. Only those
    # may be used inside a lazy body (a lexeme must stay a regular language).
    bodies: dict[str, Rule] = {}
    regular: set[str] = set()
    for index in reversed(range(len(rule_names))):
        name = rule_names[index]
        later = tuple(rule_names[index + 1 :])
        if name in lexeme_like:
            usable = tuple(n for n in later if n in regular)
            bodies[name] = draw(
                _lexeme_like_rule(name, tuple(terminal_names), usable, alphabet, suffix_stop)
            )
            continue
        leaf_args = (alphabet, tuple(terminal_names), later, sub_grammar is not None)
        safe = draw(_rule_exprs(*leaf_args, 4))
        body: Expr = safe
        shape = draw(st.integers(0, 5))
        if shape == 0:
            # left recursion: r = r x | safe
            step = draw(_rule_exprs(*leaf_args, 2))
            body = Choice(alternatives=(Seq(items=(Ref(name=name), step)), safe))
        elif shape == 1:
            # any reference, recursion included, in an extra alternative
            target = draw(st.sampled_from(rule_names))
            wrapped = draw(st.sampled_from(["plain", "nested", "right"]))
            recursive: Expr = Ref(name=target)
            if wrapped == "nested":
                recursive = Seq(items=(Literal(text="("), Ref(name=target), Literal(text=")")))
            elif wrapped == "right":
                recursive = Seq(items=(draw(literals(alphabet)), Ref(name=target)))
            body = Choice(alternatives=(safe, recursive))
        else:
            uses = [node for node in walk(body) if isinstance(node, (Ref, Embed))]
            if all(
                isinstance(node, Ref) and (node.name in terminal_names or node.name in regular)
                for node in uses
            ):
                regular.add(name)
        bodies[name] = Rule(name=name, body=body)
    rules.extend(bodies[name] for name in rule_names)

    ignore_exprs: tuple[Expr, ...] = ()
    want_ignore = draw(st.booleans()) if ignore is None else ignore
    if want_ignore:
        ignore_leaves: list[st.SearchStrategy[Expr]] = [
            literals(IGNORE_ALPHABET).map(lambda lit: Literal(text=lit.text)),
            char_classes(IGNORE_ALPHABET).map(lambda c: CharClass(ranges=c.ranges)),
        ]
        if terminal_names:
            ignore_leaves.append(st.sampled_from(terminal_names).map(lambda n: Ref(name=n)))
        ignore_exprs = tuple(draw(st.lists(st.one_of(*ignore_leaves), min_size=1, max_size=2)))
    options = GrammarOptions(allow_initial_skip=bool(ignore_exprs) and draw(st.booleans()))
    subs = () if sub_grammar is None else (Subgrammar(name=SUBGRAMMAR_NAME, grammar=sub_grammar),)
    return GrammarIR(
        rules=tuple(rules), ignore=ignore_exprs, options=options, subgrammars=subs
    ).verify()


def admits_most_tokens(grammar: GrammarIR) -> bool:
    """Whether `grammar` has a negated class or a wildcard or negated token set anywhere
    (sub-grammars included): such grammars admit most of a real vocabulary at most positions,
    where the reference matcher's brute force takes seconds per mask, so real-vocabulary runs
    against it leave them to the small-vocabulary suites."""
    stack: list[object] = [grammar.model_dump()]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("negated") or node.get("wildcard"):
                return True
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return False


@st.composite
def _lexeme_like_rule(
    draw: st.DrawFn,
    name: str,
    terminals: tuple[str, ...],
    regular_rules: tuple[str, ...],
    alphabet: str,
    suffix_stop: bool,
) -> Rule:
    body = draw(_terminal_exprs(terminals + regular_rules, alphabet, 3))
    kind = draw(st.sampled_from(["lazy", "suffix", "stop"] if suffix_stop else ["lazy"]))
    if kind == "lazy":
        return Rule(name=name, body=body, options=RuleOptions(lazy=True))
    marker = draw(st.one_of(literals(alphabet), char_classes(alphabet)))
    capture = draw(st.sampled_from([None, "marker"]))
    return Rule(
        name=name, body=body, options=RuleOptions(**{kind: marker, "stop_capture": capture})
    )


# ---------------------------------------------------------------------------------------------
# rich grammars for IR round trips


def spans() -> st.SearchStrategy[Span | None]:
    """An optional source span."""
    return st.one_of(
        st.none(),
        st.builds(
            Span,
            line=st.integers(1, 50),
            column=st.integers(1, 80),
            end_line=st.one_of(st.none(), st.integers(1, 50)),
            end_column=st.one_of(st.none(), st.integers(1, 80)),
        ),
    )


def _token_sets() -> st.SearchStrategy[TokenSet]:
    ranges = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 5)), min_size=1, max_size=3)
    return st.one_of(
        st.just(TokenSet(wildcard=True)),
        st.builds(
            lambda rs, negated: TokenSet(
                ranges=tuple(_merged([(lo, lo + width) for lo, width in rs])), negated=negated
            ),
            ranges,
            st.booleans(),
        ),
    )


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _with_span(strategy: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.builds(lambda node, span: node.model_copy(update={"span": span}), strategy, spans())


_UNICODE_TEXT = st.text(
    # hypothesis types the categories as a union of Literal strings, which a tuple defeats
    st.characters(codec="utf-8", exclude_categories=("Cs",)),  # type: ignore[arg-type]
    min_size=0,
    max_size=4,
)


@functools.lru_cache(maxsize=1)
def _rich_text_leaves() -> st.SearchStrategy[Expr]:
    return st.one_of(
        _with_span(st.builds(Literal, text=_UNICODE_TEXT)),
        _with_span(literals(string_module.ascii_letters)),
        _with_span(st.builds(Bytes, data=st.binary(max_size=3))),
        _with_span(
            st.builds(
                CharClass.of,
                st.lists(st.tuples(st.integers(0, 0x2FF), st.integers(0, 40)), max_size=3).map(
                    lambda rs: [(lo, min(lo + w, 0x10FFFF)) for lo, w in rs]
                ),
                st.booleans(),
            )
        ),
        st.just(Empty()),
    )


@functools.lru_cache(maxsize=16)
def _rich_terminal_bodies(earlier_terminals: tuple[str, ...]) -> st.SearchStrategy[Expr]:
    leaves = [_rich_text_leaves()]
    if earlier_terminals:
        leaves.append(st.sampled_from(earlier_terminals).map(lambda n: Ref(name=n)))
    return _expressions(st.one_of(*leaves), max_leaves=3)


@functools.lru_cache(maxsize=64)
def _rich_rule_bodies(names: tuple[str, ...], embed: bool) -> st.SearchStrategy[Expr]:
    leaves = [
        _rich_text_leaves(),
        st.sampled_from(names).map(lambda n: Ref(name=n)),
        _with_span(_token_sets()),
        _with_span(st.builds(SpecialToken, text=st.text(min_size=1, max_size=6))),
    ]
    if embed:
        leaves.append(_with_span(st.just(Embed(name="inner.0"))))
    return _expressions(st.one_of(*leaves), max_leaves=5)


@st.composite
def rich_grammars(draw: st.DrawFn, *, nested: bool = True) -> GrammarIR:
    """A valid grammar using every node kind, rule options, grammar options and spans."""
    terminal_names = [f"T{i}" for i in range(draw(st.integers(0, 2)))]
    rule_names = ["start"] + [f"r{i}" for i in range(1, draw(st.integers(1, 3)))]
    sub = draw(rich_grammars(nested=False)) if nested and draw(st.booleans()) else None
    rules: list[Rule] = []
    for index, name in enumerate(terminal_names):
        body = draw(_rich_terminal_bodies(tuple(terminal_names[:index])))
        rules.append(Rule(name=name, body=body, terminal=True, span=draw(spans())))
    bodies = _rich_rule_bodies(tuple(rule_names + terminal_names), sub is not None)
    for name in rule_names:
        rules.append(
            Rule(name=name, body=draw(bodies), options=draw(_rule_options()), span=draw(spans()))
        )
    draw(st.randoms(use_true_random=False)).shuffle(rules)
    ignore = tuple(draw(st.lists(terminal_exprs(terminal_names, max_leaves=2), max_size=2)))
    return GrammarIR(
        rules=tuple(rules),
        ignore=ignore,
        options=GrammarOptions(allow_initial_skip=draw(st.booleans())),
        subgrammars=() if sub is None else (Subgrammar(name="inner.0", grammar=sub),),
    ).verify()


@st.composite
def _rule_options(draw: st.DrawFn) -> RuleOptions:
    kind = draw(st.sampled_from(["none", "none", "lazy", "suffix", "stop", "temperature"]))
    capture = draw(st.sampled_from([None, "c", "a.b-c_1"]))
    if kind == "none":
        return RuleOptions(capture=capture)
    if kind == "temperature":
        return RuleOptions(capture=capture, temperature=draw(st.floats(0, 2, allow_nan=False)))
    max_tokens = draw(st.one_of(st.none(), st.integers(1, 1_000_000)))
    max_chars = draw(st.one_of(st.none(), st.integers(0, 1000)))
    if kind == "lazy":
        return RuleOptions(lazy=True, capture=capture, max_tokens=max_tokens, max_chars=max_chars)
    marker = draw(st.one_of(literals(), char_classes()))
    return RuleOptions(
        **{kind: marker},
        stop_capture=draw(st.sampled_from([None, "m"])),
        capture=capture,
        max_tokens=max_tokens,
        max_chars=max_chars,
    )


# ---------------------------------------------------------------------------------------------
# strings


class StringSampler:
    """Random derivations of a grammar, following the same ignore rules as the oracle.

    Below ``max_depth`` every choice is random; past it the sampler takes, at each choice
    and repeat, the way out with the fewest expansions, so it always terminates. A lazy or
    suffix/stop occurrence is sampled from its body (plus marker), so the result may violate
    committed-shortest matching: samples are *usually* members, and tests must ask the oracle.
    """

    def __init__(
        self,
        grammar: GrammarIR,
        max_depth: int = 6,
        ignore_rate: float = 0.3,
        max_pieces: int = 40,
    ) -> None:
        self.grammar = grammar
        self.max_depth = max_depth
        self.max_pieces = max_pieces
        self.ignore_rate = ignore_rate
        self._rules = grammar.rule_map()
        self._subs = {
            sub.name: StringSampler(sub.grammar, max_depth, ignore_rate)
            for sub in grammar.subgrammars
        }
        self._cost = self._rule_costs()

    def sample(self, rnd: random.Random) -> str | None:
        """One string, or None when the start rule derives nothing."""
        if math.isinf(self._cost.get(self.grammar.start, math.inf)):
            return None
        out: list[str] = []
        if self.grammar.options.allow_initial_skip:
            self._maybe_ignore(rnd, out)
        self._emit(Ref(name=self.grammar.start), rnd, out, 0, lexeme=False)
        return "".join(out)

    # -- costs: the fewest expansions needed to finish, infinity when impossible ----------
    def _rule_costs(self) -> dict[str, float]:
        cost: dict[str, float] = {name: math.inf for name in self._rules}
        changed = True
        while changed:
            changed = False
            for name, rule in self._rules.items():
                value = 1 + self._expr_cost(self._full_body(rule), cost)
                if value < cost[name]:
                    cost[name] = value
                    changed = True
        return cost

    def _expr_cost(self, expr: Expr, cost: dict[str, float]) -> float:
        if isinstance(expr, Seq):
            return sum((self._expr_cost(item, cost) for item in expr.items), 0.0)
        if isinstance(expr, Choice):
            return min((self._expr_cost(alt, cost) for alt in expr.alternatives), default=math.inf)
        if isinstance(expr, Repeat):
            return expr.min * self._expr_cost(expr.item, cost) if expr.min else 0.0
        if isinstance(expr, Ref):
            return cost.get(expr.name, math.inf)
        if isinstance(expr, CharClass):
            return 1.0 if expr.positive_ranges() else math.inf
        if isinstance(expr, Embed):
            sub = self._subs.get(expr.name)
            return math.inf if sub is None else sub._cost.get(sub.grammar.start, math.inf)
        if isinstance(expr, (TokenSet, SpecialToken)):
            return math.inf  # not text
        return 0.0

    @staticmethod
    def _full_body(rule: Rule) -> Expr:
        marker = rule.options.suffix if rule.options.suffix is not None else rule.options.stop
        return rule.body if marker is None else Seq(items=(rule.body, marker))

    # -- emission -------------------------------------------------------------------------
    def _maybe_ignore(self, rnd: random.Random, out: list[str]) -> None:
        while self.grammar.ignore and rnd.random() < self.ignore_rate:
            self._emit(rnd.choice(self.grammar.ignore), rnd, out, self.max_depth, lexeme=True)

    def _emit(
        self, expr: Expr, rnd: random.Random, out: list[str], depth: int, lexeme: bool
    ) -> None:
        # Past the depth or size budget, take the cheapest way out so that sampling ends
        # quickly and strings stay short enough for the oracle.
        deep = depth >= self.max_depth or len(out) >= self.max_pieces
        if isinstance(expr, Seq):
            for item in expr.items:
                self._emit(item, rnd, out, depth, lexeme)
        elif isinstance(expr, Choice):
            viable = [
                alt for alt in expr.alternatives if not math.isinf(self._expr_cost(alt, self._cost))
            ]
            if not viable:
                raise _Stuck
            if deep:
                chosen = min(viable, key=lambda alt: self._expr_cost(alt, self._cost))
            else:
                chosen = rnd.choice(viable)
            self._emit(chosen, rnd, out, depth + 1, lexeme)
        elif isinstance(expr, Repeat):
            high = expr.max if expr.max is not None else expr.min + 2
            count = expr.min if deep else rnd.randint(expr.min, high)
            for _ in range(count):
                self._emit(expr.item, rnd, out, depth + 1, lexeme)
        elif isinstance(expr, Ref):
            rule = self._rules[expr.name]
            inner_lexeme = lexeme or rule.terminal or self._is_lexeme_like(rule)
            self._emit(self._full_body(rule), rnd, out, depth + 1, inner_lexeme)
            if not lexeme and inner_lexeme:
                self._maybe_ignore(rnd, out)
        elif isinstance(expr, Embed):
            text = self._subs[expr.name]._sample_inner(rnd, depth + 1)
            out.append(text)
            if not lexeme:
                self._maybe_ignore(rnd, out)
        elif isinstance(expr, (Literal, Bytes, CharClass)):
            out.append(_leaf_text(expr, rnd))
            if not lexeme and not _is_empty_leaf(expr):
                self._maybe_ignore(rnd, out)
        elif isinstance(expr, (TokenSet, SpecialToken)):
            raise _Stuck

    def _sample_inner(self, rnd: random.Random, depth: int) -> str:
        out: list[str] = []
        if self.grammar.options.allow_initial_skip:
            self._maybe_ignore(rnd, out)
        self._emit(Ref(name=self.grammar.start), rnd, out, depth, lexeme=False)
        return "".join(out)

    @staticmethod
    def _is_lexeme_like(rule: Rule) -> bool:
        options = rule.options
        return options.lazy or options.suffix is not None or options.stop is not None


class _Stuck(Exception):
    """A derivation reached something that has no text (a token element or no way out)."""


def _is_empty_leaf(expr: Expr) -> bool:
    return (isinstance(expr, Literal) and not expr.text) or (
        isinstance(expr, Bytes) and not expr.data
    )


def _leaf_text(expr: Expr, rnd: random.Random) -> str:
    if isinstance(expr, Literal):
        if expr.case_insensitive:
            return "".join(c.upper() if rnd.random() < 0.5 else c.lower() for c in expr.text)
        return expr.text
    if isinstance(expr, Bytes):
        return expr.data.decode("utf-8", errors="replace")
    assert isinstance(expr, CharClass)
    ranges = expr.positive_ranges()
    # Prefer the printable ASCII part so that samples stay readable and hit the alphabet.
    ascii_ranges = [(lo, min(hi, 0x7E)) for lo, hi in ranges if lo <= 0x7E]
    lo, hi = rnd.choice(ascii_ranges if ascii_ranges and rnd.random() < 0.9 else list(ranges))
    return chr(rnd.randint(lo, hi))


def sample_string(grammar: GrammarIR, rnd: random.Random, max_depth: int = 6) -> str | None:
    """One random derivation of ``grammar`` (None if it has none reachable as text)."""
    try:
        return StringSampler(grammar, max_depth).sample(rnd)
    except _Stuck:
        return None


def grammar_strings(grammar: GrammarIR, max_depth: int = 6) -> st.SearchStrategy[str]:
    """Strings derived from ``grammar`` (usually members; the empty string if none)."""
    sampler = StringSampler(grammar, max_depth)

    def draw_one(rnd: random.Random) -> str:
        try:
            return sampler.sample(rnd) or ""
        except _Stuck:
            return ""

    return st.randoms(use_true_random=False).map(draw_one)


def mutate(text: str, rnd: random.Random, alphabet: str = ALPHABET + " ") -> str:
    """``text`` with one to three random edits: insert, delete, replace, swap, truncate."""
    chars = list(text)
    for _ in range(rnd.randint(1, 3)):
        edit = rnd.choice(["insert", "delete", "replace", "swap", "truncate", "duplicate"])
        position = rnd.randint(0, len(chars))
        if edit == "insert" or not chars:
            chars.insert(position, rnd.choice(alphabet))
        elif edit == "delete":
            del chars[min(position, len(chars) - 1)]
        elif edit == "replace":
            chars[min(position, len(chars) - 1)] = rnd.choice(alphabet)
        elif edit == "swap" and len(chars) > 1:
            i = min(position, len(chars) - 2)
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        elif edit == "truncate":
            del chars[position:]
        elif edit == "duplicate":
            end = rnd.randint(position, len(chars))
            chars[position:position] = chars[position:end]
    return "".join(chars)


def mutated_strings(grammar: GrammarIR, max_depth: int = 6) -> st.SearchStrategy[str]:
    """Samples of ``grammar`` with random edits: near misses and other members."""
    return st.tuples(grammar_strings(grammar, max_depth), st.randoms(use_true_random=False)).map(
        lambda pair: mutate(pair[0], pair[1])
    )


def probe_strings(grammar: GrammarIR, max_depth: int = 6) -> st.SearchStrategy[str]:
    """Samples, mutated samples and short random strings over the alphabet, mixed."""
    return st.one_of(
        grammar_strings(grammar, max_depth),
        mutated_strings(grammar, max_depth),
        st.text(ALPHABET + " ", max_size=6),
    )
