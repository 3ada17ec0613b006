"""Where a `make test` run spent its wall time: one line per test, per pytest-xdist worker.

With `KSTREAM_TEST_TIMELINE=<file>` every worker appends `worker start end nodeid` (seconds
since the epoch) for each test it runs, setup and teardown included. `python
tests/support/timeline.py <file>` then prints each worker's busy time, its last test's end
(the run's critical path is the worker that ends last) and its longest units; that is what
`scheduling.UNIT_SECONDS` is tuned from. `python tests/support/timeline.py <file> --replay N`
then replays the file's test durations through the current `scheduling` (its order, its
follower rule, pytest-xdist handing a worker the next unit when it has two tests or fewer
left) on N workers: where each worker would end, so a change to the estimates or the groups is
judged against a measured run without running the suite again. (The file does not hold the
collection order: files are taken alphabetically, each file's tests in the order they ran.)
"""

from __future__ import annotations

import os
import sys
import time
from collections import OrderedDict, defaultdict

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


def replay(path: str, workers: int) -> None:
    from scheduling import longest_units_order, queue_follower, seconds_left, unit_of

    with open(path, encoding="utf-8") as f:
        rows = sorted((line.split(" ", 3) for line in f if line.strip()), key=lambda r: float(r[1]))
    took = {nodeid.strip(): float(end) - float(start) for _, start, end, nodeid in rows}
    collected = sorted(took, key=lambda nodeid: nodeid.split("::", 1)[0])  # stable: ran order
    workqueue: OrderedDict[str, dict[str, bool]] = OrderedDict()
    for i in longest_units_order(collected):
        workqueue.setdefault(unit_of(collected[i]), {})[collected[i]] = False
    assigned: list[dict[str, dict[str, bool]]] = [{} for _ in range(workers)]
    queued: list[list[str]] = [[] for _ in range(workers)]
    clock = [0.0] * workers

    def hand_out(w: int) -> None:
        if workqueue and len(queued[w]) <= 2:
            queue_follower(seconds_left(assigned[w]), workqueue)
            unit, tests = workqueue.popitem(last=False)
            assigned[w][unit] = tests
            queued[w] += tests

    for w in range(workers):  # as LoadScopeScheduling.schedule: a unit each, then a second
        if workqueue:
            unit, tests = workqueue.popitem(last=False)
            assigned[w][unit] = tests
            queued[w] += tests
    for w in range(workers):
        hand_out(w)
    while any(queued):
        w = min((w for w in range(workers) if queued[w]), key=lambda w: clock[w])
        nodeid = queued[w].pop(0)
        clock[w] += took[nodeid]
        assigned[w][unit_of(nodeid)][nodeid] = True
        hand_out(w)
    for w in sorted(range(workers), key=lambda w: -clock[w]):
        longest = sorted(assigned[w], key=lambda u: -sum(took[n] for n in assigned[w][u]))[:3]
        print(f"worker {w}: ends {clock[w]:6.1f}s; {', '.join(longest)}")
    total = sum(took.values())
    print(f"{len(took)} tests, {total:.0f} s in all, {total / workers:.0f} s per worker")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--replay":
        replay(sys.argv[1], int(sys.argv[3]))
    else:
        report(sys.argv[1])
