"""A stuck producer is abandoned for a new one, and a broker outage is waited out, not counted.

The real stream thread runs one loop turn at a time over the mock clients
(tests/support/mock_runtime.py); outputs must stay exact through each fault.

- A producer call past its deadline raises `ClientStuckError` (kstream.kafka.deadline): the
  failure table routes it to `Recovery.ABANDON_PRODUCER`, and the thread rolls the shared
  transaction back and goes on with one new producer, the stuck one let go.
- While Kafka does not answer (the thread's probe, `kstream.runtime.outage`), failures count
  nothing against `MAX_RETRIES`, and a recovery that needs a new producer builds it only once
  Kafka answers again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import support.mock_runtime as mock_runtime
from support.mock_runtime import SRC, cluster_with_input, counts, running

import kstream.runtime.outage as outage
from kstream.errors import KafkaClientError
from kstream.kafka.errors import ClientStuckError
from kstream.runtime.failures import FAILURE_TABLE, MAX_RETRIES, Recovery, route
from kstream.testing import MockProducer
from kstream.testing.supplier import MockClientSupplier

EXACT = [("a", 1), ("b", 1), ("b", 2), ("c", 1)]


class StuckProducer(MockProducer):
    """A mock producer whose first `send_offsets` is abandoned at its deadline, as the real
    one's is (kstream.kafka.deadline): the call raises ClientStuckError, and the producer is
    wedged from then on: every transactional call raises it again, `close` lets it go."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stuck: str | None = None
        self.closed_while_stuck = 0

    def _wedged(self) -> None:
        if self.stuck is not None:
            raise ClientStuckError(f"the client was abandoned, stuck in {self.stuck}")

    def is_fatal(self) -> bool:
        return self.stuck is not None or super().is_fatal()

    def begin(self) -> None:
        self._wedged()
        super().begin()

    def send_offsets(self, *args: Any, **kwargs: Any) -> None:
        self._wedged()
        self.stuck = "sending offsets to the transaction"
        raise ClientStuckError("sending offsets to the transaction: no answer 40s after it began")

    def commit(self, timeout: float | None = None) -> None:
        self._wedged()
        super().commit(timeout)

    def abort(self, timeout: float | None = None) -> None:
        try:
            self._wedged()
        finally:
            self._txn = None
        super().abort(timeout)

    def close(self, timeout: float = 30.0, *, drop_undelivered: bool = False) -> None:
        if self.stuck is not None:
            self.closed_while_stuck += 1
            return
        super().close(timeout, drop_undelivered=drop_undelivered)


class Supplier(MockClientSupplier):
    """Hands out a `StuckProducer` as the first transactional producer; records each one."""

    made: list[Any]

    def producer(self, config: Any) -> Any:
        if config.transactional_id is not None and not any(
            isinstance(p, StuckProducer) for p in self.producers
        ):
            p = StuckProducer(
                self.cluster,
                transactional_id=config.transactional_id,
                idempotent=config.idempotent,
                track_offsets=config.track_offsets,
            )
            self.producers.append(p)
            return p
        return super().producer(config)


class StuckFlush(MockProducer):
    """A mock idempotent producer whose first `flush` is abandoned at its deadline: wedged
    from then on (every flush raises ClientStuckError again)."""

    stuck: str | None = None

    def flush(self, timeout: float = 30.0) -> None:
        if self.stuck is None:
            self.stuck = "flushing"
        raise ClientStuckError("flushing: no answer 40s after the call began")

    def close(self, timeout: float = 30.0, *, drop_undelivered: bool = False) -> None:
        pass  # let go


class FlushSupplier(MockClientSupplier):
    """Hands out a `StuckFlush` as the first producer."""

    def producer(self, config: Any) -> Any:
        if not self.producers:
            p = StuckFlush(self.cluster, idempotent=True, track_offsets=config.track_offsets)
            self.producers.append(p)
            return p
        return super().producer(config)


def test_at_least_once_replaces_a_producer_stuck_in_its_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mock_runtime, "MockClientSupplier", FlushSupplier)
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "at_least_once") as r:
        r.turn(4)
        assert isinstance(r.supplier.producers[0], StuckFlush)
        assert all(rt.producer is not r.supplier.producers[0] for rt in r.thread.tasks.values())
    assert sorted(counts(cluster)) == EXACT
    assert cluster.committed("app", SRC, 0) == 2


