"""Translation of confluent-kafka errors into kstream exceptions.

librdkafka reports everything as a `KafkaError` code; callers of kstream need to decide between
"retry the batch", "recreate the producer" and "stop", so the mapping below sorts codes into
the exception classes of `kstream.errors` (plus the few finer ones defined here).
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from kstream.errors import (
    BrokerUnreachableError,
    KafkaClientError,
    ProduceError,
    ProducerFencedError,
    TopicError,
    TransactionError,
)

__all__ = [
    "COORDINATOR_NOT_READY",
    "COORDINATOR_RETRY_S",
    "AuthenticationError",
    "BrokerStartError",
    "BrokerUnreachableError",
    "ClientStuckError",
    "CommitOutcomeUnknownError",
    "FatalTransactionError",
    "KafkaClientError",
    "ProduceError",
    "ProducerFencedError",
    "TopicError",
    "TransactionAbortableError",
    "TransactionError",
    "coordinator_not_ready",
    "map_error",
]

COORDINATOR_NOT_READY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
"""A group request's answers that a later request gets past: the group's coordinator is being
created, loaded or moved (a broker that has just created `__consumer_offsets`, or is still
loading it). Kafka's Java clients ask again until their timeout; librdkafka hands these back to
the caller for group-offset reads and admin calls, so kstream asks again itself."""
COORDINATOR_RETRY_S = 0.1


def coordinator_not_ready(e: BaseException) -> bool:
    """Whether `e` is a confluent-kafka error in `COORDINATOR_NOT_READY`."""
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and err.code() in COORDINATOR_NOT_READY


class AuthenticationError(KafkaClientError):
    """TLS or SASL negotiation failed: a certificate, CA or credential is wrong."""


class BrokerStartError(KafkaClientError):
    """The embedded broker process could not be started or did not answer in time."""


class ClientStuckError(KafkaClientError):
    """A client call outlived its deadline (its own timeout and a grace; kstream.kafka.
    deadline): the call is abandoned with its client, which answers every later call with this
    error. Replace the client; do not close it (closing would wait on the same stuck state)."""


class TransactionAbortableError(TransactionError):
    """The transaction must be aborted; the producer stays usable for the retry."""


class FatalTransactionError(TransactionError):
    """The producer can no longer be used (includes commit timeouts): recreate it."""


class CommitOutcomeUnknownError(KafkaClientError):
    """A transaction commit failed without an answer on its outcome (it timed out, or the call
    was abandoned at its deadline): the broker may have committed it. Only the broker can tell,
    once a producer taking the transactional id over has settled the transaction, so the
    runtime revives the transaction's tasks from the committed state instead of replaying the
    batch from the offsets it knew (which would write the batch's outputs twice)."""


_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._TIMED_OUT,
}
_AUTH = {
    KafkaError._SSL,
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
_FENCED = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}
_TOPIC = {
    KafkaError.TOPIC_ALREADY_EXISTS,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_EXCEPTION,
    KafkaError.INVALID_PARTITIONS,
    KafkaError.INVALID_REPLICATION_FACTOR,
    KafkaError.INVALID_CONFIG,
    KafkaError.POLICY_VIOLATION,
}


def _describe(err: KafkaError) -> str:
    return f"{err.name()}: {err.str()}"


def map_error(
    err: KafkaError | KafkaException | BaseException,
    context: str,
    *,
    transactional: bool = False,
) -> KafkaClientError:
    """Return the kstream exception for a confluent-kafka error, prefixed with `context`.

    `context` says what was being done ("producing to 'clicks'", "committing offsets") so the
    message is useful on its own. With `transactional=True`, errors that are not fencing become
    `TransactionAbortableError` or `FatalTransactionError` as librdkafka classifies them.
    """
    if isinstance(err, KafkaClientError):
        return err
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if not isinstance(err, KafkaError):
        return KafkaClientError(f"{context}: {err}")
    code = err.code()
    msg = f"{context}: {_describe(err)}"
    name = err.name()
    retriable = bool(err.retriable())
    if code in _FENCED:
        return ProducerFencedError(
            f"{msg} (a newer producer with the same transactional.id took over)", code=name
        )
    if transactional:
        if err.txn_requires_abort():
            return TransactionAbortableError(msg, code=name, retriable=True)
        if err.fatal() or code in (KafkaError._TIMED_OUT, KafkaError._STATE):
            return FatalTransactionError(msg, code=name)
        return TransactionError(msg, code=name, retriable=retriable)
    if code in _AUTH:
        return AuthenticationError(msg, code=name)
    if code in _UNREACHABLE:
        return BrokerUnreachableError(msg, code=name, retriable=True)
    if code in _TOPIC:
        return TopicError(msg, code=name, retriable=retriable)
    if code in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError._QUEUE_FULL,
    ):
        return ProduceError(msg, code=name, retriable=retriable)
    return KafkaClientError(msg, code=name, retriable=retriable)
