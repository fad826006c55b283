"""The driver: walks a schema, merges and distributes its combinators, and emits IR rules.

One rule is made per schema location (and nesting depth, when indentation makes depth
visible); ``$ref`` targets are shared rules, which is how recursive schemas terminate. A schema
is first *flattened* (``$ref`` and ``allOf`` merged in, see :mod:`.combinators`), then its
``anyOf``/``oneOf``/``if``/``not``/dependencies are distributed into a choice of flat
branches, and finally each branch is split by type and handed to the per-type builders
(:mod:`.objects`, :mod:`.arrays`, :mod:`.strings`, :mod:`.numbers`).
"""

from __future__ import annotations

import itertools
import json
import re
import warnings
from collections.abc import Callable, Hashable
from typing import Any
from urllib.parse import urldefrag, urlsplit

from gramkiln.frontend.json_schema import arrays, objects
from gramkiln.frontend.json_schema.automaton import (
    MAX_DFA_STATES,
    MAX_LENGTH_PRODUCT_STATES,
    AutomatonTooLarge,
    Dfa,
    complement,
    dfa_from_expr,
    group_edges,
    intersect,
    is_empty,
    length_dfa,
    length_range,
    minimize,
    only_self_loops,
)
from gramkiln.frontend.json_schema.combinators import (
    MAX_NEGATION_BRANCHES,
    NotNegatable,
    Unmergeable,
    canonical,
    close_unevaluated,
    compact_text,
    merge,
    merge_beside,
    negate,
    overlapping_pairs,
    type_set,
)
from gramkiln.frontend.json_schema.drafts import (
    ANNOTATIONS,
    CONSTRAINTS,
    DEFAULT_DRAFT,
    detect_draft,
    normalize,
)
from gramkiln.frontend.json_schema.exprs import (
    NEVER,
    char_class,
    choice,
    derives_text,
    is_never,
    lit,
    repeat,
    rule_ref,
    seq,
)
from gramkiln.frontend.json_schema.formats import (
    FORMAT_PATTERNS,
    FORMAT_SUPERSETS,
    format_dfa,
    format_expr,
)
from gramkiln.frontend.json_schema.keys import any_string_dfa, word_set_dfa
from gramkiln.frontend.json_schema.layout import Layout
from gramkiln.frontend.json_schema.numbers import (
    Bound,
    NumberSpec,
    NumberSpecError,
    enumerated_values,
    number_dfa,
    plain_number_expr,
    to_decimal,
)
from gramkiln.frontend.json_schema.options import JsonSchemaOptions
from gramkiln.frontend.json_schema.refs import DEFAULT_BASE, RefError, RefIndex
from gramkiln.frontend.json_schema.scope import DynamicScopes, in_scope, scope_of, unwrap
from gramkiln.frontend.json_schema.strings import ALL_CHARS, encode_expr, encoded_char
from gramkiln.frontend.json_schema.validate import flat_is_valid
from gramkiln.frontend.json_schema.values import (
    MAX_PERMUTED_KEYS,
    number_spellings_expr,
    value_expr,
)
from gramkiln.frontend.json_schema.vocabularies import UnknownVocabulary, switched_off
from gramkiln.ir import CharClass, Expr, GrammarIR, Ref, Repeat, Rule, walk

from gramkiln.errors import EmptyLanguageWarning, GrammarError

LANGUAGE = "JSON Schema"
MAX_FLATTEN_DEPTH = 64
# allOf / $ref merges of one document: sub-schemas reached along exponentially many paths
# (each level an allOf of two references to the level below) would otherwise take hours. The
# most in the MaskBench data is 7,731 (a few seconds); a merge costs up to ~0.3 ms.
MAX_FLATTENS = 50_000
# Branches built by distributing anyOf / oneOf / if into each other: each level multiplies
# them, and a fuzzed schema kept building new ones for minutes. The most in the MaskBench
# data is 5,096.
MAX_BRANCHES_BUILT = 25_000
MAX_BRANCHES = 128  # per branch of a oneOf made exact by negations
# anyOf, and oneOf with provably disjoint branches: one alternative each, so linear in size
# (real schemas spell enums as a oneOf of several hundred `const` branches with descriptions).
MAX_ALTERNATIVES = 4096
# Flat-schema keys of combinators that a string-only schema can evaluate as one automaton.
STRING_COMBINATORS = ("__groups", "__not", "__conds")
MAX_CHAIN_STATES = 4096
MAX_NESTING = 120
# Automata up to this size (and MAX_UNFOLDED_STATES once unfolded) are written as one terminal,
# larger ones as a rule per state. Each rule-level edge is a lexeme of its own, so a key trie
# written as rules made every key character a lexeme: with 256 here, an object with ~50
# declared keys (370 trie states) had 21-54 ms masks inside its keys; as one lexeme, 0.07 ms.
MAX_TERMINAL_STATES = 4000
MAX_INLINE_NESTING = 40
MAX_UNFOLDED_STATES = 4000
MAX_LEXEME_COUNT = 64
# Hosts of the official meta-schemas; any other $schema is a custom meta-schema.
STANDARD_META_HOSTS = frozenset({"json-schema.org", "www.json-schema.org"})
# anyOf under unevaluated* expands into every subset of its branches (2^n - 1 of them).
MAX_ANNOTATED_ANY_OF = 5
MAX_REASONS_SHOWN = 4  # contradictions named when the whole schema admits nothing
FALSE_REASON = "a false schema applies (false itself, or through allOf, $ref or not)"
TYPE_ORDER = ("null", "boolean", "integer", "number", "string", "array", "object")


# Reference keywords and how each resolves (see Compiler.resolve).
REFERENCE_KINDS = {"$ref": "static", "$dynamicRef": "dynamic", "$recursiveRef": "recursive"}
# Keywords of a flat schema whose values are raw sub-schemas, built later in the scope of the
# schema they are merged into (combinator lists carry their own base URI and scope): one
# sub-schema, a list, or a map of them.
SUBSCHEMA_KEYWORDS = {
    "additionalProperties": "one",
    "propertyNames": "one",
    "unevaluatedProperties": "one",
    "items": "one",
    "contains": "one",
    "unevaluatedItems": "one",
    "prefixItems": "list",
    "properties": "map",
    "patternProperties": "map",
    "dependentSchemas": "map",
}
# Internal keywords with sub-schemas inside structures of their own.
NESTED_SUBSCHEMA_KEYWORDS = ("__more_contains", "__witnesses")


def rescoped(flat: dict[str, Any], base: str) -> dict[str, Any] | None:
    """``flat`` with its sub-schemas to be built at ``base`` (see :func:`.scope.in_scope`);
    None when it holds sub-schemas this cannot wrap."""
    if any(flat.get(keyword) for keyword in NESTED_SUBSCHEMA_KEYWORDS):
        return None
    out = dict(flat)
    for keyword, shape in SUBSCHEMA_KEYWORDS.items():
        if keyword not in flat:
            continue
        value = flat[keyword]
        if shape == "one":
            out[keyword] = in_scope(value, base)
        elif shape == "list" and isinstance(value, list):
            out[keyword] = [in_scope(v, base) for v in value]
        elif shape == "map" and isinstance(value, dict):
            out[keyword] = {name: in_scope(v, base) for name, v in value.items()}
    return out


class Unsupported(Exception):
    """Raised inside the builders; turned into a located GrammarError or a warning."""

    def __init__(self, keywords: list[str] | tuple[str, ...], reason: str) -> None:
        super().__init__(reason)
        self.keywords = tuple(keywords)
        self.reason = reason


