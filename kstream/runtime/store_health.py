"""Readiness and remote stores: a store whose server does not answer makes the app not ready.

A remote store that is paused, cut off by the network or overloaded does not fail a call at
once: the backend waits for its socket timeout and retries for up to its `retry_for` (30 s by
default for Redis), and the stream thread sits in that call. Liveness stays true meanwhile (the
process is sound and the server may come back; a restart would not help), but readiness says
no, with the reason, once an operation has waited `STALL_S` seconds: a load balancer stops
sending queries that would hang on that store, and an operator sees which server to look at.
Only operations in flight count: an idle app does not probe its stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

STALL_S = 5.0
"""How long an operation on a remote store may wait before the app reports not-ready."""


def _backends(stream: Any) -> Iterator[Any]:
    """The backends of a stream thread's task stores and global stores."""
    for rt in list(stream.tasks.values()):
        for store in list(rt.task.stores.values()):
            yield store.backend
    globals_ = getattr(stream, "globals", None)
    if globals_ is not None:
        for store in list(globals_.task.stores.values()):
            yield store.backend


def unanswered_store(stream: Any, after: float = STALL_S) -> str | None:
    """Why a store of `stream` (a StreamThread, or None) is not usable: the first remote
    store with an operation waiting `after` seconds or more for its server; None if none."""
    if stream is None:
        return None
    for backend in _backends(stream):
        probe = getattr(backend, "not_answering", None)
        if probe is not None:
            why: str | None = probe(after)
            if why is not None:
                return why
    return None
