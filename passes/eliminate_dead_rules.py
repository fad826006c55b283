"""Pass ``eliminate_dead_rules``: drop definitions and sub-grammars nothing can reach."""

from __future__ import annotations

from gramkiln.ir import GrammarIR, expr_facts
from gramkiln.passes._common import referenced_name_set, rule_exprs


def eliminate_dead_rules(grammar: GrammarIR) -> GrammarIR:
    """Keep only the rules, terminals and sub-grammars reachable from the roots.

    Roots are the start rule and every ``Ref`` in the ``%ignore`` expressions; a live rule
    keeps alive whatever its body and its suffix/stop markers reference, and the
    sub-grammars it embeds. Each kept sub-grammar is cleaned the same way from its own start
    (its names live in their own namespace). Surviving definitions keep their order.

    Preserves: the language, every surviving rule unchanged (names, options, spans), the
    ignore set and the grammar options.
    """
    rules = grammar.rule_map()
    live: set[str] = set()
    embedded: set[str] = set()
    pending = [grammar.start, *referenced_name_set(grammar.ignore)]
    while pending:
        name = pending.pop()
        if name in live or name not in rules:
            continue
        live.add(name)
        for expr in rule_exprs(rules[name]):
            facts = expr_facts(expr)  # memoised per subtree: no walk of unchanged bodies
            pending.extend(facts.refs)
            embedded.update(facts.embeds)
    subgrammars = tuple(
        sub.model_copy(update={"grammar": eliminate_dead_rules(sub.grammar)})
        for sub in grammar.subgrammars
        if sub.name in embedded
    )
    return grammar.model_copy(
        update={
            "rules": tuple(rule for rule in grammar.rules if rule.name in live),
            "subgrammars": subgrammars,
        }
    )
