"""Lossless, versioned msgpack encoding of the IR."""

from __future__ import annotations

from typing import Any

import msgpack
from gramkiln.ir.grammar import IR_VERSION, GrammarIR
from pydantic import ValidationError

from gramkiln.errors import IRError

IR_MAGIC = "gramkiln-ir"


def ir_to_msgpack(grammar: GrammarIR) -> bytes:
    """Encode a grammar as ``[magic, IR_VERSION, fields]`` in msgpack (spans included)."""
    payload = grammar.model_dump(mode="python", exclude_none=True)
    return msgpack.packb([IR_MAGIC, IR_VERSION, payload], use_bin_type=True)


def ir_from_msgpack(data: bytes) -> GrammarIR:
    """Decode bytes from `ir_to_msgpack`; raise IRError on anything malformed."""
    try:
        envelope: Any = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:
        raise IRError(f"not a msgpack IR document: {exc}") from exc
    if not (isinstance(envelope, list) and len(envelope) == 3 and envelope[0] == IR_MAGIC):
        raise IRError("not a gramkiln IR document (bad magic)")
    if envelope[1] != IR_VERSION:
        raise IRError(f"IR version {envelope[1]} is not supported (this build reads {IR_VERSION})")
    try:
        return GrammarIR.model_validate(_tuples(envelope[2]))
    except ValidationError as exc:
        raise IRError(f"malformed IR document: {exc}") from exc


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value
