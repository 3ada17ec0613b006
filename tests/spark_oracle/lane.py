"""The oracle's generated specs on Spark, compared with Kafka Streams' answers.

Each generated spec (tests/oracle/generate.py) is run by the Spark engine (`kstream.spark.run`,
`local[2]`) from topics of the session broker, and its outputs, read back by a plain
read_committed consumer, must be Kafka Streams' outputs for the same input, record for record
and in order on every output topic (key, value, timestamp, headers).

**What Kafka Streams answers.** The harness (`oracle.harness.Oracle`) runs the spec in Kafka's
TopologyTestDriver, which processes the records in the order they are piped. On a broker the
order is the runtime's: every topic of a spec has one partition and holds all its records before
the run, so a task takes its partitions' records merged by head timestamp (the extracted one,
ties to the topic whose name sorts first: `kstream.records.merge_by_head`, Kafka's
PartitionGroup), and a global table is read to its end before any record is processed. So the
spec's records are first put in that order (`broker_order`), and that case is what both sides
run: Kafka Streams' answer to it is the answer of a KafkaStreams app on the broker.

One more order a broker decides: a sub-topology that reads a repartition topic together with
another topic merges them by head timestamp once its upstream has written them (the Spark
runner starts a query once the queries it reads from are done), where the test driver takes
each repartition record as it is written. A spec where the two orders differ has no answer of
the driver to compare with (`order_defined`, checked by running the spec in kstream's test
driver); such a spec is compared by its output tables' final contents where those do not
depend on the order (`eventually_comparable`), else counted apart. A foreign-key join's answers
come back on a broker after the records behind them (on Spark after the left side's turn),
where the driver answers each subscription at once, and which intermediate results the join
emits depends on that, on Kafka Streams as on Spark (a stale answer is dropped): a spec with
one (`has_loop`) whose records differ is compared again by its final contents where it can be,
else counted apart with its difference, as are those Spark refuses (an operator's
`spark_refusal`), those with wall-clock punctuation (the rows that move the driver's clock have
no counterpart on a broker), and those Kafka Streams fails on, but for the failures a case may
expect (a suppress buffer that shuts down when full: tests/oracle/compare.py), which Spark's run
of the spec, alone, must fail with too.

**Batches.** A Spark run costs seconds before its first record, so the specs are run many per
Spark run: the specs of a batch are renamed apart (topics, stores, names, node ids) and built
as one topology of independent parts, one query per sub-topology. Kafka Streams answers each
spec alone, with the very names it has in the batch. A batch whose run fails is run again spec
by spec, so a failure names its spec; a batch that failed while none of its specs fails alone
failed for a reason no spec accounts for (once: a worker past 1,024 files, `select()` refusing
its socket), and the lane reports it and fails.

Timestamps are moved `SHIFT` ms later (a multiple of every window size, advance and
punctuation interval the generator draws): a producer writes timestamp 0 as "now".
"""

from __future__ import annotations

import copy
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from oracle import library as lib
from oracle import spec as oracle_spec
from oracle.compare import EXPECTED_FAILURES
from oracle.harness import Oracle
from oracle.spec import Answer, Case, KstreamBuilder, Node

from kstream.errors import TopologyError
from kstream.kafka.admin import Admin, TopicSpec
from kstream.kafka.producer import Producer
from kstream.records import Record, merge_by_head
from kstream.serde import serde
from kstream.state import provenance
from kstream.testing import TopologyTestDriver

SHIFT = 20
WALL_CLOCK_FLOOR = 1_600_000_000_000  # a timestamp this late is the producer's wall clock
PARTITIONS = 1
# the fields of a node that name something a batch's specs must not share
_NAME_FIELDS = ("store", "name", "grouped", "materialized")
Row = list[Any]


# --- what a spec uses ---------------------------------------------------------------------------


