"""End to end on Apache Kafka: one spec, run by a real KafkaStreams app and by a kstream App.

Each case is a spec (tests/oracle/spec.py) whose input this test writes to topics of the session
broker (several partitions, several keys, timestamps out of order). The oracle harness runs the
spec as a KafkaStreams app (exactly_once_v2, no record cache, `Broker.java`) until its group
has consumed all its input and every repartition topic, and closes it; meanwhile a kstream
`App` runs the same spec, with the same guarantee, on the same input topics and writes its own
output topics, until the same holds for its group. Both apps' outputs are then read by a plain
confluent-kafka consumer in read_committed mode and compared per key: the sequence of (value,
timestamp) updates of every key, and with it the final table (each key's last value). The
order of records across partitions is not defined, so it is not compared; what is defined of
a key's updates depends on where they come from, and each case says what it compares:
- "exact": each key's (value, timestamp) sequence, and the final table with timestamps: a key's
  records come from one input partition in log order.
- "values": each key's value sequence, and the final table with timestamps: a key's records
  come through a repartition topic from several upstream tasks, whose interleaving differs from
  run to run in both implementations; a running count is 1, 2, ... in any order, but each
  update's timestamp is the largest seen so far, which depends on that order, except the last.
- "multiset": each key's (value, timestamp) updates in any order: a stream-stream join takes a
  key's records from two topics, whose interleaving differs from run to run.

The four examples (examples/) in spec form, with string values for their JSON:
- word_count: lines -> flatMapValues(words) -> groupBy(word) -> count -> to (a repartition).
- clicks_per_minute: clicks -> groupByKey -> 1-minute tumbling windows with 10 s grace, emit
  final -> count -> to, the windowed key as the text "user@start/end" on both sides (kstream's
  wall-clock closing of idle windows is off in specs: Kafka Streams has none).
- orders_enriched: orders re-keyed by customer (a repartition), joined with the customers
  table, left-joined with the products global table, re-keyed by order id.
- payments_dedup: payments keyed by account, their idempotency key the value's second
  comma-separated token (none: the payment passes), deduplicated within an hour. kstream runs
  `KStream.deduplicate`; Kafka Streams' DSL has no such operator (KIP-655 is not in 4.4 either), so
  the harness runs what a Kafka user writes: a processor with a window store of first-seen
  times keyed by the idempotency key (Kafka's EventDeduplication example; Processors.java).
"""

from __future__ import annotations

import copy
import random
import struct
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from e2e.support import create_topics, produce
from support.groups import fast_group

from kstream.runtime import App, AppState
from oracle.harness import Oracle
from oracle.spec import Case, KstreamBuilder, Node

T0 = 1_700_000_000_000
PARTITIONS = 3
TIMEOUT_S = 60.0
_LONG = struct.Struct(">q")
Update = tuple[Any, int]  # (value, timestamp)
COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


@dataclass
class BrokerCase:
    name: str
    case: Case
    compare: Literal["exact", "values", "multiset"]  # what is defined (see the docstring)


def _shuffled_times(n: int, step: int, disorder: int, rng: random.Random) -> list[int]:
    """n timestamps rising by `step`, each moved by up to `disorder` either way."""
    return [T0 + i * step + rng.randint(-disorder, disorder) for i in range(n)]


def word_count() -> BrokerCase:
    rng = random.Random(1)
    vocab = ["the", "Quick", "fox", "jumps", "over", "lazy", "dog", "a", "b_2", "Fox"]
    times = _shuffled_times(80, 100, 400, rng)
    records = [
        ["lines", f"l{i % 17}", " ".join(rng.choices(vocab, k=rng.randint(0, 6))) + ".", ts]
        for i, ts in enumerate(times)
    ]
    nodes: list[Node] = [
        {"id": 0, "op": "stream", "vt": "string", "topic": "lines"},
        {"id": 1, "op": "flatMapValues", "in": [0], "vt": "string", "fn": "words"},
        {"id": 2, "op": "groupBy", "in": [1], "vt": "string", "fn": "value"},
        {"id": 3, "op": "count", "in": [2], "vt": "long", "store": "counts", "store_kind": "kv"},
        {"id": 4, "op": "toStream", "in": [3], "vt": "long"},
        {"id": 5, "op": "to", "in": [4], "vt": "long", "topic": "word-counts"},
    ]
    return BrokerCase("word_count", Case(nodes, records), "values")


