"""Objects: declared properties in order, required ones enforced, additional keys exact.

In the default "schema" order the members form a chain of rules, one per (position, count)
state: at position ``i`` the object either writes property ``i`` or, if it is optional,
skips it; after the last declared property come the additional members. That is linear in
the number of properties (no blow-up for many optional ones) and exact for ``required``,
``minProperties`` and ``maxProperties``. Additional keys are drawn from the language "any
string except the declared names" (intersected with ``propertyNames`` and split by
``patternProperties``), built as an automaton so that a declared key can never be re-used
with the additional-properties schema.

With ``property_order="any"``, a state is the set of declared properties already written,
which is exact but exponential, so it is limited to a handful of declared properties.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import TYPE_CHECKING, Any, NamedTuple

from gramkiln.frontend.json_schema.automaton import (
    AutomatonTooLarge,
    Dfa,
    accepts,
    complement,
    intersect,
    is_empty,
)
from gramkiln.frontend.json_schema.combinators import canonical, pattern_branches
from gramkiln.frontend.json_schema.exprs import NEVER, choice, is_never, lit, seq
from gramkiln.frontend.json_schema.keys import (
    any_string_dfa,
    not_words_dfa,
    pattern_dfa,
    pattern_matches,
)
from gramkiln.frontend.json_schema.strings import json_string_literal
from gramkiln.ir import Expr

if TYPE_CHECKING:
    from gramkiln.frontend.json_schema.compiler import Compiler

MAX_PATTERN_PROPERTIES = 32
MAX_PATTERN_REGIONS = 64  # non-empty combinations of matched patterns (see _additional_groups)
MAX_WITNESSES = 6
MAX_ANY_ORDER_PROPERTIES = 8
# Bound on (required keys counted + 1) * 2**(required keys tracked as a set).
TRACKED_STATE_BUDGET = 512


def default_additional_properties(flat: dict[str, Any], strict: bool) -> bool:
    """``additionalProperties`` for an object schema that leaves it out.

    JSON Schema's default is ``true``. ``strict`` makes it ``false``, but only for schemas
    that declare their members (``properties`` or ``patternProperties``): a bare
    ``{"type": "object"}`` (or one constrained only by ``propertyNames``, ``required`` or a
    member count) still admits every key, since forbidding all undeclared keys there would
    leave nothing but ``{}`` (XGrammar's strict mode draws the same line).
    """
    return not (strict and ("properties" in flat or "patternProperties" in flat))


def strict_forbids_undeclared(flat: dict[str, Any], strict: bool) -> bool:
    """Whether strict mode, not the schema, is what forbids the undeclared keys of ``flat``."""
    if "additionalProperties" in flat or "unevaluatedProperties" in flat:
        return False
    return not default_additional_properties(flat, strict)


def _all_of(schemas: list[Any]) -> Any:
    present = [s for s in schemas if s is not True and s != {}]
    if any(s is False for s in present):
        return False
    if not present:
        return True
    if len(present) == 1:
        return present[0]
    return {"allOf": present}


def object_expr(
    compiler: Compiler, flat: dict[str, Any], pointer: str, base: str, depth: int
) -> Expr:
    """The expression for objects valid against a flat schema."""
    from gramkiln.frontend.json_schema.compiler import Unsupported

    options = compiler.options
    properties: dict[str, Any] = dict(flat.get("properties") or {})
    required = [r for r in flat.get("required", ()) if isinstance(r, str)]
    patterns: dict[str, Any] = dict(flat.get("patternProperties") or {})
    additional = flat.get(
        "additionalProperties", default_additional_properties(flat, options.strict)
    )
    implied_strict = strict_forbids_undeclared(flat, options.strict)
    shadowed: set[str] = set()
    if "unevaluatedProperties" in flat and "additionalProperties" not in flat:
        # The merged schema holds every evaluating part's properties and patterns, so the
        # unevaluated keys are exactly the ones additionalProperties would see, plus the
        # names only a failed (negated) sub-schema mentioned.
        additional = flat["unevaluatedProperties"]
        shadowed = set(flat.get("__shadow", ()))
    min_count = int(flat.get("minProperties", 0))
    max_count = flat.get("maxProperties")
    max_count = int(max_count) if max_count is not None else None
    if max_count is not None and max_count < min_count:
        return compiler.unsatisfiable(
            pointer, f"minProperties {min_count} is above maxProperties {max_count}"
        )
    try:
        names_dfa = compiler.key_dfa_for(flat.get("propertyNames"), pointer, base)
        for pattern in patterns:
            pattern_dfa(pattern)
    except AutomatonTooLarge as exc:
        compiler.unsupported(pointer, ["propertyNames", "patternProperties"], str(exc))
        names_dfa = None

    def pattern_schemas(name: str) -> list[Any]:
        try:
            return [
                schema for pattern, schema in patterns.items() if pattern_matches(pattern, name)
            ]
        except Exception as exc:  # a regex error: report it at this location
            raise compiler.error(pointer, f"patternProperties: {exc}") from None

    # allOf over sides whose additionalProperties see different patterns: every side's
    # (patterns, additional) pair applies to undeclared keys (see pattern_branches). Every
    # key is then evaluated by some side, so unevaluatedProperties never applies.
    branches: list[list[Any]] | None = None
    if "__pattern_branches" in flat:
        branches = pattern_branches(flat)
        if implied_strict:
            branches.append([dict(patterns), False])

    def undeclared_value(matched_names: set[str], matched: list[Any]) -> Any:
        """The schema of an undeclared key matching exactly the patterns ``matched_names``."""
        if branches is None:
            return _all_of(matched) if matched else additional
        extra = [more for own, more in branches if not matched_names & set(own)]
        return _all_of(matched + extra)

    # Declared members: properties in order, then required names that only patterns or
    # additionalProperties describe.
    declared: list[tuple[str, Any, bool]] = []
    all_names = list(properties) + [r for r in required if r not in properties]
    for name in all_names:
        own = [properties[name]] if name in properties else []
        matched = pattern_schemas(name)
        if name in properties:
            value_schema = _all_of(own + matched + ([additional] if name in shadowed else []))
        else:
            names_matched = {p for p in patterns if pattern_matches(p, name)} if matched else set()
            value_schema = undeclared_value(names_matched, matched)
            if implied_strict and not matched and branches is None:
                # A required name is a declared member: strict mode forbids only the keys
                # the schema never mentions, so its value is unconstrained.
                value_schema = True
        if names_dfa is not None and not accepts(names_dfa, name):
            value_schema = False
        is_required = name in required
        if value_schema is False:
            if is_required:
                return compiler.unsatisfiable(
                    pointer,
                    f"required property {name!r} cannot be present (its schema is false, or "
                    "additionalProperties / propertyNames exclude it)",
                )
            continue
        declared.append((name, value_schema, is_required))

    names_key = canonical(flat.get("propertyNames", True))
    groups = _additional_groups(
        compiler,
        all_names,
        patterns,
        additional,
        names_dfa,
        names_key,
        pointer,
        undeclared_value if branches is not None else None,
    )

    members = [
        (
            json_string_literal(name),
            compiler.value_ref(schema, f"{pointer}/properties/{_escape(name)}", base, depth + 1),
            is_required,
            name in properties,
        )
        for name, schema, is_required in declared
    ]
    group_values = [
        (key_expr, compiler.value_ref(schema, f"{pointer}/additionalProperties", base, depth + 1))
        for key_expr, schema, _ in groups
    ]
    # Witnesses (from negated member keywords): some member must have its key in a language
    # and its value valid against a schema. Each member gets extra "witnessing" variants that
    # record which witnesses they satisfy; the object may only end when all are satisfied.
    witnesses = list(flat.get("__witnesses", ()))
    witness_variants: list[tuple[Expr, Expr, frozenset[int]]] = []
    if witnesses:
        witness_variants = _witness_variants(
            compiler, witnesses, declared, groups, pointer, base, depth
        )
    counted = bool(min_count) or max_count is not None

    def build(plan: _MemberPlan) -> Expr:
        return _member_chain(
            compiler,
            plan,
            group_values,
            witness_variants,
            len(witnesses),
            min_count,
            max_count,
            pointer,
            depth,
        )

    if options.property_order == "schema":
        try:
            return seq(lit("{"), build(_schema_order_plan(members)))
        except Unsupported as exc:
            raise compiler.error(pointer, exc.reason) from None
    plan, order_note = _any_order_plan(members)
    notes = [order_note] if order_note else []
    if counted and len(plan.tracked) < len(plan.free):
        notes.append(
            "optional keys are not tracked, so a repeated key counts twice for "
            "minProperties/maxProperties"
        )
    before = set(compiler.rules)
    try:
        body = build(plan)
    except Unsupported as exc:
        # Too many states for any order: drop the half-built rules and write the declared
        # properties in schema order, saying so.
        for name in set(compiler.rules) - before:
            del compiler.rules[name]
        notes = [f"declared properties must follow the schema order ({exc.reason} otherwise)"]
        try:
            body = build(_schema_order_plan(members))
        except Unsupported as inner:
            raise compiler.error(pointer, inner.reason) from None
    for note in notes:
        compiler.note(pointer, note)
    return seq(lit("{"), body)


# A declared member: (key expression, value expression, required, named in `properties`).
_Member = tuple[Expr, Expr, bool, bool]


class _MemberPlan(NamedTuple):
    """How the declared members of an object are laid out.

    ``ordered`` members come in this order (optional ones may be skipped); ``free`` members
    may come anywhere between them, each of the ``tracked`` ones (indexes into ``free``) at
    most once; the ``counted`` ones (required, too many to track as a set) together exactly
    as often as there are of them; the others as often as they like (each occurrence
    validated).
    """

    ordered: list[tuple[Expr, Expr, bool]]
    free: list[tuple[Expr, Expr, bool]]
    tracked: frozenset[int]
    counted: frozenset[int] = frozenset()


def _schema_order_plan(members: list[_Member]) -> _MemberPlan:
    """Declared properties in declaration order; names only `required` mentions are free."""
    ordered = [(key, value, req) for key, value, req, declared in members if declared]
    free = [(key, value, req) for key, value, req, declared in members if not declared]
    return _MemberPlan(ordered, free, frozenset(range(len(free))))


def _tracked_required_count(required: int) -> int:
    """How many required keys can be tracked as a set when the rest are counted.

    The chain has (counted required + 1) * 2**tracked key states; keeping that under
    ``TRACKED_STATE_BUDGET`` bounds the grammar while tracking as many as possible.
    """
    best = 0
    for tracked in range(min(required, MAX_ANY_ORDER_PROPERTIES) + 1):
        if (required - tracked + 1) * 2**tracked <= TRACKED_STATE_BUDGET:
            best = tracked
    return best


def _any_order_plan(members: list[_Member]) -> tuple[_MemberPlan, str | None]:
    """Declared members in any order, and a note when some required ones are only counted.

    Up to ``MAX_ANY_ORDER_PROPERTIES`` members are all tracked (each at most once: exact).
    Beyond that optional members are untracked (a repeated optional key is accepted, each
    occurrence validated, so the object a JSON parser builds is still valid); required ones
    are tracked while the state budget allows and the rest are counted: any of them may come
    anywhere, and the object ends only after as many of their occurrences as there are of
    them. No valid object is refused (the schema order was, before, for every object that
    wrote them in another order); a repeated counted key standing in for a missing one is
    accepted, which the note says.
    """
    items = [(key, value, req) for key, value, req, _ in members]
    if len(items) <= MAX_ANY_ORDER_PROPERTIES:
        return _MemberPlan([], items, frozenset(range(len(items)))), None
    required = [item for item in items if item[2]]
    optional = [item for item in items if not item[2]]
    keep = _tracked_required_count(len(required))
    free = required + optional
    counted = frozenset(range(keep, len(required)))
    plan = _MemberPlan([], free, frozenset(range(keep)), counted)
    if not counted:
        return plan, None
    note = (
        f"{len(required)} required properties: {keep} are tracked, the other "
        f"{len(counted)} are counted, not tracked, so a repeated one of them can stand in "
        "for a missing one"
    )
    return plan, note


def _member_chain(
    compiler: Compiler,
    plan: _MemberPlan,
    group_values: list[tuple[Expr, Expr]],
    witness_variants: list[tuple[Expr, Expr, frozenset[int]]],
    witness_count: int,
    min_count: int,
    max_count: int | None,
    pointer: str,
    depth: int,
) -> Expr:
    """The chain of rules after ``{``: members laid out by ``plan``, then ``}``."""
    layout = compiler.layout
    ordered, free, tracked, counted = plan
    free_required = frozenset(i for i, (_, _, req) in enumerate(free) if req and i not in counted)
    counted_total = len(counted)
    all_witnesses = frozenset(range(witness_count))
    cap = max_count if max_count is not None else max(min_count, 1)
    untracked = [
        (key, value)
        for i, (key, value, _) in enumerate(free)
        if i not in tracked and i not in counted
    ]
    # Untracked members share one rule (the choice of their key/value pairs) so that each
    # state costs one alternative for all of them, not one per property.
    untracked_pairs: Expr = NEVER
    if untracked:
        pairs = [seq(key, layout.key_separator(), value) for key, value in untracked]
        untracked_pairs = compiler.add_rule(compiler.new_name(f"{pointer}/members"), choice(*pairs))
    # Likewise the counted required members: each moves the tally up by one, so one shared
    # choice serves every state (one alternative per member and state made an object with
    # 2,000 required keys take minutes to build).
    counted_pairs: Expr = NEVER
    counted_members = [
        seq(key, layout.key_separator(), value)
        for i, (key, value, _) in enumerate(free)
        if i in counted and not is_never(value) and not is_never(key)
    ]
    if counted_members:
        counted_pairs = compiler.add_rule(
            compiler.new_name(f"{pointer}/counted"), choice(*counted_members)
        )

    def member(name_expr: Expr, value: Expr, count: int) -> Expr:
        if is_never(value) or is_never(name_expr):
            return NEVER
        return seq(separator(count), name_expr, layout.key_separator(), value)

    def separator(count: int) -> Expr:
        return layout.open_first(depth) if count == 0 else layout.item_separator(depth)

    def bump(count: int) -> int:
        return min(count + 1, cap)

    def room(count: int) -> bool:
        return max_count is None or count < max_count

    ordered_keys = {key for key, _, _ in ordered}
    declared_keys = ordered_keys | {key for key, _, _ in free}

    def moves(state: Any) -> list[tuple[Expr, Any]]:
        position, count, used, seen, tally = state
        out: list[tuple[Expr, Any]] = []
        if position < len(ordered):
            key_expr, value, is_required = ordered[position]
            if room(count):
                nxt = (position + 1, bump(count), used, seen, tally)
                out.append((member(key_expr, value, count), nxt))
                for w_key, w_value, satisfied in witness_variants:
                    if w_key == key_expr:
                        nxt = (position + 1, bump(count), used, seen | satisfied, tally)
                        out.append((member(key_expr, w_value, count), nxt))
            if not is_required:
                out.append((lit(""), (position + 1, count, used, seen, tally)))
        if not room(count):
            return out
        # Free members and additional keys may come anywhere between the ordered ones.
        for index, (key_expr, value, _) in enumerate(free):
            if index in used or (index in counted and tally == counted_total):
                continue
            after = used | {index} if index in tracked else used
            now = tally + 1 if index in counted else tally
            if index in tracked:
                nxt = (position, bump(count), after, seen, now)
                out.append((member(key_expr, value, count), nxt))
            for w_key, w_value, satisfied in witness_variants:
                if w_key == key_expr:
                    nxt = (position, bump(count), after, seen | satisfied, now)
                    out.append((member(key_expr, w_value, count), nxt))
        if counted_members and tally < counted_total:
            nxt = (position, bump(count), used, seen, tally + 1)
            out.append((seq(separator(count), counted_pairs), nxt))
        if untracked:
            nxt = (position, bump(count), used, seen, tally)
            out.append((seq(separator(count), untracked_pairs), nxt))
        for key_expr, value in group_values:
            nxt = (position, bump(count), used, seen, tally)
            out.append((member(key_expr, value, count), nxt))
        for w_key, w_value, satisfied in witness_variants:
            if w_key not in declared_keys:
                nxt = (position, bump(count), used, seen | satisfied, tally)
                out.append((member(w_key, w_value, count), nxt))
        return out

    def end(state: Any) -> Expr | None:
        position, count, used, seen, tally = state
        if position < len(ordered) or count < min_count or not free_required <= used:
            return None
        if seen != all_witnesses or tally != counted_total:
            return None
        return layout.close_nonempty("}", depth) if count else layout.close_empty("}", depth)

    start: tuple[int, int, frozenset[Any], frozenset[Any], int] = (
        0,
        0,
        frozenset(),
        frozenset(),
        0,
    )
    return compiler.chain(f"{pointer}/object", start, moves, end)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _additional_groups(
    compiler: Compiler,
    names: list[str],
    patterns: dict[str, Any],
    additional: Any,
    names_dfa: Dfa | None,
    names_key: str,
    pointer: str,
    value_for: Callable[[set[str], list[Any]], Any] | None = None,
) -> list[tuple[Expr, Any, Dfa | None]]:
    """(key expression, value schema, key automaton or None for any key) for keys that are
    not declared names. ``value_for(matched pattern names, their schemas)`` gives the value
    schema of each combination of patterns when it is not the plain rule (the matched
    patterns' schemas, or ``additional`` when none matches)."""
    if additional is False and not patterns:
        return []
    if not names and names_dfa is None and not patterns:
        return [
            (
                compiler.shared_rule(
                    ("any-key",),
                    "key",
                    lambda: seq(lit('"'), compiler_string_body(compiler), lit('"')),
                ),
                additional,
                None,
            )
        ]
    if len(patterns) > MAX_PATTERN_PROPERTIES:
        compiler.unsupported(
            pointer, ["patternProperties"], f"more than {MAX_PATTERN_PROPERTIES} patterns"
        )
        return []
    try:
        base_dfa = not_words_dfa(tuple(names))
        if names_dfa is not None:
            base_dfa = intersect(base_dfa, names_dfa)
        pattern_list = list(patterns.items())
        # The keys are split by which patterns match them, one pattern at a time, keeping only
        # the non-empty parts: k patterns with distinct prefixes give k + 1 parts, where trying
        # all 2**k combinations capped k at 4.
        regions: list[tuple[tuple[int, ...], Dfa]] = [((), base_dfa)]
        for index, (pattern, _) in enumerate(pattern_list):
            pdfa = pattern_dfa(pattern)
            outside = complement(pdfa)
            split: list[tuple[tuple[int, ...], Dfa]] = []
            for chosen, region in regions:
                for part, part_dfa in (((*chosen, index), pdfa), (chosen, outside)):
                    narrowed = intersect(region, part_dfa)
                    if not is_empty(narrowed):
                        split.append((part, narrowed))
            if len(split) > MAX_PATTERN_REGIONS:
                compiler.unsupported(
                    pointer,
                    ["patternProperties"],
                    f"keys matched by more than {MAX_PATTERN_REGIONS} combinations of patterns",
                )
                return []
            regions = split
        groups: list[tuple[Expr, Any, Dfa | None]] = []
        for chosen, dfa in sorted(regions, key=lambda region: (len(region[0]), region[0])):
            chosen_schemas = [pattern_list[i][1] for i in chosen]
            if value_for is not None:
                chosen_names = {pattern_list[i][0] for i in chosen}
                value = value_for(chosen_names, chosen_schemas)
            else:
                value = _all_of(chosen_schemas) if chosen else additional
            if value is False:
                continue
            key = compiler.shared_rule(
                (
                    "key-dfa",
                    tuple(names),
                    tuple(pattern_list[i][0] for i in chosen),
                    tuple(p for p, _ in pattern_list),
                    names_key,
                ),
                "key",
                lambda dfa=dfa: seq(
                    lit('"'), compiler.emit_dfa(dfa, "key", compiler.char), lit('"')
                ),
            )
            groups.append((key, value, dfa))
        return groups
    except AutomatonTooLarge as exc:
        compiler.unsupported(pointer, ["additionalProperties"], f"key language too large: {exc}")
        return []


def compiler_string_body(compiler: Compiler) -> Expr:
    """Any string's encoded characters (shared with plain strings)."""
    from gramkiln.frontend.json_schema.exprs import repeat
    from gramkiln.frontend.json_schema.strings import ALL_CHARS

    return repeat(compiler.char(ALL_CHARS))


def witness_key_dfa(compiler: Compiler, key: dict[str, Any], pointer: str, base: str) -> Dfa:
    """The key language of a witness: in some patterns, outside others and outside names,
    and (``names_schema_neg``) violating a propertyNames schema."""
    dfa = any_string_dfa()
    for pattern in key.get("in_patterns", ()):
        dfa = intersect(dfa, pattern_dfa(pattern))
    for pattern in key.get("out_patterns", ()):
        dfa = intersect(dfa, complement(pattern_dfa(pattern)))
    if key.get("out_names"):
        dfa = intersect(dfa, not_words_dfa(tuple(key["out_names"])))
    if "names_schema_neg" in key:
        allowed = compiler.key_dfa_for(key["names_schema_neg"], pointer, base)
        dfa = intersect(dfa, complement(allowed)) if allowed is not None else Dfa([[]], set())
    return dfa


def _witness_variants(
    compiler: Compiler,
    witnesses: list[dict[str, Any]],
    declared: list[tuple[str, Any, bool]],
    groups: list[tuple[Expr, Any, Dfa | None]],
    pointer: str,
    base: str,
    depth: int,
) -> list[tuple[Expr, Expr, frozenset[int]]]:
    """(key expression, value expression, witnesses satisfied) for witnessing members."""
    if len(witnesses) > MAX_WITNESSES:
        compiler.unsupported(pointer, ["not"], f"more than {MAX_WITNESSES} negated member rules")
        return []
    try:
        key_dfas = [witness_key_dfa(compiler, w["key"], pointer, base) for w in witnesses]
        variants: list[tuple[Expr, Expr, frozenset[int]]] = []
        subsets = [
            frozenset(c)
            for size in range(1, len(witnesses) + 1)
            for c in combinations(range(len(witnesses)), size)
        ]
        where = f"{pointer}/not"
        for name, schema, _ in declared:
            for subset in subsets:
                if all(accepts(key_dfas[i], name) for i in subset):
                    value = _witness_value(compiler, schema, [witnesses[i] for i in subset], where)
                    variants.append((json_string_literal(name), value(base, depth), subset))
        for _, schema, group_dfa in groups:
            for subset in subsets:
                dfa = group_dfa if group_dfa is not None else any_string_dfa()
                for i in subset:
                    dfa = intersect(dfa, key_dfas[i])
                if is_empty(dfa):
                    continue
                key = seq(lit('"'), compiler.emit_dfa(dfa, "key", compiler.char), lit('"'))
                value = _witness_value(compiler, schema, [witnesses[i] for i in subset], where)
                variants.append((key, value(base, depth), subset))
        return variants
    except AutomatonTooLarge as exc:
        compiler.unsupported(pointer, ["not"], f"key language too large: {exc}")
        return []


def _witness_value(compiler: Compiler, schema: Any, witnesses: list[dict[str, Any]], where: str):  # type: ignore[no-untyped-def]
    """A builder for the value of a member that satisfies its own schema and the witnesses'."""

    def build(base: str, depth: int) -> Expr:
        flat = compiler.flatten(schema, where, base, 0) if schema is not True else {}
        for witness in witnesses:
            flat = compiler.merge_at(flat, witness["value"], where)
        return compiler.branch(flat, where, base, depth + 1)

    return build
