"""`kstreamd dashboards`: everything needed to look at kstream apps in Grafana, without compose.

The dashboard, the alert rules and their tests ship inside the package (`kstream/assets/grafana`),
so a pip install has them too. `write_bundle` copies them into one directory together with the
files that tie them to a given Prometheus and set of kstreamd instances:

    OUT/dashboards/kstream.json                      the dashboard
    OUT/provisioning/dashboards/kstream.yml          Grafana: load dashboards from OUT/dashboards
    OUT/provisioning/datasources/kstream-prometheus.yml   Grafana: the Prometheus at URL
    OUT/prometheus/prometheus.yml                    Prometheus: scrape the instances (job kstream)
    OUT/prometheus/kstream-alerts.yml                the alert rules (and their promtool tests)

Then `prometheus --config.file=OUT/prometheus/prometheus.yml` and a Grafana started with
`GF_PATHS_PROVISIONING=OUT/provisioning` show every app the instances run.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

__all__ = ["DASHBOARD_FILES", "JOB", "add_parser", "assets_dir", "run_command", "write_bundle"]

JOB = "kstream"  # the scrape job the alert rules and the dashboard's job variable expect
DATASOURCE_UID = "kstream-prometheus"  # the dashboard's default data source
DASHBOARD_FILES = ("kstream.json",)
RULE_FILES = ("kstream-alerts.yml", "kstream-alerts.test.yml")


def assets_dir() -> Path:
    """The packaged Grafana assets (dashboards/, prometheus/, provisioning/)."""
    with as_file(files("kstream") / "assets" / "grafana") as path:
        return Path(path)


def write_bundle(
    out: str | Path,
    *,
    prometheus_url: str = "http://127.0.0.1:9090",
    targets: Sequence[str] = ("127.0.0.1:8080",),
    scrape_interval: str = "5s",
) -> list[Path]:
    """Write the dashboards, Grafana provisioning and a Prometheus config under `out`.

    `targets` are the HOST:PORT of the kstreamd instances' HTTP servers. Existing files of the
    same names are replaced, nothing else in `out` is touched. Returns the files written.
    """
    src = assets_dir()
    root = Path(out).resolve()
    dash_dir = root / "dashboards"
    prom_dir = root / "prometheus"
    written: list[Path] = []
    for name in DASHBOARD_FILES:
        written.append(_copy(src / "dashboards" / name, dash_dir / name))
    for name in RULE_FILES:
        written.append(_copy(src / "prometheus" / name, prom_dir / name))
    written.append(
        _write(
            prom_dir / "prometheus.yml",
            _prometheus_config(targets, scrape_interval),
        )
    )
    written.append(
        _write(
            root / "provisioning" / "dashboards" / "kstream.yml",
            "# Grafana dashboard provisioning, written by `kstreamd dashboards`.\n"
            "apiVersion: 1\nproviders:\n  - name: kstream\n    orgId: 1\n    folder: kstream\n"
            "    type: file\n    disableDeletion: false\n    allowUiUpdates: true\n"
            f"    options:\n      path: {_q(str(dash_dir))}\n"
            "      foldersFromFilesStructure: false\n",
        )
    )
    written.append(
        _write(
            root / "provisioning" / "datasources" / "kstream-prometheus.yml",
            "# Grafana datasource provisioning, written by `kstreamd dashboards`: the dashboard's\n"
            "# data source variable defaults to this uid.\n"
            "apiVersion: 1\ndatasources:\n  - name: kstream Prometheus\n"
            f"    uid: {DATASOURCE_UID}\n    type: prometheus\n    access: proxy\n"
            f"    url: {_q(prometheus_url)}\n    isDefault: true\n"
            f"    jsonData:\n      timeInterval: {_q(scrape_interval)}\n",
        )
    )
    return written


def _prometheus_config(targets: Sequence[str], scrape_interval: str) -> str:
    listed = ", ".join(_q(t) for t in targets)
    return (
        "# Prometheus scraping kstreamd instances, written by `kstreamd dashboards`.\n"
        "# With http_token set, add an authorization block (type: Bearer, credentials_file).\n"
        f"global:\n  scrape_interval: {_q(scrape_interval)}\n  evaluation_interval: 15s\n"
        "rule_files:\n  - kstream-alerts.yml\n"
        f"scrape_configs:\n  - job_name: {JOB}\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: [{listed}]\n"
    )


def _q(text: str) -> str:
    """A YAML scalar: JSON strings are valid YAML double-quoted strings."""
    return json.dumps(text)


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def add_parser(sub: Any) -> None:
    """Register `kstreamd dashboards` on the CLI's subparsers."""
    p = sub.add_parser(
        "dashboards",
        help="write the Grafana dashboard, its provisioning and a Prometheus scrape config "
        "(with the alert rules) into a directory",
    )
    p.add_argument("--out", required=True, help="directory to write into (created if missing)")
    p.add_argument(
        "--prometheus-url",
        default="http://127.0.0.1:9090",
        help="the Prometheus Grafana should query (default http://127.0.0.1:9090)",
    )
    p.add_argument(
        "--target",
        action="append",
        default=None,
        metavar="HOST:PORT",
        help="a kstreamd HTTP address to scrape; repeat for more (default 127.0.0.1:8080)",
    )
    p.add_argument("--scrape-interval", default="5s", help="Prometheus scrape interval (5s)")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """`kstreamd dashboards`: write the bundle and say how to start Prometheus and Grafana."""
    out = Path(args.out).resolve()
    for path in write_bundle(
        out,
        prometheus_url=args.prometheus_url,
        targets=args.target or ["127.0.0.1:8080"],
        scrape_interval=args.scrape_interval,
    ):
        print(f"wrote {path}")
    print(
        "\nstart Prometheus:  prometheus "
        f"--config.file={out / 'prometheus' / 'prometheus.yml'}\n"
        f"start Grafana:     GF_PATHS_PROVISIONING={out / 'provisioning'} grafana-server "
        "--homepath <grafana home>\n"
        "then open the 'kstream' dashboard in the 'kstream' folder."
    )
    return 0
