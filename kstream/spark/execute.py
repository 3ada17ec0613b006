"""The Python side of the Spark steps: the topology's own processors, run batch-wise.

Every step emits rows of one schema (`ROW_SCHEMA`): either a record bound for a stateful step
(`dest` = its node, key in the order-preserving "auto" encoding so equal keys group together,
value pickled) or a record for a user topic (`dest` null, `topic` set, key and value already
serialized with the sink's serdes). Each row keeps the source topic, partition and offset of the
input record that caused it, and `seq`, its place among the step's outputs: the sink turns them
into deterministic provenance ids, so a replayed batch produces the very same records. `h` holds
the record's headers, carried from the input record as in Kafka Streams.

A record that does not deserialize, or on which a processor or sink raises, goes to the error
policies (`kstream.spark.policy`): `fail` fails the batch with kstream's error naming the
record, `skip` drops it, `dlq` adds a row for the dead-letter topic (the record's bytes and
`kstream.error.*` headers), written with the batch's other rows.

The stateful step groups its rows by `grp`, one of `STATE_BUCKETS` buckets of keys: one call per
bucket and batch, its state the bucket's stores (a pickled dict per store). A call per key
would cost a pandas frame in and out per key; a bucket's state travels through Spark's state
store once per batch instead, which suits state of moderate size.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from kstream.dsl.processors import Change
from kstream.errors import TopologyError
from kstream.records import Headers, Record
from kstream.serde import BUILTIN, Serde, SerdeContext
from kstream.spark.failure import in_worker
from kstream.spark.order import merge_by_head, tp_order
from kstream.spark.plan import ENTRY, Plan
from kstream.spark.policy import Origin, RecordPolicy
from kstream.spark.source import decode_headers, encode_headers
from kstream.topology.topology import ProcessorDef, SinkDef, SourceDef

ROW_ARROW_SCHEMA = pa.schema(
    [
        ("dest", pa.string()),
        ("topic", pa.string()),
        ("k", pa.binary()),
        ("v", pa.binary()),
        ("ts", pa.int64()),
        ("part", pa.int32()),
        ("ptopic", pa.string()),
        ("ppart", pa.int32()),
        ("poff", pa.int64()),
        ("seq", pa.int64()),
        ("grp", pa.int32()),
        ("h", pa.binary()),
    ]
)
ROW_SCHEMA = (
    "dest string, topic string, k binary, v binary, ts long, part int, ptopic string, "
    "ppart int, poff long, seq long, grp int, h binary"
)
STATE_SCHEMA = "stores binary"
COLUMNS = ROW_ARROW_SCHEMA.names
STATEFUL_COLUMNS = ("dest", "k", "v", "ts", "ptopic", "ppart", "poff", "seq", "grp", "h")

_AUTO = BUILTIN["auto"]
_NONE_KEY = b"\x00"


def key_bytes(key: Any) -> bytes:
    """Equal keys give equal bytes (the grouping column of stateful steps)."""
    return _NONE_KEY if key is None else bytes(_AUTO._to_bytes(key))


def key_from_bytes(data: bytes) -> Any:
    return None if data == _NONE_KEY else _AUTO._from_bytes(data)


# --- state buckets ----------------------------------------------------------------------------

STATE_BUCKETS = 32


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of an int column (Murmur3 x86_32, seed 42), as a signed int."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    k1 = (value & m) * 0xCC9E2D51 & m
    k1 = rotl(k1, 15) * 0x1B873593 & m
    h1 = rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & m
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & m
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & m
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spread_labels(n: int, modulus: int) -> list[int]:
    """Grouping values for groups 0..n-1 that Spark spreads evenly over its partitions.

    Spark places a group in shuffle partition `hash(value) mod P`. Label i is an int whose
    Spark hash is i modulo `modulus` (a power of two), so for every P dividing `modulus`
    group i lands in partition i mod P: no two of P consecutive groups share a core, whatever
    partition count a checkpoint was started with, and the labels never change.
    """
    want = [i % modulus for i in range(n)]
    rank = [i // modulus for i in range(n)]
    seen: dict[int, int] = {}
    found: dict[tuple[int, int], int] = {}
    x = 0
    while len(found) < n:
        r = _murmur3_int(x) % modulus
        k = seen.get(r, 0)
        seen[r] = k + 1
        if r < min(n, modulus) and k <= (n - 1 - r) // modulus:
            found[(r, k)] = x
        x += 1
    return [found[(w, k)] for w, k in zip(want, rank, strict=True)]


BUCKET_LABELS = spread_labels(STATE_BUCKETS, STATE_BUCKETS)


def bucket_of(kb: bytes) -> int:
    """The `grp` of a key (its `key_bytes`)."""
    return BUCKET_LABELS[zlib.crc32(kb) % STATE_BUCKETS]


# --- serdes -----------------------------------------------------------------------------------


def _ser(s: Serde, value: Any, topic: str, is_key: bool, headers: Any = ()) -> bytes | None:
    if value is None:
        return None
    if s.needs_context:
        return s.serialize(value, SerdeContext(topic, headers, is_key))
    return s.to_bytes(value)


def _de(s: Serde, data: bytes | None, topic: str, is_key: bool, headers: Any = ()) -> Any:
    if data is None:
        return None
    if s.needs_context:
        return s.deserialize(data, SerdeContext(topic, headers, is_key))
    return s.from_bytes(data)


def input_records(batch: pa.RecordBatch) -> list[Record]:
    """The source's Arrow batch as records, key and value still bytes."""
    c = batch.columns
    names = batch.schema.names
    col = {n: c[i] for i, n in enumerate(names)}
    if "headers" in col and col["headers"].null_count < batch.num_rows:
        headers = [decode_headers(h) for h in col["headers"].to_pylist()]
    else:
        headers = [()] * batch.num_rows
    return records_from_columns(
        col["topic"].to_pylist(),
        col["partition"].to_pylist(),
        col["offset"].to_pylist(),
        col["timestamp"].to_pylist(),
        col["key"].to_pylist(),
        col["value"].to_pylist(),
        headers,
    )


