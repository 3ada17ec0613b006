"""The task executor: runs one task's step of the loop, in the commit period its protocol opens.

As Kafka Streams' `TaskExecutor`, it knows nothing of rebalances, failures or commits: the
task manager (task_manager.py) routes a batch to its tasks with `route`, runs each task's step
here (`process`, `drain`, `punctuate`) under its failure handling, and commits. A step opens
the task's commit period first (`CommitProtocol.begin`: under exactly-once the transaction),
so whatever the task produces falls in the transaction its next commit ends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from itertools import groupby
from typing import Any

from confluent_kafka import KafkaException

from kstream.kafka.consumer import Consumer
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.future_timestamps import FutureTimestamps
from kstream.runtime.idling import LagOf
from kstream.runtime.tasks import TP, RuntimeTask

__all__ = ["TaskExecutor", "by_partition", "fetched_lag"]


class TaskExecutor:
    """Runs tasks' steps: their share of a batch, their buffered records, their punctuation."""

    def __init__(self, commits: CommitProtocol, future: FutureTimestamps) -> None:
        """`future`: counts and reports records that move stream time far past the clock."""
        self.commits = commits
        self.future = future

    def route(
        self, msgs: list[Any], task_of: Mapping[TP, RuntimeTask], skip: Mapping[TP, int]
    ) -> tuple[dict[TP, list[Any]], dict[RuntimeTask, dict[TP, list[Any]]]]:
        """`msgs` by partition, and each task's share of them (as Kafka Streams'
        `TaskManager.addRecordsToTasks`): the partitions in `skip` (rolled back, their seek
        deferred: read again later) and those of no task are left out."""
        groups = by_partition(msgs)
        per_task: dict[RuntimeTask, dict[TP, list[Any]]] = {}
        for tp, lst in groups.items():
            rt = task_of.get(tp)
            if rt is None or tp in skip:
                continue
            per_task.setdefault(rt, {})[tp] = lst
        limit = self.future.limit(int(time.time() * 1000))
        for rt in per_task:
            rt.task.future_limit, rt.task.on_future = limit, self.future
        return groups, per_task

    def process(self, rt: RuntimeTask, parts: dict[TP, list[Any]], lag: LagOf) -> None:
        """`rt`'s share of the batch. A task with input buffers (task idling) buffers it and
        processes what it is ready to."""
        self.commits.begin(rt)
        if rt.buffers is None:
            rt.process(parts)
        else:
            rt.buffer(parts)
            rt.process_ready(int(time.time() * 1000), lag)

    @staticmethod
    def ready_to_drain(rt: RuntimeTask, now_ms: int, lag: LagOf) -> bool:
        """`rt` holds buffered records (task idling) and may process some now, even though
        the batch brought it nothing: an idle deadline passed, or a lag became known. One
        readiness check, O(its partitions)."""
        buffers = rt.buffers
        return buffers is not None and bool(buffers.pending) and buffers.ready(now_ms, lag)

    def drain(self, rt: RuntimeTask, now_ms: int, lag: LagOf) -> None:
        """`rt`'s buffered records it is ready for."""
        self.commits.begin(rt)
        rt.process_ready(now_ms, lag)

    def punctuate(self, rt: RuntimeTask, now_ms: int) -> None:
        """`rt`'s wall-clock punctuations."""
        self.commits.begin(rt)
        rt.punctuate(now_ms)


def fetched_lag(consumer: Consumer, tp: TP, position: int | None) -> int | None:
    """The records the broker holds for `tp` past `position` (the next offset its task
    expects; None: not known there), from `consumer`'s last fetch response, as Kafka's
    consumer reports it to Kafka Streams' task idling: None while no fetch response told it.

    The end is librdkafka's cached high watermark (the last stable offset under
    read_committed). Where the consumer stands is the furthest of `position`, the consumer's
    own position and its last end-of-partition event (cleared by a seek): a transaction's
    commit marker follows its last record but is never delivered, so only the end-of-partition
    event shows that the consumer got past it.
    """
    high = consumer.high_watermark(*tp)
    if high is None:
        return None
    at = -1 if position is None else position
    eof = consumer.eof_offset(*tp)
    if eof is not None:
        at = max(at, eof)
    try:
        own = consumer.position([tp])[0].offset
    except KafkaException:
        own = -1
    if own is not None:
        at = max(at, own)
    if at < 0:
        return 0 if high == 0 else None  # a partition that never had a record
    return max(0, high - at)


def by_partition(msgs: list[Any]) -> dict[TP, list[Any]]:
    """`msgs` by (topic, partition), each partition's in the order consumed, the partitions in
    the order they first appear.

    A consumer returns a partition's messages in runs. With one topic in the batch (a task
    reading one topic: every stateless and most stateful apps) the runs are cut by
    `itertools.groupby` on the partition, read with the message class's own method from C
    (not `operator.methodcaller`, which builds a bound method per call and cost twice the
    loop); several topics, or a batch of mixed message classes, take a loop that looks each
    run's list up once."""
    groups: dict[TP, list[Any]] = {}
    if msgs:
        cls = type(msgs[0])
        try:
            topics = set(map(cls.topic, msgs))
            if len(topics) == 1:
                (topic,) = topics
                for part, run in groupby(msgs, cls.partition):
                    found = groups.get((topic, part))
                    if found is None:
                        groups[(topic, part)] = list(run)
                    else:
                        found.extend(run)
                return groups
        except (TypeError, AttributeError):  # a message of another class: the loop asks each
            groups = {}
    last_topic: str | None = None
    last_part = -1
    lst: list[Any] = []
    for m in msgs:
        part = m.partition()
        topic = m.topic()
        if part != last_part or topic != last_topic:
            last_topic, last_part = topic, part
            found = groups.get((topic, part))
            if found is None:
                groups[(topic, part)] = found = []
            lst = found
        lst.append(m)
    return groups