def test_a_stuck_client_call_is_routed_to_abandoning_the_producer() -> None:
    assert route(ClientStuckError("send_offsets: no answer")) is Recovery.ABANDON_PRODUCER
    kinds = [kind for kind, _ in FAILURE_TABLE]
    # before the client errors' catch-all, which would only retry with the stuck producer
    assert kinds.index(ClientStuckError) < kinds.index(KafkaClientError)


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_stuck_send_offsets_is_abandoned_for_a_new_producer_and_outputs_stay_exact(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mock_runtime, "MockClientSupplier", Supplier)
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        r.turn(4)
        stuck = [p for p in r.supplier.producers if isinstance(p, StuckProducer)]
        assert len(stuck) == 1 and stuck[0].stuck is not None
        # the stuck one is let go, and no task writes through it any more
        assert all(rt.producer is not stuck[0] for rt in r.thread.tasks.values())
        assert r.thread.task_manager.retries.failures <= 1
        assert r.app.metrics.txn_aborted == 1
    assert sorted(counts(cluster)) == EXACT
    assert cluster.committed("app", SRC, 0) == 2


def test_exactly_once_v2_builds_one_new_producer_for_a_stuck_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback's abort fails at once on the stuck producer and replaces it; the recovery
    does not replace the new one again (each start fences the one before for nothing)."""
    monkeypatch.setattr(mock_runtime, "MockClientSupplier", Supplier)
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "exactly_once_v2") as r:
        r.poll()
        made = len(r.supplier.producers)
        r.commit()
        assert len(r.supplier.producers) == made + 1
        r.turn(3)
    assert sorted(counts(cluster)) == EXACT


class Probe:
    """The thread's probe of Kafka: `away` answers of no, then yes; every call is logged."""

    def __init__(self, away: int, log: list[str]) -> None:
        self.away = away
        self.log = log

    def __call__(self, timeout_s: float) -> bool:
        answers = self.away <= 0
        self.away -= 1
        self.log.append("answers" if answers else "away")
        return answers


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "RETRY_S", 0.0)


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_failures_while_kafka_does_not_answer_spend_no_retries(
    tmp_path: Path, guarantee: str, quick: None
) -> None:
    """More failed commits in a row than MAX_RETRIES, each while Kafka is away: the thread
    waits each outage out and carries on; outputs exact."""
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        log: list[str] = []
        probe = Probe(0, log)
        r.thread.kafka_probe = probe
        cluster.fail_next_commit(MAX_RETRIES + 10)
        for _ in range(MAX_RETRIES + 20):
            probe.away = 2  # away when the failure is seen, back two probes later
            r.turn()
        assert r.thread.task_manager.retries.failures == 0
        assert r.thread.outage.outages >= MAX_RETRIES + 10
    assert sorted(counts(cluster)) == EXACT


def test_failures_while_kafka_answers_still_end_the_thread(tmp_path: Path, quick: None) -> None:
    """The outage is no blanket excuse: a broker that answers and keeps failing a commit
    (the same error every time) uses the retries up, as before."""
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "exactly_once_v2") as r:
        r.thread.kafka_probe = Probe(0, [])
        cluster.fail_next_commit(MAX_RETRIES + 10)
        with pytest.raises(KafkaClientError):
            r.turn(MAX_RETRIES + 10)
        assert r.thread.outage.outages == 0


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_new_producer_is_built_only_once_kafka_answers_again(
    tmp_path: Path, guarantee: str, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timed-out transaction needs a new producer, whose start would fail while Kafka is
    away (its start-up check gives up after connect_timeout) and stop the app: the recovery
    waits for Kafka first."""
    log: list[str] = []

    class Recording(MockClientSupplier):
        def producer(self, config: Any) -> Any:
            log.append("new producer")
            return super().producer(config)

    monkeypatch.setattr(mock_runtime, "MockClientSupplier", Recording)
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        r.poll()  # the batch is processed: its transaction is open
        r.thread.kafka_probe = Probe(3, log)
        log.clear()
        cluster.time_out_transactions()
        r.turn(4)
        first = log.index("new producer")
        assert log[:first] == ["away", "away", "away", "answers"]
        assert r.thread.task_manager.retries.failures == 0
    assert sorted(counts(cluster)) == EXACT
