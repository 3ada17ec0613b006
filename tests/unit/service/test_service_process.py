"""`kstreamd` as a process: signals during shutdown and a reader that closes the pipe.

Each case runs in its own Python process, so a signal that kills it cannot take the test run
with it. No broker: the app and the instance registry are stand-ins.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
KSTREAMD = [sys.executable, str(ROOT / "cmd" / "kstreamd" / "kstreamd")]

SERVICE = """
import os, signal, sys, time
import kstream.service.instances as instances
from kstream.config import Config
from kstream.metrics import Metrics
from kstream.service.runner import run_service
from kstream.service.settings import Settings

SIGNALS_DURING_CLOSE = int(sys.argv[1])


class Registry:
    def __init__(self, *args, **kwargs):
        self.instance_id, self.endpoint = kwargs["instance_id"], kwargs["endpoint"]
    def start(self): pass
    def publish(self, partitions): return False
    def instances(self): return []
    def close(self): print("registry closed", flush=True)


instances.InstanceRegistry = Registry


class App:
    app_id = "signals"
    bootstrap_servers = "127.0.0.1:1"
    processing_guarantee = "exactly_once"
    error = None
    topology = None

    def __init__(self):
        self.config = Config(http="127.0.0.1:0")
        self.metrics = Metrics("signals")
        self.state = "RUNNING"

    def start(self):
        os.kill(os.getpid(), signal.SIGTERM)  # the operator stops the app

    def assigned_partitions(self):
        return []

    def close(self, timeout=None):
        # the clean close (finish the batch, commit) takes a while; more signals arrive
        for _ in range(SIGNALS_DURING_CLOSE):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        time.sleep(0.3)
        print("app closed cleanly", flush=True)
        self.state = "NOT_RUNNING"
        return True


sys.exit(run_service(App(), Settings()))
"""


def _service(signals_during_close: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SERVICE, str(signals_during_close)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
    )


def test_a_second_sigterm_during_shutdown_does_not_abort_the_clean_close() -> None:
    done = _service(signals_during_close=1)
    assert done.returncode == 0, done.stderr
    assert "app closed cleanly" in done.stdout
    assert "registry closed" in done.stdout
    assert "finishing the clean close" in done.stderr


def test_a_third_sigterm_aborts() -> None:
    done = _service(signals_during_close=2)
    assert done.returncode == -15, (done.returncode, done.stdout, done.stderr)
    assert "app closed cleanly" not in done.stdout


@pytest.mark.parametrize("fmt", ["text", "mermaid", "dot"])
def test_describe_exits_quietly_when_the_reader_closed_the_pipe(fmt: str) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that already exited
    try:
        done = subprocess.run(
            [*KSTREAMD, "describe", "examples.word_count:topology", "--format", fmt],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=str(ROOT),
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert done.stderr == ""
