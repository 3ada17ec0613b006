"""Shared fixtures: one Apache Kafka broker for the whole run, and unique topic names.

The suite runs on Apache Kafka (KRaft, from `tools/kafka`: `make kafka`). The process that
starts pytest starts one single-node broker before any test process exists and hands its
address to every pytest-xdist worker (`KSTREAM_TEST_BOOTSTRAP`); tests stay apart by using
unique topic (and group) names. `KSTREAM_TEST_BROKER=tansu` runs the suite on the embedded
Tansu broker instead (one per worker, as Tansu keeps everything in memory): the compatibility
lane. Tests that are about Tansu itself (the embedded broker, `kstreamd demo`, the
broker-compatibility component) start their own Tansu in either lane. Set
`KSTREAM_TEST_BOOTSTRAP` to run against a Kafka the tests did not start.

With `CI` set (as CI runs `.ci/run`), a skipped test is a failure: a missing system package
(redis-server, prometheus, Java, Maven) must not turn the suite silently green. `xfail` stays
allowed, and so does the skip of a test of a Kafka feature that the broker of a compatibility
lane (`make test-kafka-3.9`) is too old for (`kafka_feature` marks, support.kafka_features).
Tests marked `slow` run only with `KSTREAM_LONG=1`; otherwise they are deselected (listed as
such in the summary), not skipped.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import kafka_features
from support.scheduling import group_of, longest_units_first, make_scheduler, yield_to_spark
from support.timeline import test_finished, test_started

from kstream.kafka.broker import EmbeddedBroker
from kstream.testing.kafka import KafkaCluster


@dataclass(frozen=True)
class ExternalBroker:
    """A Kafka the tests did not start: only its address is known."""

    bootstrap_servers: str


LONG = os.environ.get("KSTREAM_LONG") == "1"
BROKERS = ("kafka", "tansu")
TEST_BROKER = os.environ.get("KSTREAM_TEST_BROKER", "kafka").strip().lower()
if TEST_BROKER not in BROKERS:
    raise pytest.UsageError(
        f"KSTREAM_TEST_BROKER: expected one of {', '.join(BROKERS)}, got {TEST_BROKER!r}"
    )
_SHARED_KAFKA: KafkaCluster | None = None
# JVM settings for every Spark JVM the tests start (local sessions, submitted drivers, the
# cluster's executors), through the `spark-defaults.conf` Spark reads from `SPARK_CONF_DIR`.
# Test JVMs live for seconds to minutes: the C1 compiler alone and the serial collector halve
# their CPU time (a small local job: 33-40 s of CPU with the defaults, 18-21 s with these), and
# the tests are bound by CPU, not by peak JIT-compiled speed. Production jobs keep Spark's
# defaults: these settings live only here.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
# kstream's `sitecustomize` for Spark's Python processes: they import pyspark from the installed
# package (with its compiled bytecode) rather than from `pyspark.zip`; on the path of every
# process the tests start, so it covers the sessions the tests start themselves too.
PYSPARK_FIRST = str(Path(__file__).resolve().parent.parent / "kstream" / "spark" / "worker_site")
SPARK_TEST_DEFAULTS = {
    "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.ui.enabled": "false",
}


def _spark_test_defaults() -> None:
    """Point `SPARK_CONF_DIR` at a `spark-defaults.conf` of `SPARK_TEST_DEFAULTS`, unless one
    is set already (by the user, or inherited by a pytest-xdist worker from the controller);
    put `PYSPARK_FIRST` on the path of every process the tests start."""
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PYSPARK_FIRST not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([PYSPARK_FIRST, *path])
    if os.environ.get("SPARK_CONF_DIR"):
        return
    conf_dir = tempfile.mkdtemp(prefix="kstream-test-spark-conf-")
    lines = [f"{k} {v}\n" for k, v in SPARK_TEST_DEFAULTS.items()]
    Path(conf_dir, "spark-defaults.conf").write_text("".join(lines))
    os.environ["SPARK_CONF_DIR"] = conf_dir
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", TEST_JVM_OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kafka_feature(name): needs a feature of Apache Kafka that older brokers lack; skipped "
        "on those (support.kafka_features)",
    )
    _spark_test_defaults()
    if TEST_BROKER == "tansu":
        # every App and kstreamd of the lane turns on the compensations Tansu needs
        os.environ.setdefault("KSTREAM_BROKER_COMPAT", "tansu")
    if hasattr(config, "workerinput") or TEST_BROKER != "kafka" or config.option.collectonly:
        return  # (collecting only, e.g. tests/support/warm_bytecode.py, needs no broker)
    if os.environ.get("KSTREAM_TEST_BOOTSTRAP") or not _needs_broker(config):
        return
    # One broker for the run, started here, before pytest-xdist starts its workers, which
    # inherit the address.
    global _SHARED_KAFKA
    _SHARED_KAFKA = KafkaCluster(nodes=1).start()
    os.environ["KSTREAM_TEST_BOOTSTRAP"] = _SHARED_KAFKA.bootstrap_servers
    os.environ[kafka_features.VERSION_ENV] = _SHARED_KAFKA.version
    os.environ["KSTREAM_TEST_BROKER_LOG"] = str(_SHARED_KAFKA.nodes[0].log_path)


_BROKER_FREE = ("tests/unit", "tests/property", "tests/conformance", "tests/oracle")


def _needs_broker(config: pytest.Config) -> bool:
    """False when every path the run was given lies in a suite that needs no broker."""
    root = Path(__file__).resolve().parent.parent
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")]
    if not args:
        return True
    for arg in args:
        path = Path(arg).resolve()
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            return True
        if not rel.startswith(_BROKER_FREE):
            return True
    return False


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name the broker the run's tests shared: which Apache Kafka a lane ran on shows in its
    log (`make test-kafka-3.9` and the like point KSTREAM_KAFKA_LIBS at other jars)."""
    if _SHARED_KAFKA is not None:
        terminalreporter.write_line(
            f"broker: Apache Kafka {_SHARED_KAFKA.version} (KRaft), jars {_SHARED_KAFKA.libs}"
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    global _SHARED_KAFKA
    if _SHARED_KAFKA is not None:
        _SHARED_KAFKA.stop()
        _SHARED_KAFKA = None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`, by our units (`support.scheduling`).

    pytest-xdist marks a test's group by a suffix of its node id, which pytest 9 no longer
    lets a plugin change, so its own `loadgroup` would run every test wherever.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    return make_scheduler(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if hasattr(item.config, "workerinput"):
        yield_to_spark(item.nodeid)
    reason = _missing_kafka_feature(item)
    if reason is not None:
        pytest.skip(reason)


def _missing_kafka_feature(item: pytest.Item) -> str | None:
    """Why the tests' Apache Kafka lacks a feature `item` needs (its `kafka_feature` marks),
    or None; never on the Tansu lane, whose tests say what they need themselves."""
    if TEST_BROKER != "kafka":
        return None
    for mark in item.iter_markers("kafka_feature"):
        reason = kafka_features.missing(*mark.args)
        if reason is not None:
            return reason
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Setup, call and teardown of one test, where it runs (`support.timeline`)."""
    test_started(item.nodeid)
    yield
    test_finished(item.nodeid)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.path).replace("\\", "/")
        # everything that needs the broker is `integration`; Spark tests are also `spark`
        if "/integration/" in path or "/e2e/" in path or "/spark/" in path:
            item.add_marker(pytest.mark.integration)
        if "/spark/" in path:
            item.add_marker(pytest.mark.spark)
        group = group_of(item.nodeid)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if not LONG:
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the scheduler takes units in order
        longest_units_first(items)


def _skip_reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    # a skip for a feature the lane's older broker lacks is what that lane means: it stays
    if (
        _in_ci()
        and report.skipped
        and not hasattr(report, "wasxfail")
        and _missing_kafka_feature(item) is None
        and not (
            TEST_BROKER == "kafka" and kafka_features.expected_skip(_skip_reason(report.longrepr))
        )
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI={os.environ['CI']} (a skip in CI means something the test "
            f"needs is missing; install it in .ci/run): {_skip_reason(report.longrepr)}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if _in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"module skipped under CI={os.environ['CI']} (a skip in CI means something the "
            f"tests need is missing; install it in .ci/run): {_skip_reason(report.longrepr)}"
        )


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker | ExternalBroker]:
    """The broker shared by every integration test (use `.bootstrap_servers`): the run's
    Apache Kafka, or with `KSTREAM_TEST_BROKER=tansu` this worker's own Tansu."""
    if TEST_BROKER == "tansu":
        with EmbeddedBroker() as broker:
            yield broker
        return
    external = os.environ.get("KSTREAM_TEST_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    with KafkaCluster(nodes=1) as cluster:  # a run that was not expected to need one
        yield ExternalBroker(cluster.bootstrap_servers)


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[EmbeddedBroker]:
    """An embedded Tansu broker of this worker, for the tests of the compatibility lane."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def kafka_cluster3() -> Iterator[KafkaCluster]:
    """A fresh three-node Apache Kafka cluster (replication factor 3, min.insync.replicas 2)
    for failover tests; its nodes can be killed, paused and restarted."""
    with KafkaCluster(nodes=3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker: EmbeddedBroker | ExternalBroker) -> str:
    """The shared broker's address."""
    return kafka_broker.bootstrap_servers


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80]


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """`unique_name("orders")` -> a topic/group name no other test uses."""

    def make(prefix: str = "t") -> str:
        return f"{_slug(prefix)}-{_slug(request.node.name)}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_name(unique_name: Callable[[str], str]) -> str:
    """A topic name unique to this test."""
    return unique_name("topic")
