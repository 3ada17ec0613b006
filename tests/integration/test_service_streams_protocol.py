"""`kstreamd run` under `rebalance_protocol="streams"` (KIP-1071): two processes of one app, the
broker's coordinator assigning their tasks, and every key query answered from either instance
with the owner's exact count, routed by the group's own assignment (each member sends its
`--http` address; the coordinator tells every member which endpoint runs which partitions)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integration.test_service_run import APP_MODULE, KSTREAMD, TOKEN, WORDS, get, wait_until
from support.groups import fast_group_env

from kstream.kafka import Admin, Producer
from kstream.kafka.broker import free_port
from kstream.kafka.partitioner import default_partition

pytestmark = pytest.mark.kafka_feature("streams_group_protocol")


@pytest.fixture(scope="module")
def instances(
    kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], dict[str, int], list[Path]]]:
    bootstrap = kafka_broker.bootstrap_servers
    tmp = tmp_path_factory.mktemp("svc-streams")
    suffix = str(int(time.time() * 1000))
    lines, out, prices = f"ss-lines-{suffix}", f"ss-counts-{suffix}", f"ss-prices-{suffix}"
    (tmp / "ss_app.py").write_text(APP_MODULE.format(lines=lines, out=out, prices=prices))
    admin = Admin(bootstrap)
    for t in (lines, out, prices):
        admin.create_topic(t, 4)
    expected: dict[str, int] = {}
    producer = Producer(bootstrap)
    for i in range(200):
        words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(3)]
        for w in words:
            expected[w] = expected.get(w, 0) + 1
        producer.produce(lines, " ".join(words).encode(), f"line-{i}".encode())
    producer.flush()
    env = {**os.environ, "PYTHONPATH": str(tmp), "PYTHONUNBUFFERED": "1", **fast_group_env()}
    env["KSTREAM_HTTP_TOKEN"] = TOKEN
    env["KSTREAM_REBALANCE_PROTOCOL"] = "streams"
    procs: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    logs: list[Path] = []
    for n in range(2):
        env["KSTREAM_STATE_DIR"] = str(tmp / f"state-{n}")
        port = free_port()
        log = tmp / f"instance-{n}.log"
        procs.append(
            subprocess.Popen(
                [
                    *KSTREAMD,
                    *("run", "ss_app:topology", "--app-id", f"ss-app-{suffix}"),
                    *("--bootstrap-servers", bootstrap, "--http", f"127.0.0.1:{port}"),
                    *("--instance-id", f"instance-{n}"),
                ],
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=tmp,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
        logs.append(log)
    try:

        def both_hold_tasks() -> bool:
            owned = []
            for url in urls:
                try:
                    status, body = get(url + "/stores")
                except OSError:
                    return False
                if status != 200:
                    return False
                owned.append(body["stores"][0]["local_partitions"])
            return all(owned) and sorted(owned[0] + owned[1]) == [0, 1, 2, 3]

        wait_until("both instances to hold tasks", both_hold_tasks, 90, logs)
        yield urls, expected, logs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_every_key_is_answered_exactly_from_either_instance(
    instances: tuple[list[str], dict[str, int], list[Path]],
) -> None:
    urls, expected, logs = instances

    wrong: list[Any] = []

    def exact_everywhere() -> bool:
        wrong[:] = [
            (url, w, n, answer)
            for url in urls
            for w, n in expected.items()
            if (answer := get(url + f"/stores/counts/keys/{w}"))[1].get("value") != n
        ]
        return not wrong

    deadline = time.monotonic() + 60
    while not exact_everywhere() and time.monotonic() < deadline:
        time.sleep(0.5)
    tails = "".join(f"\n--- {p}:\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    assert not wrong, f"{len(wrong)} answers not exact, e.g. {wrong[:3]}{tails}"
    routed = 0
    for w in expected:
        owner = get(urls[0] + f"/stores/counts/owner/{w}")[1]
        assert owner["partition"] == default_partition(w.encode(), 4)
        routed += not owner["local"]
    assert routed > 0, "no key needed routing"
