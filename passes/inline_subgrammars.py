"""Pass ``inline_subgrammars``: merge every sub-grammar into the root's rule list."""

from __future__ import annotations

from gramkiln.ir import Embed, Expr, GrammarIR, Ref, Rule
from gramkiln.passes._common import NameAllocator, map_expr, rename_refs, safe_name_part

from gramkiln.errors import IRError

NAMESPACE_SEPARATOR = "::"


def inline_subgrammars(grammar: GrammarIR) -> GrammarIR:
    """Flatten ``subgrammars`` into the root, replacing each ``Embed`` by a ``Ref``.

    A sub-grammar's definitions are appended with namespaced names ``<sub>::<name>`` (nested
    sub-grammars are inlined first, giving ``outer::inner::name``; a name already taken gets
    a numeric suffix), and ``Embed(sub)`` becomes ``Ref`` to the renamed start of ``sub``.

    Each grammar's ``%ignore`` applies only inside it, which a flat rule list cannot express,
    so the pass requires ignore sets to have been woven already (``weave_ignore``): it raises
    ``IRError`` if the root or any sub-grammar still has one.

    Preserves: the language; root definitions unchanged; sub-grammar definitions keep their
    bodies, options and spans under their new names.
    """
    if not grammar.subgrammars:
        return grammar
    _require_woven(grammar, "the root grammar")
    names = NameAllocator(rule.name for rule in grammar.rules)
    starts: dict[str, str] = {}
    inlined: list[Rule] = []
    for sub in grammar.subgrammars:
        flat = inline_subgrammars(sub.grammar)
        prefix = safe_name_part(sub.name) + NAMESPACE_SEPARATOR
        renames = {rule.name: names.claim(prefix + rule.name) for rule in flat.rules}
        if flat.start not in renames:
            raise IRError(f"sub-grammar {sub.name} has no start rule {flat.start!r}")
        starts[sub.name] = renames[flat.start]
        for rule in flat.rules:
            inlined.append(_renamed(rule, renames))

    def embed_to_ref(node: Expr) -> Expr:
        if isinstance(node, Embed):
            if node.name not in starts:
                raise IRError(f"embed of unknown sub-grammar {node.name}")
            return Ref(name=starts[node.name], span=node.span)
        return node

    rules = [
        rule.model_copy(update={"body": map_expr(rule.body, embed_to_ref)})
        for rule in grammar.rules
    ]
    return grammar.model_copy(update={"rules": (*rules, *inlined), "subgrammars": ()})


def _require_woven(grammar: GrammarIR, where: str) -> None:
    if grammar.ignore:
        raise IRError(
            f"inline_subgrammars needs woven ignore sets, but {where} still has %ignore; "
            "run weave_ignore first"
        )
    for sub in grammar.subgrammars:
        _require_woven(sub.grammar, f"sub-grammar {sub.name}")


def _renamed(rule: Rule, renames: dict[str, str]) -> Rule:
    update: dict[str, object] = {
        "name": renames[rule.name],
        "body": rename_refs(rule.body, renames),
    }
    markers = {
        key: rename_refs(marker, renames)
        for key, marker in (("suffix", rule.options.suffix), ("stop", rule.options.stop))
        if marker is not None
    }
    if markers:
        update["options"] = rule.options.model_copy(update=markers)
    return rule.model_copy(update=update)