def families(case: Case) -> set[str]:
    """The operator families a spec uses, for the lane's report."""
    out: set[str] = set()
    kinds = {n["id"]: n for n in case.nodes}
    for n in case.nodes:
        op = n["op"]
        if "fk" in n:
            out.add("fk_join")
        if op == "suppress":
            out.add("suppress")
        if "versioned" in n:
            out.add("versioned_table")
        if "grace" in n:
            out.add("stream_table_join_grace")
        if "chooser" in n:
            out.add("topic_chooser")
        if "extractor" in n:
            out.add("timestamp_extractor")
        if op == "windowedBy":
            out.add(
                f"{n['windows']['type']}_windows" + ("_final" if n.get("emit") == "final" else "")
            )
        if op in ("count", "reduce", "aggregate") and kinds[n["in"][0]]["op"] != "windowedBy":
            out.add("aggregation")
        if op in ("join", "leftJoin", "outerJoin") and "fk" not in n:
            right = kinds[n["in"][1]]["op"]
            if "window" in n:
                out.add("stream_stream_join")
            elif right == "globalTable":
                out.add("global_table_join")
            else:
                out.add("join")
        if op in ("cogroup", "deduplicate", "process", "transformValues", "repartition", "split"):
            out.add(op)
        if op in ("groupBy", "selectKey", "map", "flatMap"):
            out.add("rekey")
        if op in ("table", "toTable"):
            out.add("table")
    return out


def spark_refusal(case: Case, app_id: str = "oracle") -> str | None:
    """Why the Spark runner refuses the spec's topology, or None when it runs it."""
    from kstream.spark.tasks import build_task_plan

    try:
        build_task_plan(KstreamBuilder().build(case).build(), app_id)
    except TopologyError as e:
        return str(e)
    return None


def refusal_kind(message: str) -> str:
    """A refusal's message without the node's name: one line of the report per kind."""
    text = message.split(": ", 1)[1] if message.startswith("node ") else message
    return text.split(" (", 1)[0].split(";", 1)[0][:90]


# --- one spec as both sides run it --------------------------------------------------------------


def inputs_of(case: Case) -> dict[str, str]:
    """Input topic -> value type."""
    return {n["topic"]: n["vt"] for n in case.nodes if "topic" in n and n["op"] != "to"}


def outputs_of(case: Case) -> dict[str, str]:
    """Output topic -> value type (every topic a chooser may pick)."""
    return {
        t: n["vt"] for n in case.nodes if n["op"] == "to" for t in n.get("topics", [n.get("topic")])
    }


def renamed(case: Case, topic_prefix: str, name_prefix: str, id_offset: int) -> Case:
    """`case` with its topics, stores, names and node ids made its own within a batch."""
    nodes = copy.deepcopy(case.nodes)
    for n in nodes:
        n["id"] += id_offset
        if "in" in n:
            n["in"] = [i + id_offset for i in n["in"]]
        if "topic" in n:
            n["topic"] = topic_prefix + n["topic"]
        if "topics" in n:
            n["topics"] = [topic_prefix + t for t in n["topics"]]
        for f in _NAME_FIELDS:
            if f in n:
                n[f] = name_prefix + n[f]
    rows = [r if r[0] is None else [topic_prefix + r[0], *r[1:]] for r in case.records]
    return Case(nodes, rows)


def shifted(case: Case) -> Case:
    rows = [r if r[0] is None else [r[0], r[1], r[2], r[3] + SHIFT, *r[4:]] for r in case.records]
    return Case(case.nodes, rows)


def _extracted(case: Case) -> list[int | None]:
    """Each row's timestamp as its source's extractor gives it (None: dropped, negative)."""
    extractor: dict[str, Callable[..., int]] = {
        n["topic"]: lib.TIMESTAMP_EXTRACTORS[n["extractor"]].fn
        for n in case.nodes
        if "extractor" in n and "topic" in n
    }
    partition_time: dict[str, int] = {}
    out: list[int | None] = []
    for row in case.records:
        topic, key, value, ts = row[:4]
        fn = extractor.get(topic)
        if fn is None:
            out.append(ts)
            continue
        before = partition_time.get(topic, -1)
        got = fn(Record(key, value, ts, (), topic, 0, 0), before)
        if got < 0:
            out.append(None)
            continue
        partition_time[topic] = max(before, got)
        out.append(got)
    return out


