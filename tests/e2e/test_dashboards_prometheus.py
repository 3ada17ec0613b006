"""The Grafana dashboard queries real data: Prometheus scrapes two kstreamd apps under load.

Two apps with different ids run side by side, scraped by one Prometheus configured by
`kstreamd dashboards`. Every PromQL expression of every panel, with the dashboard's variables
set as Grafana would, must return data for each app through Prometheus's HTTP API, so the
dashboard only uses metrics that exist; and no panel may mix the apps: every selector filters
on the job, app and instance variables, and with both apps selected every series a panel shows
belongs to one app. The alert rules and the Prometheus config pass `promtool check` and the
rules' unit tests.
"""

from __future__ import annotations

import json
import os
import re
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
from support.groups import fast_group_env

from kstream.kafka import Admin, Producer
from kstream.kafka.broker import free_port
from kstream.service.dashboards import write_bundle

ROOT = Path(__file__).parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "kstream.json"
KSTREAMD = [sys.executable, str(ROOT / "cmd" / "kstreamd" / "kstreamd")]
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="needs the prometheus Debian package (prometheus, promtool)",
)
# clicks joined with the users table, re-keyed by region (a repartition topic), counted in
# LMDB (so the store reports its size)
APP_MODULE = """
from kstream.dsl import StreamBuilder

def topology():
    b = StreamBuilder()
    users = b.table("{users}", key_serde="string", value_serde="string", store="users")
    (
        b.stream("{clicks}", key_serde="string", value_serde="string")
        .join(users, lambda click, region: region)
        .group_by(lambda user, region: region, key_serde="string")
        .count(store="clicks-per-region")
        .to_stream()
        .to("{out}", key_serde="string", value_serde="long")
    )
    return b.build()
"""
FILTERS = ('job=~"$job"', 'app_id=~"$app"', 'instance_id=~"$instance"')
SCRAPE_S = 1


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def data_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def panel_queries() -> list[tuple[dict[str, Any], str]]:
    return [(p, t["expr"]) for p in data_panels() for t in p["targets"]]


def grafana_expr(expr: str, app: str) -> str:
    """`expr` with the dashboard's variables as Grafana sets them for `app` (a regex)."""
    for var, value in (
        ("$__rate_interval", f"{4 * SCRAPE_S + 6}s"),
        ("$__range", "5m"),
        ("$job", "kstream"),
        ("$app", app),
        ("$instance", ".*"),
    ):
        expr = expr.replace(var, value)
    return expr


def test_the_dashboard_has_variables_rows_and_the_panels_operators_expect() -> None:
    dash = dashboard()
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "job", "app", "instance"]
    prov = (GRAFANA / "provisioning" / "datasources" / "kstream-prometheus.yml").read_text()
    assert "uid: kstream-prometheus" in prov
    assert dash["templating"]["list"][0]["current"]["value"] == "kstream-prometheus"
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Throughput", "Latency", "Lag", "State", "Errors", "Process"]
    for p in data_panels():
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        assert p["fieldConfig"]["defaults"]["unit"] != "recordsps", p["title"]
    titles = " | ".join(p["title"].lower() for p in data_panels())
    for words in (
        "records in",
        "records out",
        "per instance",
        "repartition",
        "busy ratio",
        "end-to-end latency",
        "heatmap",
        "lag in time",
        "max lag (time)",
        "rebalances",
        "store entries",
        "store size",
        "restore",
        "abort ratio",
        "skipped records",
        "dead-lettered records",
        "cpu",
        "memory",
        "garbage collections",
        "app state",
    ):
        assert words in titles, words
    assert any(p["type"] == "heatmap" for p in data_panels())


def test_every_selector_filters_on_job_app_and_instance_with_grafana_intervals() -> None:
    for panel, expr in panel_queries():
        where = f"{panel['title']}: {expr}"
        names = re.findall(r"\b((?:kstream|process|python)_[a-z_]+)\b(.?)", expr)
        assert names, where
        for name, after in names:
            assert after == "{", f"{where}: {name} without the variable filters"
        for selector in re.findall(r"\{([^}]*)\}", expr):
            for f in FILTERS:
                assert f in selector, f"{where}: {f} missing"
        ranges = re.findall(r"\[([^\]]+)\]", expr)
        assert all(r in ("$__rate_interval", "$__range") for r in ranges), where
        assert "kstream_dedup_dropped" not in expr, where  # deprecated
        assert "kstream_rebalances_total{" not in expr or "increase(" in expr, where
        if "records_consumed" in expr or "records_produced" in expr:
            assert "repartition" in expr, f"{where}: internal topics not separated"


