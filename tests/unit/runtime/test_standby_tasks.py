"""Standby tasks (kstream.runtime.standby) on the mock cluster: they follow the changelog of a
task another instance runs, report how far behind they are, answer stale reads, and hand their
stores to the task's new active copy, whose restore then reads only the tail.

One app ("one") runs the word count; a second app ("two") on the same cluster never joins the
group: its standbys are driven by hand, with a registry stand-in that says "one" runs the
counting task.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from support.mock_runtime import Runner, cluster_with_input, send

from kstream.runtime.instances import InstanceInfo
from kstream.runtime.task_restore import restore_tasks
from kstream.service.http import HttpServer
from kstream.service.probe import attach
from kstream.service.query import AppService
from kstream.testing import MockCluster

COUNTING = 1  # the word count's sub-topology with the store (after the repartition)
TASK = (COUNTING, 0)


class Registry:
    """The instance registry as the standbys see it: `one` runs the counting task."""

    def __init__(self, me: str, counting_topic: str) -> None:
        self.instance_id = me
        self.members = [InstanceInfo("one", "", {counting_topic: [0]}, offset=1)]
        self.published: list[tuple[list[tuple[str, int]], list[tuple[str, int]]]] = []

    def live(self) -> list[InstanceInfo]:
        return self.members

    def wait_caught_up(self, timeout: float) -> bool:
        return True

    def publish(
        self, partitions: Iterable[tuple[str, int]], standbys: Iterable[tuple[str, int]] = ()
    ) -> bool:
        self.published.append((list(partitions), list(standbys)))
        return True


@contextmanager
def two_instances(tmp_path: Path, cluster: MockCluster) -> Iterator[tuple[Runner, Runner]]:
    """`one` (the active) and `two` (keeps standbys, never polls its group consumer)."""
    one = Runner(cluster, tmp_path / "one", "exactly_once_v2", num_standby_replicas=1)
    two = Runner(cluster, tmp_path / "two", "exactly_once_v2", num_standby_replicas=1)
    topic = one.thread.ctx.compiled.subtopologies[COUNTING].source_topics[0]
    two.thread.standbys.membership = Registry("two", topic)
    two.app._stream = two.thread  # the app's queries read this thread's tasks and standbys
    try:
        yield one, two
    finally:
        one.close()
        two.close()


def exposed_lag(runner: Runner) -> dict[tuple[str, str], float]:
    """`kstream_standby_lag_records` as /metrics exposes it, per (store, partition)."""
    text = runner.app.metrics.render().decode()
    return {
        (s.labels["store"], s.labels["partition"]): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "kstream_standby_lag_records"
        for s in fam.samples
    }


def changelog_end(cluster: MockCluster) -> int:
    return cluster.end_offset("app-counts-changelog", 0)


def test_a_standby_follows_the_changelog_and_its_lag_is_a_metric(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        standbys = two.thread.standbys
        standbys._batch = 1  # one changelog record per turn: the lag shows
        standbys.tick({}, now=0.0)
        assert set(standbys.tasks) == {TASK}  # never with its active ("one" runs it)
        end = changelog_end(cluster)
        assert end >= 3
        assert two.app.metrics.standby_lag[("counts", 0)] == end - 1
        assert exposed_lag(two) == {("counts", "0"): end - 1}
        for _ in range(end):
            standbys.tick({}, now=0.0)
        assert two.app.metrics.standby_lag[("counts", 0)] == 0
        assert exposed_lag(two) == {("counts", "0"): 0}
        assert two.app.metrics.standby_tasks == 1
        assert two.app.metrics.standby_records == end
        # it published what it holds: no active task, the standby's input partition
        published = standbys.membership.published[-1]  # type: ignore[union-attr]
        assert published == (
            [],
            [(one.thread.ctx.compiled.subtopologies[COUNTING].source_topics[0], 0)],
        )


def test_stale_reads_answer_from_the_standby_only_when_asked(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        two.thread.standbys.tick({}, now=0.0)
        assert two.app.query("counts", "b") is None  # not an active partition here
        assert two.app.query("counts", "b", enable_stale_stores=True) == 2
        assert one.thread.tasks[TASK].task.stores["counts"].get("b") == 2
        send(cluster, "b")
        one.turn(3)
        two.thread.standbys.tick({}, now=0.0)
        assert dict(two.app.store("counts", enable_stale_stores=True).all()) == {
            "a": 1,
            "b": 3,
            "c": 1,
        }


def test_the_new_active_task_restores_only_the_tail_from_the_standby(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        standbys = two.thread.standbys
        standbys.tick({}, now=0.0)
        caught_up = changelog_end(cluster)
        send(cluster, "c d")  # the standby does not see this one before the takeover
        one.turn(3)
        handed = standbys.take(TASK)
        assert set(handed) == {"counts"} and TASK not in standbys.tasks
        ctx = two.thread.ctx
        [[result]] = restore_tasks(
            ctx, [TASK], {}, {TASK: handed}, transactional=two.thread.commits.transactional
        )
        assert result.store is handed["counts"]
        assert result.start_offset == caught_up  # from the standby's checkpoint, not from 0
        assert result.applied == 2  # the tail: c and d
        assert result.end_offset == changelog_end(cluster)
        assert {k: v for k, v in result.store.all()} == {"a": 1, "b": 2, "c": 2, "d": 1}
        result.store.close()


class _Running:
    """An active task as the standbys see it (its input partitions)."""

    def __init__(self, *tps: tuple[str, int]) -> None:
        self.tps = list(tps)


def test_without_a_registry_a_task_given_up_is_closed_not_kept(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with two_instances(tmp_path, cluster) as (one, _two):
        one.turn(3)
        rt = one.thread.tasks[TASK]
        stores = rt.close_keeping_stores()
        # "one" has no registry (standbys off): everything comes back to be closed
        assert one.thread.standbys.park(TASK, stores) == stores
        for s in stores:
            s.close()
        one.thread.tasks.clear()
        one.thread.task_of.clear()
        one.thread.commits.release_producer(rt.producer)


def test_a_task_given_up_stays_as_a_standby_until_placed_elsewhere(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        standbys = two.thread.standbys
        assert standbys.take(TASK) == {}  # no standby there yet
        standbys.tick({}, now=0.0)
        kept = standbys.take(TASK)
        assert kept and standbys.tasks == {}
        assert standbys.park(TASK, kept.values()) == []  # given up: kept as a standby
        assert set(standbys.tasks) == {TASK}
        # a third instance with nothing to run joins; "two" now runs the other task, so the
        # least loaded instance, "three", is to keep the standby and "two" drops its copy
        registry = standbys.membership
        assert isinstance(registry, Registry)
        registry.members.append(InstanceInfo("three", "", {}, offset=2))
        source = one.thread.ctx.compiled.subtopologies[0].source_topics[0]
        standbys.tick({(0, 0): _Running((source, 0))}, now=1.0)
        assert standbys.tasks == {}
        assert two.app.metrics.standby_tasks == 0
        assert ("counts", 0) not in two.app.metrics.standby_lag


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_key_queries_answer_from_the_standby_with_stale_true(tmp_path: Path) -> None:
    """`/stores/{store}/keys/{key}?stale=true` (Kafka's enableStaleStores) answers from this
    instance's standby copy; without it the query goes to the owner, whom this registry-less
    instance cannot reach (503)."""
    cluster = cluster_with_input("a b", "b c")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        two.thread.standbys.tick({}, now=0.0)
        service = AppService(two.app, attach(two.app), None, "two")
        loc = service.locate("counts", "b")
        assert not loc.local and loc.standby_local
        server = HttpServer(service, "127.0.0.1", 0).start()
        try:
            status, body = _get(server.url + "/stores/counts/keys/b?stale=true")
            assert (status, body["value"], body["instance_id"]) == (200, 2, "two")
            status, body = _get(server.url + "/stores/counts/keys/b?stale=true&local=true")
            assert (status, body["value"]) == (200, 2)
            status, body = _get(server.url + "/stores/counts/keys/b?local=true")
            assert status == 503, body  # its active partitions only: none here
            status, body = _get(server.url + "/stores/counts/keys/b?stale=maybe")
            assert status == 400, body
        finally:
            server.close()


def test_an_instance_joining_a_running_app_warms_up_its_standbys_first(tmp_path: Path) -> None:
    """KIP-441's warm-up: before joining, "two" follows the standbys placed on it until each
    is within acceptable_recovery_lag of its changelog's end (here 0, one record a turn)."""
    cluster = cluster_with_input("a b", "b c", "d e")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        standbys = two.thread.standbys
        standbys._batch = 1
        assert standbys.warm_up(threading.Event(), acceptable=0)
        assert set(standbys.tasks) == {TASK}
        assert standbys.lag() == {("app-counts-changelog", 0): 0}
        assert two.app.query("counts", "b", enable_stale_stores=True) == 2


def test_no_warm_up_when_no_other_instance_runs_tasks_or_when_turned_off(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b")
    with two_instances(tmp_path, cluster) as (one, two):
        one.turn(3)
        standbys = two.thread.standbys
        assert not standbys.warm_up(threading.Event(), acceptable=-1)
        registry = standbys.membership
        assert isinstance(registry, Registry)
        registry.members = [InstanceInfo("one", "", {}, offset=1)]  # runs nothing
        assert not standbys.warm_up(threading.Event(), acceptable=0)
        assert standbys.tasks == {}