def broker_order(case: Case) -> Case:
    """`case` with its rows in the order a broker's runtime processes them: the global tables'
    rows first, then every topic's rows merged by head timestamp (each topic in its own order;
    a row its extractor drops goes with the row before it in its topic)."""
    glob = {n["topic"] for n in case.nodes if n["op"] == "globalTable"}
    times = _extracted(case)
    queues: dict[str, list[tuple[int, Row]]] = {}
    first: list[Row] = []
    for row, ts in zip(case.records, times, strict=True):
        if row[0] in glob:
            first.append(row)
            continue
        q = queues.setdefault(row[0], [])
        q.append((ts if ts is not None else (q[-1][0] if q else -1), row))
    merged = merge_by_head([queues[t] for t in sorted(queues)], lambda item: item[0])
    return Case(case.nodes, first + [row for _, row in merged])


def has_loop(case: Case) -> bool:
    """Whether the spec's sub-topologies feed one another (a foreign-key join)."""
    from kstream.spark.tasks import build_task_plan

    return bool(build_task_plan(KstreamBuilder().build(case).build(), "oracle").loops)


def order_defined(case: Case, app_id: str) -> str | None:
    """None when every sub-topology that reads a repartition topic besides another topic gets
    its records, merged by head timestamp, in the order kstream's test driver hands them over
    (each as it is written); else what differs. `case` is in broker order."""
    topology = KstreamBuilder().build(case).build()
    compiled = topology.compile(app_id)
    internal = set(compiled.repartition_topics)
    mixed = [
        s.id
        for s in compiled.subtopologies
        if len(s.source_topics) > 1 and internal & set(s.source_topics)
    ]
    if not mixed:
        return None
    seen: dict[int, list[Record]] = {sid: [] for sid in mixed}
    with TopologyTestDriver(topology, app_id=app_id, initial_wall_clock=0) as driver:
        for task in driver.tasks:
            if task.subtopology in seen:
                task.process = _recording(task, seen[task.subtopology])  # type: ignore[method-assign]
        inputs = {t: driver.input_topic(t, "string", vt) for t, vt in inputs_of(case).items()}
        times = dict(enumerate(_extracted(case)))
        stamped: dict[tuple[str, int], int | None] = {}
        counts: Counter[str] = Counter()
        for i, row in enumerate(case.records):
            stamped[(row[0], counts[row[0]])] = times[i]
            counts[row[0]] += 1
            try:
                headers = oracle_spec._input_headers(row[4] if len(row) > 4 else [])
                inputs[row[0]].pipe(row[1], row[2], row[3], headers)
            except Exception:  # the case fails on both sides: the comparison says so
                return None
    for sid, records in seen.items():
        arrived = []
        for r in records:
            ts = stamped.get((r.topic or "", r.offset or 0), r.timestamp)
            if r.topic in internal:
                ts = r.timestamp
            if ts is not None:
                arrived.append((ts, r.topic or "", r.offset or 0))
        by_topic: dict[str, list[tuple[int, str, int]]] = {}
        for item in arrived:
            by_topic.setdefault(item[1], []).append(item)
        merged = merge_by_head([by_topic[t] for t in sorted(by_topic)], lambda item: item[0])
        if merged != arrived:
            return (
                f"sub-topology {sid} takes its records in another order on a broker than in the "
                f"test driver: {[m[1:] for m in merged]} vs {[a[1:] for a in arrived]}"
            )
    return None


_ORDERLESS_STREAM_OPS = {
    "filter", "filterNot", "mapValues", "map", "selectKey", "flatMap", "flatMapValues",
    "processValues", "merge", "repartition", "split", "branch", "groupBy", "groupByKey",
}  # fmt: skip
_ORDERLESS_TABLE_OPS = {"filter", "filterNot", "mapValues", "join", "leftJoin", "outerJoin"}


