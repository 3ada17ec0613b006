"""The faults the scheduler can plant in an instance's client calls.

Each is what a real client reports in that situation, through the same exception types
`kstream.kafka.Producer` and `Consumer` raise:

* `poll`: the connection to the broker drops (a retriable transport error);
* `global_poll`: the same in the global tables' consumer (topologies with a global table);
* `committed`: a committed-offset read times out;
* `send_offsets`, `commit`: the coordinator asks for the transaction to be aborted (abortable);
* `commit_timeout`: the commit times out before it reached the broker (kstream treats a commit
  timeout as fatal and recreates the producer);
* `commit_landed`: the commit reached the broker and committed, but its answer was lost and
  the call timed out: the same error as `commit_timeout`, with the other outcome;
* `fence`: another producer took the transactional id over (or the broker aborted the
  transaction): the broker bumps the id's epoch and the call fails fenced;
* `consumer_commit`, `flush` (at_least_once): an offset commit or a delivery fails;
* `poll_taken`: a poll's batch holds a partition's error event among its records (librdkafka's
  positions are then past them): the real consumer's handling (`kstream.kafka.consumer.
  split_events`) hands the records over and raises the error at the next poll. It dropped
  them before (lost counts, or a task that never caught up: `count` seed 7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.errors import KafkaClientError, ProduceError
from kstream.kafka.errors import FatalTransactionError, TransactionAbortableError
from kstream.testing.sim.broker import SimKafka

__all__ = ["FAULTS", "Fault", "faults_for"]

Fault = tuple[str, str, Callable[[SimKafka], Callable[[Any], None]]]
"""(name, the call it is planted before, what it does given the cluster)"""


def _raise(error: Callable[[], BaseException]) -> Callable[[SimKafka], Callable[[Any], None]]:
    def plant(_cluster: SimKafka) -> Callable[[Any], None]:
        def act(_client: Any) -> None:
            raise error()

        return act

    return plant


def _landed(cluster: SimKafka) -> Callable[[Any], None]:
    def act(client: Any) -> None:
        cluster.end_transaction(client.transactional_id, client._epoch, commit=True)
        raise FatalTransactionError(
            "committing a transaction: _TIMED_OUT: the commit's answer did not come in time "
            "(injected; the broker committed it)",
            code="_TIMED_OUT",
        )

    return act


def _fence(cluster: SimKafka) -> Callable[[Any], None]:
    def act(client: Any) -> None:
        tid = client.transactional_id
        st = cluster.producers[tid]
        if st.txn is not None:
            cluster._end(st, commit=False, why="aborted: fenced (injected)")
        st.epoch += 1
        cluster.event(f"txn {tid}: epoch {st.epoch} (injected fence)")

    return act


def _taken(_cluster: SimKafka) -> Callable[[Any], None]:
    def act(client: Any) -> None:
        client.fail_after_batch = True

    return act


def _transport() -> BaseException:
    return KafkaClientError(
        "consuming: _TRANSPORT: connection to the broker dropped (injected)",
        code="_TRANSPORT",
        retriable=True,
    )


def _committed_timeout() -> BaseException:
    return KafkaClientError(
        "reading committed offsets: _TIMED_OUT (injected)", code="_TIMED_OUT", retriable=True
    )


def _abortable() -> BaseException:
    return TransactionAbortableError(
        "transaction: COORDINATOR_NOT_AVAILABLE (injected)",
        code="COORDINATOR_NOT_AVAILABLE",
        retriable=True,
    )


def _commit_timeout() -> BaseException:
    return FatalTransactionError(
        "committing a transaction: _TIMED_OUT (injected; the commit never reached the broker)",
        code="_TIMED_OUT",
    )


def _coordinator() -> BaseException:
    return KafkaClientError(
        "committing offsets: COORDINATOR_NOT_AVAILABLE (injected)",
        code="COORDINATOR_NOT_AVAILABLE",
        retriable=True,
    )


def _delivery() -> BaseException:
    return ProduceError(
        "delivery failed: _MSG_TIMED_OUT (injected)", code="_MSG_TIMED_OUT", retriable=True
    )


FAULTS: dict[str, Fault] = {
    f[0]: f
    for f in (
        ("poll", "consumer.poll", _raise(_transport)),
        ("global_poll", "consumer.poll_global", _raise(_transport)),
        ("poll_taken", "consumer.poll", _taken),
        ("committed", "consumer.committed", _raise(_committed_timeout)),
        ("send_offsets", "producer.send_offsets", _raise(_abortable)),
        ("commit", "producer.commit", _raise(_abortable)),
        ("commit_timeout", "producer.commit", _raise(_commit_timeout)),
        ("commit_landed", "producer.commit", _landed),
        ("fence", "producer.commit", _fence),
        ("consumer_commit", "consumer.commit", _raise(_coordinator)),
        ("flush", "producer.flush", _raise(_delivery)),
    )
}

_EXACTLY_ONCE = (
    "poll",
    "poll_taken",
    "committed",
    "send_offsets",
    "commit",
    "commit_timeout",
    "commit_landed",
    "fence",
)
_AT_LEAST_ONCE = ("poll", "poll_taken", "committed", "consumer_commit", "flush")
#: faults of known open defects: planted only when named in `include` (none open now)
OPEN: tuple[str, ...] = ()


def faults_for(
    guarantee: str,
    exclude: tuple[str, ...] = (),
    global_tables: bool = False,
    include: tuple[str, ...] = (),
) -> list[str]:
    """The fault names that apply under `guarantee` (and to a topology with global tables),
    less `exclude`, with those of `OPEN` named in `include`."""
    names: tuple[str, ...] = _AT_LEAST_ONCE if guarantee == "at_least_once" else _EXACTLY_ONCE
    names += ("global_poll",) if global_tables else ()
    names += tuple(n for n in OPEN if n in include)
    return [n for n in names if n not in exclude]
