"""`CompiledGrammar` (runtime tables + metadata), matchers and bitmask helpers.

A compiled grammar is an artifact (see `gramkiln.runtime.artifact`) with two sections: ``ir``
(the source IR, for inspection) and ``runtime`` (the C++ tables, validated by the C++ loader).
Loading reads and validates; it never compiles.
"""

from __future__ import annotations

import atexit
import operator
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gramkiln.ir import GrammarIR, ir_to_msgpack
from gramkiln.runtime import _core
from gramkiln.runtime.artifact import (
    check_vocab,
    ir_from_artifact,
    ir_hash,
    load_artifact,
    make_header_without_ir_hash,
    read_artifact,
    save_artifact,
    write_artifact,
)

from gramkiln.errors import ArtifactError

GrammarMatcher = _core.GrammarMatcher
RUNTIME_SECTION = "runtime"
RUNTIME_LAYOUT = 1

# No thread may hold a runtime lock across fork() (the child would inherit it locked): before a
# fork, prewarms are stopped, the calls running without the GIL are waited for, and new ones
# wait until the fork is done. Prewarms are also stopped before the interpreter tears down.
atexit.register(_core.stop_all_prewarms)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_core.prepare_fork,
        after_in_parent=_core.fork_done_in_parent,
        after_in_child=_core.fork_done_in_child,
    )


# The runtime's tuning variables, read at each load, and what each must hold. The C++ side
# ignores a value it cannot read (a typo must not stop a server); the load warns instead.
_WHOLE_NUMBER = "a whole decimal number"
_ENVIRONMENT_FORMATS: dict[str, tuple[str, frozenset[str] | None]] = {
    "GRAMKILN_MASK_CACHE_BYTES": (_WHOLE_NUMBER, None),
    "GRAMKILN_WALK_CACHE_BYTES": (_WHOLE_NUMBER, None),
    "GRAMKILN_FILL_WALK_BUDGET": (_WHOLE_NUMBER, None),
    "GRAMKILN_FILL_WALK_MS": (_WHOLE_NUMBER, None),
    "GRAMKILN_MERGE_AFTER": (_WHOLE_NUMBER, None),
    "GRAMKILN_PREWARM_MS": (_WHOLE_NUMBER, None),
    "GRAMKILN_ITEM_WALKS": ("on, off, 1 or 0", frozenset({"on", "off", "1", "0"})),
    "GRAMKILN_FUTURE_KEYS": ("on, off or auto", frozenset({"on", "off", "auto"})),
    "GRAMKILN_PREWARM_TRAFFIC": ("on, off, 1 or 0", frozenset({"on", "off", "1", "0"})),
    "GRAMKILN_HUGE_PAGES": ("on, off, 1 or 0", frozenset({"on", "off", "1", "0"})),
    "GRAMKILN_PREWARM_READBACK": ("on, off, 1 or 0", frozenset({"on", "off", "1", "0"})),
    "GRAMKILN_DESCENT_ADMISSION": ("first or second", frozenset({"first", "second"})),
    "GRAMKILN_FUTURE_DESCENTS": ("on, off or auto", frozenset({"on", "off", "auto"})),
}
_environment_warned: set[tuple[str, str]] = set()


def _warn_about_unreadable_environment() -> None:
    """Warn once per (variable, value) about a runtime tuning variable that will be ignored."""
    for name, (expected, choices) in _ENVIRONMENT_FORMATS.items():
        value = os.environ.get(name)
        if value is None or (name, value) in _environment_warned:
            continue
        if choices is not None:
            readable = value in choices
        else:
            readable = value.isascii() and value.isdigit()
        if not readable:
            _environment_warned.add((name, value))
            warnings.warn(
                f"{name}={value!r} is not {expected}; the runtime ignores it and uses its default",
                RuntimeWarning,
                stacklevel=3,
            )