def eventually_comparable(case: Case) -> bool:
    """Whether every output of `case` is a table's changelog whose final contents do not
    depend on the order its inputs are processed in (a "final" comparison, for a spec whose
    order a broker does not fix: a foreign-key join's responses come back after its
    subscriptions went out). The tables: sources, counts and sums or maxima of streams taken
    through stateless operators, and what table filters, mapValues and joins (foreign-key ones
    too) make of such tables; each written by `toStream` straight to its topic (not through a
    topic chooser that looks at more than the key)."""
    nodes = {n["id"]: n for n in case.nodes}

    def orderless(nid: int) -> bool:
        n = nodes[nid]
        op, ins = n["op"], n.get("in", [])
        if op in ("stream", "table"):
            return True
        if op in ("count", "reduce") and nodes[ins[0]]["op"] in ("groupBy", "groupByKey"):
            grouped = nodes[ins[0]]
            stream_grouping = nodes[grouped["in"][0]]["op"] not in _TABLE_MAKERS
            fine = op == "count" or n.get("fn") in ("sum", "max")
            return fine and stream_grouping and orderless(ins[0])
        if op in _ORDERLESS_STREAM_OPS and not _is_table(nodes, nid):
            return all(orderless(i) for i in ins)
        if op in _ORDERLESS_TABLE_OPS and _is_table(nodes, nid) and not n.get("window"):
            return all(orderless(i) for i in ins)
        return False

    for n in case.nodes:
        if n["op"] != "to":
            continue
        if n.get("chooser", KEY_CHOOSER) != KEY_CHOOSER:
            # a chooser that looks at more than the key splits a key's changelog (a tombstone
            # may go elsewhere than the update it deletes): each topic's final contents
            # depend on which updates came
            return False
        src = nodes[n["in"][0]]
        if src["op"] != "toStream" or "fn" in src or src.get("windowed"):
            return False
        if not _is_table(nodes, src["in"][0]) or not orderless(src["in"][0]):
            return False
    return True


KEY_CHOOSER = "key_is_a"  # the generator's one topic chooser that picks by the key alone
_TABLE_MAKERS = {"table", "toTable", "count", "reduce", "aggregate", "suppress", "transformValues"}


def _is_table(nodes: dict[int, Node], nid: int) -> bool:
    """Whether node `nid` gives a table (for the operators both streams and tables have)."""
    n = nodes[nid]
    if n["op"] in _TABLE_MAKERS:
        return True
    if n["op"] in ("filter", "filterNot", "mapValues", "join", "leftJoin", "outerJoin"):
        if "window" in n or "selector" in n:
            return False
        return all(_is_table(nodes, i) for i in n["in"][:1])
    return False


def _recording(task: Any, into: list[Record]) -> Callable[[list[Record]], None]:
    original = task.process

    def process(records: list[Record]) -> None:
        into.extend(
            Record(r.key, r.value, r.timestamp, (), r.topic, r.partition, r.offset) for r in records
        )
        original(records)

    return process


# --- the lane -----------------------------------------------------------------------------------


@dataclass
class Spec:
    """One generated spec in the lane: as generated, as run, and what became of it."""

    index: int
    generated: Case
    case: Case  # renamed, shifted, in broker order: what Kafka Streams and Spark both run
    families: set[str]
    skip: str | None = None  # why it is not compared (counted apart)
    theirs: Answer | None = None
    expected_failure: str | None = None  # Kafka Streams fails on it as a case may expect
    got: dict[str, list[Row]] | None = None
    error: str | None = None  # Spark failed on it
    failure: str | None = None  # the kind of that failure (`spec.expected_failure`), if any
    kstreams_own: bool = False  # it differs, and kstream's test driver differs alike
    final_only: bool = False  # compared by its output tables' final contents only
    differences: list[str] = field(default_factory=list)

    @property
    def inputs(self) -> dict[str, str]:
        return inputs_of(self.case)

    @property
    def outputs(self) -> dict[str, str]:
        return outputs_of(self.case)