def clicks_per_minute() -> BrokerCase:
    rng = random.Random(2)
    # 4 clicks a second over 6 minutes; some up to 15 s late, beyond the 10 s grace
    times = _shuffled_times(160, 2_300, 15_000, rng)
    records = [
        ["clicks", f"u{rng.randint(0, 5)}", f"page{i % 4}", ts] for i, ts in enumerate(times)
    ]
    windows = {"type": "time", "size": 60_000, "advance": 60_000, "grace": 10_000}
    nodes: list[Node] = [
        {"id": 0, "op": "stream", "vt": "string", "topic": "clicks"},
        {"id": 1, "op": "groupByKey", "in": [0], "vt": "string"},
        {"id": 2, "op": "windowedBy", "in": [1], "vt": "string", "windows": windows,
         "emit": "final"},
        {"id": 3, "op": "count", "in": [2], "vt": "long", "store": "clicks-per-minute",
         "store_kind": "window"},
        {"id": 4, "op": "toStream", "in": [3], "vt": "long", "windowed": True},
        {"id": 5, "op": "to", "in": [4], "vt": "long", "topic": "clicks-per-minute"},
    ]  # fmt: skip
    return BrokerCase("clicks_per_minute", Case(nodes, records), "exact")


def orders_enriched() -> BrokerCase:
    rng = random.Random(3)
    customers = [
        ["customers", f"c{i}", f"cust{i} {'eu' if i % 2 else 'us'}", T0] for i in range(10)
    ]
    products = [["products", f"p{i}", f"prod{i} {i + 1}", T0] for i in range(5)]
    # orders of customers c10, c11 (unknown: dropped) and products p5 (unknown: null product)
    times = _shuffled_times(90, 10, 200, rng)
    orders = [
        ["orders", f"o{i}", f"c{rng.randint(0, 11)} p{rng.randint(0, 5)} {i % 4 + 1}", 1000 + ts]
        for i, ts in enumerate(times)
    ]
    nodes: list[Node] = [
        {"id": 0, "op": "table", "vt": "string", "topic": "customers", "store": "customers"},
        {"id": 1, "op": "globalTable", "vt": "string", "topic": "products", "store": "products"},
        {"id": 2, "op": "stream", "vt": "string", "topic": "orders"},
        # (order id, "c p q") -> (customer id, "order c p q")
        {"id": 3, "op": "map", "in": [2], "vt": "string", "fn": "by_first_word"},
        {"id": 4, "op": "join", "in": [3, 0], "vt": "string", "fn": "pair"},
        {"id": 5, "op": "leftJoin", "in": [4, 1], "vt": "string", "fn": "pair",
         "selector": "third_word"},
        {"id": 6, "op": "selectKey", "in": [5], "vt": "string", "fn": "first_word"},
        {"id": 7, "op": "to", "in": [6], "vt": "string", "topic": "orders-enriched"},
    ]  # fmt: skip
    return BrokerCase("orders_enriched", Case(nodes, customers + products + orders), "exact")


def stream_stream_join() -> BrokerCase:
    rng = random.Random(4)
    records: list[list[Any]] = []
    for side in ("left", "right"):
        times = _shuffled_times(50, 20, 150, rng)
        records += [
            [side, f"k{rng.randint(0, 6)}", f"{side[0]}{i}", ts] for i, ts in enumerate(times)
        ]
    window = {"before": 60, "after": 30, "grace": 10_000}
    nodes: list[Node] = [
        {"id": 0, "op": "stream", "vt": "string", "topic": "left"},
        {"id": 1, "op": "stream", "vt": "string", "topic": "right"},
        {"id": 2, "op": "join", "in": [0, 1], "vt": "string", "fn": "pair", "window": window},
        {"id": 3, "op": "to", "in": [2], "vt": "string", "topic": "joined"},
    ]
    return BrokerCase("stream_stream_join", Case(nodes, records), "multiset")


HOUR = 3_600_000


