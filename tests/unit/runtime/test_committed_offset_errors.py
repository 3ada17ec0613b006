"""A committed offset that comes back with an error is read again, never taken as "nothing
committed".

The client answers a partition it could not read the committed offset of with no offset and an
error on that partition (an unstable offset, an unknown or unauthorised topic), the same offset
it gives a partition the group never committed. Taken as such, a restarted task would start
from the beginning on stores restored up to the real committed offset and count every record
again after its first rollback. Driven on the mock cluster: the first reads fail for one
partition, and a rollback of the restarted tasks must still take them back to the committed
offsets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError
from support.mock_runtime import DST, SRC, cluster_with_input, counts, latest, running, send

from kstream.dsl import StreamBuilder
from kstream.testing.mock_consumer import MockConsumer

# 30 lines keyed k0..k29 (`send` keys its lines by their index)
LINES = [f"line {i}" for i in range(30)]


def _count_keys() -> StreamBuilder:
    """A count per key, read from one topic: one sub-topology, a task per partition."""
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(DST, key_serde="string", value_serde="long")
    return b


@dataclass
class _Unread:
    """A partition as the client answers it when its committed offset could not be read."""

    topic: str
    partition: int
    offset: int = OFFSET_INVALID
    error: KafkaError = field(default_factory=lambda: KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_a_partition_read_with_an_error_is_read_again(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = cluster_with_input(*LINES, partitions=2)
    with running(cluster, tmp_path / "a", guarantee, topology=_count_keys()) as r:
        r.turn(3)
    assert all(cluster.committed("app", SRC, p) for p in (0, 1))
    first = len(counts(cluster))
    assert first == len(LINES)

    real = MockConsumer.committed
    failed: list[int] = []

    def committed(
        self: MockConsumer, partitions: Iterable[Any], timeout: float | None = None
    ) -> list[Any]:
        found: list[Any] = real(self, partitions, timeout)
        if len(failed) < 2:  # the first two reads: partition 1 unreadable
            failed.append(1)
            return [_Unread(tp.topic, tp.partition) if tp.partition == 1 else tp for tp in found]
        return found

    monkeypatch.setattr(MockConsumer, "committed", committed)
    # a restart on an empty state directory: the stores come from their changelogs
    send(cluster, *LINES[:10])
    with running(cluster, tmp_path / "b", guarantee, topology=_count_keys()) as r:
        r.poll()
        r.poll()  # the tasks run and processed the new lines; nothing committed yet
        tm = r.thread.task_manager
        assert set(tm.tasks) == {(0, 0), (0, 1)}
        # a failed commit: the tasks go back to the input offsets they were created with
        rolled = [one for rt in list(tm.tasks.values()) for one in tm.rollback(rt)]
        tm.seek_back(list(dict.fromkeys(rolled)))
        r.turn(3)
    keys = Counter(f"k{i}" for i in list(range(len(LINES))) + list(range(10)))
    # every input record counted once: the rollback went back to the committed offsets (and
    # under exactly-once the rolled-back outputs were aborted, so none is written twice)
    assert latest(cluster) == dict(keys)
    if guarantee != "at_least_once":
        assert len(counts(cluster)) == first + 10
    assert len(failed) == 2  # the reads that failed were read again