def records_from_columns(
    topics: Sequence[str],
    partitions: Sequence[int],
    offsets: Sequence[int],
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Any],
) -> list[Record]:
    """The source's columns (from Arrow or pandas) as records, key and value still bytes."""
    return [
        Record(k, v, ts, h, t, p, o)
        for t, p, o, ts, k, v, h in zip(
            topics, partitions, offsets, timestamps, keys, values, headers, strict=True
        )
    ]


class _Rows:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {n: [] for n in COLUMNS}
        self.seq = 0

    def add_many(
        self,
        dest: str | None,
        topic: str | None,
        keys: list[Any],
        values: list[Any],
        parts: list[Any] | None,
        grps: list[Any] | None,
        records: Sequence[Record],
    ) -> None:
        n = len(records)
        c = self.cols
        c["dest"].extend([dest] * n)
        c["topic"].extend([topic] * n)
        c["k"].extend(keys)
        c["v"].extend(values)
        c["ts"].extend([r.timestamp for r in records])
        c["part"].extend(parts if parts is not None else [None] * n)
        c["ptopic"].extend([r.topic for r in records])
        c["ppart"].extend([r.partition for r in records])
        c["poff"].extend([r.offset for r in records])
        c["seq"].extend(range(self.seq, self.seq + n))
        c["grp"].extend(grps if grps is not None else [None] * n)
        c["h"].extend([encode_headers(r.headers) if r.headers else None for r in records])
        self.seq += n

    def __len__(self) -> int:
        return len(self.cols["dest"])

    def take_columns(self) -> dict[str, list[Any]]:
        out, self.cols = self.cols, {n: [] for n in COLUMNS}
        return out

    def take(self) -> pa.RecordBatch:
        out = pa.RecordBatch.from_pydict(self.cols, schema=ROW_ARROW_SCHEMA)
        self.cols = {n: [] for n in COLUMNS}
        return out


class _Ctx:
    """The part of `ProcessorContext` the built-in processors use, for one node."""

    task = None

    def __init__(self, runner: _Runner, node: str, stores: dict[str, dict[bytes, Any]]) -> None:
        self.runner = runner
        self.node = node
        self._stores = stores
        self.app_id = ""

    def forward_batch(self, records: Sequence[Record], to: str | None = None) -> None:
        if records:
            self.runner.forward(self.node, list(records), to)

    def forward(self, record: Record, to: str | None = None) -> None:
        self.runner.forward(self.node, [record], to)

    def on_error(self, exc: Exception, record: Record) -> None:
        self.runner.policy.report(exc, record, f"processor {self.node!r}")

    def get_store(self, name: str) -> _DictStore:
        return _DictStore(self._stores.setdefault(name, {}))

    def record_dropped(self, reason: str, record: Record | None = None) -> None:
        """A record dropped on purpose (e.g. a null key): Spark keeps no kstream metrics."""
        return None


