"""A rolled-back batch does not leave its stream time behind.

When a batch's transaction is aborted (a fenced or failed commit, a rebalance mid-batch), the
runtime discards the stores' pending writes and processes the same records again. A windowed
aggregation or a stream-stream join that kept the rolled-back batch's stream time in memory
would then drop the retried records as late: wrong window sums with exact counts, as a crash
test read once. `Task.discard` takes that time back to what the stores committed.
"""

from __future__ import annotations

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows, TimeWindows
from kstream.testing import TopologyTestDriver


def _uncommitted_batch(driver: TopologyTestDriver, topic: str, key: str, ts: int) -> None:
    """Process one record as a batch the runtime then rolls back (no flush, then discard)."""
    driver._enqueue(topic, key.encode(), b"1", ts, ())
    rec = driver._queue.popleft()
    task = driver._task_of[topic]
    task.process([rec])
    task.discard()


def test_a_windowed_aggregation_counts_the_retried_records_after_a_rollback() -> None:
    b = StreamBuilder()
    (
        b.stream("in", key_serde="string", value_serde="string")
        .group_by_key()
        .windowed_by(TimeWindows.of(10_000, grace=0))
        .count()
        .to_stream()
        .to("out")
    )
    with TopologyTestDriver(b.build()) as driver:
        source = driver.input_topic("in", "string", "string")
        source.pipe("k", "1", timestamp=1_000)
        _uncommitted_batch(driver, "in", "k", 100_000)  # moved stream time far ahead, undone
        source.pipe("k", "1", timestamp=2_000)  # late only against the undone stream time
        assert driver.dropped_records().get("late_record", 0) == 0
        counts = [v for _k, v in driver.output_topic("out").read_key_values()]
    assert counts[-1] == (2).to_bytes(8, "big")  # the long serde


def test_a_stream_stream_join_joins_the_retried_records_after_a_rollback() -> None:
    b = StreamBuilder()
    left = b.stream("left", key_serde="string", value_serde="string")
    right = b.stream("right", key_serde="string", value_serde="string")
    left.join(right, lambda a, c: f"{a}+{c}", window=JoinWindows.of(1_000, grace=0)).to(
        "out", key_serde="string", value_serde="string"
    )
    with TopologyTestDriver(b.build()) as driver:
        driver.input_topic("left", "string", "string").pipe("k", "a", timestamp=1_000)
        _uncommitted_batch(driver, "right", "x", 100_000)
        driver.input_topic("right", "string", "string").pipe("k", "b", timestamp=1_500)
        out = driver.output_topic("out", "string", "string").read_key_values()
    assert out == [("k", "a+b")]