def prepare(cases: Sequence[Case], run_id: str) -> list[Spec]:
    """Each case renamed for the lane (topics `<run_id>-<i>-...`), with why it is skipped."""
    out = []
    offset = 0
    for i, generated in enumerate(cases):
        case = renamed(generated, f"{run_id}-{i}-", f"c{i}_", offset)
        offset += len(case.nodes)
        spec = Spec(i, generated, case, families(generated))
        refusal = spark_refusal(generated)
        if any(r[0] is None for r in case.records):
            spec.skip = "wall-clock punctuation (no broker counterpart for the driver's clock)"
        elif refusal is not None:
            spec.skip = "refused: " + refusal_kind(refusal)
        else:
            spec.case = broker_order(shifted(case))
        out.append(spec)
    return out


def ask_kafka_streams(oracle: Oracle, specs: Iterable[Spec]) -> None:
    """Kafka Streams' answer to each spec still in the lane; a spec it fails on leaves it."""
    for spec in specs:
        if spec.skip is not None:
            continue
        spec.theirs = oracle.ask(spec.case)
        if spec.theirs.get("error") in EXPECTED_FAILURES:
            spec.expected_failure = spec.theirs["error"]
        elif "error" in spec.theirs:
            kind = str(spec.theirs["error"]).splitlines()[0][:80]
            spec.skip = f"Kafka Streams fails ({kind})"


def combined(specs: Sequence[Spec]) -> Any:
    """One topology of the specs' independent parts."""
    nodes = [n for s in specs for n in s.case.nodes]
    return KstreamBuilder().build(Case(nodes)).build()


def create_and_fill(bootstrap: str, specs: Sequence[Spec]) -> None:
    """The specs' input and output topics (one partition each), and their input records."""
    topics = [TopicSpec(t, PARTITIONS) for s in specs for t in (*s.inputs, *s.outputs)]
    with Admin(bootstrap) as admin:
        admin.create_topics(topics)
    with Producer(bootstrap) as p:
        for s in specs:
            value_serdes = {t: serde(vt) for t, vt in s.inputs.items()}
            keys = serde("string")
            for row in s.case.records:
                topic, key, value, ts = row[:4]
                headers = oracle_spec._input_headers(row[4]) if len(row) > 4 else None
                p.produce(
                    topic,
                    value_serdes[topic].to_bytes(value),
                    keys.to_bytes(key),
                    partition=0,
                    timestamp=ts,
                    headers=headers or None,
                )
        p.flush()


def read_outputs(bootstrap: str, topics: dict[str, str]) -> dict[str, list[Row]]:
    """Every record of `topics` ({topic: value type}) as [key, value, timestamp, headers] in
    offset order, as a plain read_committed consumer sees them; the provenance header the
    Spark sink stamps is left out."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"spark-oracle-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    out: dict[str, list[Row]] = {t: [] for t in topics}
    keys = serde("string")
    values = {t: serde(vt) for t, vt in topics.items()}
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        ends = {
            (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, 10, cached=False)[1]
            for tp in tps
        }
        consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in tps])
        left = {tp for tp, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while left:
            assert time.monotonic() < deadline, f"could not read to the end of {sorted(left)}"
            for msg in consumer.consume(1000, 0.2):
                tp = (str(msg.topic()), msg.partition() or 0)
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    if (msg.offset() or 0) >= ends[tp]:
                        left.discard(tp)
                    continue
                headers = [
                    [k, None if v is None else bytes(v).decode("latin-1")]
                    for k, v in msg.headers() or ()
                    if k != provenance.HEADER
                ]
                out[tp[0]].append(
                    [
                        keys.from_bytes(msg.key()),
                        values[tp[0]].from_bytes(msg.value()),
                        msg.timestamp()[1],
                        headers,
                    ]
                )
    finally:
        consumer.close()
    return out


def run_on_spark(
    spark: Any, bootstrap: str, specs: Sequence[Spec], app_id: str, checkpoints: Path
) -> str | None:
    """Run `specs` as one Spark run and read their outputs into `spec.got`; a failing run is
    run again spec by spec (on topics of their own), so a failure names its spec. Returns the
    failed batch's error when none of its specs failed alone (`unexplained`): the batch failed
    for a reason no spec accounts for, and the lane says so rather than hide it."""
    from kstream.spark import run

    try:
        run(
            combined(specs),
            app_id,
            bootstrap,
            checkpoint_dir=str(checkpoints / app_id),
            spark=spark,
        )
    except Exception as e:
        if len(specs) == 1:
            specs[0].error = traceback.format_exc()
            specs[0].failure = oracle_spec.expected_failure(e)
            return None
        batch_error = traceback.format_exc()
        for s in specs:
            alone = _alone(s)
            create_and_fill(bootstrap, [alone])
            run_on_spark(spark, bootstrap, [alone], f"{app_id}-{s.index}", checkpoints)
            s.theirs = _renamed_answer(s.theirs, alone.case, s)
            s.error, s.failure, s.got, s.case = alone.error, alone.failure, alone.got, alone.case
        return None if any(s.error is not None for s in specs) else batch_error
    got = read_outputs(bootstrap, {t: vt for s in specs for t, vt in s.outputs.items()})
    for s in specs:
        s.got = {t: got[t] for t in s.outputs}
    return None


def unexplained(app_id: str, error: str) -> str:
    """What the report says of a batch whose run failed while each of its specs, alone, ran:
    its app id and the error's last lines."""
    tail = [line for line in error.strip().splitlines() if line.strip()][-3:]
    return f"batch {app_id} failed, its specs each ran alone: " + " | ".join(tail)


