"""Helpers shared by the passes: tree rewriting, name allocation and IR classification.

Nothing here changes a grammar's meaning on its own; each pass documents what it preserves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from operator import is_

from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    Seq,
    SpecialToken,
    TokenSet,
    copy_with,
    expr_facts,
    walk,
)

# Synthetic names start with a double underscore. Front ends never produce such names for
# user definitions, so a pass can recognise the rules and terminals another pass created.
SUFFIX_MARKER_PREFIX = "__suffix_"
STOP_MARKER_PREFIX = "__stop_"
MARKER_PREFIXES = (SUFFIX_MARKER_PREFIX, STOP_MARKER_PREFIX)

# Leaves that are one lexeme wherever they are written in a (non-terminal) rule body.
TEXT_LEAVES = (Literal, Bytes, CharClass)
TOKEN_LEAVES = (TokenSet, SpecialToken, Embed)
# Nodes allowed inside a terminal body (Refs are allowed too when they name terminals).
TERMINAL_NODE_KINDS = (Literal, Bytes, CharClass, Seq, Choice, Repeat, Empty)

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_\-.]")


def map_expr(
    expr: Expr, rewrite: Callable[[Expr], Expr], memo: dict[int, tuple[Expr, Expr]] | None = None
) -> Expr:
    """Rebuild ``expr`` bottom-up, applying ``rewrite`` to every node after its children.

    Nodes whose children did not change are kept as they are, so unchanged subtrees keep
    their identity and spans. When ``rewrite`` depends on nothing but the node, pass a
    ``memo`` (shared across calls): a subtree shared by several places (front ends
    hash-cons) is then rewritten once, and its result is shared too.
    """
    if memo is not None:
        known = memo.get(id(expr))
        if known is not None and known[0] is expr:
            return known[1]
    original = expr
    if isinstance(expr, Seq):
        items = tuple([map_expr(item, rewrite, memo) for item in expr.items])
        if children_changed(items, expr.items):
            expr = copy_with(expr, {"items": items})
    elif isinstance(expr, Choice):
        alternatives = tuple([map_expr(alt, rewrite, memo) for alt in expr.alternatives])
        if children_changed(alternatives, expr.alternatives):
            expr = copy_with(expr, {"alternatives": alternatives})
    elif isinstance(expr, Repeat):
        item = map_expr(expr.item, rewrite, memo)
        if item is not expr.item:
            expr = copy_with(expr, {"item": item})
    result = rewrite(expr)
    if memo is not None:
        memo[id(original)] = (original, result)  # the node is kept so its id stays unique
    return result


def children_changed(new: tuple, old: tuple) -> bool:
    """Whether rebuilt children differ from the old ones (by identity, not equality)."""
    # Identity, not equality: comparing pydantic trees deeply at every level is quadratic.
    # map(is_, ...) runs the comparison loop in C (this is asked at every node of every pass).
    return len(new) != len(old) or not all(map(is_, new, old))


def rename_refs(expr: Expr, renames: dict[str, str]) -> Expr:
    """``expr`` with every ``Ref`` whose name is a key of ``renames`` pointing at the value."""
    if not renames:
        return expr

    def rename(node: Expr) -> Expr:
        if isinstance(node, Ref) and node.name in renames:
            return copy_with(node, {"name": renames[node.name]})
        return node

    return map_expr(expr, rename)


def is_lexeme_like(rule: Rule) -> bool:
    """Whether references to ``rule`` count as one lexeme (terminals and lazy-like rules)."""
    options = rule.options
    return rule.terminal or options.lazy or options.suffix is not None or options.stop is not None


def rules_inside_lexemes(grammar: GrammarIR) -> set[str]:
    """Non-terminal rules reachable from inside a lexeme-like rule (its body or marker).

    Such rules are part of one lexeme: they are matched as a regular language, never get
    ``%ignore`` woven in, and must stay non-recursive.
    """
    rules = grammar.rule_map()
    inside: set[str] = set()
    pending = [
        name
        for rule in grammar.rules
        if is_lexeme_like(rule) and not rule.terminal
        for name in referenced_name_set(rule_exprs(rule))
    ]
    while pending:
        name = pending.pop()
        rule = rules.get(name)
        if rule is None or rule.terminal or name in inside:
            continue
        inside.add(name)
        pending.extend(referenced_name_set(rule_exprs(rule)))
    return inside


def is_terminal_only(expr: Expr, terminals: set[str] | frozenset[str]) -> bool:
    """Whether ``expr`` could be the body of a terminal (only text nodes and terminal refs)."""
    # Token elements are the only node kinds a terminal may not hold besides rule refs;
    # the facts are memoised per subtree, so asking at every level stays linear.
    facts = expr_facts(expr)
    return not facts.token_elements and facts.refs <= terminals


def referenced_name_set(exprs: Iterable[Expr]) -> frozenset[str]:
    """Names of every ``Ref`` in ``exprs`` (memoised per subtree, see ``expr_facts``)."""
    names: frozenset[str] = frozenset()
    for expr in exprs:
        names = names | expr_facts(expr).refs
    return names


def referenced_names(exprs: Iterable[Expr]) -> list[str]:
    """Names of every ``Ref`` in ``exprs``, in first-occurrence order without duplicates."""
    seen: dict[str, None] = {}
    for expr in exprs:
        for node in walk(expr):
            if isinstance(node, Ref):
                seen.setdefault(node.name, None)
    return list(seen)


def rule_exprs(rule: Rule) -> list[Expr]:
    """The body of ``rule`` and its suffix/stop marker expressions, when present."""
    exprs: list[Expr] = [rule.body]
    if rule.options.suffix is not None:
        exprs.append(rule.options.suffix)
    if rule.options.stop is not None:
        exprs.append(rule.options.stop)
    return exprs


class NameAllocator:
    """Hands out fresh definition names that clash with nothing already taken."""

    def __init__(self, taken: Iterable[str]) -> None:
        self._taken = set(taken)
        self._counters: dict[str, int] = {}

    def claim(self, name: str) -> str:
        """``name`` itself if free, else ``name_2``, ``name_3``...; the result becomes taken."""
        candidate, number = name, 2
        while candidate in self._taken:
            candidate = f"{name}_{number}"
            number += 1
        self._taken.add(candidate)
        return candidate

    def numbered(self, prefix: str) -> str:
        """The next free ``{prefix}{n}`` with a per-prefix counter (``__t_0``, ``__t_1``...)."""
        number = self._counters.get(prefix, 0)
        while f"{prefix}{number}" in self._taken:
            number += 1
        self._counters[prefix] = number + 1
        name = f"{prefix}{number}"
        self._taken.add(name)
        return name


def safe_name_part(text: str) -> str:
    """``text`` made usable inside a definition name of the canonical text form."""
    cleaned = _UNSAFE_NAME_CHARS.sub("_", text) or "_"
    if not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = "_" + cleaned
    return cleaned


def optional(expr: Expr) -> Repeat:
    """``expr?`` as a Repeat node."""
    return Repeat(item=expr, min=0, max=1)


def is_empty_text(expr: Expr) -> bool:
    """Whether ``expr`` is an empty literal or empty bytes: the empty string, not a lexeme."""
    return (isinstance(expr, Literal) and expr.text == "") or (
        isinstance(expr, Bytes) and expr.data == b""
    )


def is_empty_language(expr: Expr) -> bool:
    """Whether ``expr`` is syntactically the empty language (a choice of no alternatives)."""
    return isinstance(expr, Choice) and not expr.alternatives


def with_subgrammars(grammar: GrammarIR, transform: Callable[[GrammarIR], GrammarIR]) -> tuple:
    """The sub-grammars of ``grammar`` with ``transform`` applied to each nested grammar."""
    return tuple(copy_with(sub, {"grammar": transform(sub.grammar)}) for sub in grammar.subgrammars)
