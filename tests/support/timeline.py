"""Where a `make test` run spent its wall time: one line per test, per pytest-xdist worker.

With `KSTREAM_TEST_TIMELINE=<file>` every worker appends `worker start end nodeid` (seconds
since the epoch) for each test it runs, setup and teardown included. `python
tests/support/timeline.py <file>` then prints each worker's busy time, its last test's end
(the run's critical path is the worker that ends last) and its longest units; that is what
`scheduling.UNIT_SECONDS` is tuned from.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

TIMELINE = os.environ.get("KSTREAM_TEST_TIMELINE")
_started: dict[str, float] = {}


def test_started(nodeid: str) -> None:
    if TIMELINE:
        _started[nodeid] = time.time()


def test_finished(nodeid: str) -> None:
    start = _started.pop(nodeid, None)
    if not TIMELINE or start is None:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(TIMELINE, "a", encoding="utf-8") as f:
        f.write(f"{worker} {start:.2f} {time.time():.2f} {nodeid}\n")


def report(path: str) -> None:
    from scheduling import unit_of  # run as a script from tests/support

    with open(path, encoding="utf-8") as f:
        rows = [line.split(" ", 3) for line in f if line.strip()]
    t0 = min(float(r[1]) for r in rows)
    per_worker: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for worker, start, end, nodeid in rows:
        per_worker[worker].append((float(start) - t0, float(end) - t0, nodeid.strip()))
    for worker, tests in sorted(per_worker.items(), key=lambda kv: -max(e for _, e, _ in kv[1])):
        units: dict[str, float] = defaultdict(float)
        for start, end, nodeid in tests:
            units[unit_of(nodeid)] += end - start
        busy = sum(units.values())
        last = max(e for _, e, _ in tests)
        longest = sorted(units.items(), key=lambda kv: -kv[1])[:4]
        top = ", ".join(f"{unit} {seconds:.0f}s" for unit, seconds in longest)
        print(f"{worker}: ends {last:6.1f}s, busy {busy:6.1f}s, {len(tests)} tests; {top}")


if __name__ == "__main__":
    report(sys.argv[1])
