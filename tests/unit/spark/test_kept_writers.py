"""A Python worker's kept slot writers (kstream.spark.slot_writer.cached_writer): kept from
batch to batch, closed once idle, so a worker that serves query after query does not gather
Kafka clients (and their files) for good."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.spark import slot_writer
from kstream.spark.slot_writer import IDLE_WRITER_S, SlotWriter, cached_writer, drop_writer


class Client:
    """Stands for a writer's producer or consumer: only whether it was closed matters here."""

    def __init__(self) -> None:
        self.closed = False

    def close(self, **_: Any) -> None:
        self.closed = True


def writer(app: str, slot: int, at: float, run: str = "run-1") -> SlotWriter:
    w = cached_writer(run, app, "127.0.0.1:9092", {}, slot, "exactly_once", None, now=at)
    if w._producer is None:  # as if it had written: clients started
        w._producer, w._consumer = Client(), Client()
    return w


@pytest.fixture(autouse=True)
def no_kept_writers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slot_writer, "_WRITERS", {})


def test_a_writer_used_every_batch_is_kept_however_long_the_run() -> None:
    first = writer("a", 0, at=0.0)
    at = 0.0
    for _ in range(20):  # a batch every half of the idle bound, for ten bounds
        at += IDLE_WRITER_S / 2
        assert writer("a", 0, at) is first
    assert not first._producer.closed


def test_writers_idle_past_the_bound_are_closed_when_the_worker_next_asks_for_one() -> None:
    old_app = [writer("old", slot, at=0.0) for slot in range(3)]
    producers = [w._producer for w in old_app]
    busy = writer("busy", 0, at=0.0)
    writer("busy", 0, at=IDLE_WRITER_S)  # used again: not idle
    assert all(not p.closed for p in producers)

    writer("new", 0, at=IDLE_WRITER_S + 1)
    assert all(p.closed for p in producers)
    assert all(w._producer is None and w._consumer is None for w in old_app)
    assert set(slot_writer._WRITERS) == {
        ("busy", "127.0.0.1:9092", 0, False),
        ("new", "127.0.0.1:9092", 0, False),
    }
    assert not busy._producer.closed
    # asked for again, an idle writer's slot gets a new writer (which reads its marker again)
    again = writer("old", 0, at=IDLE_WRITER_S + 2)
    assert again is not old_app[0]


def test_the_writer_asked_for_is_reused_however_long_it_idled() -> None:
    slow = writer("slow", 0, at=0.0)  # a query whose batches come minutes apart
    assert writer("slow", 0, at=10 * IDLE_WRITER_S) is slow
    assert not slow._producer.closed


def test_another_run_of_the_slot_and_a_failed_writer_are_not_kept() -> None:
    first = writer("a", 0, at=0.0, run="run-1")
    producer = first._producer
    second = writer("a", 0, at=1.0, run="run-2")
    assert second is not first and producer.closed
    drop_writer(second)
    assert slot_writer._WRITERS == {}
