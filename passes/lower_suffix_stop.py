"""Pass ``lower_suffix_stop``: turn ``suffix=M`` / ``stop=M`` rules into plain lazy rules."""

from __future__ import annotations

from gramkiln.ir import GrammarIR, Ref, Rule, RuleOptions, Seq
from gramkiln.passes._common import (
    STOP_MARKER_PREFIX,
    SUFFIX_MARKER_PREFIX,
    NameAllocator,
    is_terminal_only,
    with_subgrammars,
)

CAPTURE_SUFFIX = ".capture"


def lower_suffix_stop(grammar: GrammarIR) -> GrammarIR:
    """Rewrite ``name[suffix=M]: body`` (and ``stop=M``) as ``name[lazy]: body M``.

    The architecture defines such an occurrence as ``lazy(body M)`` for masks and
    membership, which is exactly the lazy rule produced. What only captures need is kept in
    the IR, by convention, so that a later capture implementation can recover it:

    - the marker becomes its own definition, named ``__suffix_<name>`` or ``__stop_<name>``
      (the prefix records which attribute it was); it is a terminal when ``M`` is a terminal
      expression (the usual case), else an ordinary rule;
    - the marker reference is always the last item of the lazy rule's top-level ``Seq``;
    - ``stop_capture="c"`` becomes a rule ``__suffix_<name>.capture [capture="c"]`` whose
      body is the marker reference, used in its place;
    - ``capture``, ``max_tokens`` and ``max_chars`` stay on the rule.

    Preserves: the language (marker rules are referenced only inside the lazy rule, so no
    ``%ignore`` content is woven into or around them), rule names and spans of existing
    definitions. Applies to sub-grammars too.
    """
    terminals = {rule.name for rule in grammar.rules if rule.terminal}
    names = NameAllocator(rule.name for rule in grammar.rules)
    rules: list[Rule] = []
    added: list[Rule] = []
    for rule in grammar.rules:
        options = rule.options
        marker = options.suffix if options.suffix is not None else options.stop
        if marker is None:
            rules.append(rule)
            continue
        prefix = SUFFIX_MARKER_PREFIX if options.suffix is not None else STOP_MARKER_PREFIX
        marker_name = names.claim(prefix + rule.name)
        added.append(
            Rule(
                name=marker_name,
                body=marker,
                terminal=is_terminal_only(marker, terminals),
                span=marker.span,
            )
        )
        tail = Ref(name=marker_name)
        if options.stop_capture is not None:
            capture_name = names.claim(marker_name + CAPTURE_SUFFIX)
            added.append(
                Rule(
                    name=capture_name, body=tail, options=RuleOptions(capture=options.stop_capture)
                )
            )
            tail = Ref(name=capture_name)
        lazy_options = RuleOptions(
            lazy=True,
            capture=options.capture,
            max_tokens=options.max_tokens,
            max_chars=options.max_chars,
        )
        body = Seq(items=(rule.body, tail))
        rules.append(rule.model_copy(update={"body": body, "options": lazy_options}))
    return grammar.model_copy(
        update={
            "rules": (*rules, *added),
            "subgrammars": with_subgrammars(grammar, lower_suffix_stop),
        }
    )
