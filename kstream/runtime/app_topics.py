"""The topics an app owns: created by `App.start` before anything runs, so a misconfigured
cluster or a co-partitioning mismatch fails there, not on the first record.

Internal topics (repartition and changelog topics) get Kafka Streams' configs
(kstream.internal_topics) and the configured replication factor; with broker_compat's high
marks, each sub-topology's marks changelog; the control topic of SHUTDOWN_APPLICATION
requests; the dead-letter topic, if one is configured and missing.
"""

from __future__ import annotations

from typing import Any

from kstream.broker_compat import compat_of, marks_spec
from kstream.config import Config
from kstream.errors import TopologyError
from kstream.kafka.admin import TopicSpec
from kstream.kafka.supplier import ClientConfig, ClientSupplier
from kstream.runtime.app_shutdown import control_topic_spec
from kstream.runtime.policies import ensure_dlq_topic

__all__ = ["create_topics", "internal_topic_names"]


def create_topics(
    compiled: Any,
    app_id: str,
    config: Config,
    client_supplier: ClientSupplier,
    bootstrap_servers: str,
) -> dict[str, int]:
    """Check that the source topics of `compiled` exist and create the app's own topics;
    every topic's partition count (sources, sinks and internal topics)."""
    admin = client_supplier.admin(
        ClientConfig(bootstrap_servers, config.kafka, config.connect_timeout)
    )
    external = compiled.external_source_topics + compiled.global_topics
    sinks = [t for s in compiled.subtopologies for t in s.sink_topics]
    have = admin.partition_counts(external + sinks)
    missing = [t for t in external if t not in have]
    if missing:
        raise TopologyError(
            f"app {app_id!r}: source topic(s) {', '.join(map(repr, missing))} do not "
            "exist; create them before starting"
        )
    counts = compiled.resolve_partitions(have)
    # internal topics get Kafka Streams' configs (kstream.internal_topics) and the
    # configured replication factor (-1: the broker's default.replication.factor)
    rf = config.replication_factor
    extra = config.windowstore_changelog_additional_retention
    specs = []
    for name, it in compiled.internal_topics.items():
        specs.append(TopicSpec(name, counts[name], it.topic_config(extra), rf))
    for s in compiled.subtopologies if compat_of(config).drop_repeats else ():
        n = max(counts[t] for t in s.source_topics)
        marks = marks_spec(s.id)
        name = marks.changelog_topic(app_id)
        specs.append(TopicSpec(name, n, marks.changelog_config(extra), rf))
    specs.append(control_topic_spec(app_id, config))  # SHUTDOWN_APPLICATION requests
    admin.create_topics(specs)
    # used as it is if it exists, whatever its partition count; else made with one
    have.update(ensure_dlq_topic(admin, config))
    out = dict(have)
    out.update(counts)
    return out


def internal_topic_names(compiled: Any, app_id: str) -> list[str]:
    """Every topic an app of `compiled` may create and own: repartition and changelog topics,
    the provenance marks' changelogs (broker_compat="tansu") and the instances registry of
    `kstreamd run`."""
    names = set(compiled.internal_topics)
    names.update(marks_spec(s.id).changelog_topic(app_id) for s in compiled.subtopologies)
    names.add(f"{app_id}-instances")
    return sorted(names)