def payments_dedup() -> BrokerCase:
    """Retries of a payment come 1 s to 40 min after it (duplicates) or 80 min to 3 h later
    (new again: its id left the hour); a tenth of the payments carry no idempotency key.
    Each account's payments are in time order, as one service writes them."""
    rng = random.Random(5)
    payments: list[list[Any]] = []
    for i in range(60):
        account = f"acct{rng.randint(0, 7)}"
        first = T0 + i * 60_000 + rng.randint(0, 59_000)
        value = f"{rng.randint(1, 500)}.00" + ("" if i % 10 == 9 else f",pay-{i}")
        payments.append(["payments", account, value, first])
        for _ in range(rng.choice((0, 1, 1, 2))):
            later = rng.choice((rng.randint(1_000, 40 * 60_000), rng.randint(80, 180) * 60_000))
            payments.append(["payments", account, value, first + later])
    payments.sort(key=lambda r: r[3])
    nodes: list[Node] = [
        {"id": 0, "op": "stream", "vt": "string", "topic": "payments"},
        {"id": 1, "op": "deduplicate", "in": [0], "vt": "string", "fn": "second_token",
         "within": HOUR, "store": "payment-ids"},
        {"id": 2, "op": "to", "in": [1], "vt": "string", "topic": "payments-deduped"},
    ]  # fmt: skip
    return BrokerCase("payments_dedup", Case(nodes, payments), "exact")


CASES = [word_count, clicks_per_minute, orders_enriched, payments_dedup, stream_stream_join]


# --- running -------------------------------------------------------------------------------


def _renamed(case: Case, names: dict[str, str]) -> Case:
    nodes = copy.deepcopy(case.nodes)
    for n in nodes:
        if "topic" in n:
            n["topic"] = names[n["topic"]]
    return Case(nodes, [[names[r[0]], *r[1:]] for r in case.records])


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )


def _partitions(consumer: Consumer, topics: list[str]) -> list[TopicPartition]:
    md = consumer.list_topics(timeout=10)
    return [TopicPartition(t, p) for t in topics for p in sorted(md.topics[t].partitions)]


@dataclass
class Progress:
    """What a group's probe saw: per partition, (committed offset, end offset)."""

    offsets: dict[tuple[str, int], tuple[int, int]]
    missing: list[str]  # topics the group reads that the broker does not list yet

    def __str__(self) -> str:
        seen = ", ".join(f"{t}[{p}] {c}/{e}" for (t, p), (c, e) in sorted(self.offsets.items()))
        return f"committed/end: {seen}" + (f"; not listed: {self.missing}" if self.missing else "")


def progress(
    bootstrap: str, group: str, sources: list[str], internal: list[str] | None = None
) -> Progress | None:
    """`group`'s committed and end offsets of every partition it consumes: its `sources` and
    its repartition topics (`internal`: their exact names; None: those found on the broker
    by the group's prefix, as for the Kafka Streams app). None while the group coordinator is
    not ready (a broker started moments ago, under load, still loading its offsets topic):
    librdkafka's `committed` raises NOT_COORDINATOR rather than retrying."""
    probe = _consumer(bootstrap, group)  # only asks the coordinator, never joins
    try:
        md = probe.list_topics(timeout=10)
        if internal is None:
            internal = [
                t for t in md.topics if t.startswith(group + "-") and t.endswith("-repartition")
            ]
        missing = [t for t in sources + internal if t not in md.topics]
        tps = _partitions(probe, [t for t in sources + internal if t in md.topics])
        try:
            found = probe.committed(tps, 10)
        except KafkaException as e:
            if e.args[0].code() in COORDINATOR_NOT_READY:
                return None
            raise
        offsets = {}
        for tp in found:
            _, end = probe.get_watermark_offsets(tp, timeout=10, cached=False)
            offsets[(tp.topic, tp.partition)] = (tp.offset, end)
        return Progress(offsets, missing)
    finally:
        probe.close()


