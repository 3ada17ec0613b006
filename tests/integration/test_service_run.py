"""`kstreamd run` as operators use it: two real processes of one app on the shared broker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.exposition import lint_exposition
from support.groups import fast_group_env

from kstream.kafka import Admin, Producer
from kstream.kafka.broker import free_port
from kstream.kafka.partitioner import default_partition

KSTREAMD = [sys.executable, str(Path(__file__).parents[2] / "cmd" / "kstreamd" / "kstreamd")]
TOKEN = "s3cret-token"
WORDS = [f"w{i:03d}" for i in range(60)]
APP_MODULE = """
from kstream.dsl import StreamBuilder

def topology():
    b = StreamBuilder()
    (
        b.stream("{lines}", key_serde="string", value_serde="string")
        .flat_map_values(str.split)
        .group_by(lambda _k, w: w, key_serde="string")
        .count(store="counts")
        .to_stream()
        .to("{out}", key_serde="string", value_serde="long")
    )
    # a versioned table (KIP-889): its store answers as-of and range queries (KIP-960/968)
    b.table("{prices}", "string", "string", store="prices", versioned=3_600_000)
    return b.build()
"""
# each price key's versions: (value, timestamp), the third one arriving out of order
PRICES = [f"p{i:02d}" for i in range(12)]
# Recent times: the versioned changelog is compacted by the broker once its records are older
# (by their timestamps, against the wall clock) than min.compaction.lag.ms, history retention
# plus a day, as Kafka Streams configures it; versions from 1970 could be compacted away before
# a restore reads them (the broker drops history a store of 1970 would have dropped long ago).
T0 = int(time.time() * 1000) // 1000 * 1000
PRICE_PUTS = [("v1", T0 + 1_000), ("v3", T0 + 3_000), ("v2", T0 + 2_000)]


@dataclass
class Instance:
    proc: subprocess.Popen[str]
    url: str
    log: Path


def get(url: str, token: str | None = TOKEN) -> tuple[int, Any]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            body = r.read()
            status = r.status
            ctype = r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        body, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    return status, json.loads(body) if ctype.startswith("application/json") else body.decode()


def wait_until(what: str, check: Callable[[], bool], timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tails = "\n".join(f"--- {p}:\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{tails}")


@pytest.fixture(scope="module")
def cluster(
    kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[Instance], dict[str, int], str]]:
    bootstrap = kafka_broker.bootstrap_servers
    tmp = tmp_path_factory.mktemp("svc")
    suffix = str(int(time.time() * 1000))
    lines, out, app_id = f"svc-lines-{suffix}", f"svc-counts-{suffix}", f"svc-app-{suffix}"
    prices = f"svc-prices-{suffix}"
    (tmp / "svc_app.py").write_text(APP_MODULE.format(lines=lines, out=out, prices=prices))
    admin = Admin(bootstrap)
    admin.create_topic(lines, 4)
    admin.create_topic(out, 4)
    admin.create_topic(prices, 4)
    expected: dict[str, int] = {}
    producer = Producer(bootstrap)
    for i in range(400):
        words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(3)]
        for w in words:
            expected[w] = expected.get(w, 0) + 1
        producer.produce(lines, " ".join(words).encode(), f"line-{i}".encode())
    for value, ts in PRICE_PUTS:
        for p in PRICES:
            producer.produce(prices, value.encode(), p.encode(), timestamp=ts)
    producer.flush()
    env = {**os.environ, "PYTHONPATH": str(tmp), "PYTHONUNBUFFERED": "1"}
    env.update(fast_group_env())  # short group sessions: joins take ~1s instead of ~3s
    env["KSTREAM_HTTP_TOKEN"] = TOKEN
    instances: list[Instance] = []
    for n in range(2):
        # one state directory per instance, as each would have on its own machine (one
        # directory is locked by the instance that holds it)
        env["KSTREAM_STATE_DIR"] = str(tmp / f"state-{n}")
        port = free_port()
        log = tmp / f"instance-{n}.log"
        proc = subprocess.Popen(
            [
                *KSTREAMD,
                "run",
                "svc_app:topology",
                "--app-id",
                app_id,
                "--bootstrap-servers",
                bootstrap,
                "--http",
                f"127.0.0.1:{port}",
                "--instance-id",
                f"instance-{n}",
            ],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp,
        )
        instances.append(Instance(proc, f"http://127.0.0.1:{port}", log))
    logs = [i.log for i in instances]
    try:

        def both_own_partitions() -> bool:
            owned = []
            for inst in instances:
                try:
                    status, body = get(inst.url + "/stores")
                except OSError:
                    return False
                if status != 200:
                    return False
                owned.append(body["stores"][0]["local_partitions"])
            return all(owned) and sorted(owned[0] + owned[1]) == [0, 1, 2, 3]

        wait_until("both instances to hold partitions", both_own_partitions, 90, logs)

        def all_counted() -> bool:
            for w, n in expected.items():
                status, body = get(instances[0].url + f"/stores/counts/keys/{w}")
                if status != 200 or body["value"] != n:
                    return False
            return True

        wait_until("every word to be counted", all_counted, 60, logs)

        def both_know_every_owner() -> bool:
            # each instance learns the other's partitions from the instances topic: until it
            # has, a key the other holds is answered 503 owner_unknown
            return all(
                get(inst.url + f"/stores/counts/keys/{w}")[0] == 200
                for inst in instances
                for w in expected
            )

        wait_until("both instances to know every key's owner", both_know_every_owner, 30, logs)
        yield instances, expected, app_id
    finally:
        for inst in instances:
            if inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()


def test_a_key_asked_from_either_instance_gives_the_same_exact_value(
    cluster: tuple[list[Instance], dict[str, int], str],
) -> None:
    instances, expected, _ = cluster
    routed = 0
    for w, n in expected.items():
        answers = [get(inst.url + f"/stores/counts/keys/{w}") for inst in instances]
        assert answers[0] == answers[1], w
        status, body = answers[0]
        assert status == 200 and body["value"] == n and body["key"] == w
        owner = get(instances[0].url + f"/stores/counts/owner/{w}")[1]
        assert owner["partition"] == default_partition(w.encode(), 4)
        assert owner["instance_id"] == body["instance_id"]
        routed += not owner["local"]
    assert routed > 0, "no key needed routing: both instances answered everything locally"


def test_a_versioned_store_answers_as_of_and_range_queries_from_either_instance(
    cluster: tuple[list[Instance], dict[str, int], str],
) -> None:
    """Kafka's IQv2 VersionedKeyQuery (`as_of`, KIP-960) and MultiVersionedKeyQuery
    (`/versions`, KIP-968), routed to the key's owner like any key query: each price key has
    v1@1000, v3@3000 and, out of order, v2@2000 (history only)."""
    instances, _, _ = cluster
    v1 = {"value": "v1", "timestamp": T0 + 1_000, "valid_to": T0 + 2_000}
    v2 = {"value": "v2", "timestamp": T0 + 2_000, "valid_to": T0 + 3_000}
    v3 = {"value": "v3", "timestamp": T0 + 3_000, "valid_to": None}

    def versions_of(url: str, key: str) -> Any:
        status, body = get(url + f"/stores/prices/versions/{key}")
        return body.get("versions") if status == 200 else None

    wait_until(
        "the price versions to be served",
        lambda: all(versions_of(i.url, p) == [v3, v2, v1] for i in instances for p in PRICES),
        60,
        [i.log for i in instances],
    )
    for inst in instances:
        for p in PRICES[:4]:
            status, body = get(inst.url + f"/stores/prices/keys/{p}")
            assert (status, {k: body[k] for k in v3}) == (200, v3), body
            status, body = get(inst.url + f"/stores/prices/keys/{p}?as_of={T0 + 2500}")
            assert (status, {k: body[k] for k in v2}) == (200, v2), body
            status, body = get(inst.url + f"/stores/prices/keys/{p}?as_of={T0 + 999}")
            assert (status, body["error"]) == (404, "key_not_found"), body
            status, body = get(
                inst.url + f"/stores/prices/versions/{p}?from={T0 + 1500}&to={T0 + 2000}&order=asc"
            )
            assert (status, body["versions"]) == (200, [v1, v2]), body
    url = instances[0].url
    for path, code in [
        ("/stores/prices/keys/p00?as_of=soon", "bad_request"),
        ("/stores/prices/versions/p00?order=sideways", "bad_request"),
        ("/stores/prices/versions/p00?from=5&to=1", "bad_request"),
        ("/stores/counts/versions/w001", "not_versioned"),
        ("/stores/counts/keys/w001?as_of=5", "not_versioned"),
    ]:
        status, body = get(url + path)
        assert (status, body["error"]) == (400, code), (path, body)


def test_local_true_does_not_route(cluster: tuple[list[Instance], dict[str, int], str]) -> None:
    instances, expected, _ = cluster
    statuses = set()
    for w in expected:
        owner = get(instances[0].url + f"/stores/counts/owner/{w}")[1]
        status, _ = get(instances[0].url + f"/stores/counts/keys/{w}?local=true")
        statuses.add(status)
        assert (status == 200) == owner["local"], (w, status, owner)
    assert statuses == {200, 503}


def test_token_is_required_except_for_health(
    cluster: tuple[list[Instance], dict[str, int], str],
) -> None:
    url = cluster[0][0].url
    for path in ("/metrics", "/stores", "/topology", "/stores/counts/keys/w001"):
        status, body = get(url + path, token=None)
        assert status == 401, path
        assert body["error"] == "unauthorized"
        assert get(url + path, token="wrong")[0] == 401
    assert get(url + "/health/live", token=None) == (200, {"state": "RUNNING", "status": "ok"})
    assert get(url + "/health/ready", token=None)[0] == 200


def test_unknown_stores_and_bad_requests_get_json_errors(
    cluster: tuple[list[Instance], dict[str, int], str],
) -> None:
    url = cluster[0][0].url
    status, body = get(url + "/stores/nope/keys/x")
    assert status == 404 and body["error"] == "unknown_store" and "counts" in body["message"]
    status, body = get(url + "/stores/counts/keys/never-seen")
    assert status == 404 and body["error"] == "key_not_found"
    status, body = get(url + "/stores/counts/keys/12?key_type=int")
    assert status == 400 and body["error"] == "bad_key" and "string serde" in body["message"]
    status, body = get(url + "/stores/counts/keys/w001?key_type=nonsense")
    assert status == 400 and body["error"] == "bad_key"
    status, body = get(url + "/topology?format=png")
    assert status == 400 and body["error"] == "bad_format"
    assert get(url + "/nowhere")[0] == 404
    status, text = get(url + "/topology?format=mermaid")
    assert status == 200 and text.startswith("flowchart")


def test_metrics_page_passes_the_lint(cluster: tuple[list[Instance], dict[str, int], str]) -> None:
    consumed = 0.0
    for inst in cluster[0]:
        status, text = get(inst.url + "/metrics")
        assert status == 200
        assert lint_exposition(text) == []
        assert re.search(r'kstream_app_state\{[^}]*state="RUNNING"[^}]*\} 1\.0', text)
        assert "# TYPE kstream_records_consumed_total counter" in text
        consumed += sum(
            float(v)
            for v in re.findall(r"^kstream_records_consumed_total\{[^}]*\} (\S+)$", text, re.M)
        )
    # the first instance to join may have read all 400 lines before the second held a
    # partition: the series of each input partition is on one instance or the other
    assert consumed >= 400


def test_sigterm_commits_and_exits_0(cluster: tuple[list[Instance], dict[str, int], str]) -> None:
    instances, _, app_id = cluster
    for inst in instances:
        inst.proc.send_signal(signal.SIGTERM)
    for inst in instances:
        try:
            code = inst.proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kstreamd did not exit within 45s of SIGTERM:\n{inst.log.read_text()}")
        assert code == 0, inst.log.read_text()[-3000:]
        assert f"kstreamd: app '{app_id}' stopped" in inst.log.read_text()
