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
from collections.abc import Sequence
from typing import Any

import pytest

# Tests that run together on one pytest-xdist worker (test id prefix -> group, first match):
# the Spark tests share a session per worker, so a JVM per group rather than per worker; they
# are the longest part of the suite, so they form two groups of about equal length (two JVMs in
# parallel): the differential tests with the orders example, and the rest. The standalone-
# cluster tests share one cluster (a cluster each would run twelve JVMs at once on two cores:
# Python workers then miss Spark's 10 s connect-back timeout).
XDIST_GROUPS = (
    ("tests/spark/test_differential.py", "spark-differential"),
    ("tests/spark/test_tasks.py::test_orders_enriched", "spark-differential"),
    ("tests/spark/", "spark"),
    ("tests/spark_cluster/", "spark-cluster"),
)
# Wall seconds of the longest units on 2 cores under `make test` (all workers busy); only the
# order matters. Any other unit counts `SECONDS_PER_TEST` per test.
UNIT_SECONDS = {
    "spark-cluster": 290.0,
    "spark": 270.0,
    "spark-differential": 185.0,
    "tests/e2e/test_supervisor.py": 80.0,
    "tests/e2e/test_incremental_rebalance.py": 40.0,
    "tests/e2e/test_consumer_protocol_processes.py": 18.0,
    "tests/e2e/test_pending_offsets.py": 40.0,
    "tests/e2e/test_broker_failover.py": 75.0,
    "tests/integration/test_redis_loss.py": 55.0,
    "tests/property/test_backends_statemachine.py": 50.0,
    "tests/integration/test_packaging.py": 50.0,
    "tests/integration/test_service_reset.py": 30.0,
    "tests/property/test_join_window_reference.py": 25.0,
    "tests/oracle/test_oracle.py": 25.0,
    "tests/oracle/test_on_broker.py": 30.0,
    "tests/oracle/test_idling_on_broker.py": 50.0,
    "tests/e2e/test_examples.py": 25.0,
    "tests/integration/test_kstreamd_processes.py": 25.0,
    "tests/unit/service/test_service_process.py": 25.0,
    "tests/e2e/test_dashboards_prometheus.py": 20.0,
    "tests/integration/test_kafka_ssl.py": 15.0,
    "tests/integration/test_internal_topics.py": 15.0,
    "tests/integration/test_operator_warnings.py": 12.0,
    "tests/integration/test_kafka_sasl.py": 10.0,
}
SECONDS_PER_TEST = 0.3
# Modules of long, independent tests (no module-scoped fixture): each test is a unit of its own,
# so they run side by side; seconds per test.
PER_TEST_UNITS = {
    "tests/e2e/test_processes.py": 50.0,
    "tests/e2e/test_crash.py": 70.0,
    "tests/e2e/test_crash_cache.py": 35.0,
    "tests/e2e/test_crash_fk_join.py": 70.0,
    "tests/e2e/test_crash_grace_join.py": 35.0,
    "tests/e2e/test_crash_cogroup_suppress.py": 30.0,
    "tests/e2e/test_cooperative_rebalance.py": 40.0,
    "tests/e2e/test_consumer_protocol_standby.py": 25.0,
    "tests/e2e/test_broker_outage.py": 100.0,
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
    first: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for i, item in enumerate(items):
        unit = unit_of(item.nodeid)
        first.setdefault(unit, i)
        sizes[unit] = sizes.get(unit, 0) + 1

    def key(item: pytest.Item) -> tuple[float, int]:
        unit = unit_of(item.nodeid)
        return (-unit_seconds(unit, sizes[unit]), first[unit])

    items.sort(key=key)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A `LoadScopeScheduling` over our units, in collection order (`longest_units_first`)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _seconds_left(self, node: Any) -> float:
            left = 0.0
            for unit, tests in self.assigned_work.get(node, {}).items():
                pending = sum(1 for done in tests.values() if not done)
                if pending:
                    left += unit_seconds(unit, len(tests)) * pending / len(tests)
            return left

        def _assign_work_unit(self, node: Any) -> None:
            if self._seconds_left(node) > LONG_UNIT_S and len(self.workqueue) > 1:
                shortest: Sequence[str] = list(self.workqueue)[-1:]
                self.workqueue.move_to_end(shortest[0], last=False)
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
