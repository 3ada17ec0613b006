"""`App(config={"processes": 2})` under Kafka's consumer group protocol (KIP-848,
`rebalance_protocol="consumer"`) and exactly_once_v2, on Apache Kafka.

Two worker processes of one app (the supervisor on a background thread of this process, as
`App.start()` runs it) share the stateful pipeline's four partitions: both get tasks. One
worker is SIGKILLed while records flow; the supervisor starts it again (the same state
directory, so the same transactional id, which fences its predecessor), the coordinator gives
the dead member's partitions away once the group's session (the group config
consumer.session.timeout.ms, set on the broker) has passed, and a plain read_committed reader
(e2e.independent_reader) finds every count and every sum once.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType

from e2e.pipelines import expected, make_input
from e2e.supervised import APP_MODULE
from e2e.support import Results, check_exact, create_topics, produce, require_kafka
from e2e.test_consumer_protocol_standby import group_type
from e2e.test_incremental_rebalance import _group_session
from kstream import App, AppState
from kstream.kafka.broker import free_port

# Apache Kafka 4.0+ (support.kafka_features): skipped on an older broker
pytestmark = pytest.mark.kafka_feature("consumer_group_protocol")

PARTITIONS = 4
RECORDS = 10_000
KEYS = 200
FIRST = 2_000
DELAY_S = 0.001
"""Per record: each worker processes under 1,000 records/s, so the kill lands mid-stream."""
SESSION_MS = 2000


@pytest.fixture
def app_module(tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[tuple[str, ...]]:
    """(module name, input, counts, sums): e2e.supervised's app module on new topics, importable
    here and by the workers (they start with this process's sys.path)."""
    topics = unique_name("in"), unique_name("counts"), unique_name("sums")
    name = unique_name("kip848procs").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(
        APP_MODULE.format(inp=topics[0], cnt=topics[1], sm=topics[2], delay=DELAY_S)
    )
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
        yield (name, *topics)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


class Fleet:
    """The supervisor's one HTTP address: its workers and their merged metrics."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str) -> bytes:
        try:
            with urllib.request.urlopen(self.url + path, timeout=20) as r:
                return bytes(r.read())
        except urllib.error.HTTPError as e:
            return bytes(e.read())

    def workers(self) -> list[dict[str, Any]]:
        return list(json.loads(self._get("/health/ready"))["workers"])

    def ready(self) -> bool:
        try:
            return all(w["alive"] and w["ready"] for w in self.workers())
        except OSError:
            return False

    def assigned(self) -> dict[str, float]:
        """Input partitions each worker holds (`kstream_assigned_partitions`), by instance id."""
        out: dict[str, float] = {}
        for line in self._get("/metrics").decode().splitlines():
            if line.startswith("kstream_assigned_partitions{"):
                labels, value = line.rsplit(" ", 1)
                out[labels.split('instance_id="')[1].split('"')[0]] = float(value)
        return out


@pytest.mark.timeout(300)
def test_two_worker_processes_under_the_consumer_protocol_survive_a_kill(
    kafka_broker: Any, app_module: tuple[str, ...], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    began = time.monotonic()
    bs = kafka_broker.bootstrap_servers
    module, inp, cnt, sm = app_module
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    app_id = module.replace("_", "-")
    _group_session(bs, app_id, SESSION_MS)
    data = make_input(RECORDS, KEYS)
    produce(bs, inp, data[:FIRST])
    port = free_port()
    app = App(
        f"{module}:topology",
        app_id,
        bs,
        "exactly_once_v2",
        config={
            "processes": 2,
            "rebalance_protocol": "consumer",
            "http": f"127.0.0.1:{port}",
            "state_dir": str(tmp_path / "state"),
            "commit_interval": 50,
            "batch_max_wait": 50,
            "batch_max_records": 200,
            # a transaction the kill leaves open with offsets pending is aborted after 10 s
            "kafka": {"transaction.timeout.ms": 10000},
        },
    )
    fleet = Fleet(f"http://127.0.0.1:{port}")
    res = Results(bs, cnt, sm)

    def wait(done: Callable[[], bool], what: str, secs: float) -> None:
        def checked() -> bool:
            assert app.state != AppState.ERROR, app.error
            return done()

        res.wait(checked, what, secs)

    app.start()
    try:
        counts, _ = expected(data[:FIRST])
        wait(lambda: res.complete(counts), "the first outputs", 120)
        wait(fleet.ready, "both workers ready", 120)
        held: dict[str, float] = {}

        def both_hold_partitions() -> bool:
            nonlocal held
            held = fleet.assigned()
            return len(held) == 2 and all(n > 0 for n in held.values())

        wait(both_hold_partitions, "both workers to hold partitions", 60)
        assert sum(held.values()) == PARTITIONS, held
        assert group_type(bs, app_id) == ConsumerGroupType.CONSUMER
        produce(bs, inp, data[FIRST:])
        target = res.total + 500
        wait(lambda: res.total >= target, f"{target} outputs", 60)
        victim = fleet.workers()[0]
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.monotonic()
        res.poll()
        # mid-stream: outputs of the second part are out, and more of it is still to come
        assert FIRST < res.total < RECORDS, res.total

        def restarted() -> bool:
            return bool(fleet.workers()[0]["restarts"] == 1)

        wait(restarted, "the supervisor to restart the killed worker", 30)
        counts, _ = expected(data)
        wait(lambda: res.complete(counts), "every output after the kill", 180)
        resumed = time.monotonic() - killed
        wait(fleet.ready, "both workers ready again", 120)
        assert app.close(timeout=90)
        assert app.error is None, app.error
        assert app.state == AppState.NOT_RUNNING
    finally:
        app.close(timeout=90)
    verdicts = check_exact(res, data, inp)
    res.close()
    print(
        f"consumer protocol, 2 processes: partitions held {held}; {victim['instance_id']} "
        f"killed, every output {resumed:.1f} s later; "
        + "; ".join(str(v) for v in verdicts)
        + f"; {time.monotonic() - began:.1f} s in all"
    )