class _DictStore:
    """A key-value store over the slice of state Spark keeps for one grouping key."""

    def __init__(self, data: dict[bytes, Any]) -> None:
        self.data = data

    def get(self, key: Any) -> Any:
        return self.data.get(key_bytes(key))

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.data.pop(key_bytes(key), None)
        else:
            self.data[key_bytes(key)] = value

    def delete(self, key: Any) -> Any:
        return self.data.pop(key_bytes(key), None)


class _Runner:
    """Pushes records through the stateless nodes until a stateful node or a sink; a failing
    record goes to the error policies (`policy`), a dead letter to the step's rows."""

    def __init__(self, plan: Plan, owner: str, stores: dict[str, dict[bytes, Any]]) -> None:
        self.plan = plan
        self.owner = owner
        self.stateful = set(plan.stateful)
        self.rows = _Rows()
        self.stores = stores
        self.procs: dict[str, Any] = {}
        self.captured: list[Record] | None = None
        self.policy = RecordPolicy(plan.policies, self._dead_letter)

    def _dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        ts: int,
        headers: Headers,
        origin: Origin,
    ) -> None:
        src = Record(None, None, ts, list(headers), *origin)
        self.rows.add_many(None, topic, [key], [value], None, None, [src])

    def _proc(self, node: str) -> Any:
        proc = self.procs.get(node)
        if proc is None:
            nd = self.plan.nodes[node]
            assert isinstance(nd, ProcessorDef)
            proc = nd.factory()
            ctx: Any = _Ctx(self, node, self.stores)
            proc.init(ctx)
            self.procs[node] = proc
        return proc

    def forward(self, node: str, records: list[Record], to: str | None) -> None:
        if node == self.owner and self.captured is not None:
            self.captured.extend(records)
            return
        for child in [to] if to is not None else self.plan.children[node]:
            self.push(child, records)

    def push(self, node: str, records: list[Record]) -> None:
        nd = self.plan.nodes[node]
        if isinstance(nd, SinkDef):
            if nd.topic in self.plan.repartition_topics:
                for child in self.plan.children[node]:
                    self.push(child, records)
            else:
                self._emit_sink(nd, records)
        elif isinstance(nd, SourceDef):
            for child in self.plan.children[node]:
                self.push(child, records)
        elif node in self.stateful and node != self.owner:
            kbs = [key_bytes(r.key) for r in records]
            values = [pickle.dumps(r.value, protocol=5) for r in records]
            grps = [bucket_of(kb) for kb in kbs]
            self.rows.add_many(node, None, kbs, values, None, grps, records)
        else:
            self._proc(node).process_batch(records)

    def _emit_sink(self, nd: SinkDef, records: list[Record]) -> None:
        topic, ks, vs, fn = nd.topic, nd.key_serde, nd.value_serde, nd.partitioner
        n = self.plan.sink_partitions.get(topic, 1)
        try:
            if ks.needs_context or vs.needs_context or fn is not None:
                raise _OneByOne
            kser, vser = ks.to_bytes, vs.to_bytes
            keys = [kser(r.key) for r in records]
            values = [vser(r.value) for r in records]
            parts = None
        except Exception:
            keys, values, parts, sent = [], [], [], []
            for r in records:
                try:
                    k = _ser(ks, r.key, topic, True, r.headers)
                    v = _ser(vs, r.value, topic, False, r.headers)
                    part = None if fn is None else int(fn(r.key, r.value, n))
                except Exception as e:
                    self.policy.report(e, r, f"sink {nd.name!r} (topic {topic!r})")
                    continue
                keys.append(k)
                values.append(v)
                parts.append(part)
                sent.append(r)
            if fn is None:
                parts = None
            records = sent
        self.rows.add_many(None, topic, keys, values, parts, None, records)


class _OneByOne(Exception):
    """Serialize record by record (context serdes, partitioners, or to find a failure)."""


def deserialize(plan: Plan, records: list[Record], policy: RecordPolicy) -> dict[str, list[Record]]:
    """Input records (key and value bytes) deserialized in place, by source node; a record
    that does not deserialize goes to `policy` and, if that returns (skip, dlq), no further."""
    by_topic: dict[str, list[Record]] = {}
    for r in records:
        by_topic.setdefault(r.topic or "", []).append(r)
    out: dict[str, list[Record]] = {}
    for topic, recs in by_topic.items():
        src_name = plan.source_of_topic[topic]
        src = plan.nodes[src_name]
        assert isinstance(src, SourceDef)
        ks, vs = src.key_serde, src.value_serde
        try:
            if ks.needs_context or vs.needs_context:
                raise _OneByOne
            kd, vd = ks.from_bytes, vs.from_bytes
            keys = [kd(r.key) for r in recs]
            values = [vd(r.value) for r in recs]
            for r, k, v in zip(recs, keys, values, strict=True):
                r.key = k
                r.value = v
        except Exception:
            good = []
            for r in recs:
                try:
                    k = _de(ks, r.key, topic, True, r.headers)
                except Exception as e:
                    policy.bad_input(e, r, src_name, "key")
                    continue
                try:
                    v = _de(vs, r.value, topic, False, r.headers)
                except Exception as e:
                    policy.bad_input(e, r, src_name, "value")
                    continue
                r.key = k
                r.value = v
                good.append(r)
            recs = good
        out.setdefault(src_name, []).extend(recs)
    return out


