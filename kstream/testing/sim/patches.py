"""What the harness patches for the length of a run, and why each patch keeps the run
deterministic without changing what the runtime does.

* The runtime's own threads: the task manager creates new tasks (and fences previous owners)
  on a `ThreadPoolExecutor`, so that their producers' round trips overlap. Over the simulated
  broker a round trip takes no time, and threads would only make the order of those calls (and
  so producer ids and epochs) vary between runs: an executor that runs each call at once, in
  submission order, gives the same results in a fixed order.
* LMDB environments: a crash must leave an instance's LMDB files as a killed process leaves
  them, and its successor opens them again in this same process. The environments an instance
  opened are recorded so that its crash can close them (closing writes nothing: every write
  reached LMDB in a committed transaction, or not at all).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

__all__ = ["InlineExecutor", "LmdbEnvironments", "patched_runtime"]


class InlineExecutor:
    """`concurrent.futures.ThreadPoolExecutor`'s calls, run at once in the caller's thread."""

    def __init__(self, max_workers: int | None = None, **_ignored: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:
            fut.set_exception(e)
        return fut

    def shutdown(self, wait: bool = True, **_ignored: Any) -> None:
        pass

    def __enter__(self) -> InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class LmdbEnvironments:
    """The LMDB backends opened during a run, so that a crash can close an instance's."""

    def __init__(self) -> None:
        self.opened: list[Any] = []

    def close_under(self, directory: str) -> int:
        """Close (without a write) every open environment under `directory`; how many."""
        closed = 0
        for backend in self.opened:
            if str(backend.path).startswith(directory) and not backend._closed:
                backend._closed = True
                backend._env.close()
                closed += 1
        self.opened = [b for b in self.opened if not b._closed]
        return closed


@contextmanager
def patched_runtime(envs: LmdbEnvironments) -> Iterator[None]:
    """Apply the module docstring's patches until the block ends."""
    import kstream.runtime.active_tasks as active_tasks
    from store_backends import lmdb_backend

    saved_pool = active_tasks.ThreadPoolExecutor
    saved_init = lmdb_backend.LMDBBackend.__init__

    owner = threading.get_ident()

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        saved_init(self, *args, **kwargs)
        if threading.get_ident() == owner:  # another thread's environments are not the run's
            envs.opened.append(self)

    active_tasks.ThreadPoolExecutor = InlineExecutor  # type: ignore[misc,assignment]
    lmdb_backend.LMDBBackend.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        active_tasks.ThreadPoolExecutor = saved_pool  # type: ignore[misc]
        lmdb_backend.LMDBBackend.__init__ = saved_init  # type: ignore[method-assign]
        for backend in envs.opened:
            if not backend._closed:
                backend._closed = True
                backend._env.close()
