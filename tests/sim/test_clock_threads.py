"""A run's outcome does not depend on what other threads of the process do: only the thread
running the simulation reads the virtual clock. Under pytest-xdist a thread left running by an
earlier test (a client's, a watchdog's) slept on the virtual clock and moved it on, by hours:
the fixed seeds of `make test` failed their liveness bound (seen on a fresh clone's CI)."""

from __future__ import annotations

import threading
import time

from kstream.testing.sim import Options, simulate
from kstream.testing.sim.clock import VirtualClock, patched_time


def test_another_thread_keeps_the_real_clock_and_cannot_move_the_virtual_one() -> None:
    clock = VirtualClock()
    seen: list[float] = []
    with patched_time(clock):
        time.sleep(5.0)
        worker = threading.Thread(target=lambda: (time.sleep(0.01), seen.append(time.monotonic())))
        worker.start()
        worker.join()
        assert time.monotonic() == 5.0
    assert clock.now == 5.0
    assert seen and seen[0] != 5.0  # the real monotonic clock


def test_a_seed_replays_the_same_with_a_thread_sleeping_beside_it() -> None:
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            time.sleep(0.001)

    quiet = simulate(Options(seed=11, topology="count", guarantee="exactly_once"))
    beside = threading.Thread(target=busy, daemon=True)
    beside.start()
    try:
        noisy = simulate(Options(seed=11, topology="count", guarantee="exactly_once"))
    finally:
        stop.set()
        beside.join()
    assert quiet.ok and noisy.ok
    assert noisy.trace_hash == quiet.trace_hash
