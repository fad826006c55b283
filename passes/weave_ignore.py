"""Pass ``weave_ignore``: make ``%ignore`` explicit in the rules."""

from __future__ import annotations

from gramkiln.ir import (
    Choice,
    Expr,
    GrammarIR,
    GrammarOptions,
    Ref,
    Repeat,
    Rule,
    Seq,
)
from gramkiln.passes._common import (
    TEXT_LEAVES,
    TOKEN_LEAVES,
    NameAllocator,
    is_empty_text,
    is_lexeme_like,
    map_expr,
    optional,
    referenced_name_set,
    rename_refs,
    rule_exprs,
    with_subgrammars,
)

IGNORE_TERMINAL = "__ignore"
WOVEN_START = "__start"
RAW_COPY_PREFIX = "__raw_"


def weave_ignore(grammar: GrammarIR) -> GrammarIR:
    """Rewrite the grammar so that ``%ignore`` is spelled out and the ignore set is empty.

    As docs/design/architecture.md defines it, ignored content may follow every lexeme and
    may precede the first lexeme only with ``allow_initial_skip``. The pass:

    - adds one terminal ``__ignore`` = ``(i1 | i2 | ...)+`` for the merged ignore set;
    - in every ordinary rule, replaces each lexeme ``x`` (a non-empty literal or bytes, a
      class, token element, embed, or a ``Ref`` to a terminal or a lazy/suffix/stop rule) by
      ``x __ignore?``;
    - leaves terminals and lexeme-like rule bodies alone: ignore never goes inside a lexeme.
      An ordinary rule referenced both from a normal position and from inside a lexeme-like
      rule gets an unwoven copy ``__raw_<name>`` for the latter;
    - when the start is itself a lexeme or ``allow_initial_skip`` is set, adds a new start
      ``__start`` = ``__ignore? start`` (initial skip) or ``start __ignore?`` (lexeme start);
    - recurses into sub-grammars, each with its own ignore set and options (the embedding
      grammar's ignore follows the ``Embed`` element);
    - returns a grammar with ``ignore=()`` and default options everywhere.

    Preserves: the language; names of existing definitions, their options and spans. The
    start rule's name changes only in the cases above.
    """
    subgrammars = with_subgrammars(grammar, weave_ignore)
    if not grammar.ignore:
        return grammar.model_copy(update={"subgrammars": subgrammars, "options": GrammarOptions()})
    rules = grammar.rule_map()
    names = NameAllocator(rules)
    ignore_name = names.claim(IGNORE_TERMINAL)
    ignore_body = (
        grammar.ignore[0] if len(grammar.ignore) == 1 else Choice(alternatives=grammar.ignore)
    )
    maybe_ignore = optional(Ref(name=ignore_name))

    normal, raw = _contexts(grammar)
    raw_copies = {name: names.claim(RAW_COPY_PREFIX + name) for name in sorted(normal & raw)}

    def is_lexeme_ref(name: str) -> bool:
        target = rules.get(name)
        return target is not None and is_lexeme_like(target)

    def weave(node: Expr) -> Expr:
        lexeme = (isinstance(node, TEXT_LEAVES + TOKEN_LEAVES) and not is_empty_text(node)) or (
            isinstance(node, Ref) and is_lexeme_ref(node.name)
        )
        return Seq(items=(node, maybe_ignore)) if lexeme else node

    new_rules: list[Rule] = []
    copies: list[Rule] = []
    for rule in grammar.rules:
        if rule.terminal:
            new_rules.append(rule)
        elif is_lexeme_like(rule) or (rule.name in raw and rule.name not in normal):
            new_rules.append(_unwoven(rule, raw_copies))
        else:
            new_rules.append(rule.model_copy(update={"body": map_expr(rule.body, weave)}))
            if rule.name in raw_copies:
                raw_copy = _unwoven(rule, raw_copies)
                copies.append(raw_copy.model_copy(update={"name": raw_copies[rule.name]}))
    new_rules.extend(copies)
    new_rules.append(Rule(name=ignore_name, body=Repeat(item=ignore_body, min=1), terminal=True))

    start = grammar.start
    start_rule = rules.get(start)
    start_is_lexeme = start_rule is not None and is_lexeme_like(start_rule)
    initial_skip = grammar.options.allow_initial_skip
    if start_is_lexeme or initial_skip:
        items: list[Expr] = [maybe_ignore] if initial_skip else []
        items.append(Ref(name=start))
        if start_is_lexeme:
            items.append(maybe_ignore)
        start = names.claim(WOVEN_START)
        new_rules.append(
            Rule(name=start, body=items[0] if len(items) == 1 else Seq(items=tuple(items)))
        )
    return grammar.model_copy(
        update={
            "start": start,
            "rules": tuple(new_rules),
            "ignore": (),
            "options": GrammarOptions(),
            "subgrammars": subgrammars,
        }
    )


def _unwoven(rule: Rule, raw_copies: dict[str, str]) -> Rule:
    """``rule`` for use inside a lexeme: its references go to the unwoven copies."""
    update: dict[str, object] = {"body": rename_refs(rule.body, raw_copies)}
    markers = {
        key: rename_refs(marker, raw_copies)
        for key, marker in (("suffix", rule.options.suffix), ("stop", rule.options.stop))
        if marker is not None
    }
    if markers:
        update["options"] = rule.options.model_copy(update=markers)
    return rule.model_copy(update=update)


def _contexts(grammar: GrammarIR) -> tuple[set[str], set[str]]:
    """Ordinary rules reached at a normal position, and rules reached inside a lexeme.

    Ordinary rules that nothing reaches count as normal, so that they are woven too.
    """
    rules = grammar.rule_map()
    normal: set[str] = set()
    raw: set[str] = set()
    normal_pending = [grammar.start]
    raw_pending: list[str] = []
    while normal_pending:
        name = normal_pending.pop()
        rule = rules.get(name)
        if rule is None or name in normal:
            continue
        if is_lexeme_like(rule):
            if not rule.terminal:
                raw_pending.extend(referenced_name_set(rule_exprs(rule)))
            continue
        normal.add(name)
        normal_pending.extend(referenced_name_set([rule.body]))
    while raw_pending:
        name = raw_pending.pop()
        rule = rules.get(name)
        if rule is None or name in raw or rule.terminal:
            continue
        raw.add(name)
        raw_pending.extend(referenced_name_set(rule_exprs(rule)))
    for rule in grammar.rules:
        if not is_lexeme_like(rule) and rule.name not in raw:
            normal.add(rule.name)
    return normal, raw