def _alone(spec: Spec) -> Spec:
    """`spec` on topics of its own (a run of it alone after a failed batch)."""
    prefix = f"r{uuid.uuid4().hex[:6]}-"
    nodes = copy.deepcopy(spec.case.nodes)
    for n in nodes:
        if "topic" in n:
            n["topic"] = prefix + n["topic"]
        if "topics" in n:
            n["topics"] = [prefix + t for t in n["topics"]]
    rows = [[prefix + r[0], *r[1:]] for r in spec.case.records]
    return Spec(spec.index, spec.generated, Case(nodes, rows), spec.families)


def _renamed_answer(theirs: Answer | None, case: Case, spec: Spec) -> Answer | None:
    """Kafka Streams' answer with its output topics named as in `case` (`_alone`'s topics)."""
    if theirs is None:
        return None
    names = dict(zip(spec.outputs, outputs_of(case), strict=True))
    return {**theirs, "outputs": {names[t]: rows for t, rows in theirs["outputs"].items()}}


def compare(spec: Spec) -> None:
    """Spark's outputs against Kafka Streams', topic by topic, record for record; or, where
    Kafka Streams fails as a case may expect (a suppress buffer that shuts down when full),
    Spark's run must fail so too (outputs are not compared then: tests/oracle/compare.py)."""
    assert spec.theirs is not None
    if spec.expected_failure is not None:
        if spec.failure != spec.expected_failure:
            spec.differences = [
                f"Kafka Streams fails ({spec.expected_failure}); Spark: {spec.error or 'ran'}"
            ]
        return
    if spec.error is not None:
        spec.differences = [f"Spark failed: {spec.error}"]
        return
    assert spec.got is not None
    if spec.final_only:
        theirs = spec.theirs["outputs"]
        spec.differences = [
            f"topic {t} ends at:\n  Spark:         {a}\n  Kafka Streams: {b}"
            for t in sorted(spec.outputs)
            if (a := _final(spec.got.get(t, []))) != (b := _final(theirs.get(t, [])))
        ]
        return
    out = []
    for topic in sorted(spec.outputs):
        mine, theirs = spec.got.get(topic, []), spec.theirs["outputs"].get(topic, [])
        if len(mine) == len(theirs):
            mine = [_at_zero(m, t) for m, t in zip(mine, theirs, strict=True)]
        if mine != theirs:
            out.append(f"topic {topic}:\n  Spark:         {mine}\n  Kafka Streams: {theirs}")
    spec.differences = out


