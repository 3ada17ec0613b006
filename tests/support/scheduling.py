"""Which pytest-xdist worker runs what, so `make test`'s wall time is its longest unit's.

A unit is a group of `XDIST_GROUPS` (tests sharing one Spark session), a test of
`PER_TEST_UNITS`, or else a module (its module-scoped fixtures, e.g. kstreamd processes or
Prometheus, start once). Units start longest
first, by `UNIT_SECONDS`: pytest-xdist's own order (most tests first) started the one-test Spark
cluster modules last, and the run waited minutes for them alone.

A worker runs the last test it was sent only once it has another one (or is told to shut
down), so a long unit always has a follower queued behind it. That follower is the shortest
unit left, never the next long one, which another worker starts as soon as it is free.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

# Tests that run together on one pytest-xdist worker (test id prefix -> group, first match): the
# Spark tests share a session per worker, so a JVM per group rather than per worker; they are long
# (`make test-spark`, a lane of their own, runs them on two workers), so they form two groups of
# about equal length (two JVMs in parallel): the differential tests, the orders example, the
# foreign-key joins and the record cache in one, the rest in the other. (With the foreign-key joins
# and suppress added to the rest, it took 1,077 s of a worker and ended the run 200 s after every
# other worker.) The standalone-cluster tests share one cluster (a cluster each would run twelve
# JVMs at once on two cores: Python workers then miss Spark's 10 s connect-back timeout).
XDIST_GROUPS = (
    ("tests/spark/test_differential.py", "spark-differential"),
    ("tests/spark/test_tasks.py::test_orders_enriched", "spark-differential"),
    ("tests/spark/test_fk_join_on_spark.py", "spark-differential"),
    ("tests/spark/test_record_cache_on_spark.py", "spark-differential"),
    ("tests/spark/", "spark"),
    ("tests/spark_cluster/", "spark-cluster"),
)
# Wall seconds of the units of 30 s or more in a `make test` timeline (support.timeline) at a
# load of 20-40 on 2 cores, all workers busy; only the order matters. Any other unit counts
# `SECONDS_PER_TEST` per test. A long unit missing here starts among the last and holds the
# run's end: tests/e2e/test_standby_failover.py (81 s) started at 790 s of 878.
UNIT_SECONDS = {
    "spark-cluster": 290.0,
    "spark": 700.0,
    "spark-differential": 695.0,
    "tests/e2e/test_broker_failover.py": 190.0,
    "tests/sim/test_simulation.py": 115.0,
    "tests/oracle/test_oracle.py": 105.0,
    "tests/oracle/test_describe.py": 80.0,
    "tests/integration/test_streams_protocol_switch.py": 75.0,
    "tests/e2e/test_supervisor.py": 75.0,
    "tests/property/test_join_window_reference.py": 65.0,
    "tests/integration/test_packaging.py": 60.0,
    "tests/property/test_backends_statemachine.py": 60.0,
    "tests/oracle/test_on_broker.py": 55.0,
    "tests/integration/test_streams_protocol_security.py": 55.0,
    "tests/integration/test_streams_rebalance_protocol.py": 55.0,
    "tests/oracle/test_idling_on_broker.py": 55.0,
    "tests/integration/test_kstreamd_state_dir_lock.py": 50.0,
    "tests/e2e/test_pending_offsets.py": 45.0,
    "tests/integration/test_test_broker_ports.py": 40.0,
    "tests/integration/test_internal_topics.py": 40.0,
    "tests/integration/test_redis_rollback.py": 35.0,
    "tests/e2e/test_bad_input.py": 35.0,
    "tests/oracle/test_conformance_cases.py": 35.0,
    "tests/e2e/test_examples.py": 35.0,
    "tests/integration/test_service_reset.py": 30.0,
    "tests/integration/test_kafka_ssl.py": 30.0,
    "tests/e2e/test_dashboards_prometheus.py": 30.0,
    "tests/integration/test_changelog_refusal.py": 30.0,
    "tests/integration/test_service_run.py": 30.0,
    "tests/oracle/test_ported_operators.py": 30.0,
    "tests/integration/test_redis_loss.py": 30.0,
}
SECONDS_PER_TEST = 0.3
# Modules of long, independent tests (no module-scoped fixture): each test is a unit of its own,
# so they run side by side; seconds per test (the module's mean, same timeline).
PER_TEST_UNITS = {
    "tests/e2e/test_broker_outage.py": 195.0,
    "tests/e2e/test_crash.py": 150.0,
    "tests/e2e/test_crash_fk_join.py": 95.0,
    "tests/e2e/test_crash_cache.py": 50.0,
    "tests/e2e/test_consumer_protocol_standby.py": 50.0,
    "tests/e2e/test_crash_grace_join.py": 45.0,
    "tests/e2e/test_processes.py": 45.0,
    "tests/e2e/test_crash_cogroup_suppress.py": 45.0,
    "tests/e2e/test_standby_failover.py": 40.0,
    "tests/e2e/test_incremental_rebalance.py": 20.0,
    "tests/e2e/test_cooperative_rebalance.py": 20.0,
}
# a worker with more than this still to run gets the shortest unit left as its follower
LONG_UNIT_S = 30.0


# The Spark units are the suite's critical path, and the machine is busy throughout: a worker
# lowers its own priority to this niceness, for good, before its first test outside the Spark
# groups (a worker that starts with a Spark unit runs it at the normal priority). The other
# tests then take the cores Spark leaves, rather than slowing the longest units down; what
# they start (brokers, worker processes, redis) inherits it.
OTHERS_NICENESS = 5


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0].replace("\\", "/")
    if path in PER_TEST_UNITS:
        return nodeid
    return group_of(nodeid) or path


def group_of(nodeid: str) -> str | None:
    """The `XDIST_GROUPS` group of a test, if it is in one."""
    path, sep, rest = nodeid.partition("::")
    test_id = path.replace("\\", "/") + sep + rest
    return next((g for prefix, g in XDIST_GROUPS if test_id.startswith(prefix)), None)


def unit_seconds(unit: str, tests: int) -> float:
    path = unit.split("::", 1)[0]
    if path in PER_TEST_UNITS:
        return PER_TEST_UNITS[path]
    return UNIT_SECONDS.get(unit, SECONDS_PER_TEST * tests)


def longest_units_first(items: list[pytest.Item]) -> None:
    """Reorder `items` (in place) unit by unit, longest unit first; a unit's own tests keep
    their order."""
    items[:] = [items[i] for i in longest_units_order([item.nodeid for item in items])]


def longest_units_order(nodeids: Sequence[str]) -> list[int]:
    """The positions of `nodeids` (in collection order) as `longest_units_first` runs them."""
    first: dict[str, int] = {}
    sizes: dict[str, int] = {}
    units = [unit_of(nodeid) for nodeid in nodeids]
    for i, unit in enumerate(units):
        first.setdefault(unit, i)
        sizes[unit] = sizes.get(unit, 0) + 1
    return sorted(
        range(len(units)),
        key=lambda i: (-unit_seconds(units[i], sizes[units[i]]), first[units[i]], i),
    )


def seconds_left(assigned: Mapping[str, Mapping[str, bool]]) -> float:
    """What a worker still has to run, by the estimates: `assigned` is its units, each a map
    of its tests to whether they are done."""
    left = 0.0
    for unit, tests in assigned.items():
        pending = sum(1 for done in tests.values() if not done)
        if pending:
            left += unit_seconds(unit, len(tests)) * pending / len(tests)
    return left


def queue_follower(left: float, workqueue: OrderedDict[str, Any]) -> None:
    """Before a worker with `left` seconds still to run is handed the next unit of
    `workqueue` (longest first): past `LONG_UNIT_S`, the shortest unit left goes first."""
    if left > LONG_UNIT_S and len(workqueue) > 1:
        workqueue.move_to_end(next(reversed(workqueue)), last=False)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A `LoadScopeScheduling` over our units, in collection order (`longest_units_first`)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            queue_follower(seconds_left(self.assigned_work.get(node, {})), self.workqueue)
            super()._assign_work_unit(node)

    return UnitScheduling(config, log)


def yield_to_spark(nodeid: str) -> None:
    """Before test `nodeid` on a pytest-xdist worker: see `OTHERS_NICENESS`."""
    if group_of(nodeid) is not None:
        return
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < OTHERS_NICENESS:
            os.setpriority(os.PRIO_PROCESS, 0, OTHERS_NICENESS)
    except OSError:  # a platform or sandbox without it: the order alone still holds
        pass
