"""What a test that runs apps inside the pytest process leaves when that process dies.

librdkafka runs in the test's own process when a test starts `App`s in it, and a native
failure there (an assertion in librdkafka, which prints one line to stderr and aborts) ends
the process: pytest's fd capture holds that line in an unlinked temporary file, and the log
records it captures are in memory, so both are lost. What remained of one such crash (a
pytest-xdist worker running test_incremental_rebalance's static-membership test under the
consumer group protocol) was faulthandler's "Fatal Python error: Aborted" and the Python
stacks, the aborting thread in `Consumer.consume_batch`: not which assertion, nor what the
group went through before.

`evidence(tmp_path, capfd)` keeps both for the block: stderr is not captured (a native
assertion's line reaches the run's output, beside faulthandler's stacks), and the `kstream`
loggers (librdkafka's own log lines come through `kstream.kafka.librdkafka`) also write, as
they log, to `<tmp_path>/in-process.log`, with times and thread names. A crashed xdist worker
leaves that file under its base temporary directory (`pytest-of-<user>/pytest-<n>/popen-gw<k>/
<test>0/`); the chaos lane keeps a failed run's base temporary directory (tools/chaos.py), and
tests/e2e/artifacts.py copies it for a test that fails without crashing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

LOG_NAME = "in-process.log"
FORMAT = "%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"


@contextmanager
def evidence(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> Iterator[Path]:
    """For the block: stderr uncaptured and the `kstream` loggers' records (INFO and up: the
    state changes, tasks assigned and revoked, librdkafka's warnings) written to
    `tmp_path / LOG_NAME` as well; yields that path."""
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
        with capfd.disabled():
            yield path
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
