"""A real Spark standalone cluster for the tests: one master and two workers of one core each
(`kstream.spark.local_cluster.LocalCluster`).

Started once per test session (the cluster tests run on one pytest-xdist worker) and stopped
at the end. Jobs are submitted to it the way a user would: `kstreamd run
--engine spark --master spark://...` in a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
HERE = str(Path(__file__).resolve().parent)
SPARK_TESTS = str(Path(__file__).resolve().parents[1] / "spark")
if SPARK_TESTS not in sys.path:  # the shared helpers (feeding, reading, reference results)
    sys.path.insert(0, SPARK_TESTS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/spark_cluster/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from kstream.spark.local_cluster import LocalCluster

    logs = tmp_path_factory.mktemp("spark-cluster")
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {"PYTHONPATH": os.pathsep.join([*inherited, ROOT, HERE, SPARK_TESTS])}
    with LocalCluster(workers=2, cores=1, memory="1g", env=env, logs=str(logs)) as cluster:
        yield cluster


@pytest.fixture
def submit(
    spark_cluster: Any, bootstrap_servers: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """`submit(target, app_id, *flags, env=...)` starts `kstreamd run --engine spark --master
    <cluster>` on `target` in a process of its own (log: `<tmp_path>/<app_id>.log`)."""
    started: list[subprocess.Popen[bytes]] = []

    def run(
        target: str, app_id: str, *flags: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{app_id}.log", "ab")  # noqa: SIM115 - the process keeps it
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kstream.service.cli",
                "run",
                target,
                "--engine",
                "spark",
                "--master",
                spark_cluster.url,
                "--app-id",
                app_id,
                "--bootstrap-servers",
                bootstrap_servers,
                "--checkpoint-dir",
                str(tmp_path / f"{app_id}-checkpoint"),
                "--spark-conf",
                "spark.executor.memory=512m",
                "--spark-conf",
                "spark.driver.host=127.0.0.1",
                *flags,
            ],
            env={**spark_cluster.env, "KSTREAM_STATE_DIR": str(tmp_path / "state"), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        started.append(proc)
        return proc

    yield run
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()
