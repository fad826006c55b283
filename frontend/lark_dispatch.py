"""The seed's dynamic tool-call dispatch and standalone lazy heads, as exact languages.

The seed (section "Dynamic Tool-Call Dispatch") recognises grammars of the shape::

    start: tool* tail                 // or (tool_a | tool_b | ...)* tail
    tail: TEXT                        // TEXT: any text, e.g. /(\\n|.)*/
    tool: head payload...             // head[lazy]: TEXT "<t>", head[suffix="<t>"]: TEXT,
                                      // head[stop="<t>"]: TEXT, head[lazy]: /(\\n|.)*<t>/,
                                      // head[lazy]: TEXT <|tok|>, or inline TEXT <|tok|> ...

and gives it dispatch semantics: free text runs until the first complete trigger; from there
the matching payload is mandatory. As plain CFG membership ``tail: TEXT`` could swallow a
trigger (``<tool_call>`` alone would be free text), and one tool's head could swallow another
tool's trigger. Both are the same regular condition, so the dispatch language is exactly the
CFG in which, for string triggers,

- the tail's text is "any text containing no trigger" (a partial trigger at the end is fine),
- each head's text plus its trigger is "any text whose first complete trigger is this one,
  ending there".

Both languages come from one Aho-Corasick automaton over the triggers, turned into regular
expressions by state elimination; each becomes one generated terminal, so the rewritten rules
stay single lexemes exactly like the lazy heads they replace. Special-token triggers need no
rewriting (text never matches a special token).

A standalone lazy head used as the whole start rule (``start: head``) accepts text that never
produces the trigger as well (seed, "Standalone Lazy Rules"): its body becomes "no trigger, or
first trigger at the end".

The seed's restrictions are checked here with located errors: all triggers at one level
(strings or special tokens), no negated token set as a trigger, no ``capture``,
``stop_capture`` or ``max_tokens`` on the head, tool and tail rules.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from gramkiln.ir import (
    CharClass,
    Choice,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    RuleOptions,
    Seq,
    Span,
    SpecialToken,
    TokenSet,
    walk,
)
from gramkiln.ir.nodes import MAX_CODEPOINT, complement_ranges, normalise_ranges

from gramkiln.errors import GrammarError

_LOG = logging.getLogger("gramkiln")

# Generated terminals; the dot keeps them apart from every name a Lark source can define.
FREE_TEXT_NAME = "dispatch.free_text"
UNTIL_TRIGGER_PREFIX = "dispatch.until."
# Overlap-free triggers (the usual case) only eliminate for the free text, which stays linear
# in the triggers' total length; heads of overlapping triggers are eliminated too and can grow
# fast, so past this many IR nodes the grammar is rejected with a clear error.
MAX_EXPRESSION_NODES = 200_000
_ANY_TEXT_DEPTH = 50

Locate = Callable[[str, Span | None], GrammarError]


@dataclass(frozen=True)
class _Trigger:
    """How one tool (or standalone head) starts: any text, then this trigger."""

    text: str | None  # the trigger string, or None for a special-token trigger
    token: Expr | None  # the SpecialToken / TokenSet of a token trigger
    head: str | None  # the head rule carrying it (None: inline ``TEXT <|tok|>`` in the tool)
    span: Span | None


def apply_dispatch(grammar: GrammarIR, locate: Locate) -> GrammarIR:
    """Give ``grammar`` the seed's dispatch / standalone-lazy semantics where it has the shape.

    Grammars of any other shape are returned unchanged. ``locate(message, span)`` builds the
    located ``GrammarError`` raised for a violated restriction.
    """
    rules = {rule.name: rule for rule in grammar.rules}
    start = rules.get(grammar.start)
    if start is None or start.terminal:
        return grammar
    items = _flatten(start.body)
    if len(items) == 1 and isinstance(items[0], Ref):
        return _standalone(grammar, rules, items[0].name, locate)
    if len(items) != 2 or not isinstance(items[1], Ref):
        return grammar
    loop, tail_ref = items
    if not (isinstance(loop, Repeat) and loop.min == 0 and loop.max is None):
        return grammar
    tool_refs = loop.item.alternatives if isinstance(loop.item, Choice) else (loop.item,)
    if not all(isinstance(ref, Ref) for ref in tool_refs):
        return grammar
    tail = rules.get(tail_ref.name)
    if tail is None or tail.terminal or not _is_any_text(tail.body, rules):
        return grammar
    tools: list[Rule] = []
    triggers: list[_Trigger] = []
    for ref in tool_refs:
        tool = rules.get(ref.name)  # type: ignore[union-attr]
        if tool is None or tool.terminal or tool in tools:
            return grammar
        trigger = _tool_trigger(tool, rules, locate)
        if trigger is None:
            return grammar
        tools.append(tool)
        triggers.append(trigger)
    heads = {t.head for t in triggers if t.head is not None}
    consumed = [tail.name, *(tool.name for tool in tools), *sorted(heads)]
    if not _only_used_by_dispatch(grammar, start.name, consumed, heads, tools):
        return grammar
    for name in consumed:
        _check_consumed_options(rules[name], locate)
    grammar = _without_max_chars(grammar, {start.name, *consumed})
    _check_one_level(triggers, locate)
    strings = sorted({t.text for t in triggers if t.text is not None})
    if not strings:
        return grammar  # special-token triggers: text never contains them already
    languages = _trigger_languages(strings, locate, start.span)
    new_rules: list[Rule] = []
    for rule in grammar.rules:
        if rule.name == tail.name:
            rule = rule.model_copy(update={"body": Ref(name=FREE_TEXT_NAME, span=rule.body.span)})
        elif rule.name in heads:
            (trigger_text,) = {t.text for t in triggers if t.head == rule.name}
            assert trigger_text is not None  # string triggers only past the check above
            number = strings.index(trigger_text)
            rule = _plain_rule(rule, Ref(name=UNTIL_TRIGGER_PREFIX + str(number)))
        new_rules.append(rule)
    return grammar.with_rules(new_rules + _generated_terminals(strings, languages))


# -- the shape ------------------------------------------------------------------------------------


def _flatten(expr: Expr) -> list[Expr]:
    """The items of a sequence, nested sequences (a regex's) spliced in."""
    if isinstance(expr, Seq):
        return [leaf for item in expr.items for leaf in _flatten(item)]
    return [expr]


def _is_any_text(expr: Expr, rules: dict[str, Rule], depth: int = 0) -> bool:
    """Whether ``expr`` is the any-text lexeme (every code point, any number of times).

    Regexes such as ``/(\\n|.)*/``, ``/[\\s\\S]*/`` and ``/.*/s`` all normalise to
    ``[\\u{0}-\\u{10ffff}]*``; a terminal name is followed to its definition.
    """
    if depth > _ANY_TEXT_DEPTH:
        return False
    if isinstance(expr, Ref):
        target = rules.get(expr.name)
        return (
            target is not None and target.terminal and _is_any_text(target.body, rules, depth + 1)
        )
    if isinstance(expr, Seq) and len(expr.items) == 1:
        return _is_any_text(expr.items[0], rules, depth + 1)
    return (
        isinstance(expr, Repeat)
        and expr.min == 0
        and expr.max is None
        and isinstance(expr.item, CharClass)
        and not expr.item.negated
        and expr.item.ranges == ((0, MAX_CODEPOINT),)
    )


def _tool_trigger(tool: Rule, rules: dict[str, Rule], locate: Locate) -> _Trigger | None:
    """The trigger a tool rule starts with, or None when it has no trigger form."""
    items = _flatten(tool.body)
    if not items:
        return None
    first = items[0]
    if isinstance(first, Ref):
        head = rules.get(first.name)
        if head is not None and not head.terminal and not _is_any_text(first, rules):
            return _head_trigger(head, rules, locate)
    if len(items) >= 2 and _is_any_text(first, rules) and _is_token(items[1]):
        _check_not_negated(items[1], locate)
        return _Trigger(text=None, token=items[1], head=None, span=items[1].span)
    return None


def _head_trigger(head: Rule, rules: dict[str, Rule], locate: Locate) -> _Trigger | None:
    """The trigger of a head rule in one of the seed's head forms, else None."""
    options = head.options
    marker = options.suffix if options.suffix is not None else options.stop
    if marker is not None:
        if _is_any_text(head.body, rules) and _is_plain_literal(marker):
            return _Trigger(text=marker.text, token=None, head=head.name, span=marker.span)  # type: ignore[union-attr]
        return None
    if not options.lazy:
        return None
    items = _flatten(head.body)
    if len(items) < 2 or not _is_any_text(items[0], rules):
        return None
    rest = items[1:]
    if len(rest) == 1 and _is_token(rest[0]):
        _check_not_negated(rest[0], locate)
        return _Trigger(text=None, token=rest[0], head=head.name, span=rest[0].span)
    if all(_is_plain_literal(item) for item in rest):
        text = "".join(item.text for item in rest)  # type: ignore[union-attr]
        if text:
            return _Trigger(text=text, token=None, head=head.name, span=rest[0].span)
    return None


def _is_plain_literal(expr: Expr) -> bool:
    return isinstance(expr, Literal) and not expr.case_insensitive


def _is_token(expr: Expr) -> bool:
    return isinstance(expr, (SpecialToken, TokenSet))


def _only_used_by_dispatch(
    grammar: GrammarIR, start: str, consumed: list[str], heads: set[str], tools: list[Rule]
) -> bool:
    """Whether the tail and head rules are referenced only where the pattern puts them.

    Rewriting them changes their language; a use elsewhere would change with it.
    """
    uses: Counter[str] = Counter()
    for rule in grammar.rules:
        for node in walk(rule.body):
            if isinstance(node, Ref):
                uses[node.name] += 1
    for expr in grammar.ignore:
        for node in walk(expr):
            if isinstance(node, Ref):
                uses[node.name] += 1
    expected: Counter[str] = Counter({consumed[0]: 1})
    for tool in tools:
        first = _flatten(tool.body)[0]
        if isinstance(first, Ref) and first.name in heads:
            expected[first.name] += 1
    return start not in uses and all(uses[name] == expected[name] for name in expected)


# -- the seed's restrictions ----------------------------------------------------------------------


def _check_consumed_options(rule: Rule, locate: Locate) -> None:
    options = rule.options
    for name, value in (
        ("capture", options.capture),
        ("stop_capture", options.stop_capture),
        ("max_tokens", options.max_tokens),
    ):
        if value is not None:
            raise locate(
                f"{name} is not supported on rules consumed by the dynamic dispatch pattern "
                f"(rule '{rule.name}')",
                rule.span,
            )


def _without_max_chars(grammar: GrammarIR, names: set[str]) -> GrammarIR:
    """``grammar`` without ``max_chars`` on the dispatch's own rules, where the seed ignores
    it with a logged warning (the dispatch structure has no single occurrence to count)."""
    ignored = [r.name for r in grammar.rules if r.name in names and r.options.max_chars is not None]
    if not ignored:
        return grammar
    for name in ignored:
        _LOG.warning(
            "max_chars on rule '%s' is ignored: it is part of the dynamic dispatch pattern", name
        )
    return grammar.with_rules(
        [
            rule.model_copy(
                update={"options": RuleOptions(**{**rule.options.__dict__, "max_chars": None})}
            )
            if rule.name in ignored
            else rule
            for rule in grammar.rules
        ]
    )


def _check_not_negated(token: Expr, locate: Locate) -> None:
    if isinstance(token, TokenSet) and token.negated:
        raise locate("a negated token set cannot be used as a trigger", token.span)


def _check_one_level(triggers: list[_Trigger], locate: Locate) -> None:
    kinds = {trigger.text is None for trigger in triggers}
    if len(kinds) > 1:
        later = next(t for t in triggers if (t.text is None) != (triggers[0].text is None))
        raise locate(
            "dispatch triggers cannot mix string and token triggers "
            "(all must be strings or all special tokens)",
            later.span,
        )


# -- standalone lazy heads ------------------------------------------------------------------------


def _standalone(grammar: GrammarIR, rules: dict[str, Rule], name: str, locate: Locate) -> GrammarIR:
    """``start: head`` with a lazy any-text head: text without the trigger is accepted too."""
    head = rules.get(name)
    if head is None or head.terminal:
        return grammar
    regex_suffix = head.options.lazy and not isinstance(_flatten(head.body)[0], Ref)
    trigger = _head_trigger(head, rules, locate)
    if trigger is None or (regex_suffix and trigger.text is not None):
        # The regex-suffix form is a dispatch-only head (seed): elsewhere it is general lazy.
        return grammar
    uses = sum(
        isinstance(node, Ref) and node.name == name
        for rule in grammar.rules
        for node in walk(rule.body)
    )
    if uses != 1:
        return grammar
    if trigger.text is None:
        text = _flatten(head.body)[0]
        body: Expr = Seq(items=(text, Repeat(item=trigger.token, min=0, max=1)))  # type: ignore[arg-type]
        new_rules = [_plain_rule(head, body) if r.name == name else r for r in grammar.rules]
        return grammar.with_rules(new_rules)
    languages = _trigger_languages([trigger.text], locate, head.span)
    body = Choice(alternatives=(Ref(name=FREE_TEXT_NAME), Ref(name=UNTIL_TRIGGER_PREFIX + "0")))
    new_rules = [_plain_rule(head, body) if r.name == name else r for r in grammar.rules]
    return grammar.with_rules(new_rules + _generated_terminals([trigger.text], languages))


def _plain_rule(rule: Rule, body: Expr) -> Rule:
    """``rule`` with a new body and without the lazy / marker options it no longer needs.

    The generated terminals already end at the first trigger, so committed-shortest
    matching would change nothing, and the marker is part of the body.
    """
    options = rule.options.model_copy(
        update={"lazy": False, "suffix": None, "stop": None, "stop_capture": None}
    )
    return rule.model_copy(update={"body": body, "options": RuleOptions(**options.__dict__)})


def _generated_terminals(strings: list[str], languages: tuple[Expr, list[Expr]]) -> list[Rule]:
    free, until = languages
    terminals = [Rule(name=FREE_TEXT_NAME, body=free, terminal=True)]
    for index, expr in enumerate(until):
        terminals.append(Rule(name=f"{UNTIL_TRIGGER_PREFIX}{index}", body=expr, terminal=True))
    return terminals


# -- the languages, by state elimination ----------------------------------------------------------


def _trigger_languages(
    triggers: list[str], locate: Locate, span: Span | None
) -> tuple[Expr, list[Expr]]:
    """(text with no trigger, [text whose first complete trigger is ``t``, ending there]).

    States of the Aho-Corasick automaton that have not completed a trigger are the unknowns
    of a right-linear system ``X_q = sum(chars . X_r) + constants_q``; eliminating them from
    the deepest up (Arden's rule on self-loops) leaves the root's expressions.
    """
    # Without overlaps, "first complete trigger is t, at the end" is simply free text then t:
    # an earlier completion would need a trigger inside t or one straddling the boundary.
    automaton = _aho_corasick(triggers)
    goto, output = automaton.goto, automaton.output
    overlap_free = _overlap_free(triggers, automaton)
    alphabet = sorted({ord(char) for trigger in triggers for char in trigger})
    live = [state for state in range(len(goto)) if not output[state]]
    # coefficients[q][r]: the code points leading from q to r (live states only);
    # constants[q][0] is ε (text may end anywhere), constants[q][1 + i] the code points
    # that complete trigger i from q.
    coefficients: dict[int, dict[int, Expr]] = {}
    constants: dict[int, list[Expr | None]] = {}
    for state in live:
        targets: dict[int, list[int]] = {}
        completes: dict[int, list[int]] = {}
        for code in alphabet:
            target = goto[state][code]
            if output[target]:
                for trigger in output[target]:
                    completes.setdefault(triggers.index(trigger), []).append(code)
            else:
                targets.setdefault(target, []).append(code)
        # Every code point outside the triggers' alphabet leads back to the root.
        outside = complement_ranges(tuple(normalise_ranges((c, c) for c in alphabet)))
        root_ranges = list(outside) + [(c, c) for c in targets.pop(0, [])]
        row: dict[int, Expr] = {}
        if root_ranges:
            row[0] = CharClass(ranges=tuple(normalise_ranges(root_ranges)))
        for target, codes in targets.items():
            row[target] = _chars(codes)
        coefficients[state] = row
        constants[state] = [Empty()]
        if not overlap_free:
            constants[state] += [
                _chars(completes[i]) if i in completes else None for i in range(len(triggers))
            ]
    budget = _Budget(locate, span)
    for state in sorted(live, reverse=True):
        if state == 0:
            break
        row = coefficients.pop(state)
        loop = row.pop(state, None)
        if loop is not None:
            prefix = Repeat(item=loop, min=0, max=None)
            row = {target: _cat(prefix, expr) for target, expr in row.items()}
            constants[state] = [_cat(prefix, c) for c in constants[state]]
        for other, other_row in coefficients.items():
            via = other_row.pop(state, None)
            if via is None:
                continue
            for target, expr in row.items():
                other_row[target] = _alt(other_row.get(target), _cat(via, expr))
            constants[other] = [
                _alt(mine, _cat(via, theirs))
                for mine, theirs in zip(constants[other], constants[state], strict=True)
            ]
            budget.charge(constants[other], other_row)
    root_row = coefficients[0]
    loop = root_row.get(0)
    root_prefix = Repeat(item=loop, min=0, max=None) if loop is not None else None
    results = [_cat(root_prefix, c) if root_prefix is not None else c for c in constants[0]]
    free = results[0]
    assert free is not None  # ε is always a constant of the root
    if overlap_free:
        free_text = Ref(name=FREE_TEXT_NAME)
        return free, [Seq(items=(free_text, Literal(text=trigger))) for trigger in triggers]
    # A trigger that contains another one can never complete first: its language is empty,
    # written as a class with no code point.
    until = [r if r is not None else CharClass(ranges=()) for r in results[1:]]
    return free, until


def _overlap_free(triggers: list[str], automaton: _Automaton) -> bool:
    """Whether no trigger occurs inside another before its end, or straddles into one.

    That is, for all triggers ``u`` and ``t``: ``u`` does not occur in ``t[:-1]`` (no state
    before the end of ``t``'s path has a match), and no non-empty proper suffix of ``u`` is a
    proper prefix of ``t`` (no state on ``u``'s failure chain has a child).
    """
    for trigger in triggers:
        state = 0
        for char in trigger[:-1]:
            state = automaton.goto[state][ord(char)]
            if automaton.output[state]:
                return False
        state = automaton.goto[state][ord(trigger[-1])]
        suffix = automaton.fail[state]
        while suffix != 0:
            if automaton.has_children[suffix]:
                return False
            suffix = automaton.fail[suffix]
    return True


@dataclass(frozen=True)
class _Automaton:
    """Aho-Corasick automaton: states are the triggers' prefixes (0 is the empty one)."""

    goto: list[dict[int, int]]  # complete over the triggers' code points
    output: list[frozenset[str]]  # triggers ending at this state (as suffixes)
    fail: list[int]  # longest proper suffix that is a state
    has_children: list[bool]  # whether the state is a proper prefix of some trigger


def _aho_corasick(triggers: list[str]) -> _Automaton:
    """The automaton of ``triggers`` (complete transitions, matches, failure links)."""
    children: list[dict[int, int]] = [{}]
    matches: list[set[str]] = [set()]
    for trigger in triggers:
        state = 0
        for char in trigger:
            code = ord(char)
            if code not in children[state]:
                children[state][code] = len(children)
                children.append({})
                matches.append(set())
            state = children[state][code]
        matches[state].add(trigger)
    alphabet = sorted({ord(char) for trigger in triggers for char in trigger})
    goto: list[dict[int, int]] = [{} for _ in children]
    fail = [0] * len(children)
    queue: deque[int] = deque()
    for code in alphabet:
        child = children[0].get(code)
        goto[0][code] = child if child is not None else 0
        if child is not None:
            queue.append(child)
    while queue:
        state = queue.popleft()
        matches[state] |= matches[fail[state]]
        for code in alphabet:
            child = children[state].get(code)
            if child is None:
                goto[state][code] = goto[fail[state]][code]
            else:
                fail[child] = goto[fail[state]][code]
                goto[state][code] = child
                queue.append(child)
    return _Automaton(
        goto=goto,
        output=[frozenset(m) for m in matches],
        fail=fail,
        has_children=[bool(c) for c in children],
    )


def _chars(codes: list[int]) -> Expr:
    if len(codes) == 1:
        return Literal(text=chr(codes[0]))
    return CharClass(ranges=tuple(normalise_ranges((c, c) for c in codes)))


def _cat(left: Expr | None, right: Expr | None) -> Expr | None:
    """Concatenation; None is the empty language, ε is dropped."""
    if left is None or right is None:
        return None
    if isinstance(left, Empty):
        return right
    if isinstance(right, Empty):
        return left
    items = (left.items if isinstance(left, Seq) else (left,)) + (
        right.items if isinstance(right, Seq) else (right,)
    )
    return Seq(items=items)


def _alt(left: Expr | None, right: Expr | None) -> Expr | None:
    """Union; None is the empty language."""
    if left is None:
        return right
    if right is None or right == left:
        return left
    options = (left.alternatives if isinstance(left, Choice) else (left,)) + (
        right.alternatives if isinstance(right, Choice) else (right,)
    )
    unique: list[Expr] = []
    for option in options:
        if option not in unique:
            unique.append(option)
    return Choice(alternatives=tuple(unique))


class _Budget:
    """Stops state elimination that grows past MAX_EXPRESSION_NODES."""

    def __init__(self, locate: Locate, span: Span | None) -> None:
        self.locate = locate
        self.span = span

    def charge(self, constants: list[Expr | None], row: dict[int, Expr]) -> None:
        size = 0
        for expr in [*constants, *row.values()]:
            if expr is not None:
                size += sum(1 for _ in walk(expr))
                if size > MAX_EXPRESSION_NODES:
                    raise self.locate(
                        "the dispatch triggers overlap too much to be compiled "
                        f"(over {MAX_EXPRESSION_NODES:,} expression nodes)",
                        self.span,
                    )