def drained(
    bootstrap: str, group: str, sources: list[str], internal: list[str] | None = None
) -> bool:
    """True when `group`'s committed offsets reach the end of every partition it consumes
    (`progress`), as Broker.java checks for the Kafka Streams app. A repartition topic is
    written in transactions: one past its last record is one short of its end (the commit
    marker). A topic not listed yet, or a coordinator not ready, is "not drained yet"."""
    seen = progress(bootstrap, group, sources, internal)
    if seen is None or seen.missing:
        return False
    for (topic, _), (committed, end) in seen.offsets.items():
        slack = 0 if topic in sources or end == 0 else 1
        if max(0, committed) < end - slack:
            return False
    return True


def read_committed(bootstrap: str, topics: dict[str, str]) -> dict[str, list[list[Any]]]:
    """Every record of `topics` ({topic: value type}) as [partition, key, value, timestamp],
    in each partition's order, read by a plain read_committed consumer."""
    consumer = _consumer(bootstrap, f"oracle-reader-{uuid.uuid4().hex}")
    out: dict[str, list[list[Any]]] = {t: [] for t in topics}
    try:
        tps = _partitions(consumer, list(topics))
        ends = {
            (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, 10, cached=False)[1]
            for tp in tps
        }
        consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in tps])
        left = {tp for tp, end in ends.items() if end > 0}
        deadline = time.monotonic() + 30
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
                raw_key, raw = msg.key(), msg.value()
                value: Any = None
                if raw is not None:
                    value = _LONG.unpack(raw)[0] if topics[tp[0]] == "long" else raw.decode()
                key = None if raw_key is None else raw_key.decode()
                out[tp[0]].append([tp[1], key, value, msg.timestamp()[1]])
    finally:
        consumer.close()
    return out


def per_key(rows: list[list[Any]]) -> dict[Any, list[Update]]:
    """Each key's (value, timestamp) updates in log order (a key is on one partition)."""
    keys: dict[Any, list[Update]] = {}
    for _, key, value, ts in rows:
        keys.setdefault(key, []).append((value, ts))
    return keys


def differences(
    mine: dict[Any, list[Update]], theirs: dict[Any, list[Update]], compare: str
) -> list[str]:
    """What differs between kstream's and Kafka Streams' per-key updates of one topic."""
    out = []
    if compare != "multiset":
        final_a = {k: v[-1] for k, v in mine.items()}
        final_b = {k: v[-1] for k, v in theirs.items()}
        if final_a != final_b:
            out.append(f"final tables (kstream, Kafka Streams): {final_a} {final_b}")
    view: Callable[[list[Update]], list[Any]] = {
        "exact": lambda u: u,
        "values": lambda u: [v for v, _ in u],
        "multiset": lambda u: sorted(u, key=repr),
    }[compare]
    for k in sorted(mine.keys() | theirs.keys(), key=repr):
        a, b = view(mine.get(k, [])), view(theirs.get(k, []))
        if a != b:
            out.append(f"key {k!r}:\n  kstream:       {a}\n  Kafka Streams: {b}")
    return out


def run_kstream(case: Case, app_id: str, bootstrap: str, state_dir: Path) -> float:
    """Run `case` as a kstream App until its group has consumed all its input, its
    repartition topics by their exact names; seconds. Prints what the last probe saw, which
    a failed comparison shows beside it."""
    start = time.monotonic()
    builder = KstreamBuilder().build(case)
    config = fast_group({"state_dir": str(state_dir), "commit_interval": 100})
    app = App(builder, app_id, bootstrap, "exactly_once_v2", config)
    sources = [n["topic"] for n in case.nodes if n["op"] in ("stream", "table")]
    internal = sorted(app.compiled.repartition_topics)
    app.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not drained(bootstrap, app_id, sources, internal):
            assert app.state != AppState.ERROR, f"kstream app failed: {app.error}"
            assert time.monotonic() < deadline, f"kstream app {app_id} did not consume its input"
            time.sleep(0.1)
        print(f"kstream drained after {time.monotonic() - start:.2f} s: "
              f"{progress(bootstrap, app_id, sources, internal)}")  # fmt: skip
    finally:
        app.close()
    return time.monotonic() - start


