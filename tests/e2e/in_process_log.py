"""What a test that runs apps inside the pytest process leaves when that process dies.

librdkafka runs in the test's own process when a test starts `App`s in it, and a native
failure there (an assertion in librdkafka, which writes one line to stderr and aborts) ends
the process: pytest's fd capture holds that line in an unlinked temporary file, and the log
records it captures are in memory, so both are lost. What remained of one such crash (a
pytest-xdist worker running test_incremental_rebalance's static-membership test under the
consumer group protocol) was faulthandler's "Fatal Python error: Aborted" and the Python
stacks, the aborting thread in `Consumer.consume_batch`: not which assertion, nor what the
group went through before.

`evidence(tmp_path, capfd)` keeps both on disk for the block, in the test's `tmp_path`:

- `native-stderr.txt`: the process's stderr (file descriptor 2, where librdkafka writes an
  assertion's line and its own log lines from clients without a logger), instead of pytest's
  capture;
- `in-process.log`: the `kstream` loggers' records (INFO and up: state changes, tasks
  assigned and revoked, librdkafka's warnings through `kstream.kafka.librdkafka`), written as
  they come, with times and thread names.

faulthandler's stacks still go to the run's output. A crashed xdist worker leaves both files
under its base temporary directory (`pytest-of-<user>/pytest-<n>/popen-gw<k>/<test>0/`); the
chaos lane keeps a failed run's base temporary directory (tools/chaos.py), and
tests/e2e/artifacts.py copies them for a test that fails without crashing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

LOG_NAME = "in-process.log"
STDERR_NAME = "native-stderr.txt"
FORMAT = "%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"


@contextmanager
def evidence(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> Iterator[Path]:
    """For the block: stderr into `tmp_path / STDERR_NAME` and the `kstream` loggers'
    records also into `tmp_path / LOG_NAME` (module docstring); yields the log's path."""
    path = tmp_path / LOG_NAME
    handler = logging.FileHandler(path, encoding="utf-8")  # flushed after every record
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("kstream")
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        with capfd.disabled():  # fd 2 is pytest's own again, and then this file's
            saved = os.dup(2)
            native = os.open(tmp_path / STDERR_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                os.dup2(native, 2)
                yield path
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                os.close(native)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
