"""Run a kstream `Topology` as Spark Structured Streaming queries.

One engine (`kstream.spark.tasks`): one query per sub-topology, each task (sub-topology,
partition) running kstream's own processors, so Spark forwards the updates the native engine
forwards. A sub-topology without state runs inside the source's read tasks (no shuffle but the
one to the sink's write slots, no Spark state): a stateless topology is one such query. A
stateful one groups its input by task over stores kept in Spark's state. The topology is
compiled and checked before Spark starts, so a topology Spark cannot run is reported at once.
Spark's checkpoint holds the source offsets and the state; the sink's marker offset in Kafka
says which batches reached Kafka.

The error policies (`on_deserialization_error`, `on_processing_error`, `dlq_topic`) apply
through the native engine's handler (`kstream.spark.policy`); a query that fails on a record
raises kstream's own error naming it (`kstream.spark.failure`), not Spark's wrapper.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kstream.broker_compat import compat_of
from kstream.config import Config, validate_app_id
from kstream.duration import duration
from kstream.errors import ConfigError, TopologyError
from kstream.guarantee import AT_LEAST_ONCE, DEFAULT_GUARANTEE, EXACTLY_ONCE, parse_guarantee
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.runtime.policies import ensure_dlq_topic
from kstream.spark.checkpoint import (
    clear_unfinished_start,
    has_logged_batch,
    use_file_system_manager,
)
from kstream.spark.policy import policy_config
from kstream.spark.queries import TaskQueries, settle
from kstream.topology.topology import Topology

if TYPE_CHECKING:
    from kstream.spark.plan import TaskPlan
    from kstream.spark.sink import TaskWriter

_PROCESSING_TIME = re.compile(r"^processingTime=(.+)$")
TASK_LABEL_MODULUS = 1024
# records read per micro-batch, all partitions together: bounds what an executor holds
DEFAULT_MAX_RECORDS_PER_BATCH = 100_000
# Spark gives a Python worker it starts on its own (a source's planner, a state processor's
# driver side) a fixed 10 s to connect back, and fails the query when one misses it, as can
# happen on a saturated machine. Such a query never ran the batch it was starting, and a query
# restarted from its checkpoint is exactly-once by design (the sink skips written slots), so
# `run` restarts it, at most `TRANSIENT_RESTARTS` times.
TRANSIENT_FAILURES = ("Python worker failed to connect back",)
TRANSIENT_RESTARTS = 3

log = logging.getLogger(__name__)


def parse_trigger(trigger: str) -> dict[str, Any]:
    """`"availableNow"` or `"processingTime=<duration>"` as `DataStreamWriter.trigger` kwargs."""
    if trigger == "availableNow":
        return {"availableNow": True}
    m = _PROCESSING_TIME.match(trigger or "")
    if m:
        ms = duration(m.group(1), name="trigger")
        return {"processingTime": f"{max(ms, 1)} milliseconds"}
    raise ConfigError(
        f"trigger: expected 'availableNow' or 'processingTime=<duration>' such as "
        f"'processingTime=1s', got {trigger!r}"
    )


def start(
    topology: Topology,
    app_id: str,
    bootstrap_servers: str,
    checkpoint_dir: str | None = None,
    trigger: str = "availableNow",
    spark: Any = None,
    config: Mapping[str, Any] | Config | None = None,
    *,
    max_records_per_batch: int | None = DEFAULT_MAX_RECORDS_PER_BATCH,
    guarantee: str = DEFAULT_GUARANTEE,
    client_supplier: ClientSupplier | None = None,
) -> TaskQueries:
    """Start the queries, one per sub-topology, and return them (see `run`)."""
    validate_app_id(app_id)
    cfg = config if isinstance(config, Config) else Config.from_mapping(config)
    trig = parse_trigger(trigger)
    guarantee = sink_guarantee(guarantee)
    from kstream.spark.plan import build_task_plan

    return _start_tasks(
        build_task_plan(topology, app_id),
        bootstrap_servers,
        checkpoint_dir,
        trig,
        spark,
        cfg,
        max_records_per_batch,
        guarantee,
        client_supplier,
    )


def run(
    topology: Topology,
    app_id: str,
    bootstrap_servers: str,
    checkpoint_dir: str | None = None,
    trigger: str = "availableNow",
    spark: Any = None,
    config: Mapping[str, Any] | Config | None = None,
    *,
    max_records_per_batch: int | None = DEFAULT_MAX_RECORDS_PER_BATCH,
    guarantee: str = DEFAULT_GUARANTEE,
    client_supplier: ClientSupplier | None = None,
) -> None:
    """Run `topology` on Spark until done (`availableNow`) or stopped (SIGTERM/SIGINT).

    With `trigger="availableNow"` it returns once every record present at the start has been
    processed and written; with `"processingTime=1s"` it runs a batch every second until the
    process is asked to stop. `config` takes the kstream config keys (`kafka`, `state_dir`
    for the default checkpoint directory `<state_dir>/<app_id>/spark-checkpoint`; on a cluster
    give `checkpoint_dir` on storage every node shares, e.g. `hdfs://` or `s3a://`).
    `max_records_per_batch` caps a micro-batch (None: everything available, one batch);
    `guarantee` is `exactly_once_v2` (the default) or `exactly_once` (transactional writes,
    replays skipped), or `at_least_once`.
    `client_supplier`: where every Kafka client of the run comes from, on the driver and the
    executors (None: Kafka's; it must pickle, see `kstream.spark.clients`).
    """
    stopping = threading.Event()
    restarts = 0
    while True:
        q = start(
            topology,
            app_id,
            bootstrap_servers,
            checkpoint_dir,
            trigger,
            spark,
            config,
            max_records_per_batch=max_records_per_batch,
            guarantee=guarantee,
            client_supplier=client_supplier,
        )
        try:
            _wait(q, stopping)
            return
        except Exception as e:
            if stopping.is_set() or restarts >= TRANSIENT_RESTARTS or not transient(e):
                raise
            restarts += 1
            log.warning(
                "app %s: a query failed to start a Python worker (%s); restarting from the "
                "checkpoint (%d of at most %d)",
                app_id,
                _first_line(e),
                restarts,
                TRANSIENT_RESTARTS,
            )
        finally:
            q.close()


def _wait(q: TaskQueries, stopping: threading.Event) -> None:
    """`q.wait()`, with SIGTERM/SIGINT stopping the queries (and any restart) meanwhile."""

    def stop(*_: Any) -> None:
        stopping.set()
        q.stop()

    restore: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            restore[sig] = signal.signal(sig, stop)
    try:
        q.wait()
    finally:
        for sig, handler in restore.items():
            signal.signal(sig, handler)


def transient(e: BaseException) -> bool:
    """Whether `e` is a query failure that a restart from the checkpoint gets past."""
    text = str(e)
    return any(marker in text for marker in TRANSIENT_FAILURES)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def sink_guarantee(guarantee: str) -> str:
    """The sink's mode for a kstream processing guarantee: `exactly_once` and
    `exactly_once_v2` (the default, as for the native engine) are its transactional writes,
    one transactional producer per write slot; `at_least_once` its plain ones."""
    name = parse_guarantee(guarantee, "guarantee")
    return AT_LEAST_ONCE if name == AT_LEAST_ONCE else EXACTLY_ONCE


def _start_tasks(
    plan: TaskPlan,
    bootstrap_servers: str,
    checkpoint_dir: str | None,
    trig: dict[str, Any],
    spark: Any,
    cfg: Config,
    max_records_per_batch: int | None,
    guarantee: str,
    client_supplier: ClientSupplier | None = None,
) -> TaskQueries:
    """Create the internal topics; start one query per sub-topology (`kstream.spark.tasks`)."""
    supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
    own_session = spark is None
    if spark is None:
        from kstream.spark.session import spark_session

        spark = spark_session()
    else:
        from kstream.spark.session import register

        register(spark)
    if checkpoint_dir is None:
        checkpoint_dir = os.path.join(cfg.state_dir, plan.app_id, "spark-checkpoint")
    if own_session:
        use_file_system_manager(spark, checkpoint_dir)
    # a checkpoint from before a hop was fused: its upstream's query goes on as it was
    unfused = {
        up for up in plan.fused.values() if has_logged_batch(spark, _location(checkpoint_dir, up))
    }
    if unfused:
        log.info(
            "app %s: sub-topologies %s keep their own query (their checkpoints have batches)",
            plan.app_id,
            sorted(unfused),
        )
        plan.unfuse(unfused)
    slots, widest_input = _prepare_topics(plan, bootstrap_servers, cfg, supplier)
    plan.bootstrap_servers = bootstrap_servers
    plan.kafka = dict(cfg.kafka)
    plan.client_supplier = client_supplier
    plan.policies = policy_config(cfg)
    plan.cache_max_bytes = cfg.cache_max_bytes
    plan.provenance = compat_of(cfg).provenance
    plan.gc_pause = cfg.gc_pause
    if own_session:
        spark.conf.set("spark.sql.shuffle.partitions", str(widest_input))
    queries = _SubTopologyQueries(
        plan,
        plan.blob(),
        slots,
        spark,
        trig,
        checkpoint_dir,
        cfg,
        max_records_per_batch,
        guarantee,
        client_supplier,
    )
    return TaskQueries(
        plan,
        {sid: queries.starter(sid) for sid in plan.order},
        sequential="availableNow" in trig,
        settled=lambda topics, stopped: settle(
            plan, topics, lambda pending: _fence(plan, slots, pending, cfg, supplier), stopped
        ),
    )


def _prepare_topics(
    plan: TaskPlan, bootstrap_servers: str, cfg: Config, supplier: ClientSupplier
) -> tuple[dict[int, int], int]:
    """Check the source topics, create the repartition topics and each query's marker topic,
    and record every topic's partition count in `plan`; each sub-topology's write slots, and
    the partitions of the widest topic the tasks read."""
    from kstream.internal_topics import repartition_config
    from kstream.spark.sink import ensure_marker_topic

    admin = supplier.admin(ClientConfig(bootstrap_servers, cfg.kafka))
    try:
        counts = admin.partition_counts(plan.external_topics)
        missing = [t for t in plan.external_topics if t not in counts]
        if missing:
            raise TopologyError(f"source topic(s) {missing} do not exist")
        resolved = plan.compiled.resolve_partitions(counts)
        for t in plan.repartition_topics:
            admin.create_topic(t, resolved[t], repartition_config(), cfg.replication_factor)
        sinks = admin.partition_counts(plan.user_sink_topics)
        plan.partitions = {**counts, **resolved, **sinks, **ensure_dlq_topic(admin, cfg)}
        # as many write slots as the widest topic the query may write to
        widest = max(plan.partitions.values(), default=1)
        slots = {
            sid: ensure_marker_topic(admin, _query_app(plan.app_id, sid), widest)
            for sid in plan.order
        }
        return slots, max(resolved.values(), default=1)
    finally:
        admin.close()


class _SubTopologyQueries:
    """Starts the streaming query of one sub-topology: its source, the task processor of a
    stateful one, and the transactional sink that writes its slots."""

    def __init__(
        self,
        plan: TaskPlan,
        blob: Any,
        slots: dict[int, int],
        spark: Any,
        trig: dict[str, Any],
        checkpoint_dir: str,
        cfg: Config,
        max_records_per_batch: int | None,
        guarantee: str,
        client_supplier: ClientSupplier | None,
    ) -> None:
        self.plan, self.blob, self.slots, self.spark, self.trig = plan, blob, slots, spark, trig
        self.checkpoint_dir, self.cfg = checkpoint_dir, cfg
        self.max_records_per_batch = max_records_per_batch
        self.guarantee, self.client_supplier = guarantee, client_supplier

    def starter(self, sid: int) -> Callable[[], tuple[Any, Any]]:
        return lambda: self.start(sid)

    def start(self, sid: int) -> tuple[Any, Any]:
        """Start sub-topology `sid`'s query; the query and its sink."""
        from kstream.spark.sink import TaskWriter, TransactionalSink, forget_markers

        plan, cfg = self.plan, self.cfg
        query_app = _query_app(plan.app_id, sid)
        location = _location(self.checkpoint_dir, sid)
        if not has_logged_batch(self.spark, location):
            forgotten = forget_markers(
                plan.bootstrap_servers, query_app, cfg.kafka, self.client_supplier
            )
            if forgotten:
                log.warning(
                    "query %s starts from a new checkpoint: deleted the marker groups %s an "
                    "earlier checkpoint left, so that its batches are written again",
                    query_app,
                    forgotten,
                )
        writer = None
        if self._tasks_write(sid, location):
            writer = TaskWriter(query_app, self.guarantee, cfg.kafka)
        source = self._source(sid)
        out = self._tasks(sid, source, writer) if sid in plan.stateful else source
        sink = TransactionalSink(
            query_app,
            plan.bootstrap_servers,
            cfg.kafka,
            slots=self.slots[sid],
            partitions=plan.partitions,
            guarantee=self.guarantee,
            client_supplier=self.client_supplier,
            provenance=plan.provenance,
            by_tasks=writer is not None,
        )
        clear_unfinished_start(self.spark, location)
        query = (
            out.writeStream.queryName(query_app.replace("-", "_").replace(".", "_"))
            .option("checkpointLocation", location)
            .outputMode("append")
            .foreachBatch(sink)
            .trigger(**self.trig)
            .start()
        )
        return query, sink

    def _tasks_write(self, sid: int, location: str) -> bool:
        """Whether `sid`'s tasks write their own outputs (`plan.tasks_write`): not when the
        marker topic has fewer partitions than tasks (made for an older plan), nor when the
        checkpoint's batches were written through write slots (their markers would not say
        which of its batches the tasks wrote), as a checkpoint of an earlier kstream has it."""
        from kstream.spark.plan import tasks_write
        from kstream.spark.sink import committed_batches

        plan = self.plan
        if not tasks_write(plan, sid):
            return False
        if max(plan.partitions[t] for t in plan.sources[sid]) > self.slots[sid]:
            return False  # a task's marker is the marker topic's partition of its number
        if not has_logged_batch(self.spark, location):
            return True
        query_app = _query_app(plan.app_id, sid)
        return (
            committed_batches(
                plan.bootstrap_servers, query_app, self.cfg.kafka, self.client_supplier
            )
            == 0
        )

    def _source(self, sid: int) -> Any:
        """The sub-topology's input: packed records for a stateful one's tasks, or a stateless
        one's outputs, computed inside the source."""
        from kstream.spark import packing, source, tasks
        from kstream.spark.fusion import fused_function

        plan = self.plan
        if sid in plan.fused:
            transform = (fused_function(self.blob, plan.fused[sid], sid), packing.INPUT_SCHEMA)
        elif sid in plan.stateful:
            transform = (packing.pack_input, packing.INPUT_SCHEMA)
        else:
            transform = (
                tasks.stateless_function(self.blob, sid, self.slots[sid]),
                packing.OUTPUT_SCHEMA,
            )
        options = source.options(
            plan.bootstrap_servers,
            plan.read_topics(sid),
            kafka=self.cfg.kafka,
            max_records_per_batch=self.max_records_per_batch,
            client_supplier=self.client_supplier,
            transform=transform,
            fetch_ends=compat_of(self.cfg).enabled,
        )
        return self.spark.readStream.format(source.NAME).options(**options).load()

    def _tasks(self, sid: int, raw: Any, writer: TaskWriter | None) -> Any:
        """A stateful sub-topology's tasks over `raw`: one group per task, labelled so that
        Spark spreads them evenly over its partitions, each run by a TaskProcessor."""
        from pyspark.sql import functions as F

        from kstream.spark import packing
        from kstream.spark.labels import spread_labels
        from kstream.spark.task_processor import TaskProcessor

        plan = self.plan
        labels = spread_labels(
            max(plan.partitions[t] for t in plan.sources[sid]), TASK_LABEL_MODULUS
        )
        task = F.element_at(F.array(*[F.lit(x) for x in labels]), F.col("partition") + 1)
        return (
            raw.withColumn("task", task)
            .groupBy("task")
            .transformWithStateInPandas(
                TaskProcessor(self.blob, sid, labels, self.slots[sid], writer),
                packing.OUTPUT_SCHEMA,
                "append",
                "none",
            )
        )


def _fence(
    plan: TaskPlan,
    slots: dict[int, int],
    pending: list[tuple[str, int]],
    cfg: Config,
    supplier: ClientSupplier,
) -> None:
    """Fence the write slots of every query that writes the `pending` partitions."""
    from kstream.spark.sink import slot_of, slot_transactional_id

    ids = sorted(
        {
            slot_transactional_id(_query_app(plan.app_id, sid), slot_of(t, p, slots[sid]))
            for t, p in pending
            for sid in plan.order
            if t in plan.sinks.get(sid, ())
        }
    )
    for tid in ids:
        # a transactional producer's start (init_transactions) aborts the id's open one
        supplier.producer(
            ClientConfig(plan.bootstrap_servers, cfg.kafka, transactional_id=tid)
        ).close()


def _location(checkpoint_dir: str, sub: int) -> str:
    """Where sub-topology `sub`'s query keeps its checkpoint."""
    return os.path.join(checkpoint_dir, f"subtopology-{sub}")


def _query_app(app_id: str, sub: int) -> str:
    """The name of one sub-topology's query: its sink's transactional id and marker topic."""
    return f"{app_id}-subtopology-{sub}"