@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_same_outputs_on_broker(
    make: Callable[[], BrokerCase],
    oracle: Oracle,
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    bc = make()
    bs: str = kafka_broker.bootstrap_servers
    inputs = {n["topic"]: n for n in bc.case.nodes if n["op"] != "to" and "topic" in n}
    outputs = {n["topic"]: n["vt"] for n in bc.case.nodes if n["op"] == "to"}
    names = {t: unique_name(t) for t in inputs}
    theirs = {**names, **{t: unique_name(f"{t}-kafka-streams") for t in outputs}}
    mine = {**names, **{t: unique_name(f"{t}-kstream") for t in outputs}}
    for topic, node in inputs.items():
        create_topics(bs, 1 if node["op"] == "globalTable" else PARTITIONS, names[topic])
    create_topics(bs, PARTITIONS, *(theirs[t] for t in outputs), *(mine[t] for t in outputs))
    for topic, node in inputs.items():
        rows = [(k, v, ts) for t, k, v, ts in bc.case.records if t == topic]
        produce(bs, names[topic], rows, "string", node["vt"])

    app_ks, app_mine = unique_name(f"{bc.name}-ks"), unique_name(f"{bc.name}-kstream")
    oracle.submit(
        _renamed(bc.case, theirs),
        {"bootstrap": bs, "application_id": app_ks, "timeout_ms": int(TIMEOUT_S * 1000)},
    )
    with ThreadPoolExecutor(1) as pool:  # the JVM and kstream's app run side by side
        kstream_s = pool.submit(run_kstream, _renamed(bc.case, mine), app_mine, bs, tmp_path)
        answer = oracle.answer()
        seconds = kstream_s.result()
    assert "error" not in answer, answer["error"]
    print(f"{bc.name}: Kafka Streams {answer['ran_ms']} ms, kstream {seconds * 1000:.0f} ms")

    got_theirs = read_committed(bs, {theirs[t]: vt for t, vt in outputs.items()})
    got_mine = read_committed(bs, {mine[t]: vt for t, vt in outputs.items()})
    for topic in outputs:
        print(
            f"  {topic}: {len(got_mine[mine[topic]])} records from kstream, "
            f"{len(got_theirs[theirs[topic]])} from Kafka Streams"
        )
        theirs_keys = per_key(got_theirs[theirs[topic]])
        assert len(theirs_keys) > 1, f"Kafka Streams wrote {theirs_keys} to {topic}: too little"
        diff = differences(per_key(got_mine[mine[topic]]), theirs_keys, bc.compare)
        assert not diff, f"{bc.name}, topic {topic}:\n" + "\n".join(diff)


class _Probe:
    """A group's probe on a broker listing `topics` (one partition each, 10 records), the
    group's committed offset at the end of each; `committed` raises `error` if set."""

    def __init__(self, topics: list[str], error: int | None = None) -> None:
        self.topics, self.error = topics, error

    def list_topics(self, timeout: float) -> Any:
        one = type("T", (), {"partitions": {0: None}})()
        return type("M", (), {"topics": dict.fromkeys(self.topics, one)})()

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.error is not None:
            raise KafkaException(KafkaError(self.error))
        return [TopicPartition(tp.topic, tp.partition, 10) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return 0, 10

    def close(self) -> None:
        pass


def test_a_coordinator_not_ready_is_not_drained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh broker under load answered the probe NOT_COORDINATOR and failed the case;
    the probe's question is only "drained yet?", and the answer is "not yet"."""
    probe = _Probe(["src"], KafkaError.NOT_COORDINATOR)
    monkeypatch.setattr(sys.modules[__name__], "_consumer", lambda *_: probe)
    assert drained("127.0.0.1:1", "group", ["src"]) is False


def test_a_repartition_topic_not_listed_is_not_drained(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources consumed to their end say nothing of a repartition topic the broker does not
    list: kstream's app is drained only once its repartition topics, by their exact names,
    are consumed too."""
    monkeypatch.setattr(sys.modules[__name__], "_consumer", lambda *_: _Probe(["src"]))
    assert drained("127.0.0.1:1", "app", ["src"], ["app-counts-repartition"]) is False
    listed = _Probe(["src", "app-counts-repartition"])
    monkeypatch.setattr(sys.modules[__name__], "_consumer", lambda *_: listed)
    assert drained("127.0.0.1:1", "app", ["src"], ["app-counts-repartition"]) is True
