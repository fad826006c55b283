"""The identity memos of the front ends, IR checks and passes, and the scope of an operation.

Building and compiling a grammar memoises per-node results by identity (facts, structural
keys, normal forms, interned JSON Schema nodes): the passes keep the subtrees they do not
change, so a result computed once holds for every later pass of the same operation. Each memo
keeps its nodes alive, so that their ids stay unique while the entry exists.

Two costs come with that, both measured on large JSON Schemas (Kubernetes ``kb_1161``:
2.2 million objects left in the memos by one compile):

- CPython's cyclic garbage collector walks every live container at each full collection.
  Inside one large compile the collections were ~40% of the time (15.2 s -> 9.4 s without
  them), and once the memos of earlier compiles were retained, a collection could land in any
  later call and cost it 1-2 s, small schemas included.
- Memory: 150 Kubernetes schemas compiled in one process retained ~850 MB.

So every public operation (a front end, the pass pipeline, a compile) runs in
:func:`operation`. While the outermost one runs, automatic collections are paused (the trees
built here hold no reference cycles; whatever garbage the caller had is collected as usual
afterwards), for at most :data:`MAX_PAUSE_SECONDS` where operations of several threads
overlap; when the last one returns, the memos are cleared if they hold more than
:data:`RETAINED_ENTRIES` entries, which keeps the sharing between small grammars compiled in
turn and drops what a large one left. Clearing is always safe: every entry is recomputed from
its node's content.

The pause is process-wide, as the collector is: a ``gc.disable()`` that another thread makes
while an operation runs is undone when the operation ends. A program that manages collection
itself sets :data:`PAUSE_GC` to False.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Iterator, MutableMapping
from typing import Any, TypeVar

# Entries all memos together may keep once an operation returns. Small schemas leave a few
# thousand entries each (the 34 MaskBench bench schemas ~20,000 together); a large one leaves
# hundreds of thousands.
RETAINED_ENTRIES = 1 << 16
# Whether operations pause automatic garbage collection (see the module docstring).
PAUSE_GC = True
# The longest a pause lasts: threads whose operations overlap without end would otherwise keep
# collection off for good. An operation that ends later than this after the pause began
# resumes collection, and none is paused again until every operation has ended.
MAX_PAUSE_SECONDS = 5.0

_MEMOS: list[MutableMapping[Any, Any]] = []
_lock = threading.Lock()
_depth = 0  # operations running, in all threads
_resume_gc = False
_paused_at = 0.0
_thread = threading.local()  # .depth: the operations this thread is in

MemoT = TypeVar("MemoT", bound=MutableMapping[Any, Any])


def register(memo: MemoT) -> MemoT:
    """Put `memo` under the operations' size rule; returns it (for module-level definitions)."""
    _MEMOS.append(memo)
    return memo


def retained_entries() -> int:
    """How many entries the registered memos hold now."""
    return sum(len(memo) for memo in _MEMOS)


def clear_memos() -> None:
    """Empty every registered memo (always safe: entries are recomputed on demand)."""
    for memo in _MEMOS:
        memo.clear()


def _enter() -> None:
    global _depth, _resume_gc, _paused_at
    with _lock:
        if _depth == 0:
            _resume_gc = PAUSE_GC and gc.isenabled()
            if _resume_gc:
                gc.disable()
                _paused_at = time.monotonic()
        _depth += 1
        _thread.depth = getattr(_thread, "depth", 0) + 1


def _leave() -> None:
    global _depth, _resume_gc
    with _lock:
        _depth -= 1
        _thread.depth -= 1
        if _depth == 0 and retained_entries() > RETAINED_ENTRIES:
            clear_memos()
        if _resume_gc and (_depth == 0 or time.monotonic() - _paused_at > MAX_PAUSE_SECONDS):
            _resume_gc = False
            gc.enable()


def _after_fork_in_child() -> None:
    # The child has only the forking thread: the operations other threads were in at the fork
    # will never end there, so they must not keep collection paused or the lock taken.
    global _lock, _depth, _resume_gc
    _lock = threading.Lock()
    _depth = getattr(_thread, "depth", 0)
    if _depth == 0 and _resume_gc:
        _resume_gc = False
        gc.enable()


if hasattr(os, "register_at_fork"):
    # The lock is taken across the fork, so that no other thread holds it in the child.
    os.register_at_fork(
        before=lambda: _lock.acquire(),
        after_in_parent=lambda: _lock.release(),
        after_in_child=_after_fork_in_child,
    )


@contextlib.contextmanager
def operation() -> Iterator[None]:
    """The scope of one public operation; nested and concurrent ones count as one.

    Usable as a decorator, ``@operation()``. The outermost scope (across threads) pauses automatic garbage
    collection where it was enabled and enables it again when it ends, or when any scope ends
    more than :data:`MAX_PAUSE_SECONDS` after the pause began; the last scope to end trims the
    memos to :data:`RETAINED_ENTRIES`.
    """
    _enter()
    try:
        yield
    finally:
        _leave()
