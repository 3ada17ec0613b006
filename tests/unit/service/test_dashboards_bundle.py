"""The Grafana assets a user installs, and the bundle `kstreamd dashboards` writes from them.

`kstream/assets/grafana` is a link to `grafana/`, so reading the assets through the package in
this work tree would compare the repository with itself. What a user gets is the wheel: it
is built (tests/support/wheel.py) and its dashboards and alert rules compared with
`grafana/`, file by file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from support.wheel import ROOT, build_wheel, wheel_cache

from kstream.service.cli import main


@pytest.fixture(scope="module")
def wheel(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(wheel_cache(request.config, tmp_path_factory.mktemp("wheel")))


def test_the_wheel_carries_the_repository_dashboards_and_alert_rules(wheel: Path) -> None:
    repo = {
        str(p.relative_to(ROOT / "grafana")): p.read_bytes()
        for p in (ROOT / "grafana").rglob("*")
        if p.is_file()
    }
    assert "dashboards/kstream.json" in repo and "prometheus/kstream-alerts.yml" in repo
    prefix = "kstream/assets/grafana/"
    with zipfile.ZipFile(wheel) as z:
        packaged = {n[len(prefix) :]: z.read(n) for n in z.namelist() if n.startswith(prefix)}
    assert sorted(packaged) == sorted(repo)
    for name, data in repo.items():
        assert packaged[name] == data, name


def test_the_bundle_ties_grafana_to_prometheus_and_prometheus_to_the_instances(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "look"
    argv = ["dashboards", "--out", str(out), "--prometheus-url", "http://prom:9090"]
    assert main([*argv, "--target", "10.0.0.1:8080", "--target", "10.0.0.2:8080"]) == 0
    printed = capsys.readouterr().out
    assert f"--config.file={out / 'prometheus' / 'prometheus.yml'}" in printed
    dash = json.loads((out / "dashboards" / "kstream.json").read_text())
    assert dash["uid"] == "kstream-overview"
    datasource = (out / "provisioning" / "datasources" / "kstream-prometheus.yml").read_text()
    assert 'url: "http://prom:9090"' in datasource
    assert "uid: kstream-prometheus" in datasource
    provider = (out / "provisioning" / "dashboards" / "kstream.yml").read_text()
    assert f"path: {json.dumps(str(out / 'dashboards'))}" in provider
    prom = (out / "prometheus" / "prometheus.yml").read_text()
    assert "job_name: kstream" in prom
    assert 'targets: ["10.0.0.1:8080", "10.0.0.2:8080"]' in prom
    assert (out / "prometheus" / "kstream-alerts.yml").exists()
