"""A producer call that never returns is abandoned at its deadline (kstream.kafka.deadline).

librdkafka's `send_offsets_to_transaction` can wait for good, whatever its timeout (librdkafka
issue #5511). Here the raw confluent-kafka producer is a stand-in whose calls block until the
test lets them go, so the deadline, the wedged producer and its close are seen without a
broker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import kstream.kafka.deadline as deadline
import kstream.kafka.producer as producer_module
from kstream.errors import ProducerFencedError
from kstream.kafka.deadline import Deadline
from kstream.kafka.errors import ClientStuckError
from kstream.kafka.producer import Producer

pytestmark = pytest.mark.timeout(30)


class Raw:
    """A confluent-kafka Producer whose broker calls block while `blocked` names them."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.blocked: set[str] = set()
        # call name -> the error it raises (as librdkafka does, without serving error_cb)
        self.raising: dict[str, KafkaError] = {}
        self.release = threading.Event()
        self.calls: list[str] = []

    def _maybe_block(self, name: str) -> None:
        self.calls.append(name)
        if name in self.raising:
            raise KafkaException(self.raising[name])
        if name in self.blocked:
            self.release.wait()

    def produce(self, *args: Any) -> None:
        self.calls.append("produce")

    def init_transactions(self, timeout: float) -> None:
        self._maybe_block("init_transactions")

    def begin_transaction(self) -> None:
        self._maybe_block("begin_transaction")

    def send_offsets_to_transaction(self, offsets: Any, meta: Any, timeout: float) -> None:
        self._maybe_block("send_offsets_to_transaction")

    def commit_transaction(self, timeout: float) -> None:
        self._maybe_block("commit_transaction")

    def abort_transaction(self, timeout: float) -> None:
        self._maybe_block("abort_transaction")

    def flush(self, timeout: float) -> int:
        self._maybe_block("flush")
        return 0

    def purge(self) -> None:
        self.calls.append("purge")

    def poll(self, timeout: float = 0) -> int:
        return 0

    def list_topics(self, topic: Any = None, timeout: float = 1) -> Any:
        raise AssertionError("the connect check is skipped here")

    def __len__(self) -> int:
        return 0


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Raw]:
    """The stand-ins the producers were built with, in order (no broker is contacted)."""
    made: list[Raw] = []

    def build(conf: dict[str, Any]) -> Raw:
        made.append(Raw(conf))
        return made[-1]

    monkeypatch.setattr(producer_module, "_RawProducer", build)
    monkeypatch.setattr(producer_module, "check_connected", lambda *a: None)
    monkeypatch.setattr(deadline, "GRACE_S", 0.2)
    return made


def _producer() -> Producer:
    # calls get 0.1 s of their own (transaction_timeout, ms) and 0.2 s of grace
    return Producer("127.0.0.1:9092", transactional_id="t-1", transaction_timeout=100)


def test_a_call_that_returns_is_answered_and_one_that_raises_raises() -> None:
    d = Deadline("test", grace_s=0.5)
    assert d.call("adding", 1.0, lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        d.call("dividing", 1.0, lambda: 1 / 0)
    assert d.stuck is None
    d.close()


def test_a_call_past_its_deadline_is_abandoned_and_the_client_is_wedged() -> None:
    d = Deadline("test", grace_s=0.1)
    release = threading.Event()
    with pytest.raises(ClientStuckError, match=r"waiting: no answer 0\.2s after"):
        d.call("waiting", 0.1, release.wait)
    assert d.stuck == "waiting"
    # every later call raises at once, without running
    ran: list[int] = []
    with pytest.raises(ClientStuckError, match="abandoned, stuck in waiting"):
        d.call("another", 10.0, lambda: ran.append(1))
    assert ran == []
    release.set()  # the stuck call returns at last: its thread ends


def test_a_stuck_send_offsets_wedges_the_producer_which_is_let_go(made: list[Raw]) -> None:
    p = _producer()
    raw = made[-1]
    p.begin()
    raw.blocked.add("send_offsets_to_transaction")
    with pytest.raises(ClientStuckError, match="sending offsets to the transaction"):
        p.send_offsets([], object())
    assert p.is_fatal()
    assert p.stuck is not None and "sending offsets" in p.stuck
    with pytest.raises(ClientStuckError):
        p.begin()
    with pytest.raises(ClientStuckError):
        p.abort()
    assert not p.in_transaction
    before = list(raw.calls)
    p.close(5.0, drop_undelivered=True)
    assert raw.calls == before  # no purge, no flush, no abort: let go as it is
    raw.release.set()


@pytest.mark.parametrize("call", ["commit_transaction", "abort_transaction"])
def test_a_stuck_commit_or_abort_is_abandoned_too(made: list[Raw], call: str) -> None:
    p = _producer()
    raw = made[-1]
    p.begin()
    raw.blocked.add(call)
    with pytest.raises(ClientStuckError):
        p.commit() if call == "commit_transaction" else p.abort()
    assert p.is_fatal()
    raw.release.set()


def test_a_stuck_init_transactions_fails_the_new_producer(
    made: list[Raw], monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def blocking(conf: dict[str, Any]) -> Raw:
        made.append(Raw(conf))
        made[-1].blocked.add("init_transactions")
        made[-1].release = release
        return made[-1]

    monkeypatch.setattr(producer_module, "_RawProducer", blocking)
    with pytest.raises(ClientStuckError, match="initialising transactions"):
        _producer()
    release.set()


def test_a_healthy_producer_closes_its_call_thread(made: list[Raw]) -> None:
    p = _producer()
    p.begin()
    p.send_offsets([], object())
    p.commit()
    name = "kstream-calls-t-1"
    assert any(t.name == name for t in threading.enumerate())
    p.close(1.0, drop_undelivered=True)
    end = time.monotonic() + 5
    while any(t.name == name for t in threading.enumerate()) and time.monotonic() < end:
        time.sleep(0.01)
    assert not any(t.name == name for t in threading.enumerate())


@pytest.mark.parametrize("call", ["send_offsets_to_transaction", "begin_transaction"])
def test_a_fenced_error_raised_by_a_call_makes_the_producer_fatal_and_fenced(
    made: list[Raw], call: str
) -> None:
    """librdkafka raises the fatal _FENCED from the call, and reports it to the error callback
    only at the next poll, which a failed producer may never get: `is_fatal` and `fenced` must
    see it anyway, or the runtime keeps the fenced producer (issue 44's fence loop, seen on
    Apache Kafka after a user function outlived the transaction timeout)."""
    p = _producer()
    raw = made[-1]
    if call != "begin_transaction":
        p.begin()
    raw.raising[call] = KafkaError(
        KafkaError._FENCED, "Failed to add offsets to transaction", fatal=True
    )
    assert not p.is_fatal()
    with pytest.raises(ProducerFencedError):
        p.send_offsets([], object()) if call != "begin_transaction" else p.begin()
    assert p.is_fatal()
    assert p.fenced()
