"""`kstreamd dashboards` writes a bundle that points Grafana and Prometheus at each other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kstream.service.cli import main
from kstream.service.dashboards import assets_dir

ROOT = Path(__file__).parents[2]


def test_the_packaged_assets_are_the_repository_ones() -> None:
    packaged = assets_dir()
    for rel in ("dashboards/kstream.json", "prometheus/kstream-alerts.yml"):
        assert (packaged / rel).read_bytes() == (ROOT / "grafana" / rel).read_bytes()


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
