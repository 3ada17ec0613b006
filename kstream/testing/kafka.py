"""Apache Kafka (KRaft) on loopback, for tests, crash tests and benchmarks.

`KafkaCluster(nodes=1)` is one combined broker+controller; `KafkaCluster(nodes=3)` is three
such processes sharing one controller quorum, with replication factor 3 and
`min.insync.replicas=2` as defaults, for failover tests. Each node's storage is formatted on
start in a fresh temporary directory, ports are free loopback ports, each node logs to a file
(`node.log_path`), and nodes are stopped by PID: a graceful stop, `kill` (SIGKILL), `pause`
(SIGSTOP) and `resume`, and `restart` on the same ports and data.

The broker is `org.apache.kafka:kafka_2.13` and its runtime dependencies, resolved from Maven
Central by the repository's `tools/kafka/pom.xml` (`make kafka`); `KSTREAM_KAFKA_LIBS` names
another directory of jars. Nothing here is needed by kstream at run time.

The JVM flags (`TEST_JVM_OPTIONS`) are for a small test broker that starts in a few seconds:
the C1 compiler only, the serial collector, a 512 MB heap. Benchmarks pass
`jvm_options=BENCH_JVM_OPTIONS` for a broker with full JIT compilation. Where a class-data
archive of the broker's classes exists beside the jars (`write_class_archive`, which `make
kafka` runs: `python -m kstream.testing.kafka --class-archive`), every JVM here maps it instead
of loading and verifying some 4,000 classes from the jars: a node starts in about 3 s instead
of 5 on 2 cores. A JVM that cannot use the archive (another Java) ignores it.

`client_listener="SSL"` (or "SASL_PLAINTEXT", "SASL_SSL") adds a client listener of that
protocol, for the tests of kstream's TLS and SASL settings against Kafka's own (`KafkaCluster`).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from kstream.kafka.broker import _die_with_parent, free_port
from kstream.kafka.errors import BrokerStartError

__all__ = [
    "BENCH_JVM_OPTIONS",
    "CLIENT_LISTENER_PROTOCOLS",
    "TEST_JVM_OPTIONS",
    "KafkaCluster",
    "KafkaNode",
    "kafka_libs",
    "kafka_version",
]

TEST_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Xss512k",
    "-Djava.awt.headless=true",
)
BENCH_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms1g",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

_LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""

log = logging.getLogger("kstream.testing.kafka")
_LOG_TAIL = 3000
#: How many times `KafkaCluster.start` picks new ports when one was taken before the node
#: bound it, and how the node's log says so (java.net.BindException)
PORT_ATTEMPTS = 3
_PORT_TAKEN = "Address already in use"

#: the security protocols a `KafkaCluster` client listener can have
CLIENT_LISTENER_PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _repo_libs() -> Path:
    return Path(__file__).resolve().parents[2] / "tools" / "kafka" / "target" / "libs"


def kafka_libs() -> Path:
    """The directory of the broker's jars: `$KSTREAM_KAFKA_LIBS`, else the repository's
    `tools/kafka/target/libs` (filled by `make kafka`)."""
    env = os.environ.get("KSTREAM_KAFKA_LIBS")
    libs = Path(env) if env else _repo_libs()
    if not any(libs.glob("kafka_2.13-*.jar")):
        where = f"KSTREAM_KAFKA_LIBS={env!r}" if env else str(libs)
        raise BrokerStartError(
            f"no Apache Kafka jars in {where}: run `make kafka` (Maven resolves "
            "org.apache.kafka:kafka_2.13 with tools/kafka/pom.xml), or point "
            "KSTREAM_KAFKA_LIBS at a directory holding kafka_2.13-*.jar and its dependencies"
        )
    return libs


def class_archive(libs: Path | None = None) -> Path:
    """Where the class-data archive of the broker in `libs` lives (beside the jars)."""
    return (libs or kafka_libs()).parent / "kafka-classes.jsa"


def write_class_archive(libs: Path | None = None) -> Path:
    """Start one node with the test JVM flags, stop it gracefully, and keep the class-data
    archive its JVM writes at exit (Java's dynamic AppCDS); returns its path."""
    path = class_archive(libs)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    cluster = KafkaCluster(
        jvm_options=[*TEST_JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={tmp}"], use_archive=False
    )
    cluster.start()
    try:
        cluster.nodes[0].stop(timeout=60)
    finally:
        cluster.stop()
    if not tmp.exists():
        raise BrokerStartError(f"the broker's JVM wrote no class-data archive at {tmp}")
    tmp.replace(path)
    return path


def kafka_version(libs: Path | None = None) -> str:
    """The version of the broker in `libs` (from its jar's name), e.g. "4.4.0"."""
    jar = next((libs or kafka_libs()).glob("kafka_2.13-*.jar"))
    return jar.name[len("kafka_2.13-") : -len(".jar")]


def _java() -> str:
    home = os.environ.get("KSTREAM_KAFKA_JAVA_HOME") or os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise BrokerStartError("Apache Kafka needs Java 17 or newer: no `java` on PATH")
    return found


def _cluster_id() -> str:
    """A random KRaft cluster id (a base64 UUID), never starting with '-', which the storage
    tool's command line would read as an option (Kafka's own Uuid.randomUuid avoids it too)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class KafkaNode:
    """One KRaft process (broker and controller) of a `KafkaCluster`."""

    def __init__(self, cluster: KafkaCluster, node_id: int, root: Path) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.host = cluster.host
        self.pick_ports()
        self.dir = root / f"node-{node_id}"
        self.data_dir = self.dir / "data"
        self.config_path = self.dir / "server.properties"
        self.log_path = self.dir / "broker.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where the log of the current run starts

    def pick_ports(self) -> None:
        """Free ports for the node's listeners, as the OS has them now (another process may
        take one before the node binds it: `KafkaCluster.start` then starts again)."""
        self.port = free_port(self.host)
        self.controller_port = free_port(self.host)
        #: the port of the CLIENT listener, if the cluster has one (`client_listener`)
        self.client_port = free_port(self.host) if self.cluster.client_listener else None

    @property
    def bootstrap_server(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def client_bootstrap_server(self) -> str:
        """The address of the node's CLIENT listener (`KafkaCluster(client_listener=...)`)."""
        if self.client_port is None:
            raise ValueError("this cluster was started without a client_listener")
        return f"{self.host}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def properties(self) -> dict[str, str]:
        c = self.cluster
        rf = str(c.replication_factor)
        listeners = [
            f"PLAINTEXT://{self.host}:{self.port}",
            f"CONTROLLER://{self.host}:{self.controller_port}",
        ]
        advertised = [f"PLAINTEXT://{self.host}:{self.port}"]
        protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        if c.client_listener is not None:
            # clients only: brokers and controllers keep talking PLAINTEXT among themselves
            listeners.append(f"CLIENT://{self.client_bootstrap_server}")
            advertised.append(f"CLIENT://{self.client_bootstrap_server}")
            protocols.append(f"CLIENT:{c.client_listener}")
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": c.quorum_voters,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": str(c.min_insync_replicas),
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": str(c.min_insync_replicas),
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": str(c.min_insync_replicas),
            "group.initial.rebalance.delay.ms": "0",
            # tests use short consumer sessions, so a killed member leaves its group quickly
            "group.min.session.timeout.ms": "500",
            # the consumer group protocol's (KIP-848) session and heartbeat are the broker's:
            # a killed member leaves within seconds, and assignments (which travel with the
            # heartbeats) move within a quarter second instead of five
            "group.consumer.min.session.timeout.ms": "500",
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.min.heartbeat.interval.ms": "100",
            "group.consumer.heartbeat.interval.ms": "250",
            # Kafka Streams' rebalance protocol (KIP-1071, 4.2+): short sessions and quick
            # heartbeats as above, and no delay of a new group's first assignment (3 s);
            # older brokers log these as unknown and go on
            "group.streams.min.session.timeout.ms": "500",
            "group.streams.session.timeout.ms": "6000",
            "group.streams.min.heartbeat.interval.ms": "100",
            "group.streams.heartbeat.interval.ms": "250",
            "group.streams.initial.rebalance.delay.ms": "0",
            # a killed broker is fenced, and a restarted one admitted, within seconds; a
            # single node is its own controller (nothing to fail over to), and there a short
            # session only fenced the one broker when its JVM stalled for 3 s on a loaded
            # machine ("All brokers are currently fenced": 4 tests of a fresh clone's
            # `make test` failed beside a chaos sitting)
            "broker.session.timeout.ms": "3000" if len(c.nodes) > 1 else "30000",
            "broker.heartbeat.interval.ms": "500",
            "auto.create.topics.enable": "true",
            # tests write synthetic event times (1970, 2023): a topic without its own
            # retention keeps them, and time-based deletion does not run while tests do
            "log.retention.ms": "-1",
            "log.retention.check.interval.ms": "3600000",
            # the log cleaner runs, with a small buffer (the default takes 128 MB of heap)
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            "log.cleaner.backoff.ms": "1000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "log.flush.interval.messages": str(2**63 - 1),
            "unstable.api.versions.enable": "false",
        }
        props.update({k: str(v) for k, v in c.overrides.items()})
        return props

    def write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in self.properties().items())
        self.config_path.write_text(text)

    def format(self, cluster_id: str) -> None:
        """Format the node's log directory (KRaft's `kafka-storage format`)."""
        cmd = [
            _java(),
            *TEST_JVM_OPTIONS,
            *self.cluster.archive_options,
            "-cp",
            self.cluster.classpath,
            f"-Dlog4j2.configurationFile={self.cluster.log4j_path}",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self.config_path),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise BrokerStartError(
                f"formatting Kafka node {self.node_id}'s storage in {self.data_dir} failed "
                f"(exit {done.returncode}): {done.stdout[-_LOG_TAIL:]}{done.stderr[-_LOG_TAIL:]}"
            )

    def launch(self) -> None:
        """Start the process (no wait); storage must be formatted."""
        if self.running:
            return
        cmd = [
            _java(),
            *self.cluster.jvm_options,
            *self.cluster.archive_options,
            "-cp",
            self.cluster.classpath,
            f"-Dlog4j2.configurationFile={self.cluster.log4j_path}",
            "kafka.Kafka",
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def ready(self) -> bool:
        """The broker has started (its log says so); raises if the process is gone."""
        if self._proc is None or self._proc.poll() is not None:
            code = None if self._proc is None else self._proc.returncode
            raise BrokerStartError(
                f"Kafka node {self.node_id} on {self.bootstrap_server} exited with code {code} "
                f"during start-up; log {self.log_path}:\n{self.log_tail()}"
            )
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return b"Kafka Server started" in log.read()
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the process, as a crash would; `restart()` brings it back."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)

    def pause(self) -> None:
        """SIGSTOP: the process stays alive but answers nothing until `resume()`."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL after `timeout`; idempotent."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def restart(self, timeout: float | None = None) -> None:
        """Start a stopped or killed node again on its ports and data; waits until it is up."""
        self.stop()
        self.launch()
        self.cluster.wait_ready([self], timeout)

    def log_tail(self, chars: int = _LOG_TAIL) -> str:
        try:
            return self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"KafkaNode({self.node_id}, {self.bootstrap_server}, {state})"


class KafkaCluster:
    """Apache Kafka on loopback: `nodes` KRaft processes (each broker and controller).

    Use as a context manager or call `start()` and `stop()`. `overrides` are added to every
    node's `server.properties`. `replication_factor` and `min_insync_replicas` default to 1
    for one node and to 3 and 2 for more. The data lives in a temporary directory removed on
    `stop()` unless `keep_data` is set (logs too: see `root`).

    `client_listener` (one of `CLIENT_LISTENER_PROTOCOLS`) adds a listener named CLIENT of that
    security protocol on one more loopback port per node, advertised beside PLAINTEXT, so tests
    can exercise TLS and SASL against Kafka itself; its keys, certificates and JAAS settings
    come through `overrides` (`listener.name.client.ssl.keystore.location=...`,
    `listener.name.client.scram-sha-512.sasl.jaas.config=...`, `sasl.enabled.mechanisms=...`).
    `bootstrap_servers` stays the PLAINTEXT listener (the cluster's own readiness checks use it;
    so can a test's admin work, e.g. creating SCRAM users); `client_bootstrap_servers` is CLIENT.
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        host: str = "127.0.0.1",
        overrides: Mapping[str, Any] | None = None,
        jvm_options: Sequence[str] = TEST_JVM_OPTIONS,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
        start_timeout: float = 60.0,
        root: str | None = None,
        keep_data: bool = False,
        use_archive: bool = True,
        client_listener: str | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes: expected at least 1, got {nodes}")
        if client_listener is not None and client_listener not in CLIENT_LISTENER_PROTOCOLS:
            raise ValueError(
                f"client_listener: expected one of {', '.join(CLIENT_LISTENER_PROTOCOLS)}, "
                f"got {client_listener!r}"
            )
        self.host = host
        self.client_listener = client_listener
        self.overrides = dict(overrides or {})
        self.jvm_options = list(jvm_options)
        self.replication_factor = replication_factor or min(nodes, 3)
        self.min_insync_replicas = min_insync_replicas or (2 if nodes >= 3 else 1)
        self.start_timeout = start_timeout
        self.keep_data = keep_data or root is not None
        self.root = Path(root or tempfile.mkdtemp(prefix="kstream-kafka-"))
        self.libs = kafka_libs()
        self.version = kafka_version(self.libs)
        self.classpath = str(self.libs / "*")
        archive = class_archive(self.libs)
        #: JVM flags every process of the cluster starts with (the archive's, where one exists)
        self.archive_options = (
            [f"-XX:SharedArchiveFile={archive}"] if use_archive and archive.exists() else []
        )
        self.log4j_path = self.root / "log4j2.properties"
        self.nodes = [KafkaNode(self, i + 1, self.root) for i in range(nodes)]
        self.started_in: float | None = None

    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap_server for n in self.nodes)

    @property
    def client_bootstrap_servers(self) -> str:
        """The CLIENT listeners' addresses; ValueError without a `client_listener`."""
        return ",".join(n.client_bootstrap_server for n in self.nodes)

    @property
    def pids(self) -> list[int | None]:
        return [n.pid for n in self.nodes]

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no Kafka node {node_id} (nodes: {[n.node_id for n in self.nodes]})")

    def start(self) -> KafkaCluster:
        """Format every node's storage, start them all and wait until each broker is up.

        A port is free when picked and bound by the node a few seconds later; another process
        (a parallel test run starting its own broker) may bind it in between, and the node
        exits with "Address already in use". The cluster then starts again on new ports, up
        to `PORT_ATTEMPTS` times."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start()
            except BrokerStartError as e:
                if _PORT_TAKEN not in str(e) or attempt == PORT_ATTEMPTS:
                    raise
                log.warning("a Kafka node's port was taken before it bound it; new ports")
                for n in self.nodes:
                    shutil.rmtree(n.dir, ignore_errors=True)
                    n.pick_ports()
        raise AssertionError("unreachable")

    def _start(self) -> KafkaCluster:
        t0 = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.log4j_path.write_text(_LOG4J2)
        cluster_id = _cluster_id()
        for n in self.nodes:
            n.write_config()
        # formatting costs a JVM start each: format the nodes side by side
        errors: list[BaseException] = []
        if len(self.nodes) == 1:
            self.nodes[0].format(cluster_id)
        else:
            import threading

            def fmt(node: KafkaNode) -> None:
                try:
                    node.format(cluster_id)
                except BaseException as e:
                    errors.append(e)

            threads = [threading.Thread(target=fmt, args=(n,)) for n in self.nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        atexit.register(self.stop)
        try:
            for n in self.nodes:
                n.launch()
            self.wait_ready(self.nodes)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - t0
        return self

    def wait_ready(self, nodes: Sequence[KafkaNode], timeout: float | None = None) -> None:
        """Wait until each of `nodes` has started and every broker is in the cluster's
        metadata."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        waiting = list(nodes)
        while waiting:
            waiting = [n for n in waiting if not n.ready()]
            if not waiting:
                break
            if time.monotonic() > deadline:
                n = waiting[0]
                raise BrokerStartError(
                    f"Kafka node {n.node_id} on {n.bootstrap_server} did not start within "
                    f"{timeout or self.start_timeout:g}s; log {n.log_path}:\n{n.log_tail()}"
                )
            time.sleep(0.05)
        self._wait_brokers_registered(deadline)

    def _wait_brokers_registered(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        live = [n for n in self.nodes if n.running]
        want = {n.node_id for n in live}
        admin = AdminClient(
            {"bootstrap.servers": ",".join(n.bootstrap_server for n in live), "log_level": 3}
        )
        seen: set[int] = set()
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                seen = set(admin.list_topics(timeout=2).brokers)
                if want <= seen:
                    return
            time.sleep(0.1)
        raise BrokerStartError(
            f"Kafka brokers {sorted(want - seen)} did not join the cluster at "
            f"{self.bootstrap_servers} in time"
        )

    def stop(self) -> None:
        """Kill every node and remove the data unless kept; idempotent.

        A graceful stop of the last nodes of a quorum waits for a controller that is gone:
        the data is thrown away (or kept as written, which a restart recovers), so SIGKILL.
        """
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        for n in self.nodes:
            n.kill()
        if not self.keep_data:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaCluster({self.version}, {self.bootstrap_servers})"


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kstream.testing.kafka")
    ap.add_argument(
        "--class-archive",
        action="store_true",
        help="write the class-data archive of the broker's JVM beside the jars",
    )
    if ap.parse_args().class_archive:
        print(f"wrote {write_class_archive()}")
