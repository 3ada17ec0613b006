"""e2e.in_process_log keeps a crashed test's evidence: a pytest process that aborts inside the
block (as librdkafka does on a failed assertion) leaves the line it wrote to stderr and the
kstream log records before it on disk, where pytest's own capture loses both."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

CRASHING = textwrap.dedent(
    """
    import logging
    import os

    from e2e.in_process_log import evidence


    def test_aborts(tmp_path, capfd):
        with evidence(tmp_path, capfd):
            logging.getLogger("kstream.runtime").info("the group went through %s", "this")
            os.write(2, b"*** rdkafka_cgrp.c:1: f: assert: planted ***\\n")
            os.abort()


    def test_without(tmp_path):
        os.write(2, b"*** rdkafka_cgrp.c:1: f: assert: lost ***\\n")
        os.abort()
    """
)


def _run(tmp_path: Path, test: str) -> tuple[str, Path]:
    """Run one test of `CRASHING` in a pytest process of its own; (its output, its basetemp)."""
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    base = tmp_path / f"base-{test}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={base}",
            f"test_crashing.py::{test}",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, done.stdout  # the process aborted
    return done.stdout + done.stderr, base


def test_a_native_abort_leaves_its_line_and_the_log_on_disk(tmp_path: Path) -> None:
    output, base = _run(tmp_path, "test_aborts")
    stderr_file = base / "test_aborts0" / "native-stderr.txt"
    assert stderr_file.read_text() == "*** rdkafka_cgrp.c:1: f: assert: planted ***\n"
    log = (stderr_file.parent / "in-process.log").read_text()
    assert "kstream.runtime INFO the group went through this" in log, log
    assert "Fatal Python error: Aborted" in output  # faulthandler's stacks still reach the output


def test_without_it_pytests_capture_loses_the_line(tmp_path: Path) -> None:
    output, base = _run(tmp_path, "test_without")
    assert "Fatal Python error: Aborted" in output
    assert "assert: lost" not in output
    assert not list(base.glob("test_without0/*"))
