"""The partition count of a topic named at run time by a topic chooser (`KStream.to(chooser)`).

The topology's own topics are counted at start-up; a topic only a chooser names is looked up
when a record first goes to it, through the metadata of the producer that will write it (on a
broker that creates topics on demand, that request creates it, as a Kafka Streams producer's
does). The native runtime's collector and the Spark engine's tasks both ask here, so both
refuse a missing topic with the same error.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException

from kstream.errors import TopicError

__all__ = ["partitions_from_metadata"]


def partitions_from_metadata(producer: Any, topic: str, timeout_s: float) -> int:
    """`topic`'s partition count from `producer`'s metadata (a kstream producer whose `raw`
    is the confluent-kafka client; another producer, such as a mock, knows no such topic).

    Raises TopicError naming the topic when the metadata cannot be read (code METADATA) or the
    cluster does not have it (UNKNOWN_TOPIC_OR_PART)."""
    raw = getattr(producer, "raw", None)
    if raw is not None:
        try:
            md = raw.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as e:
            raise TopicError(
                f"cannot read the metadata of topic {topic!r} (a topic chooser named it): "
                f"{e.args[0] if e.args else e}",
                code="METADATA",
            ) from e
        if md is not None and md.error is None and md.partitions:
            return len(md.partitions)
    raise TopicError(
        f"topic {topic!r}, named by a topic chooser, does not exist (to() with a chooser "
        "writes existing topics only: create it before the app writes to it)",
        code="UNKNOWN_TOPIC_OR_PART",
    )