class Compiler:
    """Compiles one schema document into a GrammarIR (see the module docstring)."""

    def __init__(self, schema: Any, options: JsonSchemaOptions) -> None:
        self.options = options
        self.root = schema
        self.draft = detect_draft(schema)
        # A custom meta-schema's dialect: its draft, and the keywords its $vocabulary leaves
        # out (see .vocabularies); why it cannot be followed, if it cannot.
        self.switched_off: frozenset[str] = frozenset()
        self.meta_problem: str | None = None
        self.read_meta_schema()
        self.index = RefIndex(schema, self.draft, remote=options.remote_documents)
        self.scopes = DynamicScopes(self.index)
        self.layout = Layout(options)
        self.rules: dict[str, Rule] = {}
        self.rule_for_key: dict[Hashable, str] = {}
        self.keepalive: list[Any] = []
        self.warnings: list[str] = []
        # Why parts of the schema admit no value ("at #/x: minLength 3 is above maxLength
        # 1"): named only if the whole document turns out to admit nothing.
        self.contradictions: list[str] = []
        self._counter = 0
        self._nesting = 0
        # Work done per kind (see count_expansion).
        self._expansion: dict[str, int] = {}
        # One encoded character per range set: key automata ask for the same sets at every
        # trie state ("anything but these letters"), and char() only builds shared rules.
        self._chars: dict[tuple[tuple[int, int], ...], Expr] = {}
        # Canonical forms of enum / excluded value lists by list identity (the list is kept
        # with its set, so the id stays its own): every enum value is checked against the
        # other keywords, and rebuilding the set for each made a 5,000-value enum take 36 s.
        self.canonical_sets: dict[int, tuple[list[Any], frozenset[str]]] = {}
        # Pattern automata by pattern text: combinators distribute over the same string
        # keywords, and determinising one pattern anew in each branch was most of the time
        # of pattern-heavy schemas (a 2,000-state pattern minimised three times: 1.5 s).
        self._pattern_dfas: dict[str, Dfa] = {}

    def canonical_set(self, values: list[Any]) -> frozenset[str]:
        """The canonical forms (see combinators.canonical) of the JSON values in ``values``."""
        cached = self.canonical_sets.get(id(values))
        if cached is None or cached[0] is not values:
            cached = (values, frozenset(canonical(value) for value in values))
            self.canonical_sets[id(values)] = cached
        return cached[1]

    def read_meta_schema(self) -> None:
        """Follow a custom meta-schema given in ``remote_documents`` (its draft and
        ``$vocabulary``); without it, or with a required vocabulary unknown here, the
        keywords' meaning is unknown (``meta_problem``)."""
        meta = self.root.get("$schema") if isinstance(self.root, dict) else None
        host = urlsplit(meta).hostname if isinstance(meta, str) else None
        if not isinstance(meta, str) or host is None or host in STANDARD_META_HOSTS:
            return
        remote = self.options.remote_documents or {}
        documents = {urldefrag(uri)[0]: doc for uri, doc in remote.items()}
        meta_schema = documents.get(urldefrag(meta)[0])
        if not isinstance(meta_schema, dict):
            # It may switch vocabularies off (then e.g. "minimum" asserts nothing).
            self.meta_problem = "its vocabularies are unknown"
            return
        self.draft = detect_draft(meta_schema)
        try:
            self.switched_off = switched_off(meta_schema, self.draft)
        except UnknownVocabulary as exc:
            self.meta_problem = str(exc)

    def normalized(self, schema: dict[str, Any], synthetic: bool) -> dict[str, Any]:
        """``normalize`` in the schema's dialect: the document's draft, less the keywords its
        meta-schema's vocabularies leave out; 2020-12 for schemas the front end wrote."""
        s = normalize(schema, DEFAULT_DRAFT if synthetic else self.draft)
        if self.switched_off and not synthetic:
            s = {k: v for k, v in s.items() if k not in self.switched_off}
        return s

    # -- public entry -----------------------------------------------------------------------
    def grammar(self) -> GrammarIR:
        """Build and verify the grammar for the whole document."""
        if not isinstance(self.root, (dict, bool)):
            raise self.error("#", "a schema must be a JSON object or a boolean")
        if self.meta_problem is not None:
            meta = self.root.get("$schema") if isinstance(self.root, dict) else None
            self.unsupported("#", ["$schema"], f"custom meta-schema {meta!r}: {self.meta_problem}")
        try:
            body = self.value_ref(self.root, "#", DEFAULT_BASE, 0)
        except RecursionError:
            # Schemas that keep producing new sub-schemas (merges through recursive $refs)
            # have no finite grammar here.
            raise self.error(
                "#",
                "schema nested too deeply to expand (past Python's recursion limit), or its"
                " expansion does not terminate",
            ) from None
        start = Rule(name="start", body=seq(self.layout.top(), body, self.layout.top()))
        grammar = GrammarIR(start="start", rules=(start, *self.rules.values())).verify()
        self.warn_if_empty(start)
        return grammar

    def warn_if_empty(self, start: Rule) -> None:
        """Warn (EmptyLanguageWarning) when no JSON document is valid, saying why if known.

        Such a schema is legal and its grammar exact (it accepts nothing), so this is not an
        error; but it is nearly always a mistake (``minimum`` above ``maximum``, a required
        property whose schema is ``false``), and the compile-time warning cannot name the
        schema location that caused it. Checked only when some part of the schema was
        found to admit nothing (mostly a branch of a ``oneOf`` split, 6 of 200 MaskBench
        schemas); an emptiness no keyword explains (a recursive ``$ref`` with no way out) is
        still reported by the compile-time warning.
        """
        reasons = list(dict.fromkeys(self.contradictions))
        if self.root is False:
            reasons = ["at #: the schema is false"]
        if not reasons:
            return
        # Terminals are automata, emitted only when some string is accepted (else NEVER
        # stands in their place); their bodies are most of the grammar's nodes.
        bodies = {name: rule.body for name, rule in self.rules.items() if not rule.terminal}
        bodies[start.name] = start.body
        terminals = frozenset(
            name for name, rule in self.rules.items() if rule.terminal and not is_never(rule.body)
        )
        if derives_text(start.name, bodies, terminals):
            return
        shown = "; ".join(reasons[:MAX_REASONS_SHOWN])
        if len(reasons) > MAX_REASONS_SHOWN:
            shown += f"; and {len(reasons) - MAX_REASONS_SHOWN} more"
        text = f"{LANGUAGE}: the schema admits no JSON document (every mask will be empty): {shown}"
        self.warnings.append(text)
        warnings.warn(EmptyLanguageWarning(text), stacklevel=5)

    # -- diagnostics ------------------------------------------------------------------------
    def error(self, pointer: str, message: str) -> GrammarError:
        """A located error: the JSON pointer of the schema location leads the message."""
        return GrammarError(f"at {pointer}: {message}", language=LANGUAGE)

    def unsupported(self, pointer: str, keywords: tuple[str, ...] | list[str], reason: str) -> None:
        """Report keywords that are not enforced: an error, or a warning when lenient."""
        listed = ", ".join(sorted(set(keywords)))
        message = f"unsupported keyword(s) {listed}: {reason}"
        if not self.options.lenient:
            raise self.error(pointer, message)
        text = f"{LANGUAGE} at {pointer}: {message} (not enforced)"
        self.warnings.append(text)
        warnings.warn(text, stacklevel=4)

    def unsatisfiable(self, pointer: str, reason: str) -> Expr:
        """NEVER (no value is valid here), remembering why for :meth:`warn_if_empty`."""
        self.contradictions.append(f"at {pointer}: {reason}")
        return NEVER

    def note(self, pointer: str, message: str) -> None:
        """Record (and warn about) a place where the grammar differs from the schema's
        meaning in a stated way that is not a missing keyword (e.g. a forced key order)."""
        text = f"{LANGUAGE} at {pointer}: {message}"
        self.warnings.append(text)
        warnings.warn(text, stacklevel=5)

    # -- rules ------------------------------------------------------------------------------
    def new_name(self, hint: str) -> str:
        """A fresh rule name derived from a location hint."""
        self._counter += 1
        cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", hint).strip("_")[-40:] or "value"
        if not cleaned[0].isalpha():
            cleaned = "s_" + cleaned
        return f"{cleaned}__{self._counter}"

    def add_rule(self, name: str, body: Expr, terminal: bool = False) -> Ref:
        """Define a rule and return a reference to it."""
        self.rules[name] = Rule(name=name, body=body, terminal=terminal)
        return rule_ref(name)

    def shared_rule(
        self, key: Hashable, hint: str, build: Callable[[], Expr], terminal: bool = False
    ) -> Expr:
        """A rule built once per key (a reference to it, reserved before building)."""
        name = self.rule_for_key.get(key)
        if name is not None:
            return rule_ref(name)
        name = self.new_name(hint)
        self.rule_for_key[key] = name
        body = build()
        return self.add_rule(name, body, terminal)

    def chain(
        self,
        hint: str,
        start: Hashable,
        moves: Callable[[Hashable], list[tuple[Expr, Hashable]]],
        end: Callable[[Hashable], Expr | None],
    ) -> Expr:
        """Rules for a finite state machine over sub-expressions (objects, arrays).

        Each state becomes a rule: a choice of ``move_expr next_state`` and, where the state
        may stop, its end expression. States are explored from ``start`` only.
        """
        names = {start: self.new_name(hint)}
        pending = [start]
        while pending:
            state = pending.pop()
            alternatives: list[Expr] = []
            for expr, nxt in moves(state):
                if is_never(expr):
                    continue
                if nxt not in names:
                    if len(names) >= MAX_CHAIN_STATES:
                        raise Unsupported((), f"more than {MAX_CHAIN_STATES} grammar states needed")
                    names[nxt] = self.new_name(hint)
                    pending.append(nxt)
                alternatives.append(seq(expr, rule_ref(names[nxt])))
            stop = end(state)
            if stop is not None:
                alternatives.append(stop)
            self.add_rule(names[state], choice(*alternatives))
        return rule_ref(names[start])

    def emit_dfa(
        self, dfa: Dfa, hint: str, edge: Callable[[tuple[tuple[int, int], ...]], Expr]
    ) -> Expr:
        """Rules for an automaton, with ``edge`` turning a range label into an expression.

        Automata whose only cycles are self-loops become terminal rules (a self-loop is a
        ``Repeat``); others become right-linear rules.
        """
        if not dfa.accepting:
            return NEVER
        # Long terminal chains would make every consumer recurse once per state, so large
        # automata become ordinary (right-linear) rules.
        terminal = dfa.size <= MAX_TERMINAL_STATES and only_self_loops(dfa)
        if terminal and _unfolded_size(dfa) > MAX_UNFOLDED_STATES:
            # Lexer automata expand terminal references in place: an automaton whose paths
            # share many states would be unfolded exponentially, so it stays a set of rules.
            terminal = False
        if not terminal:
            names = [self.new_name(hint) for _ in range(dfa.size)]
            for state in range(dfa.size):
                alternatives: list[Expr] = [lit("")] if state in dfa.accepting else []
                for target, ranges in group_edges(dfa.edges[state]).items():
                    alternatives.append(seq(edge(ranges), rule_ref(names[target])))
                self.add_rule(names[state], choice(*alternatives))
            return rule_ref(names[dfa.start])
        # Acyclic apart from self-loops: a state reached from one place only is written inline
        # (keys that are "any string but these names" are tries: nearly every state is), the
        # others become terminal rules; inlining stops at a modest depth to keep nesting flat.
        writer = _AcyclicDfaWriter(self, dfa, hint, edge)
        start_name = self.new_name(hint)
        return self.add_rule(start_name, writer.state_body(dfa.start, 0), terminal=True)

    # -- schemas ----------------------------------------------------------------------------
    def value_ref(self, schema: Any, pointer: str, base: str, depth: int) -> Expr:
        """A reference to the rule for values valid against ``schema`` (NEVER for false)."""
        schema, base = unwrap(schema, base)
        if schema is False:
            return NEVER
        if self.layout.depth_matters and depth > self.options.max_indent_depth:
            return NEVER
        depth_key = depth if self.layout.depth_matters else 0
        if schema is True or schema == {}:
            return self.any_value(depth_key)
        if not isinstance(schema, dict):
            raise self.error(pointer, "a schema must be a JSON object or a boolean")
        base = self.base_in(schema, base)
        if id(schema) in self.index.bases:
            key: Hashable = ("schema", id(schema), base, depth_key)
        else:
            # Schemas a negation writes differ in internal keywords only (`{"__exclude": [1]}`
            # and `{"__exclude": ["x"]}` for two negated `const`s): those are part of the key.
            key = (
                "synthetic",
                canonical(_strip_internal(schema)),
                _internal_key(schema),
                base,
                depth_key,
            )
        self.keepalive.append(schema)
        return self.shared_rule(
            key, pointer, lambda: self.nested_body(schema, pointer, base, depth_key)
        )

    def nested_body(self, schema: dict[str, Any], pointer: str, base: str, depth: int) -> Expr:
        """schema_body with a bound on how deeply rule construction may nest."""
        self._nesting += 1
        try:
            if self._nesting > MAX_NESTING:
                raise self.error(
                    pointer,
                    f"schema nested more than {MAX_NESTING} levels deep, or its expansion does"
                    " not terminate",
                )
            return self.schema_body(schema, pointer, base, depth)
        finally:
            self._nesting -= 1

    def schema_body(self, schema: dict[str, Any], pointer: str, base: str, depth: int) -> Expr:
        """The expression for one schema object."""
        normalized = self.normalized(schema, synthetic=id(schema) not in self.index.bases)
        constraint_keys = [k for k in normalized if k in CONSTRAINTS]
        if len(constraint_keys) == 1 and constraint_keys[0] in REFERENCE_KINDS:
            # A reference alone: the target's own rule (in the scope the reference leads to).
            keyword = constraint_keys[0]
            ref = normalized[keyword]
            if isinstance(ref, str):
                target, target_base, location = self.resolve(
                    ref, base, pointer, REFERENCE_KINDS[keyword]
                )
                return self.value_ref(target, location, target_base, depth)
        flat = self.flatten(schema, pointer, base, 0)
        return self.flat_body(flat, pointer, base, depth)

    def base_in(self, schema: Any, base: str) -> str:
        """The base URI in force inside ``schema`` (its own ``$id`` applied), reached from
        ``base``: a new ``$id`` changes the URI, the dynamic scope stays."""
        schema, base = unwrap(schema, base)
        inner = self.index.base_of(schema, base)
        return self.scopes.with_scope(inner, scope_of(base))

    def resolve(
        self, ref: str, base: str, pointer: str, kind: str = "static"
    ) -> tuple[Any, str, str]:
        """Resolve a reference or raise a located error.

        ``kind``: "static" ($ref), "dynamic" ($dynamicRef) or "recursive" ($recursiveRef);
        the returned base carries the dynamic scope inside the target (see :mod:`.scope`).
        """
        try:
            if kind == "recursive":
                # Only "#" is meaningful (2019-09); its target depends on the scope.
                ref = self.scopes.recursive_target(base)
            target, target_base, location = self.index.resolve(ref, base)
            resource, fragment = self.index.target_resource(ref, base)
            scope = self.scopes.after_reference(base, resource)
            anchor = self.index.dynamic_anchors.get(f"{resource}#{fragment}")
            if kind == "dynamic" and anchor is not None and anchor[0] is target:
                # The static target is the resource's $dynamicAnchor of that name.
                outermost = self.scopes.dynamic_target(scope, fragment)
                if outermost is not None:
                    target, _ = self.index.dynamic_anchors[f"{outermost}#{fragment}"]
                    target_base = self.index.base_of(target, outermost)
                    location = f"{outermost}#{fragment}"
            return target, self.scopes.with_scope(target_base, scope), location
        except RefError as exc:
            if exc.remote:
                # Not fetched: unsupported (lenient mode: the reference allows anything).
                self.unsupported(pointer, ["$ref"], str(exc))
                return True, base, pointer
            raise self.error(pointer, str(exc)) from None

    def count_expansion(self, kind: str, limit: int, pointer: str, what: str) -> None:
        """Count one step of expansion work of ``kind``; past ``limit`` a located error."""
        done = self._expansion.get(kind, 0) + 1
        self._expansion[kind] = done
        if done > limit:
            raise self.error(pointer, f"schema expansion too large: more than {limit:,} {what}")

    def flatten(self, schema: Any, pointer: str, base: str, level: int) -> dict[str, Any]:
        """Merge ``$ref`` and ``allOf`` into one flat schema (see :mod:`.combinators`).

        A schema's own ``unevaluatedProperties`` / ``unevaluatedItems`` see only what it and
        its in-place applicators evaluate, not what the schemas it is merged beside evaluate:
        they are closed here (see :func:`close_unevaluated`)."""
        flat = self._flatten_open(schema, pointer, base, level)
        inner, _ = unwrap(schema, base)
        if isinstance(inner, dict) and (
            "unevaluatedProperties" in inner or "unevaluatedItems" in inner
        ):
            own = self.normalized(inner, id(inner) not in self.index.bases)
            flat = close_unevaluated(flat, own)
        return flat

    def _flatten_open(self, schema: Any, pointer: str, base: str, level: int) -> dict[str, Any]:
        """flatten, with the schema's own unevaluated* keywords left open."""
        schema, base = unwrap(schema, base)
        if schema is True:
            return {}
        if schema is False:
            return {"__false": True}
        if not isinstance(schema, dict):
            raise self.error(pointer, "a schema must be a JSON object or a boolean")
        if level > MAX_FLATTEN_DEPTH:
            raise self.error(pointer, "allOf/$ref chain does not terminate (recursive allOf)")
        self.count_expansion(
            "merges",
            MAX_FLATTENS,
            pointer,
            "allOf/$ref merges (sub-schemas reached along exponentially many paths)",
        )
        base = self.base_in(schema, base)
        # Internal keywords come only from schemas the front end wrote: in a document, a
        # keyword spelled like one is an unknown word (an annotation).
        synthetic = id(schema) not in self.index.bases
        s = self.normalized(schema, synthetic)
        self._check_keywords(s, pointer, written=not synthetic)
        flat: dict[str, Any] = {}
        for key, value in s.items():
            if key in (
                "allOf",
                "$ref",
                "anyOf",
                "oneOf",
                "not",
                "if",
                "then",
                "else",
                "pattern",
                "format",
                "const",
                "$dynamicRef",
                "$recursiveRef",
            ):
                continue
            if (
                key in CONSTRAINTS
                or synthetic
                and key
                in (
                    "__non_integer",
                    "__exclude",
                    "__shadow",
                    "__false",
                    "__not_multiples",
                    "__witnesses",
                    "__anti_patterns",
                    "__anti_formats",
                )
            ):
                # (internal keywords appear in schemas synthesized by negation)
                flat[key] = value
        if "const" in s:
            flat["enum"] = [s["const"]]
            if "enum" in s:
                flat = merge(flat, {"enum": list(s["enum"])})
        if isinstance(s.get("pattern"), str):
            flat["__patterns"] = [(s["pattern"], pointer)]
        if (
            self.options.formats == "assert"
            and isinstance(s.get("format"), str)
            and s["format"] in FORMAT_PATTERNS
        ):
            flat["__formats"] = [(s["format"], pointer)]
        # Lists that schemas synthesized by negation carry as they are (not(not B) is B's
        # flat, patterns and combinators included).
        for internal in ("__patterns", "__formats", "__more_contains"):
            if synthetic and isinstance(s.get(internal), list):
                flat[internal] = [*s[internal], *flat.get(internal, ())]
        groups = list(s["__groups"]) if synthetic and isinstance(s.get("__groups"), list) else []
        for kind in ("anyOf", "oneOf"):
            if isinstance(s.get(kind), list):
                if not s[kind]:
                    raise self.error(pointer, f"{kind} must not be empty")
                groups.append((kind, s[kind], f"{pointer}/{kind}", base))
        if groups:
            flat["__groups"] = groups
        nots = list(s["__not"]) if synthetic and isinstance(s.get("__not"), list) else []
        if "not" in s:
            nots.append((s["not"], f"{pointer}/not", base))
        if nots:
            flat["__not"] = nots
        # A lone "if" asserts nothing, but when it passes its properties/items count as
        # evaluated, which unevaluated* keywords can see.
        sees_annotations = "unevaluatedProperties" in s or "unevaluatedItems" in s
        selected: tuple[Any, str] | None = None
        if "if" in s and isinstance(s["if"], bool):
            # A constant condition: the branch it selects simply applies (and `true` or
            # `false` evaluates no property or item), so nothing needs negating.
            which = "then" if s["if"] else "else"
            if s.get(which, True) is not True:
                selected = (s[which], f"{pointer}/{which}")
        elif "if" in s and ("then" in s or "else" in s or sees_annotations):
            flat["__conds"] = [(s["if"], s.get("then", True), s.get("else", True), pointer, base)]
        if synthetic and isinstance(s.get("__conds"), list):
            flat["__conds"] = [*s["__conds"], *flat.get("__conds", ())]
        references = [keyword for keyword in REFERENCE_KINDS if isinstance(s.get(keyword), str)]
        if not references and not s.get("allOf") and selected is None:
            return flat
        try:
            applied: dict[str, Any] = {}
            for keyword in references:
                target, target_base, location = self.resolve(
                    s[keyword], base, pointer, REFERENCE_KINDS[keyword]
                )
                target_flat = self.flatten(target, location, target_base, level + 1)
                if scope_of(target_base) != scope_of(base):
                    # Merged here, the target's sub-schemas must still be built in the scope
                    # its reference leads to.
                    wrapped = rescoped(target_flat, target_base)
                    if wrapped is None:
                        self.unsupported(
                            pointer,
                            [keyword],
                            "a reference into another dynamic scope whose target counts"
                            " contains matches or negates member rules, next to other keywords",
                        )
                    else:
                        target_flat = wrapped
                applied = merge_beside(applied, target_flat)
            for index, sub in enumerate(s.get("allOf") or ()):
                applied = merge_beside(
                    applied, self.flatten(sub, f"{pointer}/allOf/{index}", base, level + 1)
                )
            if selected is not None:
                branch, where = selected
                applied = merge_beside(applied, self.flatten(branch, where, base, level + 1))
            # Property order follows the document: applicators written before "properties"
            # contribute their properties first.
            keys = list(s)
            first_applicator = min(
                keys.index(k) for k in (*REFERENCE_KINDS, "allOf", "if") if k in s
            )
            own_properties = keys.index("properties") if "properties" in s else len(keys)
            if first_applicator < own_properties:
                return merge_beside(applied, flat)
            return merge_beside(flat, applied)
        except Unmergeable as exc:
            self.unsupported(pointer, ("allOf", exc.keyword), exc.reason)
        return flat

    def _check_keywords(self, s: dict[str, Any], pointer: str, written: bool = True) -> None:
        """Reject keyword values of the wrong shape with a located error (never a crash).

        ``written``: the schema is the document's own; one the front end wrote (a merge of
        branches whose types exclude each other) may say ``type: []``, which admits nothing.
        """
        for keyword, value in s.items():
            expected = _KEYWORD_SHAPES.get(keyword)
            if expected is not None and not _has_shape(value, expected):
                raise self.error(pointer, f"{keyword} must be {expected}")
        declared = s.get("type")
        if declared == [] and written:
            # Every draft's meta-schema asks for at least one type name.
            raise self.error(pointer, "type must not be an empty array")
        if declared is not None:
            names = [declared] if isinstance(declared, str) else declared
            unknown = [n for n in names if n not in TYPE_ORDER and n != "any"]
            if unknown:
                raise self.error(pointer, f"unknown type {unknown[0]!r}")
            if "any" in names:
                del s["type"]  # draft 3's "any": no restriction

    # -- distribution of combinators ---------------------------------------------------------
    def flat_body(self, flat: dict[str, Any], pointer: str, base: str, depth: int) -> Expr:
        """The expression for a flat schema: distribute combinators, then split by type."""
        if flat.get("__false"):
            return self.unsatisfiable(pointer, FALSE_REASON)
        if type_set(flat) == {"string"} and any(k in flat for k in STRING_COMBINATORS):
            combined = self.combined_string(flat, pointer, base)
            if combined is not None:
                return combined
        groups = list(flat.get("__groups", ()))
        if groups:
            kind, alternatives, location, group_base = groups[0]
            rest = dict(flat)
            rest["__groups"] = groups[1:]
            if not rest["__groups"]:
                del rest["__groups"]
            return self.distribute(kind, alternatives, location, group_base, rest, depth)
        conds = list(flat.get("__conds", ()))
        if conds:
            condition, then, otherwise, location, cond_base = conds[0]
            rest = {k: v for k, v in flat.items() if k != "__conds"}
            if conds[1:]:
                rest["__conds"] = conds[1:]
            return self.conditional(condition, then, otherwise, location, cond_base, rest, depth)
        nots = list(flat.get("__not", ()))
        if nots:
            negated_schema, location, not_base = nots[0]
            rest = {k: v for k, v in flat.items() if k != "__not"}
            if nots[1:]:
                rest["__not"] = nots[1:]
            try:
                alternatives = self.negation(negated_schema, location, not_base)
            except NotNegatable as exc:
                self.unsupported(location, ["not"], str(exc))
                return self.branch(rest, pointer, base, depth)
            if "unevaluatedItems" in rest and _evaluates_beyond(alternatives, rest):
                # "not" yields no annotations, but its negation, merged in, would evaluate
                # items that unevaluatedItems must still see.
                self.unsupported(
                    location, ["not", "unevaluatedItems"], "items constrained under not"
                )
            return choice(
                *(
                    self.branch(self.merge_at(rest, alt, location), pointer, base, depth)
                    for alt in alternatives
                )
            )
        dependents = self.dependency_split(flat)
        if dependents is not None:
            return choice(*(self.branch(b, pointer, base, depth) for b in dependents))
        return self.leaf(flat, pointer, base, depth)

    def flatten_for_negation(self, schema: Any, pointer: str, base: str) -> Any:
        """A schema ready for :func:`negate`: booleans as is, objects flattened."""
        if isinstance(schema, bool):
            return schema
        return self.negation_form(self.flatten(schema, pointer, base, 0))

    def negation_form(self, flat: dict[str, Any]) -> Any:
        """A flat schema as :func:`negate` reads it (its anyOf / oneOf / not prepared for
        negation, conditionals refused)."""
        if flat.get("__false"):
            return False
        blocking = ("__conds", "__witnesses")
        if any(k in flat for k in blocking):
            raise NotNegatable("cannot negate conditionals or member witnesses")
        out = {k: v for k, v in flat.items() if not k.startswith("__")}
        kept = (
            "__exclude",
            "__non_integer",
            "__patterns",
            "__formats",
            "__anti_patterns",
            "__anti_formats",
            "__more_contains",
        )
        for key in (*kept, "__not_multiples"):
            if key in flat:
                out[key] = flat[key]
        for kind, alternatives, location, group_base in flat.get("__groups", ()):
            out.setdefault(f"__negated_{kind.lower()}", []).append(
                [
                    self.flatten_for_negation(alt, f"{location}/{i}", group_base)
                    for i, alt in enumerate(alternatives)
                ]
            )
        if "__not" in flat:
            out["__negated_nots"] = [self.flatten(s, loc, b, 0) for s, loc, b in flat["__not"]]
        # The positive forms stay beside them: `negate` reads only the negated forms, while a
        # schema merged from negation forms (two oneOf branches that both match) keeps its
        # `not`s and groups through `merge`, which drops the negated forms. Without them,
        # `not: {oneOf: [{not: {pattern: "^a"}}, {const: null}]}` accepted null.
        for key in ("__not", "__groups"):
            if key in flat:
                out[key] = flat[key]
        return out

    def negation(self, schema: Any, pointer: str, base: str) -> list[Any]:
        """Schemas whose union is the complement of ``schema`` (raises NotNegatable)."""
        # The schema itself counts as being negated: where it recurs below, the negation
        # stays a `not` of it, whose rule is this one (see negate).
        return negate(
            self.flatten_for_negation(schema, pointer, base),
            self.negation_preparer(pointer, base),
            {id(schema)} if isinstance(schema, dict) else None,
        )

    def negation_preparer(self, pointer: str, base: str) -> Callable[[Any], Any]:
        """The ``prepare`` callback of :func:`negate` for sub-schemas below ``pointer``."""
        return lambda sub: self.flatten_for_negation(sub, pointer, base)

    def merge_at(self, a: dict[str, Any], b: Any, pointer: str) -> dict[str, Any]:
        """merge() with booleans allowed and errors located."""
        if b is True:
            return a
        if b is False:
            return {"__false": True}
        try:
            return merge(a, b)
        except Unmergeable as exc:
            self.unsupported(pointer, (exc.keyword,), exc.reason)
            return a

    def branch(self, flat: dict[str, Any], pointer: str, base: str, depth: int) -> Expr:
        """A rule for one distributed branch (shared when identical)."""
        if flat.get("__false"):
            return self.unsatisfiable(pointer, FALSE_REASON)
        self.count_expansion(
            "branches",
            MAX_BRANCHES_BUILT,
            pointer,
            "branches of anyOf/oneOf/if distributed into each other",
        )
        key = ("branch", canonical(_strip_internal(flat)), _internal_key(flat), base, depth)
        # The key names internal schemas by id(): keep those very objects alive (not only the
        # flat, which a later step could change), so that no new object can reuse an id.
        self.keepalive.append((flat, [flat[k] for k in flat if k.startswith("__")]))
        return self.shared_rule(key, pointer, lambda: self.flat_body(flat, pointer, base, depth))

    def distribute(
        self,
        kind: str,
        alternatives: list[Any],
        location: str,
        base: str,
        rest: dict[str, Any],
        depth: int,
    ) -> Expr:
        """anyOf/oneOf: one branch per alternative merged with the rest of the schema."""
        trivial_rest = not any(k for k in rest if k not in ANNOTATIONS)
        flats = [
            self.flatten(alt, f"{location}/{i}", base, 0) for i, alt in enumerate(alternatives)
        ]
        branches = [
            flats[i] if trivial_rest else self.merge_at(rest, flats[i], location)
            for i in range(len(flats))
        ]
        if kind == "oneOf":
            exact = self.exact_one_of(branches, alternatives, location, base)
            if exact is not None:
                return choice(*(self.branch(b, location, base, depth) for b in exact))
        elif 1 < len(branches) <= MAX_ANNOTATED_ANY_OF and any(
            k in rest for k in ("unevaluatedProperties", "unevaluatedItems")
        ):
            return self.annotated_any_of(branches, location, base, depth)
        if len(branches) > MAX_ALTERNATIVES:
            raise self.error(
                location, f"{len(branches)} branches exceed the limit of {MAX_ALTERNATIVES}"
            )
        exprs = []
        for index, (alt, flat) in enumerate(zip(alternatives, branches, strict=False)):
            if trivial_rest:
                exprs.append(self.value_ref(alt, f"{location}/{index}", base, depth))
            else:
                exprs.append(self.branch(flat, f"{location}/{index}", base, depth))
        return choice(*exprs)

    def annotated_any_of(
        self, branches: list[dict[str, Any]], location: str, base: str, depth: int
    ) -> Expr:
        """anyOf seen by unevaluated*: every branch that matches evaluates its properties and
        items, so an instance is valid when some set M of branches all match and everything
        is evaluated by M and the rest of the schema. One alternative per non-empty subset S
        of branches (all of S must match; S evaluates the union) is exact: S = M accepts every
        valid instance, and any S that matches is contained in M, which evaluates more.
        """
        alternatives = []
        for size in range(1, len(branches) + 1):
            for subset in itertools.combinations(range(len(branches)), size):
                merged = branches[subset[0]]
                for index in subset[1:]:
                    merged = self.merge_at(merged, branches[index], location)
                alternatives.append(self.branch(merged, location, base, depth))
        return choice(*alternatives)

    def exact_one_of(
        self, branches: list[dict[str, Any]], alternatives: list[Any], location: str, base: str
    ) -> list[dict[str, Any]] | None:
        """oneOf: None when the branches are provably disjoint (anyOf is then exact).

        Otherwise each branch is intersected with the negation of every branch it may
        overlap, which is exact when those negations are expressible; failing that, the
        oneOf is an error, or anyOf with a warning under ``coerce_one_of``.
        """
        overlaps = overlapping_pairs([_as_schema(branch) for branch in branches])
        if not overlaps:
            return None
        try:
            negations = {
                j: self.negation(alternatives[j], f"{location}/{j}", base)
                for j in {j for _, j in overlaps}
            }
            exact: list[dict[str, Any]] = []
            for i, branch in enumerate(branches):
                others = [negations[j] for a, j in overlaps if a == i]
                if "unevaluatedItems" in branch and any(
                    _evaluates_beyond(n, branch) for n in others
                ):
                    # Failed branches yield no annotations; their negations would.
                    raise NotNegatable("items constrained by a failed branch (unevaluatedItems)")
                parts = [branch]
                for j in sorted(j for a, j in overlaps if a == i):
                    parts = [
                        self.merge_at(p, n, location)
                        for p in parts
                        for n in negations[j]
                        if n is not False
                    ]
                    parts = [p for p in parts if not p.get("__false")]
                    if len(parts) > MAX_BRANCHES:
                        raise NotNegatable(f"more than {MAX_BRANCHES} branches")
                exact.extend(parts)
            return exact
        except NotNegatable as exc:
            i, j = min(overlaps)
            message = f"oneOf branches {i} and {j} may overlap and {exc}"
            if self.options.coerce_one_of:
                text = f"{LANGUAGE} at {location}: {message} (treated as anyOf)"
                self.warnings.append(text)
                warnings.warn(text, stacklevel=4)
                return None
            self.unsupported(
                location, ["oneOf"], message + " (set coerce_one_of to accept as anyOf)"
            )
            return None

    def conditional(
        self,
        condition: Any,
        then: Any,
        otherwise: Any,
        location: str,
        base: str,
        rest: dict[str, Any],
        depth: int,
    ) -> Expr:
        """if/then/else as (if and then) or (not if and else)."""
        # The condition in full for the then-branch; the form prepared for negation keeps its
        # anyOf / oneOf / not only as the negation reads them (merged as it is, it dropped
        # them: `if: {anyOf: [{type: string}]}` let every value through the then-branch).
        condition_flat: Any = (
            condition
            if isinstance(condition, bool)
            else self.flatten(condition, f"{location}/if", base, 0)
        )
        try:
            prepared = (
                condition_flat
                if isinstance(condition_flat, bool)
                else self.negation_form(condition_flat)
            )
            negated = negate(prepared, self.negation_preparer(f"{location}/if", base))
        except NotNegatable as exc:
            self.unsupported(location, ["if"], str(exc))
            return self.branch(rest, location, base, depth)
        otherwise_flat = self.flatten(otherwise, f"{location}/else", base, 0)
        if "unevaluatedItems" in rest and _evaluates_beyond(
            negated, self.merge_at(rest, otherwise_flat, location)
        ):
            # A failed "if" yields no annotations, but its negation, merged in, would
            # evaluate items that unevaluatedItems must still see.
            self.unsupported(
                location, ["if", "unevaluatedItems"], "items constrained by a failed if"
            )
        positive = self.merge_at(rest, condition_flat, location)
        positive = self.merge_at(
            positive, self.flatten(then, f"{location}/then", base, 0), location
        )
        exprs = [self.branch(positive, location, base, depth)]
        for alternative in negated:
            branch = self.merge_at(
                self.merge_at(rest, alternative, location), otherwise_flat, location
            )
            exprs.append(self.branch(branch, location, base, depth))
        return choice(*exprs)

    def dependency_split(self, flat: dict[str, Any]) -> list[dict[str, Any]] | None:
        """dependentRequired/dependentSchemas as branches: trigger absent, or present and more."""
        required = flat.get("dependentRequired") or {}
        schemas = flat.get("dependentSchemas") or {}
        if not required and not schemas:
            return None
        rest = {k: v for k, v in flat.items() if k not in ("dependentRequired", "dependentSchemas")}
        triggers = list(dict.fromkeys(list(required) + list(schemas)))
        trigger = triggers[0]
        later_required = {k: v for k, v in required.items() if k != trigger}
        later_schemas = {k: v for k, v in schemas.items() if k != trigger}
        if later_required:
            rest["dependentRequired"] = later_required
        if later_schemas:
            rest["dependentSchemas"] = later_schemas
        absent = self.merge_at(rest, {"properties": {trigger: False}}, "#")
        present = self.merge_at(rest, {"required": [trigger, *required.get(trigger, [])]}, "#")
        if trigger in schemas:
            present = self.merge_at(
                present, self.flatten(schemas[trigger], "#/dependentSchemas", DEFAULT_BASE, 0), "#"
            )
        # Only objects are affected: keep non-objects in the "absent" branch only.
        present = self.merge_at(present, {"type": ["object"]}, "#")
        return [absent, present]

    # -- leaves -----------------------------------------------------------------------------
    def leaf(self, flat: dict[str, Any], pointer: str, base: str, depth: int) -> Expr:
        """A flat schema without combinators: a choice over its admissible types."""
        types = type_set(flat)
        allowed = [
            t
            for t in TYPE_ORDER
            if types is None and t != "integer" or types is not None and t in types
        ]
        if types is not None and "number" in types:
            allowed = [t for t in allowed if t != "integer"]
        if "enum" in flat:
            if not isinstance(flat["enum"], list):
                raise self.error(pointer, "enum must be an array")
            values = [v for v in flat["enum"] if flat_is_valid(self, v, flat, pointer, base)]
            if not values:
                return self.unsatisfiable(
                    pointer,
                    "enum is empty"
                    if not flat["enum"]
                    else "no enum/const value satisfies the other keywords that apply",
                )
            if self.options.property_order == "any" and any(map(_has_large_object, values)):
                self.note(
                    pointer,
                    f"enum/const objects with more than {MAX_PERMUTED_KEYS} keys must keep "
                    "their key order",
                )
            # Draft 4's integer is a number written without fraction or exponent (1.0 is
            # not one), so an allowed integer member keeps its integer spelling only.
            integer_only = self.draft <= 4 and types is not None and "number" not in types
            return choice(*(value_expr(v, self.layout, depth, integer_only) for v in values))
        if not allowed:
            return self.unsatisfiable(pointer, "the types that apply here have no type in common")
        alternatives = []
        for kind in allowed:
            alternatives.append(self.typed(kind, flat, pointer, base, depth))
        return choice(*alternatives)

    def typed(self, kind: str, flat: dict[str, Any], pointer: str, base: str, depth: int) -> Expr:
        """The expression for one JSON type under a flat schema."""
        excluded = [v for v in flat.get("__exclude", ())]
        if kind == "null":
            return NEVER if None in excluded else lit("null")
        if kind == "boolean":
            options = [
                lit(t)
                for t, v in (("true", True), ("false", False))
                if not any(e is v for e in excluded)
            ]
            return choice(*options)
        if kind in ("integer", "number"):
            return self.number(flat, kind == "integer", pointer)
        if kind == "string":
            return self.string(flat, pointer)
        if kind == "array":
            if any(isinstance(v, list) for v in excluded):
                return self.excluding_fixed("array", flat, pointer, base, depth)
            return arrays.array_expr(self, flat, pointer, base, depth)
        if kind == "object":
            if any(isinstance(v, dict) for v in excluded):
                return self.excluding_fixed("object", flat, pointer, base, depth)
            return objects.object_expr(self, flat, pointer, base, depth)
        raise AssertionError(kind)

    def excluding_fixed(
        self, kind: str, flat: dict[str, Any], pointer: str, base: str, depth: int
    ) -> Expr:
        """Objects (arrays) of ``flat`` other than the fixed objects (arrays) among its excluded
        values: a ``not`` of ``const`` / ``enum`` members. Each fixed value is the one value of
        a schema (an object's keys required, each with its value as ``const``, no other key;
        an array's items by position as ``const``, no more, no fewer); that schema's negation
        (a key or item missing, another present, or a member other than its own, nested fixed
        values excluded in turn) is merged into ``flat``, one branch per way."""
        container = dict if kind == "object" else list
        build = objects.object_expr if kind == "object" else arrays.array_expr
        fixed = [v for v in flat["__exclude"] if isinstance(v, container)]
        rest = dict(flat)
        rest["__exclude"] = [v for v in flat["__exclude"] if not isinstance(v, container)]
        if not rest["__exclude"]:
            del rest["__exclude"]
        branches = [rest]
        try:
            for value in fixed:
                negations = [
                    {} if n is True else n
                    for n in negate(_schema_of_fixed(value))
                    if n is not False and (type_set(n) is None or kind in type_set(n))
                ]
                branches = [
                    merged
                    for branch in branches
                    for n in negations
                    if not (merged := merge(branch, n)).get("__false")
                ]
                if len(branches) > MAX_NEGATION_BRANCHES:
                    raise NotNegatable(
                        f"excluding fixed {kind}s needs more than {MAX_NEGATION_BRANCHES} branches"
                    )
        except (NotNegatable, Unmergeable) as exc:
            self.unsupported(pointer, ["not"], f"excluding fixed {kind}s: {exc}")
            return build(self, rest, pointer, base, depth)
        return choice(*(build(self, b, pointer, base, depth) for b in branches))

    def any_value(self, depth: int) -> Expr:
        """Any JSON value (shared rules)."""
        return self.shared_rule(
            ("any", depth), "any_value", lambda: self.leaf({}, "#", DEFAULT_BASE, depth)
        )

    # -- numbers ----------------------------------------------------------------------------
    def number(self, flat: dict[str, Any], integer: bool, pointer: str) -> Expr:
        """Numbers with exact bounds and multipleOf."""
        try:
            bounds = []
            for keyword, op in (
                ("minimum", "ge"),
                ("exclusiveMinimum", "gt"),
                ("maximum", "le"),
                ("exclusiveMaximum", "lt"),
            ):
                if keyword in flat:
                    bounds.append(Bound(op, to_decimal(flat[keyword], keyword)))
            for value in flat.get("__exclude", ()):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    bounds.append(Bound("ne", to_decimal(value, "not")))
            multiple = None
            if "multipleOf" in flat:
                multiple = to_decimal(flat["multipleOf"], "multipleOf")
                if multiple <= 0:
                    raise NumberSpecError("multipleOf must be greater than 0")
        except NumberSpecError as exc:
            raise self.error(pointer, str(exc)) from None
        non_multiples = tuple(
            to_decimal(value, "multipleOf") for value in flat.get("__not_multiples", ())
        )
        if any(value <= 0 for value in non_multiples):
            raise self.error(pointer, "multipleOf must be greater than 0")
        non_integer = bool(flat.get("__non_integer"))
        if non_integer and integer:
            return NEVER
        if non_integer and (multiple is not None or non_multiples):
            self.unsupported(pointer, ["not", "multipleOf"], "non-integer multiples")
            non_integer = False
        zero_fraction = self.draft >= 6
        spec = NumberSpec(
            integer=integer,
            zero_fraction=zero_fraction,
            bounds=tuple(bounds),
            multiple_of=multiple,
            non_integer=non_integer,
            non_multiples=non_multiples,
        )
        if spec.is_plain():
            return self.shared_rule(
                ("number", integer, zero_fraction),
                "integer" if integer else "number",
                lambda: plain_number_expr(integer, zero_fraction),
                terminal=True,
            )
        kind = "integer" if integer else "number"
        if spec.is_empty_interval():
            return self.unsatisfiable(pointer, f"no {kind} satisfies {_numeric_keywords(flat)}")

        def build() -> Expr:
            try:
                dfa = number_dfa(spec)
            except AutomatonTooLarge as exc:
                # Several multiples take the remainder modulo their lcm; between two bounds the
                # numbers may still be few enough to write out one by one.
                values = enumerated_values(spec)
                if values is None:
                    self.unsupported(pointer, ["multipleOf"], str(exc))
                    return plain_number_expr(integer, zero_fraction)
                if not values:
                    return self.unsatisfiable(
                        pointer, f"no {kind} satisfies {_numeric_keywords(flat)}"
                    )
                integer_only = integer and not zero_fraction
                return choice(
                    *(
                        number_spellings_expr(
                            int(value) if value == value.to_integral_value() else value,
                            integer_only,
                        )
                        for value in values
                    )
                )
            if not dfa.accepting:
                return self.unsatisfiable(pointer, f"no {kind} satisfies {_numeric_keywords(flat)}")
            return self.emit_dfa(dfa, "num", char_class)

        return self.shared_rule(("number", spec), "number_range", build)

    # -- strings ----------------------------------------------------------------------------
    def string(self, flat: dict[str, Any], pointer: str) -> Expr:
        """Strings under length, pattern, format and exclusion constraints."""
        min_length = _non_negative(flat.get("minLength", 0), "minLength", self, pointer)
        max_length = flat.get("maxLength")
        if max_length is not None:
            max_length = _non_negative(max_length, "maxLength", self, pointer)
            if max_length < min_length:
                return self.unsatisfiable(
                    pointer, f"minLength {min_length} is above maxLength {max_length}"
                )
        patterns = tuple(sorted({p for p, _ in flat.get("__patterns", ())}))
        formats = tuple(sorted({f for f, _ in flat.get("__formats", ())}))
        excluded = tuple(sorted({v for v in flat.get("__exclude", ()) if isinstance(v, str)}))
        # From negation: patterns the string must not contain a match of, formats it must miss.
        anti = tuple(sorted({("pattern", p) for p in flat.get("__anti_patterns", ())}))
        anti += tuple(sorted({("format", f) for f in flat.get("__anti_formats", ())}))
        key = ("string", min_length, max_length, patterns, formats, excluded, anti)
        name = self.rule_for_key.get(key)
        if name is not None:
            return rule_ref(name)
        content = self.string_content(
            min_length, max_length, patterns, formats, excluded, pointer, anti
        )
        name = self.rule_for_key.setdefault(key, self.new_name("string"))
        return self.add_rule(name, seq(lit('"'), content, lit('"')), self.is_lexeme(content))

    def is_lexeme(self, expr: Expr) -> bool:
        """Whether a rule around ``expr`` may be a terminal: only terminal references, and no
        large counted repetition (which would blow up a lexer automaton; as a rule it stays a
        counter)."""
        for node in walk(expr):
            if isinstance(node, Repeat) and max(node.min, node.max or 0) > MAX_LEXEME_COUNT:
                return False
            if isinstance(node, Ref):
                rule = self.rules.get(node.name)
                if rule is None or not rule.terminal:
                    return False
        return True

    def char(self, ranges: tuple[tuple[int, int], ...]) -> Expr:
        """One encoded string character from ``ranges``; big expressions become shared rules."""
        known = self._chars.get(ranges)
        if known is None:
            known = self._chars[ranges] = self._char(ranges)
        return known

    def _char(self, ranges: tuple[tuple[int, int], ...]) -> Expr:
        ascii_part = tuple((lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F)
        other_part = tuple((max(lo, 0x80), hi) for lo, hi in ranges if hi >= 0x80)
        if ascii_part and other_part:
            # Classes that differ only in ASCII (the keys of objects) share the big rest.
            return choice(self.char(ascii_part), self.char(other_part))
        expr = encoded_char(ranges)
        if isinstance(expr, CharClass):
            return expr
        return self.shared_rule(("char", ranges), "char", lambda: expr, terminal=True)

    def string_content(
        self,
        min_length: int,
        max_length: int | None,
        patterns: tuple[str, ...],
        formats: tuple[str, ...],
        excluded: tuple[str, ...],
        pointer: str,
        anti: tuple[tuple[str, str], ...] = (),
        format_supersets: bool = False,
        exact_only: bool = False,
    ) -> Expr:
        """The encoded characters between the quotes.

        ``format_supersets``: the coarse superset of a large format (see
        ``FORMAT_SUPERSETS``), used when the exact one times the length bound is too large.
        ``exact_only``: raise ``AutomatonTooLarge`` rather than fall back (to a superset, a
        format or bound left out, or an unsupported-keyword report).
        """
        languages: list[Expr] = []
        for pattern in patterns:
            languages.append(self.pattern_language(pattern, pointer))
        for name in formats:
            expr = format_expr(name, format_supersets)
            if expr is not None:
                languages.append(expr)
        length_limited = min_length > 0 or max_length is not None
        if not languages and not excluded and not anti:
            return repeat(self.char(ALL_CHARS), min_length, max_length)
        if len(languages) == 1 and not excluded and not length_limited and not anti:
            return encode_expr(languages[0], self.char)
        try:
            dfas = [self.pattern_dfa(pattern, pointer) for pattern in patterns]
            # Formats' automata are shared (a URI's is ~180 states, built once per process).
            dfas += [
                format_dfa(name, format_supersets) for name in formats if name in FORMAT_PATTERNS
            ]
            for kind, text in anti:
                if kind == "pattern":
                    dfas.append(complement(self.pattern_dfa(text, pointer)))
                    continue
                expr = format_expr(text)
                if expr is not None:
                    dfas.append(complement(dfa_from_expr(expr)))
            if not dfas:
                dfas.append(any_string_dfa())
            if excluded:
                dfas.append(complement(word_set_dfa(excluded)))
            combined = dfas[0]
            for other in dfas[1:]:
                combined = intersect(combined, other)
            if length_limited:
                bounds = length_range(combined)
                if (
                    bounds is not None
                    and bounds[0] >= min_length
                    and (max_length is None or (bounds[1] is not None and bounds[1] <= max_length))
                ):
                    # The other constraints bound the length already (a fixed-length
                    # pattern under `maxLength: 100000`): nothing to intersect.
                    length_limited = False
            if length_limited:
                # Last, with its own larger bound: the product with a counter is the one
                # that grows with the bound (an e-mail pattern up to 254 characters); the
                # other side is minimised first so the product is as small as it can be.
                # A format with a coarser fallback gets a small budget: the exact product is
                # worth its size only while it stays small (see FORMAT_SUPERSETS).
                budget = MAX_LENGTH_PRODUCT_STATES
                combined = minimize(combined)
                if not format_supersets and set(formats) & set(FORMAT_SUPERSETS):
                    budget = MAX_DFA_STATES
                    top = max_length if max_length is not None else min_length
                    # The product's size bound: past the budget, skip the attempt.
                    if len(combined.edges) * (top + 1) > budget:
                        raise AutomatonTooLarge(f"more than {budget} automaton states")
                combined = intersect(
                    combined, length_dfa(min_length, max_length), max_states=budget
                )
        except AutomatonTooLarge as too_large:
            reason = str(too_large)
            if format_supersets or exact_only:
                raise  # the calling attempt falls back further
            coarse = sorted(set(formats) & set(FORMAT_SUPERSETS))
            if coarse and length_limited:
                try:
                    content = self.string_content(
                        min_length, max_length, patterns, formats, excluded, pointer, anti, True
                    )
                except AutomatonTooLarge as coarse_too_large:
                    reason = str(coarse_too_large)
                else:
                    self.note(
                        pointer,
                        f"format {', '.join(coarse)} with minLength/maxLength: the exact "
                        f"language times the length bound is too large ({reason}), so the format "
                        "is enforced as its coarser superset (URIs: the character set; e-mail: "
                        "any address literal)",
                    )
                    return content
            if formats and max_length is not None:
                # Even that is too large (`format: email` with `maxLength: 254`, `hostname`
                # with 253: common pairs). The format says more about a value than a generous
                # bound does (test sets' negatives break the format, not the bound), so the
                # format stays exact and the upper bound is left out; failing that, the other
                # way round.
                try:
                    content = self.string_content(
                        min_length, None, patterns, formats, excluded, pointer, anti, False, True
                    )
                    kept, dropped = "the format is", f"maxLength {max_length} is not"
                except AutomatonTooLarge:
                    content = self.string_content(
                        min_length, max_length, patterns, (), excluded, pointer, anti
                    )
                    kept, dropped = "the length is", "the format is not"
                self.note(
                    pointer,
                    f"format {', '.join(formats)} with maxLength: the format (or its coarser "
                    f"superset) times the length bound is too large ({reason}), so {dropped} "
                    f"enforced; {kept}",
                )
                return content
            self.unsupported(
                pointer, ["pattern", "maxLength"], f"combining string constraints: {reason}"
            )
            return (
                encode_expr(languages[0], self.char)
                if languages
                else repeat(self.char(ALL_CHARS), min_length, max_length)
            )
        if is_empty(combined):
            return self.unsatisfiable(
                pointer, "no string satisfies its pattern, format and length keywords together"
            )
        return self.emit_dfa(combined, "str", self.char)

    def pattern_dfa(self, pattern: str, pointer: str) -> Dfa:
        """The minimal automaton of a pattern's search language (built once per pattern)."""
        dfa = self._pattern_dfas.get(pattern)
        if dfa is None:
            dfa = self._pattern_dfas[pattern] = dfa_from_expr(
                self.pattern_language(pattern, pointer)
            )
        return dfa

    def pattern_language(self, pattern: str, pointer: str) -> Expr:
        """The regex front end's search language for a pattern, errors located here."""
        from gramkiln.frontend.regex import search_regex

        try:
            return search_regex(pattern)
        except GrammarError as exc:
            raise self.error(pointer, f"pattern {pattern!r}: {exc.message}") from None

    def key_dfa_for(self, names_schema: Any, pointer: str, base: str) -> Dfa | None:
        """The automaton of keys allowed by ``propertyNames`` (None: no restriction)."""
        if names_schema is True or names_schema is None or names_schema == {}:
            return None
        return self.string_dfa(names_schema, f"{pointer}/propertyNames", base, 0)

    def combined_string(self, flat: dict[str, Any], pointer: str, base: str) -> Expr | None:
        """A string schema whose combinators (anyOf, oneOf, not, if) only constrain strings,
        as one automaton: strings are closed under union, intersection and complement, so
        the combination needs no distribution into branches (nested ``not``/``anyOf`` over
        patterns distribute into exponentially many). None when the automaton grows past
        its budget: the caller distributes as for any other schema.
        """
        unbounded = {k: v for k, v in flat.items() if k not in ("minLength", "maxLength")}
        min_length = _non_negative(flat.get("minLength", 0), "minLength", self, pointer)
        max_length = flat.get("maxLength")
        if max_length is not None:
            max_length = _non_negative(max_length, "maxLength", self, pointer)
        try:
            dfa = minimize(self.flat_string_dfa(unbounded, pointer, base, 0))
            if min_length > 0 or max_length is not None:
                # Last, with its own larger budget, as in string_content.
                dfa = intersect(
                    dfa,
                    length_dfa(min_length, max_length),
                    max_states=MAX_LENGTH_PRODUCT_STATES,
                )
        except AutomatonTooLarge:
            return None
        if is_empty(dfa):
            return self.unsatisfiable(
                pointer, "no string satisfies its pattern, length and combinator keywords"
            )
        content = self.emit_dfa(dfa, "str", self.char)
        return self.add_rule(
            self.new_name("string"), seq(lit('"'), content, lit('"')), self.is_lexeme(content)
        )

    def string_dfa(self, schema: Any, pointer: str, base: str, level: int) -> Dfa:
        """The automaton of the strings a schema accepts (combinators included)."""
        if schema is True:
            return any_string_dfa()
        if schema is False or level > MAX_FLATTEN_DEPTH:
            if schema is not False:
                raise self.error(pointer, "schema expansion does not terminate (nesting too deep)")
            return Dfa(edges=[[]], accepting=set())
        base = self.base_in(schema, base) if isinstance(schema, dict) else base
        return self.flat_string_dfa(self.flatten(schema, pointer, base, 0), pointer, base, level)

    def flat_string_dfa(self, flat: dict[str, Any], pointer: str, base: str, level: int) -> Dfa:
        """string_dfa for a flattened schema."""
        if flat.get("__false"):
            return Dfa(edges=[[]], accepting=set())
        types = type_set(flat)
        if types is not None and "string" not in types:
            return Dfa(edges=[[]], accepting=set())
        dfas = []
        if "enum" in flat:
            dfas.append(word_set_dfa(tuple(v for v in flat["enum"] if isinstance(v, str))))
        for pattern, _ in flat.get("__patterns", ()):
            dfas.append(self.pattern_dfa(pattern, pointer))
        for name, _ in flat.get("__formats", ()):
            expr = format_expr(name)
            if expr is not None:
                dfas.append(dfa_from_expr(expr))
        if "minLength" in flat or "maxLength" in flat:
            dfas.append(length_dfa(int(flat.get("minLength", 0)), flat.get("maxLength")))
        excluded = tuple(v for v in flat.get("__exclude", ()) if isinstance(v, str))
        if excluded:
            dfas.append(complement(word_set_dfa(excluded)))
        for pattern in flat.get("__anti_patterns", ()):
            dfas.append(complement(self.pattern_dfa(pattern, pointer)))
        for name in flat.get("__anti_formats", ()):
            expr = format_expr(name)
            if expr is not None:
                dfas.append(complement(dfa_from_expr(expr)))

        def sub(node: Any, where: str, node_base: str) -> Dfa:
            return self.string_dfa(node, where, node_base, level + 1)

        for kind, alternatives, location, group_base in flat.get("__groups", ()):
            parts = [sub(alt, f"{location}/{i}", group_base) for i, alt in enumerate(alternatives)]
            if kind == "anyOf":
                dfas.append(_union(parts))
            else:  # exactly one
                exactly_one = []
                for i, part in enumerate(parts):
                    for j, other in enumerate(parts):
                        if i != j:
                            part = minimize(intersect(part, complement(other)))
                    exactly_one.append(part)
                dfas.append(_union(exactly_one))
        for negated, location, not_base in flat.get("__not", ()):
            dfas.append(complement(sub(negated, location, not_base)))
        for condition, then, otherwise, location, cond_base in flat.get("__conds", ()):
            test = sub(condition, f"{location}/if", cond_base)
            yes = intersect(test, sub(then, f"{location}/then", cond_base))
            no = intersect(complement(test), sub(otherwise, f"{location}/else", cond_base))
            dfas.append(_union([yes, no]))
        # Minimised as they go, smallest first: a product of unminimised parts (complements
        # of unions of complements) passes the state budget long before its language needs to.
        combined = any_string_dfa()
        for other in sorted((minimize(dfa) for dfa in dfas), key=lambda dfa: dfa.size):
            combined = minimize(intersect(combined, other))
        return combined


def _unfolded_size(dfa: Dfa) -> int:
    """How many states the automaton has once shared states are copied for every path
    (self-loops aside); the automaton must be acyclic apart from self-loops."""
    sizes: dict[int, int] = {}
    for state in _reverse_topological(dfa):
        total = 1
        for _, _, target in dfa.edges[state]:
            if target != state:
                total += sizes[target]
        sizes[state] = min(total, MAX_UNFOLDED_STATES + 1)
    return sizes.get(dfa.start, 1)


def _reverse_topological(dfa: Dfa) -> list[int]:
    """States ordered so that every state comes after the states it leads to."""
    order: list[int] = []
    done: set[int] = set()
    for root in range(dfa.size):
        if root in done:
            continue
        stack = [(root, iter(dfa.edges[root]))]
        done.add(root)
        while stack:
            state, edges = stack[-1]
            for _, _, target in edges:
                if target != state and target not in done:
                    done.add(target)
                    stack.append((target, iter(dfa.edges[target])))
                    break
            else:
                stack.pop()
                order.append(state)
    return order


def _union(dfas: list[Dfa]) -> Dfa:
    """The union of string automata (through complements, which are total)."""
    if not dfas:
        return Dfa(edges=[[]], accepting=set())
    rest = complement(dfas[0])
    for other in dfas[1:]:
        rest = minimize(intersect(rest, complement(other)))
    return complement(rest)


def _numeric_keywords(flat: dict[str, Any]) -> str:
    """The numeric keywords of a flat schema as written, for a message ("minimum 1, ...")."""
    parts = [
        f"{keyword} {json.dumps(flat[keyword])}"
        for keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf")
        if keyword in flat
    ]
    excluded = [
        json.dumps(value)
        for value in flat.get("__exclude", ())
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]
    if excluded:
        parts.append(f"not {' or '.join(excluded)}")
    return ", ".join(parts) or "its keywords"


def _non_negative(value: Any, keyword: str, compiler: Compiler, pointer: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise compiler.error(pointer, f"{keyword} must be a non-negative integer")
    return value


def _has_large_object(value: Any) -> bool:
    """Whether a fixed value holds an object too large to be spelled in every key order."""
    if isinstance(value, dict):
        return len(value) > MAX_PERMUTED_KEYS or any(map(_has_large_object, value.values()))
    if isinstance(value, list):
        return any(map(_has_large_object, value))
    return False


def _evaluates_beyond(alternatives: list[Any], flat: dict[str, Any]) -> bool:
    """Whether merging some alternative (of a negation) into ``flat`` would evaluate array
    items that ``flat`` itself leaves to unevaluatedItems.

    A negation stands for a schema that failed, which evaluates nothing; merged in, its
    ``prefixItems`` would count as evaluating their positions, and its ``items`` or
    ``contains`` the items they reach. That changes nothing where ``flat`` evaluates those
    items already: every item (it has ``items``), or every position of a prefix at least as
    long. (The alternatives merged before this one passed the same test, so ``flat``'s prefix
    is one its own keywords evaluate.)
    """
    if "items" in flat:
        return False
    evaluated = len(flat.get("prefixItems") or ())
    for alt in alternatives:
        if not isinstance(alt, dict):
            continue
        if any(k in alt for k in ("items", "additionalItems", "contains", "__more_contains")):
            return True
        if len(alt.get("prefixItems") or ()) > evaluated:
            return True
    return False


def _as_schema(flat: dict[str, Any]) -> Any:
    """A flat schema for the disjointness test (a false schema as False)."""
    return False if flat.get("__false") else flat


def _schema_of_fixed(value: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """The schema whose only value is the object or array ``value``."""
    if isinstance(value, dict):
        schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
        if value:
            schema["required"] = list(value)
            schema["properties"] = {key: {"const": member} for key, member in value.items()}
        return schema
    if not value:
        return {"type": "array", "maxItems": 0}
    return {
        "type": "array",
        "minItems": len(value),
        "prefixItems": [{"const": item} for item in value],
        "items": False,
    }


def _strip_internal(flat: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat.items() if not k.startswith("__")}


def _internal_key(flat: dict[str, Any]) -> str:
    """A printable key for internal list keywords (their raw schemas compare by identity)."""
    memo: dict[int, str] = {}
    parts = []
    for key in sorted(k for k in flat if k.startswith("__")):
        parts.append(f"{key}={_identity_repr(flat[key], memo)}")
    return ";".join(parts)


def _identity_repr(value: Any, memo: dict[int, str]) -> str:
    # Merged branches share their condition and group lists by reference, level under level:
    # each list is written once per key, and a long one as a digest in its parent (see
    # combinators.canonical).
    if isinstance(value, dict):
        return f"@{id(value)}"
    if not isinstance(value, (list, tuple)):
        return repr(value)
    text = memo.get(id(value))
    if text is None:
        text = "[" + ",".join(compact_text(_identity_repr(v, memo)) for v in value) + "]"
        memo[id(value)] = text
    return text


# The JSON shape each keyword's value must have (checked before use).
_KEYWORD_SHAPES = {
    "type": "a type name or an array of type names",
    "enum": "an array",
    "required": "an array of strings",
    "properties": "an object of schemas",
    "patternProperties": "an object of schemas",
    "dependentSchemas": "an object of schemas",
    "dependentRequired": "an object of string arrays",
    "$defs": "an object of schemas",
    "definitions": "an object of schemas",
    "allOf": "a non-empty array of schemas",
    "anyOf": "a non-empty array of schemas",
    "oneOf": "a non-empty array of schemas",
    "prefixItems": "an array of schemas",
    "minLength": "a non-negative integer",
    "maxLength": "a non-negative integer",
    "minItems": "a non-negative integer",
    "maxItems": "a non-negative integer",
    "minProperties": "a non-negative integer",
    "maxProperties": "a non-negative integer",
    "minContains": "a non-negative integer",
    "maxContains": "a non-negative integer",
    "minimum": "a number",
    "maximum": "a number",
    "exclusiveMinimum": "a number",
    "exclusiveMaximum": "a number",
    "multipleOf": "a number",
    "pattern": "a string",
    "uniqueItems": "a boolean",
    "$ref": "a string",
    "$dynamicRef": "a string",
    "$recursiveRef": "a string",
    "unevaluatedItems": "a schema",
    "unevaluatedProperties": "a schema",
}


def _has_shape(value: Any, expected: str) -> bool:
    """Whether a keyword value has the shape described by ``expected``."""
    if expected.startswith("a type name"):
        return isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
    if expected == "an array":
        return isinstance(value, list)
    if expected == "an array of strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if expected == "an object of schemas":
        return isinstance(value, dict) and all(isinstance(v, (dict, bool)) for v in value.values())
    if expected == "an object of string arrays":
        return isinstance(value, dict) and all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values()
        )
    if expected.endswith("array of schemas"):
        return (
            isinstance(value, list)
            and (bool(value) or not expected.startswith("a non-empty"))
            and all(isinstance(v, (dict, bool)) for v in value)
        )
    if expected == "a non-negative integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if expected == "a number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == "a string":
        return isinstance(value, str)
    if expected == "a boolean":
        return isinstance(value, bool)
    if expected == "a schema":
        return isinstance(value, (dict, bool))
    return True


class _AcyclicDfaWriter:
    """``Compiler.emit_dfa`` for an automaton without cycles other than self-loops: each
    state inline where one edge reaches it (up to ``MAX_INLINE_NESTING`` deep), otherwise a
    terminal rule of its own. A class rather than nested functions: two nested functions
    that call each other are a reference cycle, which kept the compiler's rules alive until a
    garbage collection."""

    def __init__(
        self,
        compiler: Compiler,
        dfa: Dfa,
        hint: str,
        edge: Callable[[tuple[tuple[int, int], ...]], Expr],
    ) -> None:
        self.compiler = compiler
        self.dfa = dfa
        self.hint = hint
        self.edge = edge
        self.indegree = [0] * dfa.size
        for state in range(dfa.size):
            for _, _, target in dfa.edges[state]:
                if target != state:
                    self.indegree[target] += 1
        self.rule_names: dict[int, str] = {}

    def state_expr(self, state: int, nesting: int) -> Expr:
        """The language from `state`: inline, or a reference to its rule."""
        if state != self.dfa.start and (self.indegree[state] > 1 or nesting >= MAX_INLINE_NESTING):
            if state not in self.rule_names:
                name = self.rule_names[state] = self.compiler.new_name(self.hint)
                self.compiler.add_rule(name, self.state_body(state, 0), terminal=True)
            return rule_ref(self.rule_names[state])
        return self.state_body(state, nesting)

    def state_body(self, state: int, nesting: int) -> Expr:
        """The language from `state` written out: its self-loop, then a choice of its edges."""
        grouped = group_edges(self.dfa.edges[state])
        loop = grouped.pop(state, None)
        alternatives: list[Expr] = [lit("")] if state in self.dfa.accepting else []
        for target, ranges in grouped.items():
            alternatives.append(seq(self.edge(ranges), self.state_expr(target, nesting + 1)))
        body = choice(*alternatives)
        return seq(repeat(self.edge(loop)), body) if loop is not None else body
