"""Custom meta-schemas: which keywords their ``$vocabulary`` switches off (2019-09, 2020-12).

A document whose ``$schema`` names a meta-schema other than the official ones is written in
that meta-schema's dialect. When the meta-schema is at hand (a ``remote_documents`` entry) its
``$vocabulary`` says which vocabularies apply: keywords of a standard vocabulary it leaves out
are plain annotations (a dialect without the validation vocabulary makes ``"type": "number"``
assert nothing). A vocabulary this front end does not know may be listed as optional
(``false``: ignored); one listed as required (``true``) must not be silently dropped, so it is
reported. Without a ``$vocabulary`` the dialect is the meta-schema's own draft.
"""

from __future__ import annotations

from typing import Any

# Keywords per standard vocabulary, by the vocabulary's last path segment (the same names
# in 2019-09 and 2020-12, except where noted).
_VALIDATION = frozenset(
    {
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
    }
)
_APPLICATOR = frozenset(
    {
        "prefixItems",
        "items",
        "additionalItems",
        "contains",
        "additionalProperties",
        "properties",
        "patternProperties",
        "dependentSchemas",
        "propertyNames",
        "if",
        "then",
        "else",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
    }
)
_UNEVALUATED = frozenset({"unevaluatedItems", "unevaluatedProperties"})
_FORMAT = frozenset({"format"})

VOCABULARY_PREFIXES = {
    2019: "https://json-schema.org/draft/2019-09/vocab/",
    2020: "https://json-schema.org/draft/2020-12/vocab/",
}
VOCABULARY_KEYWORDS: dict[int, dict[str, frozenset[str]]] = {
    # 2019-09 keeps unevaluated* in the applicator vocabulary.
    2019: {
        "core": frozenset(),
        "applicator": _APPLICATOR | _UNEVALUATED,
        "validation": _VALIDATION,
        "meta-data": frozenset(),
        "format": _FORMAT,
        "content": frozenset(),
    },
    2020: {
        "core": frozenset(),
        "applicator": _APPLICATOR,
        "unevaluated": _UNEVALUATED,
        "validation": _VALIDATION,
        "meta-data": frozenset(),
        "format-annotation": _FORMAT,
        "format-assertion": _FORMAT,
        "content": frozenset(),
    },
}


class UnknownVocabulary(ValueError):
    """A meta-schema requires a vocabulary whose keywords are unknown here."""


def switched_off(meta_schema: Any, draft: int) -> frozenset[str]:
    """The keywords a meta-schema's ``$vocabulary`` leaves out (raises UnknownVocabulary).

    ``draft`` is the meta-schema's own draft; before 2019-09 there are no vocabularies.
    """
    vocabulary = meta_schema.get("$vocabulary") if isinstance(meta_schema, dict) else None
    if draft not in VOCABULARY_PREFIXES or not isinstance(vocabulary, dict):
        return frozenset()
    prefix = VOCABULARY_PREFIXES[draft]
    known = VOCABULARY_KEYWORDS[draft]
    listed: set[str] = set()
    for uri, required in vocabulary.items():
        name = uri[len(prefix) :] if isinstance(uri, str) and uri.startswith(prefix) else None
        if name in known:
            listed.add(name)
        elif required is True:
            raise UnknownVocabulary(f"the meta-schema requires the unknown vocabulary {uri!r}")
    kept = frozenset().union(*(known[name] for name in listed))
    return frozenset().union(*known.values()) - kept
