"""Deadlines for the client calls that can block for good.

librdkafka bounds its calls by the timeout they are given, except where it does not: with
librdkafka 2.10 or later `send_offsets_to_transaction` can wait for good when the group
coordinator's broker drops out of the cluster's metadata (librdkafka issue #5511), whatever its
timeout; a stream thread waiting there never turns its loop again (seen after a single broker
was restarted: 4 minutes in `Producer.send_offsets`, health saying RUNNING). A C call cannot be
interrupted from Python, so these calls run on a thread of their own and the caller waits for
them up to a deadline: the call's own timeout plus `GRACE_S`. Past it the caller gets
`ClientStuckError` and the call is abandoned where it is, with its client, which is then
wedged: every later call raises at once, and its owner replaces it (the runtime's failure
table: `Recovery.ABANDON_PRODUCER`). Nothing closes it, as closing would wait on the same
stuck state; under exactly-once the outcome of its transaction is settled by the new
producer's `init_transactions`, which fences it and aborts what it left open.

Only calls that wait on the broker go through here (once per commit, never per record); a
handoff to the caller thread costs tens of microseconds.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kstream.kafka.errors import ClientStuckError

__all__ = ["GRACE_S", "Deadline"]

T = TypeVar("T")

GRACE_S = 10.0
"""How long past its own timeout a call may take before it is abandoned: librdkafka returns
a timed-out call within milliseconds of its timeout, even on a loaded machine; one that has
not returned 10 s later is not going to."""


class _Call:
    """One call handed to the caller thread, and what came of it."""

    __slots__ = ("args", "done", "error", "fn", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Deadline:
    """Runs one client's blocking calls, one at a time, on a thread of its own (started on
    the first call), each with a deadline; `name` says whose calls in the thread's name."""

    def __init__(self, name: str, grace_s: float | None = None) -> None:
        self.name = name
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: what the abandoned call was doing, and since when (monotonic); None while usable
        self.stuck: str | None = None
        self.stuck_since: float | None = None

    def call(self, doing: str, timeout_s: float, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` (a call that should return within `timeout_s`), or ClientStuckError if
        it has not returned `grace_s` after that; `doing` says what it does, for the error."""
        if self.stuck is not None:
            raise self._wedged(doing)
        job = _Call(fn, args)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=f"kstream-calls-{self.name}", daemon=True
                )
                self._thread.start()
        self._calls.put(job)
        limit = timeout_s + self.grace_s
        if not job.done.wait(limit):
            self.stuck, self.stuck_since = doing, time.monotonic() - limit
            self._calls.put(None)  # the thread ends if the call ever returns
            raise ClientStuckError(
                f"{doing}: no answer {limit:g}s after the call began (its own timeout is "
                f"{timeout_s:g}s): the call is abandoned with its client",
                code="_STUCK",
            )
        if job.error is not None:
            raise job.error
        return cast(T, job.result)

    def check(self, doing: str) -> None:
        """Raise ClientStuckError if a call was abandoned (for a call that does not wait on
        the broker but would act on the stuck call's state)."""
        if self.stuck is not None:
            raise self._wedged(doing)

    def _wedged(self, doing: str) -> ClientStuckError:
        began = self.stuck_since
        since = "" if began is None else f" {time.monotonic() - began:.0f}s ago"
        return ClientStuckError(
            f"{doing}: the client was abandoned, stuck in {self.stuck}{since}", code="_STUCK"
        )

    def _serve(self) -> None:
        while True:
            job = self._calls.get()
            if job is None:
                return
            try:
                job.result = job.fn(*job.args)
            except BaseException as e:
                job.error = e
            job.fn = job.args = None  # type: ignore[assignment]  # the client may go now
            job.done.set()

    def close(self) -> None:
        """End the thread (after the call in progress, if any)."""
        with self._lock:
            if self._thread is not None:
                self._calls.put(None)
                self._thread = None
