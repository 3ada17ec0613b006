"""CPU used by an engine's processes over a measured window, from /proc, for bench/spark.py.

The issue's goal is stated per core (records/s per core used), and the two engines use the
machine differently: the native engine is this one Python process (librdkafka's threads
included), Spark is this process (the driver's Python side) plus its JVM (driver and, on
local[2], the executors) plus the executors' Python workers, plus (on a standalone cluster
started here) the master, worker and executor JVMs. So the CPU counted is that of this process
and every descendant, but the broker's process tree (a child of this process too, yet no part of
either engine).

A process's CPU is read from `/proc/<pid>/stat` (user + system, every thread) at each sample;
a process seen at the window's start counts what it used after that, one started later counts
all it used, and one that ended counts up to its last sample (Spark's Python workers are
long-lived, reused from batch to batch, so little is lost between samples).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kstream_pipe import jit_threads_cpu, stat_cpu_s, thread_ids

SAMPLE_S = 0.2
K = TypeVar("K")


def descendants(root: int, children: Callable[[int], Iterable[int]], skip: set[int]) -> list[int]:
    """`root` and every process under it, but those in `skip` and everything under them."""
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        if p in skip:
            continue
        out.append(p)
        todo.extend(children(p))
    return out


def cpu_in_window(start: Mapping[K, float], last: Mapping[K, float]) -> float:
    """CPU seconds used between the window's start and each process's (or thread's) last
    sample: one known at the start counts its growth, one started after counts everything it
    used. One missing from `last` (ended before any sample in the window) counts nothing."""
    return sum(max(0.0, cpu - start.get(pid, 0.0)) for pid, cpu in last.items())


def cpu_by_kind(
    start: Mapping[int, float], last: Mapping[int, float], kinds: Mapping[int, str]
) -> dict[str, float]:
    """`cpu_in_window` per kind of process (`kinds`: pid -> "jvm", "python", ...), rounded."""
    out: dict[str, float] = {}
    for pid, cpu in last.items():
        kind = kinds.get(pid, "other")
        out[kind] = out.get(kind, 0.0) + max(0.0, cpu - start.get(pid, 0.0))
    return {k: round(v, 2) for k, v in sorted(out.items())}


def kind_of(name: str) -> str:
    """A process's kind from its /proc `comm`: "jvm" (java), "python", or the name itself."""
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "python"
    return name


def per_core(records: int, cpu_s: float, seconds: float) -> dict[str, float | None]:
    """The run's CPU figures: `cpu_s`, `cores_used` (CPU seconds over wall seconds) and
    `records_per_core_s` (records per CPU second: the records/s one fully used core gives)."""
    return {
        "cpu_s": round(cpu_s, 2),
        "cores_used": round(cpu_s / seconds, 2) if seconds > 0 else None,
        "records_per_core_s": round(records / cpu_s) if cpu_s > 0 else None,
    }


def proc_children(pid: int) -> list[int]:
    """The children of `pid` (every thread's), from /proc; none if it is gone."""
    out: list[int] = []
    for tid in thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


class TreeCpu:
    """Samples the CPU of this process and its descendants (the broker's tree left out) every
    `SAMPLE_S` while the block lasts; `cpu_s` is what they used in it. `descend=False` counts
    this process alone: the native engine runs in it, while the Spark JVM (stopped, yet alive
    for the Py4J gateway) and a standalone cluster's idle daemons are still its children.
    `jit_s` is the part of `cpu_s` the JVMs' JIT compiler threads used (each thread counted to
    its last sample, as a JVM ends compiler threads it no longer needs).

    The sampling is no part of the engine's work, yet it runs in this process: walking a JVM's
    hundred-odd threads for their children five times a second costs about 2% of a core. Its
    own CPU (`own_s`, from the sampling threads' clocks), and that of any other meter of the run
    `discount`ed, is taken out of `cpu_s` and of this process's kind."""

    def __init__(self, skip: Iterable[int | None] = (), descend: bool = True) -> None:
        self._skip = {p for p in skip if p}
        self._descend = descend
        self.kinds: dict[int, str] = {}
        self.jit_start: dict[tuple[int, int], float] = {}
        self.jit_last: dict[tuple[int, int], float] = {}
        self.own_s = 0.0
        self.start = self._read()
        self.jit_start = dict(self.jit_last)
        self.last = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> dict[int, float]:
        out = {}
        me = os.getpid()
        for p in descendants(me, proc_children, self._skip) if self._descend else [me]:
            cpu = stat_cpu_s(f"/proc/{p}/stat")
            if cpu is not None:
                out[p] = cpu
                # read each time: a process forked by a JVM thread carries the thread's name
                # until it execs
                self.kinds[p] = kind_of(comm(p))
                if self.kinds[p] == "jvm":
                    for tid, secs in jit_threads_cpu(p).items():
                        self.jit_last[(p, tid)] = secs
        return out

    def _run(self) -> None:
        began = time.thread_time()
        while not self._stop.wait(SAMPLE_S):
            self.last.update(self._read())
        self.own_s += time.thread_time() - began

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.last.update(self._read())

    def discount(self, seconds: float) -> None:
        """Take `seconds` of this process's CPU (another meter's) out of the engine's."""
        self.own_s += seconds

    @property
    def cpu_s(self) -> float:
        return max(0.0, cpu_in_window(self.start, self.last) - self.own_s)

    @property
    def jit_s(self) -> float:
        return cpu_in_window(self.jit_start, self.jit_last)

    @property
    def by_kind(self) -> dict[str, float]:
        """CPU seconds per kind of process: the JVMs' and the Python processes'."""
        out = cpu_by_kind(self.start, self.last, self.kinds)
        mine = self.kinds.get(os.getpid())
        if mine in out:
            out[mine] = round(max(0.0, out[mine] - self.own_s), 2)
        return out


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "gone"
