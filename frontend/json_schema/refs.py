"""``$ref`` resolution inside one schema document: JSON pointers, ``$id``, ``$anchor``.

Every sub-schema is indexed under the absolute URI its ``$id`` gives it (relative ids are
resolved against the enclosing base), and anchors under ``base#name``. References are
resolved against the base URI in force where they appear. Documents outside the schema
(remote references) are not fetched: they are reported as unsupported.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

# The base URI of a document without an absolute ``$id``. Hierarchical (unlike a private
# scheme such as ``gramkiln:root``), so that ``urljoin`` resolves relative ids and references
# against it: a root ``"$id": "customer"`` becomes ``.../customer`` and ``"customer#/$defs/x"``
# finds it. The reserved ``.invalid`` domain (RFC 2606) names no real document.
DEFAULT_BASE = "https://gramkiln.invalid/schemas/__gramkiln_root__"

# Keywords whose values are sub-schemas (single, list, or name -> schema maps): the index
# walks only these, so that e.g. an "enum" value that looks like a schema is not indexed.
SCHEMA_VALUED = {
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
}
SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}
SCHEMA_MAPS = {
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
}


class RefError(ValueError):
    """A reference that cannot be resolved locally (``remote``: to another document)."""

    def __init__(self, message: str, remote: bool = False) -> None:
        super().__init__(message)
        self.remote = remote


def _join(base: str, ref: str) -> str:
    if ref.startswith("#"):
        # urljoin would drop the fragment-only reference's base for some schemes (urn:).
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


class RefIndex:
    """Maps absolute URIs (documents and anchors) to sub-schemas and their base URIs."""

    def __init__(self, root: Any, draft: int, remote: dict[str, Any] | None = None) -> None:
        self.root = root
        self.legacy_id = draft <= 4  # draft 4 spells $id as "id"
        # Up to draft 7, "$id": "#name" declares an anchor and $ref hides sibling keywords.
        self.draft7_rules = draft <= 7
        self.documents: dict[str, Any] = {}
        self.anchors: dict[str, tuple[Any, str]] = {}
        self.bases: dict[int, str] = {}
        # Dynamic references (see Compiler.resolve): per schema resource (its URI), the names
        # of the $dynamicAnchor-s it defines; those anchors by "uri#name" (a plain $anchor of
        # the same name resolves statically); and the resources whose root says
        # "$recursiveAnchor": true (draft 2019-09).
        self.dynamic_anchor_names: dict[str, set[str]] = {}
        self.dynamic_anchors: dict[str, tuple[Any, str]] = {}
        self.recursive_roots: set[str] = set()
        # The anchor names $dynamicRef-s name, and whether any $recursiveRef is written: where
        # none is, the dynamic scope cannot matter.
        self.dynamic_ref_names: set[str] = set()
        self.has_recursive_ref = False
        self._walk(root, DEFAULT_BASE, resource_root=True)
        for uri, document in (remote or {}).items():
            uri = urldefrag(uri)[0]
            self.documents.setdefault(uri, document)
            self._walk(document, uri, resource_root=True)

    def base_of(self, schema: Any, fallback: str) -> str:
        """The base URI in force inside ``schema`` (its own ``$id`` applied)."""
        return self.bases.get(id(schema), fallback)

    def _walk(self, schema: Any, base: str, resource_root: bool = False) -> None:
        if not isinstance(schema, dict):
            return
        key = "id" if self.legacy_id else "$id"
        own = schema.get(key)
        if isinstance(own, str) and not ("$ref" in schema and self.draft7_rules):
            uri, fragment = urldefrag(_join(base, own))
            if fragment and self.draft7_rules:
                self.anchors[f"{uri}#{fragment}"] = (schema, base)
            else:
                base = uri
                resource_root = True
                self.documents.setdefault(uri, schema)
        self.bases[id(schema)] = base
        resource = urldefrag(base)[0]
        if resource_root and schema.get("$recursiveAnchor") is True:
            self.recursive_roots.add(resource)
        dynamic_ref = schema.get("$dynamicRef")
        if isinstance(dynamic_ref, str):
            self.dynamic_ref_names.add(urldefrag(dynamic_ref)[1])
        if isinstance(schema.get("$recursiveRef"), str):
            self.has_recursive_ref = True
        for anchor_key in ("$anchor", "$dynamicAnchor"):
            anchor = schema.get(anchor_key)
            if isinstance(anchor, str):
                self.anchors.setdefault(f"{resource}#{anchor}", (schema, base))
                if anchor_key == "$dynamicAnchor":
                    self.dynamic_anchor_names.setdefault(resource, set()).add(anchor)
                    self.dynamic_anchors.setdefault(f"{resource}#{anchor}", (schema, base))
        for name, value in schema.items():
            if name in ("enum", "const", "examples", "default"):
                continue
            if name in SCHEMA_MAPS and isinstance(value, dict):
                for child in value.values():
                    self._walk(child, base)
            elif name in SCHEMA_LISTS and isinstance(value, list):
                for child in value:
                    self._walk(child, base)
            elif name in SCHEMA_VALUED:
                self._walk(value, base)

    def target_resource(self, ref: str, base: str) -> tuple[str, str]:
        """The resource URI a reference points into (DEFAULT_BASE for this document's root
        resource) and its fragment."""
        uri, fragment = urldefrag(_join(base, ref))
        return (uri or DEFAULT_BASE), fragment

    def resolve(self, ref: str, base: str) -> tuple[Any, str, str]:
        """``(schema, base URI inside it, printable location)`` for a reference."""
        target = _join(base, ref)
        uri, fragment = urldefrag(target)
        if uri == DEFAULT_BASE or uri == "":
            document: Any = self.root
            doc_base = DEFAULT_BASE
        elif uri in self.documents:
            document = self.documents[uri]
            doc_base = uri
        else:
            raise RefError(
                f"$ref {ref!r} points outside this schema (remote references are not fetched)"
            )
        if fragment == "":
            return document, doc_base, "#"
        if not fragment.startswith("/"):
            found = self.anchors.get(f"{uri or DEFAULT_BASE}#{fragment}")
            if found is None:
                raise RefError(f"$ref {ref!r}: no anchor named {fragment!r}")
            schema, _ = found
            return schema, self.base_of(schema, doc_base), f"#{fragment}"
        node = document
        node_base = doc_base
        for raw in fragment[1:].split("/"):
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise RefError(f"$ref {ref!r}: JSON pointer does not resolve")
            if isinstance(node, dict):
                node_base = self.base_of(node, node_base)
        return node, node_base, "#" + fragment
