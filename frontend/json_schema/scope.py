"""Dynamic scope for ``$dynamicRef`` (2020-12) and ``$recursiveRef`` (2019-09).

A dynamic reference resolves against the *dynamic scope*: the schema resources that
evaluation passed through to get where it is, outermost first. A ``$ref`` into another resource
(or the first reference of the evaluation) adds the resource it leaves to that scope; entering
a sub-schema with its own ``$id`` changes the base URI but adds nothing (the rule the test
suite and the reference validator, ``referencing``, follow).

- ``$dynamicRef: "...#name"`` whose static target is a ``$dynamicAnchor`` named ``name`` goes to
  the outermost resource in the scope that defines a ``$dynamicAnchor`` of that name (if any;
  otherwise it is a plain ``$ref``).
- ``$recursiveRef: "#"`` goes to the current resource's root; if that root says
  ``"$recursiveAnchor": true``, then, walking the scope from the innermost resource outwards
  while each says ``"$recursiveAnchor": true`` too, to the last one reached.

The same sub-schema can therefore mean different things at different places, so the front end
builds one rule per (sub-schema, scope). Only what resolution can read is kept, which makes the
scopes finitely many:

- ``started``: whether the scope holds any resource yet (the first reference adds the resource
  it leaves even when it stays in it);
- ``anchors``: per dynamic anchor name defined in two or more resources, the outermost resource
  in the scope that defines it (a name defined once resolves to that one definition anyway);
- ``recursive``: the outermost resource of the run of ``$recursiveAnchor: true`` resources at
  the inner end of the scope (None when the innermost one has none).

The scope travels with the base URI, as a :class:`ScopedBase` (a ``str`` equal only to a base
with the same scope), so that everything that passes base URIs along keeps it, and rule keys
that include the base tell scopes apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gramkiln.frontend.json_schema.refs import RefIndex


@dataclass(frozen=True)
class Scope:
    """What dynamic resolution can read of the dynamic scope (see the module docstring)."""

    started: bool = False
    anchors: tuple[tuple[str, str], ...] = ()
    recursive: str | None = None


EMPTY_SCOPE = Scope()


class ScopedBase(str):
    """A base URI together with the dynamic scope in force where it is used."""

    scope: Scope

    def __new__(cls, uri: str, scope: Scope) -> ScopedBase:
        made = super().__new__(cls, uri)
        made.scope = scope
        return made

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) and scope_of(other) == self.scope

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((str(self), self.scope))

    def __repr__(self) -> str:
        # Rule keys print internal lists with repr(): two scopes must not print alike.
        if self.scope == EMPTY_SCOPE:
            return str.__repr__(self)
        return f"{str.__repr__(self)}@{self.scope!r}"

    def __reduce__(self) -> tuple[type, tuple[str, Scope]]:
        return (ScopedBase, (str(self), self.scope))


IN_SCOPE = "__in_scope"


def in_scope(schema: Any, base: str) -> Any:
    """``schema`` to be built at ``base`` (with its scope) wherever it is used.

    A reference with sibling keywords merges its target's keywords into the referring schema,
    whose scope may differ from the target's; the target's sub-schemas are wrapped so that
    they keep their own. Booleans need no scope; a wrapped schema is not wrapped again. The
    scope is spelled out beside the pair, so that rule keys made of canonical JSON (which
    prints a base as a plain string) tell scopes apart.
    """
    if not isinstance(schema, dict) or IN_SCOPE in schema:
        return schema
    return {IN_SCOPE: [schema, base], "__scope": repr(scope_of(base))}


def unwrap(schema: Any, base: str) -> tuple[Any, str]:
    """The schema and base of an :func:`in_scope` wrapper (others as given)."""
    if isinstance(schema, dict) and IN_SCOPE in schema:
        inner, inner_base = schema[IN_SCOPE]
        return inner, inner_base
    return schema, base


def scope_of(base: object) -> Scope:
    """The scope a base URI carries (the empty scope for a plain string)."""
    return base.scope if isinstance(base, ScopedBase) else EMPTY_SCOPE


class DynamicScopes:
    """The scope transitions of one document (see the module docstring)."""

    def __init__(self, index: RefIndex) -> None:
        self.index = index
        definers: dict[str, int] = {}
        for names in index.dynamic_anchor_names.values():
            for name in names:
                definers[name] = definers.get(name, 0) + 1
        # Names defined in one resource only resolve to it whatever the scope, and names no
        # $dynamicRef asks for are never resolved.
        self.contested = frozenset(
            name
            for name, count in definers.items()
            if count > 1 and name in index.dynamic_ref_names
        )
        # One recursive root makes every $recursiveRef static too.
        self.recursive = index.has_recursive_ref and len(index.recursive_roots) > 1
        self.active = bool(self.contested) or self.recursive

    def with_scope(self, uri: str, scope: Scope) -> str:
        """``uri`` carrying ``scope`` (a plain string when no reference is dynamic)."""
        return ScopedBase(uri, scope) if self.active else uri

    def resource_of(self, base: str) -> str:
        """The resource URI of a base URI (its part before any fragment)."""
        return str(base).partition("#")[0]

    def push(self, scope: Scope, resource: str) -> Scope:
        """The scope after evaluation leaves ``resource`` through a reference."""
        anchors = dict(scope.anchors)
        for name in self.index.dynamic_anchor_names.get(resource, ()):
            if name in self.contested:
                anchors.setdefault(name, resource)  # an outer definer stays the outermost
        recursive: str | None = None
        if self.recursive and resource in self.index.recursive_roots:
            recursive = scope.recursive if scope.recursive is not None else resource
        return replace(
            scope, started=True, anchors=tuple(sorted(anchors.items())), recursive=recursive
        )

    def after_reference(self, base: str, target_resource: str) -> Scope:
        """The scope inside the target of a reference made at ``base``."""
        scope = scope_of(base)
        current = self.resource_of(base)
        if target_resource != current or not scope.started:
            return self.push(scope, current)
        return scope

    def dynamic_target(self, scope: Scope, name: str) -> str | None:
        """The resource a ``$dynamicRef`` to a dynamic anchor ``name`` goes to under
        ``scope`` (the scope after the reference), or None to keep the static target."""
        return dict(scope.anchors).get(name)

    def recursive_target(self, base: str) -> str:
        """The resource whose root a ``$recursiveRef`` made at ``base`` goes to."""
        current = self.resource_of(base)
        scope = scope_of(base)
        if self.recursive and current in self.index.recursive_roots and scope.recursive is not None:
            return scope.recursive
        return current