def _final(rows: list[Row]) -> dict[Any, Any]:
    """The table a changelog's records end at (key -> value; a None value deletes)."""
    table: dict[Any, Any] = {}
    for key, value, *_ in rows:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def _at_zero(mine: Row, theirs: Row) -> Row:
    """A record Kafka Streams writes at timestamp 0 as it is: kstream's producers (librdkafka)
    write a timestamp of 0 as the wall clock (docs/differences.md, both engines)."""
    if theirs[2] == 0 and mine[2] >= WALL_CLOCK_FLOOR and mine[:2] == theirs[:2]:
        return [*mine[:2], 0, *mine[3:]]
    return mine


def native_answer(spec: Spec) -> str:
    """kstream's own test driver on the spec, for a report: does the native engine differ too?"""
    try:
        mine = oracle_spec.run(spec.case)
    except Exception as e:
        return f"kstream's test driver fails: {type(e).__name__}: {e}"
    assert spec.theirs is not None
    same = mine["outputs"] == spec.theirs["outputs"]
    return (
        "kstream's test driver gives Kafka Streams' outputs"
        if same
        else (f"kstream's test driver differs too: {mine['outputs']}")
    )


def kstreams_own(spec: Spec) -> bool:
    """Whether a spec where Spark differs from Kafka Streams is one where kstream itself does:
    Spark wrote exactly what kstream's test driver gives (a difference of kstream's operators,
    which the oracle of tests/oracle reports for the native engine, not one of the Spark
    engine's)."""
    if spec.got is None or spec.error is not None or spec.expected_failure is not None:
        return False
    try:
        mine = oracle_spec.run(spec.case)
    except Exception:
        return False
    for topic in spec.outputs:
        driver = mine["outputs"].get(topic, [])
        got = spec.got.get(topic, [])
        if len(got) != len(driver):
            return False
        if [_at_zero(g, d) for g, d in zip(got, driver, strict=True)] != driver:
            return False
    return True


# --- the report ---------------------------------------------------------------------------------


def report(
    specs: Sequence[Spec],
    seconds: float,
    spark_seconds: float,
    batches: int,
    failed_batches: Sequence[str] = (),
) -> str:
    compared = [s for s in specs if s.skip is None]
    equal = [s for s in compared if not s.differences]
    failing = [s for s in equal if s.expected_failure is not None]
    lines = [
        f"spark oracle lane: {len(specs)} generated specs, {len(compared)} compared on Spark, "
        f"{len(equal)} equal to Kafka Streams ({len(failing)} of them failing as Kafka Streams "
        f"does), {len(compared) - len(equal)} differ; {batches} Spark runs in "
        f"{spark_seconds:.0f} s, the lane {seconds:.0f} s",
    ]
    final = [s for s in compared if s.final_only]
    if final:
        lines.append(
            f"  of those compared, {len(final)} by their output tables' final contents only "
            f"(their order not defined on a broker), {sum(not s.differences for s in final)} "
            "equal"
        )
    own = [s for s in compared if s.differences and s.kstreams_own]
    if own:
        lines.append(
            f"  of those that differ, {len(own)} are kstream's own (its test driver gives "
            f"Spark's outputs): specs {[s.index for s in own]}"
        )
    for text in failed_batches:
        lines.append(f"  {text}")
    skipped = Counter(s.skip for s in specs if s.skip is not None)
    for reason, n in skipped.most_common():
        lines.append(f"  not compared: {n:4d}  {reason}")
    fams: dict[str, Counter[str]] = {}
    for s in specs:
        for f in s.families:
            c = fams.setdefault(f, Counter())
            c["generated"] += 1
            if s.skip is None:
                c["compared"] += 1
                c["equal"] += not s.differences
    lines.append("  by operator family (generated / compared / equal):")
    for f in sorted(fams):
        c = fams[f]
        lines.append(f"    {f:28s} {c['generated']:4d} {c['compared']:4d} {c['equal']:4d}")
    return "\n".join(lines)
