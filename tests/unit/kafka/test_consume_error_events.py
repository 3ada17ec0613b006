"""An error event among a batch's records: the records are handed over, the error raised by the
next call. librdkafka's positions are past every record it returned, so records dropped with
the error were never read again (simulator fault `poll_taken`: lost counts, or a task waiting
for good on offsets already behind the consumer)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from kstream.errors import KafkaClientError
from kstream.kafka import consumer as consumer_module
from kstream.kafka.consumer import Consumer


class Event:
    """A consumed message as confluent-kafka hands it over: a record or an error event."""

    def __init__(self, offset: int, error: KafkaError | None = None) -> None:
        self._offset, self._error = offset, error

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def error(self) -> KafkaError | None:
        return self._error


class Raw:
    """A raw consumer answering each `consume` with the next of `batches`."""

    def __init__(self, batches: list[list[Event]]) -> None:
        self.batches = batches
        self.calls = 0

    def consume(self, num: int, timeout: float) -> list[Event]:
        self.calls += 1
        return self.batches.pop(0) if self.batches else []

    def close(self) -> None:
        pass


def _consumer(monkeypatch: pytest.MonkeyPatch, raw: Raw) -> Consumer:
    monkeypatch.setattr(consumer_module, "_RawConsumer", lambda _conf: raw)
    monkeypatch.setattr(consumer_module, "check_connected", lambda *a: None)
    return Consumer("127.0.0.1:9092", group_id="g")


def _offsets(msgs: list[Any]) -> list[int]:
    return [m.offset() for m in msgs]


def test_records_before_and_after_an_error_event_are_handed_over_and_the_error_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failed = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    eof = KafkaError(KafkaError._PARTITION_EOF)
    raw = Raw([[Event(0), Event(1), Event(-1, failed), Event(2), Event(3, eof)], [Event(3)]])
    c = _consumer(monkeypatch, raw)
    assert _offsets(c.consume_batch(10, 0.1)) == [0, 1, 2]
    assert c.eof_offset("in", 0) == 3
    with pytest.raises(KafkaClientError, match="UNKNOWN_TOPIC_OR_PART"):
        c.consume_batch(10, 0.1)
    assert raw.calls == 1  # the error was raised before consuming again
    assert _offsets(c.consume_batch(10, 0.1)) == [3]


def test_an_error_event_alone_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = Raw([[Event(-1, KafkaError(KafkaError._TRANSPORT))], [Event(0)]])
    c = _consumer(monkeypatch, raw)
    with pytest.raises(KafkaClientError):
        c.consume_batch(10, 0.1)
    assert _offsets(c.consume_batch(10, 0.1)) == [0]
