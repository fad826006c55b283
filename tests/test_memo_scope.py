"""The scope of public operations: garbage collection paused inside, memos trimmed after."""

from __future__ import annotations

import gc
import os
import threading
import warnings
import weakref

import pytest
from gramkiln.ir import grammar as ir_grammar
from gramkiln.ir import memo

import gramkiln


@pytest.fixture(autouse=True)
def _gc_enabled_around_each_test():
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if not was_enabled:
        gc.disable()


def _schema_with_properties(count: int) -> dict:
    return {
        "type": "object",
        "properties": {f"field_{i}": {"type": ["integer", "string"]} for i in range(count)},
        "required": ["field_0"],
    }


def test_collection_is_paused_inside_an_operation_and_resumed_after() -> None:
    seen: list[bool] = []
    with memo.operation():
        seen.append(gc.isenabled())
        with memo.operation():
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())  # the inner scope does not resume it
    assert seen == [False, False, False]
    assert gc.isenabled()


def test_collection_resumes_when_the_operation_raises() -> None:
    with pytest.raises(gramkiln.GrammarError):
        gramkiln.Grammar.from_lark("start: undefined_rule")
    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"), memo.operation():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_collection_keeps_it_disabled() -> None:
    gc.disable()
    gramkiln.Grammar.from_lark('start: "a"+').compile()
    assert not gc.isenabled()


def test_pause_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "PAUSE_GC", False)
    with memo.operation():
        assert gc.isenabled()


def test_public_operations_run_inside_the_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each entry point calls `memo._enter` at least once; a nested call adds nothing visible.
    entered: list[int] = []
    original = memo._enter
    monkeypatch.setattr(memo, "_enter", lambda: (entered.append(1), original())[1])
    grammar = gramkiln.Grammar.from_json_schema({"type": "integer"})
    assert entered
    entered.clear()
    grammar.compile()
    assert entered
    entered.clear()
    gramkiln.Grammar.from_regex("[a-z]+")
    gramkiln.Grammar.from_ebnf('root ::= "x"')
    assert len(entered) >= 2
    assert gc.isenabled()


def test_memos_are_cleared_after_an_operation_that_leaves_too_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memo.clear_memos()
    gramkiln.Grammar.from_json_schema(_schema_with_properties(3)).compile()
    small = memo.retained_entries()
    assert 0 < small <= memo.RETAINED_ENTRIES  # kept: the next small grammar shares them

    monkeypatch.setattr(memo, "RETAINED_ENTRIES", small + 10)
    gramkiln.Grammar.from_json_schema(_schema_with_properties(60)).compile()
    assert memo.retained_entries() == 0


def test_memos_are_not_trimmed_while_an_operation_is_still_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memo, "RETAINED_ENTRIES", 0)
    with memo.operation():
        gramkiln.Grammar.from_json_schema(_schema_with_properties(5))
        assert memo.retained_entries() > 0  # the inner operations left them for this one
    assert memo.retained_entries() == 0


def test_results_are_the_same_with_and_without_retained_memos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = _schema_with_properties(12)
    monkeypatch.setattr(memo, "RETAINED_ENTRIES", 0)
    cold = gramkiln.Grammar.from_json_schema(schema).compile().to_bytes()
    monkeypatch.setattr(memo, "RETAINED_ENTRIES", 1 << 30)
    gramkiln.Grammar.from_json_schema(schema)
    warm = gramkiln.Grammar.from_json_schema(schema).compile().to_bytes()
    assert cold == warm


def test_a_verified_grammar_is_not_kept_alive_by_the_check() -> None:
    grammar = gramkiln.Grammar.from_lark('start: "a" | "b"')
    ir = grammar.ir
    assert ir_grammar._VERIFIED.get(id(ir)) is ir
    ref = weakref.ref(ir)
    del grammar, ir
    gc.collect()
    assert ref() is None


def test_concurrent_operations_resume_collection_once_all_have_ended() -> None:
    inside = threading.Barrier(3)
    release = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with memo.operation():
                inside.wait(timeout=30)
                release.wait(timeout=30)
                gramkiln.Grammar.from_lark('start: "x"*').compile()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(timeout=30)
    assert not gc.isenabled()
    release.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert gc.isenabled()
    assert memo._depth == 0


def test_a_pause_ends_after_its_limit_while_operations_still_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Threads whose operations overlap without end must not keep collection off for good.
    monkeypatch.setattr(memo, "MAX_PAUSE_SECONDS", 0.0)
    with memo.operation():
        assert not gc.isenabled()
        with memo.operation():
            pass
        assert gc.isenabled()  # the inner scope ended past the limit
        with memo.operation():
            assert gc.isenabled()  # not paused again until every scope has ended
    assert gc.isenabled()
    with memo.operation():
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_another_thread_compiles_has_collection_back() -> None:
    # The other thread's operation never ends in the child (it has only the forking thread):
    # the child must not inherit its pause, nor the scope's lock, should it have been taken.
    inside = threading.Event()
    release = threading.Event()

    def compiling() -> None:
        with memo.operation():
            inside.set()
            release.wait(timeout=60)

    thread = threading.Thread(target=compiling)
    thread.start()
    try:
        assert inside.wait(timeout=30)
        assert not gc.isenabled()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            ok = gc.isenabled() and memo._depth == 0
            gramkiln.Grammar.from_lark('start: "a"+').compile()  # the lock is free
            ok = ok and gc.isenabled()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert not gc.isenabled()  # the parent's operation is still running
    finally:
        release.set()
        thread.join(timeout=60)
    assert gc.isenabled()


# One grammar per front end, each reaching its recursive helpers: terminal cycle checks (Lark,
# GLRM, the IR verifier), terminal set operations, JSON Schema automata written as rules.
_CYCLE_FREE_BUILDS = {
    "lark terminals and operations": lambda: gramkiln.Grammar.from_lark(
        'start: WORD ("," WORD)*\nWORD: LETTER+ & /[^q]+/\nLETTER: /[a-z]/'
    ),
    "glrm": lambda: gramkiln.Grammar.from_glrm(
        'glrm 1; start v; t D = /[0-9]/; t N = D+; nt v = N | "x";'
    ),
    "json schema patterns": lambda: gramkiln.Grammar.from_json_schema(
        {
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^(ab|cd)+x?$", "maxLength": 12},
                "tag": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$"},
            },
        }
    ),
    "ebnf": lambda: gramkiln.Grammar.from_ebnf('root ::= "a" [0-9]+'),
    "regex": lambda: gramkiln.Grammar.from_regex(r"(\d{3}-){2}\d{4}"),
}


@pytest.mark.parametrize("front_end", sorted(_CYCLE_FREE_BUILDS))
def test_building_and_compiling_leave_no_reference_cycles(front_end: str) -> None:
    # Cyclic garbage (a recursive helper closing over the front end's state) keeps everything
    # it reaches alive until a collection, which after an operation must then scan it all.
    _CYCLE_FREE_BUILDS[front_end]().compile()  # first: imports leave garbage of their own
    gc.collect()
    gc.disable()
    try:
        _CYCLE_FREE_BUILDS[front_end]().compile()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            found = gc.collect()
            garbage = [type(o).__qualname__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    finally:
        gc.enable()
    assert found == 0, f"cyclic garbage after {front_end}: {sorted(set(garbage))[:12]}"