class CompiledGrammar:
    """A grammar compiled against one vocabulary: save it, load it, make matchers from it."""

    __slots__ = ("_header", "_sections", "_runtime", "_pending_ir")

    def __init__(self, header: Mapping[str, Any], sections: Mapping[str, bytes]) -> None:
        if RUNTIME_SECTION not in sections:
            raise ArtifactError("artifact has no 'runtime' section")
        if header.get("runtime_layout") != RUNTIME_LAYOUT:
            raise ArtifactError(
                f"runtime table layout {header.get('runtime_layout')!r} is not the supported "
                f"layout {RUNTIME_LAYOUT}"
            )
        # The checksum belongs to one encoding; write_artifact recomputes it.
        self._header = {k: v for k, v in header.items() if k != "checksum"}
        self._sections = dict(sections)
        # Set by from_parts: the source IR whose section and hash are not made yet.
        self._pending_ir: GrammarIR | None = None
        _warn_about_unreadable_environment()
        self._runtime = _core.load_runtime(self._sections[RUNTIME_SECTION])
        vocab_info = self._header.get("vocab")
        if not isinstance(vocab_info, Mapping) or vocab_info.get("vocab_size") != (
            self._runtime.vocab_size
        ):
            raise ArtifactError("runtime tables disagree with the header's vocabulary size")

    @classmethod
    def from_parts(
        cls, ir: GrammarIR, vocab: Any, runtime_blob: bytes, options: Mapping[str, Any]
    ) -> CompiledGrammar:
        """Assemble a compiled grammar from the compiler's outputs.

        The runtime tables are validated now. The IR section and the header's IR hash are
        made on first need (saving, `to_bytes`, `header`): encoding a large IR costs more
        than the rest of this step, and a grammar used only in this process never needs it.
        The IR is immutable, so the bytes are the same whenever they are made.
        """
        header = make_header_without_ir_hash(vocab, options, runtime_layout=RUNTIME_LAYOUT)
        compiled = cls(header, {RUNTIME_SECTION: runtime_blob})
        compiled._pending_ir = ir
        return compiled

    def _complete(self) -> None:
        """Encode the pending IR into the `ir` section and the header's `ir_hash`."""
        ir = self._pending_ir
        if ir is None:
            return
        packed = ir_to_msgpack(ir)
        # Both entries are set before the IR is dropped, so a concurrent caller either sees
        # the IR still pending (and computes the same bytes) or the finished entries.
        self._sections["ir"] = packed
        self._header["ir_hash"] = ir_hash(ir, packed)
        self._pending_ir = None

    # -- persistence ------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The artifact bytes (deterministic for the same grammar, vocabulary and options)."""
        self._complete()
        return write_artifact(self._header, self._sections)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the artifact to `path` atomically."""
        self._complete()
        save_artifact(path, self._header, self._sections)

    @classmethod
    def load(
        cls,
        source: str | os.PathLike[str] | bytes | bytearray | memoryview,
        vocab: Any = None,
        *,
        prewarm: bool = True,
    ) -> CompiledGrammar:
        """Load an artifact from a path or bytes; with `vocab`, check it is the right one.

        With `prewarm` (the default), the context-free part of the mask work is built ahead on
        a background thread (see `prewarm`), so that first fills are cheaper; masks are the
        same either way. Raises ArtifactError for a bad file and VocabError for a vocabulary
        mismatch.
        """
        if isinstance(source, (bytes, bytearray, memoryview)):
            header, sections = read_artifact(bytes(source))
        elif isinstance(source, (str, Path, os.PathLike)):
            header, sections = load_artifact(source)
        else:
            raise TypeError(f"expected a path or bytes, got {type(source).__name__}")
        if vocab is not None:
            check_vocab(header, vocab)
        compiled = cls(header, sections)
        if prewarm:
            # Skipped while as many prewarms run as there are cores (many grammars loaded at
            # once); those grammars then build their caches lazily.
            compiled._runtime.start_prewarm(always=False)
        return compiled

    def prewarm(self, wait: bool = True) -> dict[str, Any] | None:
        """Build ahead the mask work that does not depend on the parse, and the first masks.

        Every exit group a lexer thread can reach is built, with its children under every
        lexeme that can follow in the grammar (up to six lexemes deep and 32 MB); then, in at
        most half the time, the item walks of every (exit group a thread starts in, item
        waiting for its lexeme) pair and, to a fixed point, of the groups at which those items'
        left-hand sides complete, with the closure walks of those completions (what a computed
        fill looks up for each pending item it meets); then the masks of the initial
        configuration and of up to 47 configurations one or two bytes into the
        text are filled (the prefixes most tokens start with first), and those of up to 1,500
        configurations reached lexeme by lexeme from the start (at most 32 lexemes in; told
        apart by their future language where future keys pay, else by the stack within five
        levels of nesting), each lexeme written as its shortest string (`{`, `{""`, `{"":` ...
        for JSON), so that the walks of the parser states real text passes through are cached;
        from each of those, up to 16,384 masks in all inside the expected lexemes, at up to 64
        inner DFA states of each, nearest first (`{"c`, `{"cu` ... of `{"customer_name"`);
        then one path up to 64 lexemes deep along the first expected lexemes that leave the
        text incomplete (an object's declared properties in order, to the last), with up to
        4,096 masks inside lexemes along it; then the masks of up to 4,096 configurations
        told apart only by their last set's pending items (its kernel), each lexeme written
        as its shortest string and as that string after a space, so that the kernels real
        text passes through are built; the local walks of every known completion at
        every kernel built (`kernels` counts them); and last, for at most a quarter of the
        prewarm's budget (250 ms) and 100,000 tokens, synthetic traffic: random sentences of
        the grammar (up to 1 KB each, nested to random depths; each lexeme a walk through its
        automaton that takes the way least taken from each state, so that every state is
        visited, with bytes mostly letters, digits and spaces) written in the vocabulary's
        tokens longest match first
        and decoded with a mask at every token
        (`traffic_sentences`, `traffic_tokens`), so that the configurations nested deeper
        than the exploration reaches (JSON: closers three to six containers deep) are
        cached before a decode meets them. The sentences are the same on every load;
        ``GRAMKILN_PREWARM_TRAFFIC=off`` leaves this phase out. At the end, on Linux 6.1 and
        later, the memory the caches and tables lie in is handed to the kernel to be backed by
        transparent huge pages (``MADV_COLLAPSE``, by the 2 MB extents that hold them;
        `huge_page_extents` counts those it backed), since a fill that misses the caches
        otherwise waits on TLB misses for a fifth of its time; ``GRAMKILN_HUGE_PAGES=off``
        leaves that out. Very last, the memory computed fills read most (the future-key tables
        where future keys are in use, the walk arena and the stored local walks, up to 24 MB;
        `read_back_bytes`) is read once more, so that a decode that starts right after the
        prewarm finds it in the last-level cache rather than in DRAM (the earlier steps touch
        several times what that cache holds); it helps only such a decode, and
        ``GRAMKILN_PREWARM_READBACK=off`` leaves it out.
        The whole prewarm stops after about a second of wall time (typical grammars take
        50-600 ms; fills on highly ambiguous grammars grow with the text); the environment
        variable ``GRAMKILN_PREWARM_MS`` sets another budget. This runs on a
        background thread that shares the caches with concurrent fills, which build whatever
        is missing themselves. Without `wait` it returns at once (a started prewarm is not started
        again); with `wait` it blocks until done and returns ``{"levels", "masks",
        "explored", "item_walks", "local_walks", "kernels", "traffic_sentences",
        "traffic_tokens", "huge_page_extents", "read_back_bytes", "bytes", "complete"}``. Masks never depend on
        it. Running prewarms are stopped before the process forks or exits.
        """
        if not wait:
            self._runtime.start_prewarm()
            return None
        return dict(self._runtime.wait_prewarm())

    @property
    def prewarm_done(self) -> bool:
        """Whether a started prewarm has finished (False when none was started)."""
        return bool(self._runtime.prewarm_done)

    def cache_stats(self) -> dict[str, int]:
        """What the shared mask caches of this grammar hold now: ``mask_entries`` (stored
        masks under any of the three kinds of key, both generations), ``distinct_masks`` (the
        contents they share: masks are interned, so this is usually a few dozen),
        ``compact_masks`` (of those, the ones stored as what they differ in from all zeros or
        from a dense base mask, at most an eighth of their words), ``mask_bytes`` (counted against the mask budget, ``GRAMKILN_MASK_CACHE_BYTES``),
        ``walk_entries``, ``item_walk_entries``, ``local_walk_entries``,
        ``closure_walk_entries``, ``walk_bytes`` and
        ``group_bytes`` (the other caches); since load, the times the walk tables were
        cleared at their budget (``walk_clears``, ``GRAMKILN_WALK_CACHE_BYTES``),
        the fills answered by each mask table (``hits_whole_stack``, ``hits_future``,
        ``hits_depth``) and those computed (``fills_computed``), the top-level exit walks of
        computed fills answered by their thread's future (``walk_hits_future``; walking by
        items, their descents: ``descent_hits_future``, where the descents of the threads
        that start at the last set, kept as one, count once; the descents no table held, walked
        node by node: ``descents_walked``, ``descent_nodes_walked``), the computed
        fills that followed their exits by pending items (``fills_by_items``), the masks of
        computed fills found stored under the parts they were ORed from
        (``interned_by_parts``: no content compare) and the stored masks compared word by
        word with one being interned (``mask_compares``), the computed fills whose exit walks ran
        past the fill's walk budget and were answered by the trie search
        (``fills_searched``, ``GRAMKILN_FILL_WALK_BUDGET``); and
        ``future_languages`` /
        ``future_memo_entries`` (the future-language automata behind the future key), and the
        future keys found by the configuration's anchors in one probe
        (``future_keys_by_anchors``), and the futures combined from a set's anchors by the
        recipe kept for the shape of its anchor list (``future_recipe_hits``);
        ``depth_keys_idle`` is 1 once the prewarm has left the
        bounded-depth mask keys out while the future key is in use, its synthetic traffic
        having found almost no mask under them, and ``future_descents_idle`` 1 once a decode's
        first probes of descents by their thread's future found too few for the probes to pay
        (``GRAMKILN_FUTURE_DESCENTS``). For
        monitoring; masks never depend on it."""
        return {key: int(value) for key, value in self._runtime.cache_stats().items()}

    # -- use --------------------------------------------------------------------------------
    def matcher(self, default_temperature: float | None = None) -> Any:
        """A fresh matcher at the start of the grammar. ``default_temperature`` is what its
        ``temperature`` reports outside rules with a ``temperature`` option."""
        return GrammarMatcher(self._runtime, default_temperature=default_temperature)

    @property
    def vocab_size(self) -> int:
        """Number of token ids (bitmask width is ceil(vocab_size / 32) words)."""
        return int(self._runtime.vocab_size)

    @property
    def header(self) -> dict[str, Any]:
        """The artifact header (producer, IR hash, vocabulary fingerprint, options)."""
        self._complete()
        return dict(self._header)

    @property
    def source_ir(self) -> GrammarIR:
        """The grammar's IR as compiled (artifacts carry it; linking composes it)."""
        if self._pending_ir is not None:
            return self._pending_ir
        return ir_from_artifact(self._header, self._sections)

    @property
    def size_bytes(self) -> int:
        """Size of the encoded artifact in bytes."""
        return len(self.to_bytes())

    def __repr__(self) -> str:
        self._complete()
        return (
            f"<CompiledGrammar vocab_size={self.vocab_size} ir_hash={self._header['ir_hash'][:12]}>"
        )


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A zeroed int32 bitmask of shape [batch_size, ceil(vocab_size / 32)]."""
    if batch_size < 1 or vocab_size < 1:
        raise ValueError("batch_size and vocab_size must be positive")
    return np.zeros((batch_size, (vocab_size + 31) // 32), dtype=np.int32)


def _bits_to_bool(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    as_bytes = np.ascontiguousarray(bitmask, dtype=np.int32).view(np.uint8)
    bits = np.unpackbits(as_bytes.reshape(bitmask.shape[0], -1), axis=1, bitorder="little")
    return bits[:, :vocab_size].astype(bool)


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def apply_token_bitmask_inplace(
    logits: Any, bitmask: Any, *, indices: Sequence[int] | None = None
) -> None:
    """Set logits of disallowed tokens to -inf, in place.

    `logits` is [batch, vocab] or [vocab]: a numpy array of any floating dtype, or a torch
    tensor of any floating dtype (bfloat16 and float16 included) on any device. `bitmask` is
    [batch, words] or [words], int32, numpy or torch (on the CPU or on the logits' device).
    For torch logits the packed bitmask (vocab/8 bytes a row) is what crosses to the logits'
    device, where it is unpacked, so a GPU step moves 32 times less than a dense mask. Columns
    of `logits` beyond the bitmask's width are treated as disallowed. With `indices`, only those
    rows of both are masked (row `i` of `logits` by row `i` of `bitmask`); the other rows are
    left as they are, and the two may then have different numbers of rows (as with xgrammar's
    function of that name), as long as every index is a row of both.
    """
    is_torch = _is_torch_tensor(logits)
    if not _is_torch_tensor(bitmask):
        bitmask = np.asarray(bitmask)
    if str(bitmask.dtype) not in ("int32", "torch.int32"):
        raise ValueError(f"bitmask dtype must be int32, got {bitmask.dtype}")
    if is_torch:
        if not logits.is_floating_point():
            raise TypeError(f"logits must hold floating-point values, got {logits.dtype}")
        shape = tuple(logits.shape)
    else:
        if not isinstance(logits, np.ndarray):
            raise TypeError("logits must be a numpy array or a torch tensor")
        if not np.issubdtype(logits.dtype, np.floating):
            # -inf has no integer form; the error would otherwise come from numpy, mid-write.
            raise TypeError(f"logits must hold floating-point values, got {logits.dtype}")
        shape = logits.shape
    mask_shape = tuple(bitmask.shape)
    squeeze = len(shape) == 1
    mask_rows = 1 if len(mask_shape) == 1 else (mask_shape[0] if len(mask_shape) == 2 else -1)
    rows = 1 if squeeze else (shape[0] if len(shape) == 2 else -1)
    if rows < 0 or mask_rows < 0 or (indices is None and mask_rows != rows):
        raise ValueError(f"shapes do not match: logits {shape}, bitmask {mask_shape}")
    vocab = shape[-1]
    if indices is None:
        selected = np.arange(rows)
    else:
        selected = np.asarray(_row_indices(indices), dtype=np.int64).reshape(-1)
        limit = min(rows, mask_rows)
        if selected.size and (selected.min() < 0 or selected.max() >= limit):
            raise IndexError(
                f"indices must lie in [0, {limit}) (logits {shape}, bitmask {mask_shape}), "
                f"got {list(indices)}"
            )
        selected = np.unique(selected)
    if selected.size == 0:
        return
    if is_torch and logits.device.type != "cpu":
        _apply_bitmask_torch(logits, bitmask, selected if indices is not None else None)
        return
    mask = bitmask.detach().cpu().numpy() if _is_torch_tensor(bitmask) else bitmask
    mask_2d = mask.reshape(1, -1) if mask.ndim == 1 else mask
    allowed = np.zeros((len(selected), vocab), dtype=bool)
    width = min(vocab, mask_2d.shape[1] * 32)
    allowed[:, :width] = _bits_to_bool(mask_2d[selected], width)
    if is_torch:
        # On the CPU numpy's unpacking into a dense mask is quicker than torch's bit ops.
        import torch

        disallowed = torch.from_numpy(~allowed)
        rows_2d = logits.unsqueeze(0) if squeeze else logits
        if indices is None:
            rows_2d.masked_fill_(disallowed, float("-inf"))
        else:
            row_index = torch.from_numpy(selected)
            rows_2d[row_index] = rows_2d[row_index].masked_fill(disallowed, float("-inf"))
        return
    logits_2d = logits[None, :] if squeeze else logits  # a view: writes reach `logits`
    if indices is None:
        logits_2d[~allowed] = -np.inf
    else:
        for row, keep in zip(selected, allowed, strict=True):
            logits_2d[row, ~keep] = -np.inf


_BIT_VALUES_BY_DEVICE: dict[Any, Any] = {}


def _bit_values(device: Any) -> Any:
    """The int32 tensor [1, 2, 4, ..., -2**31] on `device`, made once per device."""
    values = _BIT_VALUES_BY_DEVICE.get(device)
    if values is None:
        import torch

        bits = np.left_shift(np.ones(32, dtype=np.uint32), np.arange(32, dtype=np.uint32))
        values = torch.from_numpy(bits.view(np.int32).copy()).to(device)
        _BIT_VALUES_BY_DEVICE[device] = values
    return values


def _apply_bitmask_torch(logits: Any, bitmask: Any, selected: np.ndarray | None) -> None:
    """The torch half of `apply_token_bitmask_inplace`: unpack on the logits' device.

    `selected` holds the rows to mask (sorted, distinct), or None for all of them; shapes and
    dtypes are checked by the caller.
    """
    import torch  # logits is a torch tensor, so torch is installed

    device = logits.device
    if _is_torch_tensor(bitmask):
        packed = bitmask.detach().to(device)
    else:
        packed = torch.from_numpy(np.ascontiguousarray(bitmask)).to(device)
    logits_2d = logits.unsqueeze(0) if logits.dim() == 1 else logits
    packed = packed.reshape(1, -1) if packed.dim() == 1 else packed
    if selected is not None:
        row_index = torch.from_numpy(selected).to(device)
        packed = packed.index_select(0, row_index)
    vocab = logits_2d.shape[1]
    words = min(packed.shape[1], (vocab + 31) // 32)
    # Bit j of word w is token 32 * w + j: one AND with each bit's value and one compare, two
    # kernels on an accelerator, whatever the sign of the word.
    bit_values = _bit_values(device)
    disallowed = (packed[:, :words].unsqueeze(-1) & bit_values) == 0
    disallowed = disallowed.reshape(packed.shape[0], words * 32)[:, :vocab]
    if disallowed.shape[1] < vocab:
        beyond = torch.ones(
            (packed.shape[0], vocab - disallowed.shape[1]), dtype=torch.bool, device=device
        )
        disallowed = torch.cat((disallowed, beyond), dim=1)
    if selected is None:
        logits_2d.masked_fill_(disallowed, float("-inf"))
    else:
        logits_2d[row_index] = logits_2d[row_index].masked_fill(disallowed, float("-inf"))


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the OS reports one (a container
    limited to 2 of a host's 64 cores gets 2), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1


def fill_next_token_bitmask_batch(
    matchers: Sequence[Any],
    bitmask: Any,
    indices: Sequence[int] | None = None,
    threads: int | None = None,
) -> None:
    """Fill row `indices[i]` (default i) of `bitmask` from `matchers[i]`, in parallel.

    The rows must be distinct (ValueError otherwise); one matcher may appear several times.

    `threads` defaults to the number of CPUs this process may run on (at most one per
    matcher); the GIL is released.
    """
    count = threads if threads is not None else usable_cpus()
    rows = None if indices is None else _row_indices(indices)
    _core.fill_next_token_bitmask_batch(list(matchers), bitmask, rows, max(1, int(count)))


def batch_fill_temperature(matchers: Sequence[Any], temperatures: Any) -> None:
    """Write each matcher's ``temperature`` into a one-dimensional float32 array (numpy, or a
    CPU torch tensor) with one entry per matcher; -1 where a matcher has none."""
    shape = tuple(getattr(temperatures, "shape", ()))
    if len(shape) != 1 or shape[0] != len(matchers):
        raise ValueError(
            f"temperatures must be one-dimensional with {len(matchers)} entries, got shape {shape}"
        )
    if _is_torch_tensor(temperatures):
        if temperatures.device.type != "cpu":
            raise ValueError("temperatures must be a CPU tensor")
        target = temperatures.numpy()
    else:
        target = temperatures
    if getattr(target, "dtype", None) != np.float32:
        raise TypeError(f"temperatures must hold float32, not {getattr(target, 'dtype', None)}")
    for row, matcher in enumerate(matchers):
        value = matcher.temperature
        target[row] = -1.0 if value is None else value


def _row_indices(indices: Any) -> list[int]:
    """`indices` (a sequence, numpy array or torch tensor of integers) as Python ints."""
    if hasattr(indices, "tolist") and not isinstance(indices, list):
        indices = indices.tolist()  # numpy arrays and torch tensors, on any device
    try:
        rows = [operator.index(value) for value in indices]
    except TypeError:
        raise TypeError(f"indices must be integers, got {indices!r}") from None
    # Past int64 the native call cannot take the value: out of range like any other.
    return [row if -(2**63) <= row < 2**63 else -1 for row in rows]


def bitmask_to_ids(bitmask_row: np.ndarray, vocab_size: int) -> list[int]:
    """The token ids set in one bitmask row (a debugging and testing helper)."""
    return [
        int(i) for i in np.flatnonzero(_bits_to_bool(bitmask_row.reshape(1, -1), vocab_size)[0])
    ]
