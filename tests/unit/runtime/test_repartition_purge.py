"""Repartition topics are purged with DeleteRecords up to the committed offsets after commits,
at most every `repartition_purge_interval`, one request at a time, without waiting for the
broker and without ever failing the app; never on Tansu (its DeleteRecords panics)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import DeletedRecords  # type: ignore[attr-defined,unused-ignore]
from support.mock_runtime import cluster_with_input, latest, running, send

from kstream import Config
from kstream.kafka.supplier import ClientConfig
from kstream.runtime.purge import RepartitionPurge
from kstream.runtime.tasks import RuntimeContext

REPARTITION = "app-counts-repartition"  # support.mock_runtime's word count
TP = tuple[str, int]


@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "exactly_once", "at_least_once"])
def test_commits_purge_the_repartition_topic_up_to_the_committed_offset(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee, repartition_purge_interval=0) as r:
        r.turn(3)
        committed = cluster.committed("app", REPARTITION, 0)
        assert committed == cluster.end_offset(REPARTITION, 0) == 4  # the four words
        assert cluster.start_offset(REPARTITION, 0) == committed
        assert cluster.start_offset("words", 0) == 0  # input topics are the user's
        send(cluster, "c d e")
        r.turn(3)
        assert cluster.start_offset(REPARTITION, 0) == 7
        assert r.thread.purge.requests == 2  # one per commit that moved the offset
    assert latest(cluster) == {"a": 1, "b": 2, "c": 2, "d": 1, "e": 1}


def test_no_purge_before_the_interval(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "exactly_once_v2") as r:  # the default: every 30 s
        r.turn(3)
        assert cluster.committed("app", REPARTITION, 0) == 4
        assert r.thread.purge.requests == 0
        assert cluster.start_offset(REPARTITION, 0) == 0


def test_nothing_is_purged_on_tansu(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(
        cluster, tmp_path, "exactly_once_v2", repartition_purge_interval=0, broker_compat="tansu"
    ) as r:
        r.turn(3)
        assert not r.thread.purge.enabled
        assert r.thread.purge.requests == 0
        assert cluster.start_offset(REPARTITION, 0) == 0


# --- the purge on its own: a clock, tasks and an admin client the test controls -------------


@dataclass
class Task:
    committed: dict[TP, int] = field(default_factory=dict)


class Admin:
    """Answers DeleteRecords only when the test says so."""

    def __init__(self) -> None:
        self.requests: list[dict[TP, int]] = []
        self.futures: list[dict[TP, Future[Any]]] = []
        self.refuse: Exception | None = None

    def delete_records(self, offsets: Mapping[TP, int]) -> dict[TP, Future[Any]]:
        if self.refuse is not None:
            raise self.refuse
        self.requests.append(dict(offsets))
        futures: dict[TP, Future[Any]] = {tp: Future() for tp in offsets}
        self.futures.append(futures)
        return futures

    def answer(self, error: Exception | None = None) -> None:
        for tp, f in self.futures[-1].items():
            if error is None:
                f.set_result(DeletedRecords(self.requests[-1][tp]))
            else:
                f.set_exception(error)

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_purge(admin: Admin, clock: Clock, **config: Any) -> RepartitionPurge:
    made: list[ClientConfig] = []

    def new_admin(cfg: ClientConfig) -> Admin:
        made.append(cfg)
        return admin

    ctx = SimpleNamespace(
        config=Config.from_mapping(
            {"repartition_purge_interval": 1_000, "broker_compat": "none", **config}
        ),
        compiled=SimpleNamespace(repartition_topics={"app-r": None, "app-s": None}),
        bootstrap_servers="broker:9092",
        client_supplier=SimpleNamespace(admin=new_admin),
    )
    return RepartitionPurge(cast("RuntimeContext", ctx), clock=clock)


def test_one_request_at_a_time_with_the_offsets_that_moved() -> None:
    admin, clock = Admin(), Clock()
    purge = make_purge(admin, clock)
    task = Task({("in", 0): 50, ("app-r", 0): 10, ("app-s", 1): 3})
    purge.after_commit([task])
    assert admin.requests == []  # within the first interval
    clock.now += 1.0
    purge.after_commit([task, Task({("app-r", 1): 0})])
    # the repartition partitions only, and only offsets past what was purged (0 is nothing)
    assert admin.requests == [{("app-r", 0): 10, ("app-s", 1): 3}]
    task.committed[("app-r", 0)] = 20
    clock.now += 5.0
    purge.after_commit([task])
    assert len(admin.requests) == 1  # the first request is unanswered: no second one
    admin.answer()
    purge.after_commit([task])
    assert purge.purged == {("app-r", 0): 10, ("app-s", 1): 3}
    assert admin.requests[1:] == [{("app-r", 0): 20}]  # app-s[1] did not move
    admin.answer()
    clock.now += 5.0
    purge.after_commit([task])
    assert len(admin.requests) == 2  # nothing moved since
    assert purge.purged == {("app-r", 0): 20, ("app-s", 1): 3}


def test_failures_are_logged_not_raised_and_the_next_purge_asks_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="kstream.runtime")
    admin, clock = Admin(), Clock()
    purge = make_purge(admin, clock)
    task = Task({("app-r", 0): 10})

    def purge_later() -> None:
        clock.now += 1.0
        purge.after_commit([task])

    def logged() -> list[tuple[int, str]]:
        out = [(r.levelno, r.getMessage()) for r in caplog.records if "failed" in r.message]
        caplog.clear()
        return out

    purge_later()
    admin.answer(KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT)))
    purge_later()  # takes in the failure and asks again
    assert admin.requests == [{("app-r", 0): 10}] * 2
    [(level, message)] = logged()
    assert level == logging.WARNING
    assert "app-r[0] below 10" in message and "REQUEST_TIMED_OUT" in message
    admin.answer(KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT)))
    purge_later()
    assert [level for level, _ in logged()] == [logging.DEBUG]  # failing on: not news
    admin.answer()
    purge_later()
    assert purge.purged == {("app-r", 0): 10}
    task.committed[("app-r", 0)] = 30
    admin.refuse = KafkaException(KafkaError(KafkaError._TRANSPORT))
    purge_later()  # the request cannot even be sent
    [(level, message)] = logged()
    assert level == logging.WARNING and "_TRANSPORT" in message  # failing again after a success
    admin.refuse = None
    purge_later()
    admin.answer()
    purge_later()
    assert purge.purged == {("app-r", 0): 30}


def test_an_admin_client_that_cannot_be_made_is_retried_at_the_next_interval() -> None:
    clock, attempts = Clock(), []
    admin = Admin()

    def new_admin(cfg: ClientConfig) -> Admin:
        attempts.append(cfg)
        if len(attempts) == 1:
            raise ConnectionError("broker unreachable")
        return admin

    purge = make_purge(admin, clock)
    purge._ctx.client_supplier = SimpleNamespace(admin=new_admin)
    task = Task({("app-r", 0): 10})
    clock.now += 1.0
    purge.after_commit([task])
    purge.after_commit([task])  # the same interval: no second attempt
    assert len(attempts) == 1 and admin.requests == []
    clock.now += 1.0
    purge.after_commit([task])
    assert len(attempts) == 2 and admin.requests == [{("app-r", 0): 10}]
    assert attempts[-1].bootstrap_servers == "broker:9092"


def test_a_topology_without_repartition_topics_never_purges() -> None:
    clock = Clock()
    purge = RepartitionPurge(
        cast(
            "RuntimeContext",
            SimpleNamespace(
                config=Config(repartition_purge_interval=0),
                compiled=SimpleNamespace(repartition_topics={}),
            ),
        ),
        clock=clock,
    )
    assert not purge.enabled
    clock.now += 10
    purge.after_commit([Task({("in", 0): 5})])
    assert purge.requests == 0