def entry_function(plan: Plan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Deserialize Kafka records and run them to the first boundary (run inside the read)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runner = _Runner(plan, ENTRY, {})
        with in_worker():
            for batch in batches:
                records = input_records(batch)
                runner.policy.remember(records)
                for src_name, recs in deserialize(plan, records, runner.policy).items():
                    runner.push(src_name, recs)
                if len(runner.rows):
                    yield runner.rows.take()

    return run


def stateful_function(plan: Plan) -> Callable[..., Iterator[Any]]:
    """`applyInPandasWithState` function of the stateful step: one state bucket per call.

    The bucket's records run through their nodes in Kafka Streams' order: each input
    partition's records in offset order, partitions merged by timestamp. A record that fails
    here is named by the input record that caused it (a repartition topic's record on the
    native engine, where the fast path has none) and fails or is skipped; a topology whose
    processing errors go to the dead-letter topic runs on the task path instead
    (`kstream.spark.runner.fast_plan`), since this step no longer has the record's bytes.
    """

    def run(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows: list[tuple[Any, ...]] = []
        for pdf in pdfs:
            rows.extend(
                zip(
                    pdf["ts"].tolist(),
                    pdf["ptopic"].tolist(),
                    pdf["ppart"].tolist(),
                    pdf["poff"].tolist(),
                    pdf["seq"].tolist(),
                    pdf["dest"].tolist(),
                    pdf["k"].tolist(),
                    pdf["v"].tolist(),
                    pdf["h"].tolist(),
                    strict=True,
                )
            )
        stores = _load_bucket(state, int(key[0]))
        by_node: dict[str, list[Record]] = {}
        for ts, pt, pp, po, _seq, dest, k, v, h in merge_rows(rows):
            by_node.setdefault(dest, []).append(
                Record(key_from_bytes(bytes(k)), pickle.loads(v), ts, decode_headers(h), pt, pp, po)
            )
        runner = _Runner(plan, ENTRY, stores)
        with in_worker():
            for node in sorted(by_node):
                runner.owner = node
                runner.captured = []
                runner._proc(node).process_batch(by_node[node])
                outputs, runner.captured = _coalesce(runner.captured), None
                if outputs:
                    runner.forward(node, outputs, None)
        state.update((pickle.dumps((STATE_BUCKETS, stores), protocol=5),))
        yield pd.DataFrame(runner.rows.take_columns(), columns=COLUMNS)

    return run


def _load_bucket(state: Any, grp: int) -> dict[str, dict[bytes, Any]]:
    if not state.exists:
        return {}
    buckets, stores = pickle.loads(state.get[0])
    if buckets != STATE_BUCKETS or grp not in BUCKET_LABELS:
        raise TopologyError(
            f"the checkpoint keeps state in {buckets} buckets, this version of kstream in "
            f"{STATE_BUCKETS}: start from a new checkpoint"
        )
    return stores


def merge_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows `(ts, ptopic, ppart, poff, seq, ...)`: each input partition in offset order (then
    seq), the partitions merged by the timestamp at their head, as a Kafka Streams task does."""
    parts: dict[tuple[Any, Any], list[tuple[Any, ...]]] = {}
    for r in rows:
        parts.setdefault((r[1], r[2]), []).append(r)
    for q in parts.values():
        q.sort(key=lambda r: (r[3], r[4]))
    return merge_by_head([parts[tp] for tp in sorted(parts, key=tp_order)], lambda r: r[0])


def _coalesce(outputs: list[Record]) -> list[Record]:
    """One update per key per batch, as a record cache gives: last new value, first old one."""
    if not outputs or not all(isinstance(r.value, Change) for r in outputs):
        return outputs
    first: dict[bytes, Any] = {}
    last: dict[bytes, Record] = {}
    for r in outputs:
        kb = key_bytes(r.key)
        if kb not in first:
            first[kb] = r.value.old
        last.pop(kb, None)
        last[kb] = r
    return [r.with_value(Change(r.value.new, first[kb])) for kb, r in last.items()]
