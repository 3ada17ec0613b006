"""The exceptions kstream raises.

Every error says what was wrong and where (topic, partition, offset, config key), so that an
operator can act on the message alone.
"""

from __future__ import annotations


class KStreamError(Exception):
    """Base class of every kstream error."""


class ConfigError(KStreamError, ValueError):
    """A configuration key or value is invalid; raised at construction, never on a record."""


class TopologyError(KStreamError):
    """The topology is malformed (unknown parent, duplicate name, missing store, ...)."""


class CoPartitioningError(TopologyError):
    """Topics read together by one sub-topology have different partition counts."""


class SerdeError(KStreamError):
    """A value could not be serialized or deserialized."""


class RecordError(KStreamError):
    """An error tied to one input record: it names topic, partition and offset."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = f"topic={topic!r} partition={partition} offset={offset}"
        super().__init__(f"{message} ({where})")


class DeserializationError(RecordError):
    """An input record's key or value could not be deserialized."""


class ProcessingError(RecordError):
    """User code raised while processing a record."""


class KafkaClientError(KStreamError):
    """An error reported by the Kafka client or broker."""

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = False) -> None:
        self.code = code
        self.retriable = retriable
        super().__init__(message)


class BrokerUnreachableError(KafkaClientError):
    """The bootstrap servers did not answer within the configured time."""


class TopicError(KafkaClientError):
    """A topic could not be created, described or deleted."""


class ProduceError(KafkaClientError):
    """A record could not be delivered (e.g. too large, topic missing)."""


class ProducerFencedError(KafkaClientError):
    """A newer producer with the same transactional id took over: this one must stop."""


class TransactionError(KafkaClientError):
    """A transaction could not be completed; the batch is aborted and retried."""


class StoreError(KStreamError):
    """A state store could not be opened, read or written."""


class StoreLostError(StoreError):
    """A remote store lost or rolled back its data (e.g. a server restarted empty): the task
    must stop writing to it and rebuild it from its changelog."""


class StoreCorruptedError(StoreError):
    """Local state is damaged or of an incompatible format and must be restored from scratch."""


class ChangelogRecordError(StoreError):
    """A changelog record a restore refused to apply: it does not decode with the store's
    serdes, or (with the broker-compatibility component on) its provenance is not that of a
    record of the store's task. Names the changelog record, never an input record."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(message)
