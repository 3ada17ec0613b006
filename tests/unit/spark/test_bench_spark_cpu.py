"""bench/spark_cpu.py's accounting: which processes count as an engine's (the broker's tree
never), how a process's CPU over the window is taken (growth for one seen at the start, all of
it for one started later), and the per-core figures bench/spark.py reports. The last test reads
this process's own /proc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from spark_cpu import (  # noqa: E402
    TreeCpu,
    cpu_by_kind,
    cpu_in_window,
    descendants,
    kind_of,
    per_core,
)

# a driver (1) with its JVM (2), whose Python daemon (3) forked two workers (4, 5), and the
# broker's wrapper (6) with its java (7)
TREE = {1: [2, 6], 2: [3], 3: [4, 5], 6: [7]}


def test_descendants_leave_out_the_broker_tree() -> None:
    got = descendants(1, lambda p: TREE.get(p, []), skip={6})
    assert sorted(got) == [1, 2, 3, 4, 5]


def test_descendants_of_a_leaf_is_itself() -> None:
    assert descendants(5, lambda p: TREE.get(p, []), skip=set()) == [5]


def test_cpu_counts_growth_and_whole_life_of_later_processes() -> None:
    start = {1: 10.0, 2: 100.0}
    # 1 grew by 2 s, 2 by 30 s, worker 4 started in the window and used 5 s
    last = {1: 12.0, 2: 130.0, 4: 5.0}
    assert cpu_in_window(start, last) == 37.0


def test_cpu_never_negative_for_a_reused_pid() -> None:
    # a pid seen at the start, ended, and reused by a younger process with less CPU
    assert cpu_in_window({9: 50.0}, {9: 1.0}) == 0.0


def test_per_core_figures() -> None:
    got = per_core(400_000, 40.0, 20.0)
    assert got == {"cpu_s": 40.0, "cores_used": 2.0, "records_per_core_s": 10_000}


def test_per_core_without_cpu_or_time() -> None:
    assert per_core(10, 0.0, 0.0) == {"cpu_s": 0.0, "cores_used": None, "records_per_core_s": None}


def test_tree_cpu_sees_this_process_work() -> None:
    with TreeCpu(descend=False) as cpu:
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
    # the busy loop's 0.3 s of this process's CPU, read through /proc (whose clock ticks are
    # 10 ms)
    assert cpu.cpu_s >= 0.25


def test_cpu_by_kind_splits_jvm_and_python() -> None:
    start = {1: 10.0, 2: 100.0}
    last = {1: 12.0, 2: 130.0, 4: 5.0, 5: 1.5}
    kinds = {1: "python", 2: "jvm", 4: "python"}
    assert cpu_by_kind(start, last, kinds) == {"jvm": 30.0, "other": 1.5, "python": 7.0}


def test_kind_of_comm_names() -> None:
    assert [kind_of(n) for n in ("java", "python3.11", "python", "bash")] == [
        "jvm",
        "python",
        "python",
        "bash",
    ]


def test_jit_counts_compiler_threads_up_to_their_last_sample() -> None:
    # (jvm pid, compiler thread id): thread 11 grew by 1 s, thread 12 started in the window
    # and ended after its last sample of 0.5 s
    start = {(2, 11): 3.0}
    last = {(2, 11): 4.0, (2, 12): 0.5}
    assert cpu_in_window(start, last) == 1.5


def test_tree_cpu_counts_a_child_jvms_compiler(tmp_path: Path) -> None:
    """A JVM started under this process compiles its program's hot loop: its compiler threads'
    CPU is in `jit_s`, and a part of `cpu_s`."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    source = tmp_path / "Busy.java"
    source.write_text(
        "public class Busy { public static void main(String[] a) { long s = 0;"
        " long end = System.nanoTime() + 1_500_000_000L;"
        " while (System.nanoTime() < end) { for (int i = 0; i < 1000; i++) s += i * 31 % 7; }"
        " System.out.println(s); } }"
    )
    with TreeCpu() as cpu:
        subprocess.run([java, str(source)], check=True, capture_output=True, timeout=60)
    assert cpu.jit_s > 0
    assert cpu.jit_s < cpu.cpu_s


def test_the_meters_own_cpu_is_not_the_engines() -> None:
    """The sampling threads run in this process: their CPU (`own_s`, and another meter's
    `discount`ed) is taken out of the engine's total and of this process's kind."""
    me = os.getpid()
    cpu = TreeCpu(descend=False)
    cpu.start, cpu.last = {me: 10.0}, {me: 12.0, 99: 3.0}
    cpu.kinds = {me: "python", 99: "jvm"}
    cpu.own_s = 0.25
    cpu.discount(0.25)
    assert cpu.cpu_s == 4.5
    assert cpu.by_kind == {"jvm": 3.0, "python": 1.5}


def test_sampling_records_its_own_cpu() -> None:
    with TreeCpu() as cpu:
        time.sleep(0.5)
    assert cpu.own_s > 0
