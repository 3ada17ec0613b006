"""The runtime's control path runs one way: stream thread -> task manager -> the parts it
composes (new tasks -> recovery -> partitions -> active tasks) -> task executor and commit
protocol, never back up (docs/architecture.md, "How a commit fails").

Each test records, with a profile hook, every call between methods of these objects while a
commit fails and the task is recovered, and checks that no callee sits above its caller. The
failures are the mock cluster's (a commit the broker refuses, a transaction whose answer is
lost, a store lost after its commit), so the recoveries are the real ones: rollback, revive,
rebuild.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from support.mock_runtime import SRC, cluster_with_input, counts, running

from kstream.errors import StoreLostError
from kstream.runtime.active_tasks import ActiveTasks
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.new_tasks import NewTasks
from kstream.runtime.partitions import TaskPartitions
from kstream.runtime.recovery import TaskRecovery
from kstream.runtime.task_executor import TaskExecutor
from kstream.runtime.task_manager import TaskManager
from kstream.runtime.thread import StreamThread

EXACT = [("a", 1), ("b", 1), ("b", 2), ("c", 1)]

#: each object's floor: a call may go to the same floor or one below, never up
FLOORS: list[tuple[type, int]] = [
    (StreamThread, 0),
    (TaskManager, 1),
    (NewTasks, 2),
    (TaskRecovery, 3),
    (TaskPartitions, 4),
    (ActiveTasks, 5),
    (TaskExecutor, 6),
    (CommitProtocol, 6),
]


def _floor(obj: Any) -> int | None:
    for cls, floor in FLOORS:
        if isinstance(obj, cls):
            return floor
    return None


def _owner(frame: FrameType | None) -> Any:
    """The object whose method `frame` runs (its `self`), if any."""
    if frame is None or frame.f_code.co_argcount == 0:
        return None
    first = frame.f_code.co_varnames[0]
    return frame.f_locals.get(first) if first == "self" else None


@contextmanager
def calls_between_floors() -> Iterator[list[tuple[str, str]]]:
    """Record `(caller, callee)` as `Class.method` for every call from a runtime object's
    method to one of its own or another's (the callers' frames are walked up to the nearest
    runtime object, so a call made from a nested function or a lambda counts as its
    method's)."""
    seen: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = _owner(frame)
        if _floor(callee) is None:
            return
        up = frame.f_back
        while up is not None and _floor(_owner(up)) is None:
            up = up.f_back
        caller = _owner(up)
        if caller is None:
            return
        seen.append(
            (
                f"{type(caller).__name__}.{up.f_code.co_name}",  # type: ignore[union-attr]
                f"{type(callee).__name__}.{frame.f_code.co_name}",
            )
        )

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _upward(seen: list[tuple[str, str]], objects: dict[str, int]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in seen if objects[a.split(".")[0]] > objects[b.split(".")[0]]]


def _floors_by_name(r: Any) -> dict[str, int]:
    thread = r.thread
    tm = thread.task_manager
    objects = [
        thread,
        tm,
        tm.new_tasks,
        tm.recovery,
        tm.partitions,
        tm.active,
        tm.executor,
        thread.commits,
    ]
    return {type(o).__name__: _floor(o) for o in objects}  # type: ignore[misc]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_a_failed_commit_is_recovered_by_calls_that_run_one_way(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        r.poll()
        cluster.fail_next_commit()
        with calls_between_floors() as seen:
            r.commit()
        floors = _floors_by_name(r)
        # the failure was met and recovered on this path: the commit protocol reported it
        # and the task manager acted on it
        assert ("StreamThread.commit", "TaskManager.commit") in seen
        assert ("TaskManager.commit", f"{type(r.thread.commits).__name__}.commit") in seen
        assert any(callee.startswith("TaskManager._settle") for _, callee in seen)
        # ... and the task was recovered from its committed offsets, one way
        assert ("TaskManager._settle", "TaskRecovery.retry_from_committed") in seen or (
            "TaskManager._settle",
            "TaskRecovery.recover_from",
        ) in seen
        assert _upward(seen, floors) == []
        r.turn(4)
    assert sorted(counts(cluster)) == EXACT
    assert cluster.committed("app", SRC, 0) == 2


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_commit_whose_answer_is_lost_revives_its_tasks_one_way(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        r.poll()
        cluster.time_out_transactions()
        with calls_between_floors() as seen:
            r.commit()
        assert ("TaskRecovery._recover", "TaskRecovery.revive") in seen
        assert ("TaskRecovery.revive", "TaskPartitions.read_committed") in seen
        assert ("TaskRecovery.revive", "ActiveTasks.create") in seen
        assert _upward(seen, _floors_by_name(r)) == []
        r.turn(4)
    assert sorted(counts(cluster)) == EXACT


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_a_store_lost_after_its_commit_is_rebuilt_by_the_task_manager(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The protocol reports the lost store in its outcome (it no longer asks the thread to
    apply); the task manager rebuilds the task from its changelog, which holds the commit."""
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        r.poll()
        before = r.thread.tasks[(0, 0)]
        apply = type(before).apply

        def lose_once(rt: Any, delivered: Any) -> None:
            monkeypatch.setattr(type(before), "apply", apply)
            apply(rt, delivered)
            raise StoreLostError("the store's server lost its data")

        monkeypatch.setattr(type(before), "apply", lose_once)
        with calls_between_floors() as seen:
            r.commit()
        assert ("TaskManager._settle", "TaskRecovery.rebuild") in seen
        assert _upward(seen, _floors_by_name(r)) == []
        assert r.thread.tasks[(0, 0)] is not before
        r.turn(3)
    assert sorted(counts(cluster)) == EXACT
    assert cluster.committed("app", SRC, 0) == 2
