"""Which failure of a task step leads to which recovery: one table, read top to bottom.

A task step (process a batch, punctuate, verify or commit its stores) can fail in ways that
need very different answers: a broker hiccup is fixed by rolling the task back and reading its
input again; a remote store that lost its data by rebuilding the store from its changelog; a
fenced producer means another instance owns the task now, so this one must rejoin the group;
a record error under the "fail" policy, or a bug, must stop the app. Keeping these answers in
one table (instead of a chain of `except` branches in the loop) makes them reviewable at a
glance and testable without a stream thread; the thread only carries out the recovery.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Protocol

from kstream.errors import (
    KafkaClientError,
    ProducerFencedError,
    RecordError,
    StoreError,
    StoreLostError,
    TopologyError,
)
from kstream.kafka.errors import (
    ClientStuckError,
    CommitOutcomeUnknownError,
    FatalTransactionError,
)

__all__ = [
    "FAILURE_TABLE",
    "MAX_RETRIES",
    "FatalState",
    "Recovery",
    "StreamThreadExceptionResponse",
    "UncaughtExceptionHandler",
    "route",
    "uncaught_response",
]

log = logging.getLogger("kstream.runtime")

#: consecutive failed attempts (without a commit in between) before the thread gives up
MAX_RETRIES = 50


class Recovery(enum.Enum):
    """What the stream thread does about a failed task step; the value is the log's wording."""

    RETRY = "retrying from the committed offsets"
    """Roll the task (and those sharing its transaction) back, seek back, back off, retry."""
    REBUILD = "rebuilding its stores from the changelog"
    """Roll back as RETRY does, then replace the task by one restored from its changelogs."""
    REVIVE = "reviving its tasks from the committed state"
    """The commit's outcome is unknown: roll back without aborting, settle the transaction
    with a new producer, and create the tasks again from the committed offsets read then and
    their stores restored to them (Kafka Streams closes such tasks dirty and revives them)."""
    RECREATE_PRODUCER = "recreating its producer"
    """Roll back as RETRY does, with a new producer: the old one is in a fatal state."""
    ABANDON_PRODUCER = "abandoning its stuck producer for a new one"
    """Roll back as RETRY does, leaving the producer stuck in a call where it is (neither its
    abort nor its close can return either), with a new one; the new producer's
    `init_transactions` fences the stuck one and aborts its open transaction."""
    REJOIN = "rejoining the group"
    """Another instance fenced this one: roll back without aborting, leave and rejoin."""
    STOP = "stopping"
    """Nothing retrying can fix: the error stops the thread (and the app turns ERROR)."""


#: First match wins, so a subclass comes before its base (StoreLostError before StoreError;
#: ProducerFencedError, FatalTransactionError and ClientStuckError before KafkaClientError).
#: An error matching no row stops the thread. An unreachable broker is not a row: whatever a
#: client raises while Kafka does not answer, the thread waits the outage out before the
#: recovery and counts no retry for it (kstream.runtime.outage).
FAILURE_TABLE: tuple[tuple[type[BaseException], Recovery], ...] = (
    # a remote store lost its data: only its task is hit, and its changelog has it all
    (StoreLostError, Recovery.REBUILD),
    # a record error under the "fail" policy, a broken topology or store, a bug in user code
    (RecordError, Recovery.STOP),
    (TopologyError, Recovery.STOP),
    (StoreError, Recovery.STOP),
    (TypeError, Recovery.STOP),
    (AttributeError, Recovery.STOP),
    (NameError, Recovery.STOP),
    # a newer instance owns the task's transactional id
    (ProducerFencedError, Recovery.REJOIN),
    # a commit that may have committed: replaying the batch could write it twice
    (CommitOutcomeUnknownError, Recovery.REVIVE),
    # the producer cannot go on (a transaction in a fatal state)
    (FatalTransactionError, Recovery.RECREATE_PRODUCER),
    # a producer call outlived its deadline (librdkafka issue #5511: send_offsets waiting for
    # good after the group coordinator left the metadata; kstream.kafka.deadline)
    (ClientStuckError, Recovery.ABANDON_PRODUCER),
    # anything else the clients raise: the broker away, a timeout, a failed request
    (KafkaClientError, Recovery.RETRY),
)


class FatalState(Protocol):
    """What `route` asks of a task's transactional producer."""

    def is_fatal(self) -> bool: ...

    def fenced(self) -> bool: ...


def route(error: BaseException, producer: FatalState | None = None) -> Recovery:
    """The recovery for `error`, raised by a task step.

    `producer` is the task's transactional producer (None when the guarantee has none): a
    client error that left it fatal needs what its state says (rejoin if it was fenced, a
    new producer otherwise), whatever the error itself was.
    """
    recovery = next((r for kind, r in FAILURE_TABLE if isinstance(error, kind)), Recovery.STOP)
    if recovery is Recovery.RETRY and producer is not None and producer.is_fatal():
        return Recovery.REJOIN if producer.fenced() else Recovery.RECREATE_PRODUCER
    return recovery


class StreamThreadExceptionResponse(enum.Enum):
    """Kafka's answers of an uncaught exception handler (`App.set_uncaught_exception_handler`)
    to an error that stopped the stream thread."""

    REPLACE_THREAD = "replace_thread"
    """Start a new stream thread in place of the failed one; the app stays up."""
    SHUTDOWN_CLIENT = "shutdown_client"
    """Stop this instance (state ERROR); what happens without a handler."""
    SHUTDOWN_APPLICATION = "shutdown_application"
    """Stop every instance of the app (state ERROR everywhere)."""


UncaughtExceptionHandler = Callable[[BaseException], StreamThreadExceptionResponse]


def uncaught_response(
    handler: UncaughtExceptionHandler | None, error: BaseException
) -> StreamThreadExceptionResponse:
    """What to do about `error`, which stopped the stream thread: the handler's answer, or
    SHUTDOWN_CLIENT without a handler, when the handler raises or answers something else (as
    Kafka Streams treats a failing handler)."""
    if handler is None:
        return StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    try:
        response = handler(error)
    except Exception as e:
        log.error("the uncaught exception handler raised %s: %s; shutting down", type(e), e)
        return StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    if not isinstance(response, StreamThreadExceptionResponse):
        log.error("the uncaught exception handler returned %r; shutting down", response)
        return StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    return response