@needs_prometheus
def test_promtool_checks_config_and_rules_and_runs_rule_tests(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    write_bundle(bundle, targets=["127.0.0.1:8080"])
    for cwd, args in (
        (GRAFANA / "prometheus", ["check", "config", "prometheus.yml"]),
        (GRAFANA / "prometheus", ["check", "rules", "kstream-alerts.yml"]),
        (GRAFANA / "prometheus", ["test", "rules", "kstream-alerts.test.yml"]),
        (bundle / "prometheus", ["check", "config", "prometheus.yml"]),
    ):
        proc = subprocess.run(
            [PROMTOOL or "promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60
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


class Stack:
    def __init__(self, base: str, apps: tuple[str, str]) -> None:
        self.base = base
        self.apps = apps


@pytest.fixture(scope="module")
def prometheus_and_two_apps(
    kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
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
        producer.produce(users, b"eu" if i % 2 else b"us", f"user-{i}".encode())
    producer.flush()
    apps = (f"dash-a-{suffix}", f"dash-b-{suffix}")
    ports = [free_port() for _ in apps]
    prom_port = free_port()
    env = {
        **os.environ,
        **fast_group_env(),
        "PYTHONPATH": str(tmp),
        "PYTHONUNBUFFERED": "1",
        "KSTREAM_DEFAULT_BACKEND": "lmdb",
        # the store panels show operation counts and latency, recorded at the debug level
        "KSTREAM_METRICS_RECORDING_LEVEL": "debug",
    }
    procs: list[subprocess.Popen[bytes]] = []
    for app, port in zip(apps, ports, strict=True):
        args = [*KSTREAMD, "run", "dash_app:topology", "--app-id", app,
                "--bootstrap-servers", bootstrap, "--http", f"127.0.0.1:{port}"]  # fmt: skip
        app_env = {**env, "KSTREAM_STATE_DIR": str(tmp / f"state-{app}")}
        log = (tmp / f"{app}.log").open("w")
        procs.append(
            subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=app_env, cwd=tmp)
        )
    bundle = tmp / "bundle"
    write_bundle(
        bundle,
        prometheus_url=f"http://127.0.0.1:{prom_port}",
        targets=[f"127.0.0.1:{p}" for p in ports],
        scrape_interval=f"{SCRAPE_S}s",
    )
    args = [PROMETHEUS, f"--config.file={bundle / 'prometheus' / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}"]  # fmt: skip
    log = (tmp / "prometheus.log").open("w")
    procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))
    load = Load(bootstrap, clicks)
    load.start()
    try:
        yield Stack(f"http://127.0.0.1:{prom_port}", apps)
    finally:
        load.stop.set()
        load.join(30)
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@needs_prometheus
def test_every_panel_query_returns_data_for_each_of_two_apps_and_never_mixes_them(
    prometheus_and_two_apps: Stack,
) -> None:
    base, apps = prometheus_and_two_apps.base, prometheus_and_two_apps.apps
    both = "|".join(apps)
    pending = {
        (panel["title"], expr, app): grafana_expr(expr, app)
        for panel, expr in panel_queries()
        for app in apps
    }
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for key, expr in list(pending.items()):
            try:
                result = query(base, expr)
            except OSError:
                break  # Prometheus still starting
            if result:
                for series in result:
                    assert series["metric"].get("app_id", key[2]) == key[2], (key, series)
                del pending[key]
        if pending:
            time.sleep(1)
    assert not pending, "panel queries without data after 120s:\n" + "\n".join(
        f"{title} [{app}]: {expr}" for title, expr, app in pending
    )
    # both apps selected: every panel keeps them apart (one series per app, never a sum of
    # both), except the panels Grafana repeats once per app
    for panel, expr in panel_queries():
        if panel.get("repeat") == "app":
            assert "$app" in panel["title"], panel["title"]
            continue
        result = query(base, grafana_expr(expr, both))
        seen = {series["metric"].get("app_id") for series in result}
        assert seen == set(apps), f"{panel['title']}: {expr} gave apps {seen} for {both}"
    up = query(base, 'up{job="kstream"}')
    assert sorted(s["value"][1] for s in up) == ["1", "1"]
    # the bundle's alert rules are loaded and none fails to evaluate against the real series
    with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=10) as r:
        groups = json.loads(r.read())["data"]["groups"]
    rules = [rule for g in groups for rule in g["rules"]]
    assert len(rules) == (GRAFANA / "prometheus" / "kstream-alerts.yml").read_text().count(
        "- alert:"
    )
    assert all(rule["health"] != "err" for rule in rules), rules
    for app in apps:
        rate = query(base, f'sum(rate(kstream_records_consumed_total{{app_id="{app}"}}[1m]))')
        assert float(rate[0]["value"][1]) > 0, f"Prometheus saw no throughput of {app}"
