"""`kstreamd demo` and `kstreamd broker` as users run them: real processes, real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kstream.kafka import Admin
from kstream.kafka.broker import free_port

KSTREAMD = [sys.executable, str(Path(__file__).parents[2] / "cmd" / "kstreamd" / "kstreamd")]


def test_demo_runs_on_an_embedded_broker_and_prints_its_summary() -> None:
    proc = subprocess.run(
        [*KSTREAMD, "demo", "--duration", "2", "--rate", "300", "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("embedded broker on 127.0.0.1:")
    assert "summary for topic 'clicks'" in out
    produced = int(out.split("  produced  ")[1].split()[0])
    consumed = int(out.split("  consumed  ")[1].split()[0])
    assert produced == consumed > 0
    assert "  by partition: 0=" in out
    assert out.rstrip().endswith("demo OK")


def test_demo_against_a_given_broker(kafka_broker: object) -> None:
    bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    proc = subprocess.run(
        [*KSTREAMD, "demo", "--duration", "1", "--bootstrap-servers", bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "embedded broker" not in proc.stdout
    assert proc.stdout.rstrip().endswith("demo OK")


def test_broker_command_serves_until_interrupted(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "broker.log"
    proc = subprocess.Popen(
        [*KSTREAMD, "broker", "--port", str(port), "--log-file", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"kstream embedded broker listening on 127.0.0.1:{port} ")
        admin = Admin(f"127.0.0.1:{port}", connect_timeout="5s")
        assert admin.create_topic("cli-topic", 2) is True
        assert admin.partition_counts(["cli-topic"]) == {"cli-topic": 2}
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == "broker stopped"
    assert log.exists()
