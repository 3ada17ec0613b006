"""The Grafana dashboard queries real data: Prometheus scrapes a kstreamd process under load.

Every PromQL expression of every panel must return at least one series through Prometheus's
HTTP API, so the dashboards can only use metrics that exist. The alert rules and the sample
Prometheus config pass `promtool check` and the rules' unit tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kstream.kafka import Admin, Producer
from kstream.kafka.broker import free_port

ROOT = Path(__file__).parents[2]
GRAFANA = ROOT / "grafana"
KSTREAMD = [sys.executable, str(ROOT / "cmd" / "kstreamd" / "kstreamd")]
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="needs the prometheus Debian package (prometheus, promtool)",
)
APP_MODULE = """
from kstream.dsl import StreamBuilder

def topology():
    b = StreamBuilder()
    users = b.table("{users}", key_serde="string", value_serde="string", store="users")
    (
        b.stream("{clicks}", key_serde="string", value_serde="string")
        .join(users, lambda click, region: click + "@" + region)
        .group_by_key()
        .count(store="clicks-per-user")
        .to_stream()
        .to("{out}", key_serde="string", value_serde="long")
    )
    return b.build()
"""


def panel_queries() -> list[tuple[str, str]]:
    dash = json.loads((GRAFANA / "dashboards" / "kstream.json").read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_dashboard_panels_use_the_fixed_datasource() -> None:
    dash = json.loads((GRAFANA / "dashboards" / "kstream.json").read_text())
    prov = (GRAFANA / "provisioning" / "datasources" / "kstream-prometheus.yml").read_text()
    assert "uid: kstream-prometheus" in prov
    assert dash["panels"]
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "kstream-prometheus", p["title"]
        assert p["targets"], p["title"]
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for word in (
        "in",
        "out",
        "latency",
        "lag",
        "commit",
        "abort",
        "dropped",
        "store",
        "restore",
        "rebalances",
        "state",
    ):
        assert word in titles


@needs_prometheus
def test_promtool_checks_config_and_rules_and_runs_rule_tests() -> None:
    prom = GRAFANA / "prometheus"
    for args in (
        ["check", "config", "prometheus.yml"],
        ["check", "rules", "kstream-alerts.yml"],
        ["test", "rules", "kstream-alerts.test.yml"],
    ):
        proc = subprocess.run(
            [PROMTOOL or "promtool", *args], cwd=prom, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}{proc.stderr}"


class Load(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(bootstrap)
        self.topic = topic
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.wait(0.05):
            for _ in range(50):
                self.producer.produce(self.topic, b"/page", f"user-{i % 10}".encode())
                i += 1
            self.producer.poll(0)
        self.producer.flush()


def query(base: str, expr: str) -> list[Any]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


@pytest.fixture(scope="module")
def prometheus_and_kstreamd(
    kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if PROMETHEUS is None:
        pytest.skip("needs the prometheus Debian package")
    bootstrap = kafka_broker.bootstrap_servers
    tmp = tmp_path_factory.mktemp("prom")
    suffix = str(int(time.time() * 1000))
    clicks, users, out = f"dash-clicks-{suffix}", f"dash-users-{suffix}", f"dash-out-{suffix}"
    (tmp / "dash_app.py").write_text(APP_MODULE.format(clicks=clicks, users=users, out=out))
    admin = Admin(bootstrap)
    for t in (clicks, users, out):
        admin.create_topic(t, 2)
    producer = Producer(bootstrap)
    for i in range(10):
        producer.produce(users, b"eu", f"user-{i}".encode())
    producer.flush()
    http_port, prom_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(tmp), "PYTHONUNBUFFERED": "1"}
    klog = tmp / "kstreamd.log"
    kproc = subprocess.Popen(
        [*KSTREAMD, "run", "dash_app:topology", "--app-id", f"dash-{suffix}",
         "--bootstrap-servers", bootstrap, "--http", f"127.0.0.1:{http_port}"],
        stdout=klog.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp,
    )  # fmt: skip
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: kstream\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{http_port}']\n"
    )
    plog = tmp / "prometheus.log"
    pproc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=plog.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    load = Load(bootstrap, clicks)
    load.start()
    try:
        yield f"http://127.0.0.1:{prom_port}"
    finally:
        load.stop.set()
        load.join(30)
        for p in (pproc, kproc):
            p.terminate()
        for p in (pproc, kproc):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@needs_prometheus
def test_every_panel_query_returns_data_from_a_real_prometheus(
    prometheus_and_kstreamd: str,
) -> None:
    base = prometheus_and_kstreamd
    pending = {f"{title}: {expr}": expr for title, expr in panel_queries()}
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for name, expr in list(pending.items()):
            try:
                if query(base, expr):
                    del pending[name]
            except OSError:
                break  # Prometheus still starting
        if pending:
            time.sleep(1)
    assert not pending, "panel queries without data after 120s:\n" + "\n".join(pending)
    up = query(base, 'up{job="kstream"}')
    assert up and up[0]["value"][1] == "1"
    rate = query(base, "sum(rate(kstream_records_consumed_total[1m]))")
    assert float(rate[0]["value"][1]) > 0, "Prometheus saw no throughput"
