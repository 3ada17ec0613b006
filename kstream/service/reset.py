"""`kstreamd reset`: make an app start over from the beginning of its inputs.

Run it while no instance of the app is running. It moves the group's committed offsets of the
input topics to the earliest offsets, deletes the app's internal topics (repartition,
changelog, instances) and removes the local state under `state_dir`. Input and output topics
are left alone: deleting data users wrote is not a reset's business.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from kstream.errors import KafkaClientError
from kstream.kafka.admin import Admin
from kstream.kafka.consumer import Consumer

__all__ = ["INTERNAL_SUFFIXES", "internal_topics", "reset_app"]

INTERNAL_SUFFIXES = ("-changelog", "-repartition", "-instances")


def internal_topics(app_id: str, topics: list[str]) -> list[str]:
    prefix = f"{app_id}-"
    return sorted(t for t in topics if t.startswith(prefix) and t.endswith(INTERNAL_SUFFIXES))


def _committed_partitions(admin: Admin, app_id: str, timeout: float) -> list[TopicPartition]:
    req = [ConsumerGroupTopicPartitions(app_id)]
    try:
        futures = admin.raw.list_consumer_group_offsets(req, request_timeout=timeout)
        result = futures[app_id].result(timeout=timeout + 5)
    except KafkaException as e:
        raise KafkaClientError(f"reading the committed offsets of group {app_id!r}: {e}") from None
    return [tp for tp in result.topic_partitions if tp.offset is not None and tp.offset >= 0]


def reset_app(
    app_id: str,
    bootstrap_servers: str,
    *,
    kafka: Mapping[str, Any] | None = None,
    state_dir: str | None = None,
    connect_timeout: int = 10_000,
) -> list[str]:
    """Reset `app_id`; returns one line per action taken, for the user."""
    report: list[str] = []
    admin = Admin(bootstrap_servers, kafka=kafka, connect_timeout=connect_timeout)
    internal = internal_topics(app_id, admin.list_topics())
    committed = [
        tp for tp in _committed_partitions(admin, app_id, 30.0) if tp.topic not in internal
    ]
    if committed:
        consumer = Consumer(
            bootstrap_servers, group_id=app_id, kafka=kafka, connect_timeout=connect_timeout
        )
        try:
            earliest = []
            for tp in committed:
                wm = consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), cached=False
                )
                low = wm[0] if wm else 0
                earliest.append(TopicPartition(tp.topic, tp.partition, max(0, low)))
            consumer.commit(earliest)
        finally:
            consumer.close()
        topics = sorted({tp.topic for tp in committed})
        report.append(
            f"offsets of group {app_id!r} set to earliest on {len(committed)} partition(s) "
            f"of {', '.join(topics)}"
        )
    else:
        report.append(f"group {app_id!r} has no committed offsets")
    if internal:
        admin.delete_topics(internal)
        report.append(f"deleted internal topics: {', '.join(internal)}")
    else:
        report.append("no internal topics to delete")
    if state_dir:
        local = os.path.join(state_dir, app_id)
        if os.path.isdir(local):
            shutil.rmtree(local)
            report.append(f"removed local state {local}")
        else:
            report.append(f"no local state under {local}")
    return report
