"""The Python side of the Spark steps: the topology's own processors, run batch-wise.

Every step emits rows of one schema (`ROW_SCHEMA`): either a record bound for a stateful step
(`dest` = its node, key in the order-preserving "auto" encoding so equal keys group together,
value pickled) or a record for a user topic (`dest` null, `topic` set, key and value already
serialized with the sink's serdes). Each row keeps the source topic, partition and offset of the
input record that caused it, and `seq`, its place among the step's outputs: the sink turns them
into deterministic provenance ids, so a replayed batch produces the very same records.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from kstream.dsl.processors import Change
from kstream.errors import DeserializationError, ProcessingError
from kstream.records import Record
from kstream.serde import BUILTIN, Serde, SerdeContext
from kstream.spark.plan import ENTRY, Plan
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
    ]
)
ROW_SCHEMA = (
    "dest string, topic string, k binary, v binary, ts long, part int, ptopic string, "
    "ppart int, poff long, seq long"
)
STATE_SCHEMA = "stores binary"

_AUTO = BUILTIN["auto"]
_NONE_KEY = b"\x00"


def key_bytes(key: Any) -> bytes:
    """Equal keys give equal bytes (the grouping column of stateful steps)."""
    return _NONE_KEY if key is None else bytes(_AUTO._to_bytes(key))


def key_from_bytes(data: bytes) -> Any:
    return None if data == _NONE_KEY else _AUTO._from_bytes(data)


def _ser(s: Serde, value: Any, topic: str, is_key: bool) -> bytes | None:
    if value is None:
        return None
    if s.needs_context:
        return s.serialize(value, SerdeContext(topic, (), is_key))
    return s.to_bytes(value)


def _de(s: Serde, data: bytes | None, topic: str, is_key: bool) -> Any:
    if data is None:
        return None
    if s.needs_context:
        return s.deserialize(data, SerdeContext(topic, (), is_key))
    return s.from_bytes(data)


class _Rows:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {n: [] for n in ROW_ARROW_SCHEMA.names}
        self.seq = 0

    def add(
        self, dest: str | None, topic: str | None, k: Any, v: Any, part: int | None, r: Record
    ) -> None:
        c = self.cols
        c["dest"].append(dest)
        c["topic"].append(topic)
        c["k"].append(k)
        c["v"].append(v)
        c["ts"].append(r.timestamp)
        c["part"].append(part)
        c["ptopic"].append(r.topic)
        c["ppart"].append(r.partition)
        c["poff"].append(r.offset)
        c["seq"].append(self.seq)
        self.seq += 1

    def __len__(self) -> int:
        return len(self.cols["dest"])

    def take_columns(self) -> dict[str, list[Any]]:
        out, self.cols = self.cols, {n: [] for n in ROW_ARROW_SCHEMA.names}
        return out

    def take(self) -> pa.RecordBatch:
        out = pa.RecordBatch.from_pydict(self.cols, schema=ROW_ARROW_SCHEMA)
        self.cols = {n: [] for n in ROW_ARROW_SCHEMA.names}
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
        raise ProcessingError(
            f"processor {self.node!r} failed on a record of topic={record.topic!r} "
            f"partition={record.partition} offset={record.offset}: {exc!r}"
        ) from exc

    def get_store(self, name: str) -> _DictStore:
        return _DictStore(self._stores.setdefault(name, {}))


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
    """Pushes records through the stateless nodes until a stateful node or a sink."""

    def __init__(self, plan: Plan, owner: str, stores: dict[str, dict[bytes, Any]]) -> None:
        self.plan = plan
        self.owner = owner
        self.stateful = set(plan.stateful)
        self.rows = _Rows()
        self.stores = stores
        self.procs: dict[str, Any] = {}
        self.captured: list[Record] | None = None

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
            add = self.rows.add
            for r in records:
                add(node, None, key_bytes(r.key), pickle.dumps(r.value, protocol=5), None, r)
        else:
            self._proc(node).process_batch(records)

    def _emit_sink(self, nd: SinkDef, records: list[Record]) -> None:
        topic, ks, vs, fn = nd.topic, nd.key_serde, nd.value_serde, nd.partitioner
        n = self.plan.sink_partitions.get(topic, 1)
        add = self.rows.add
        for r in records:
            try:
                k = _ser(ks, r.key, topic, True)
                v = _ser(vs, r.value, topic, False)
                part = None if fn is None else int(fn(r.key, r.value, n))
            except Exception as e:
                raise ProcessingError(
                    f"sink {nd.name!r} (topic {topic!r}) cannot write a record from "
                    f"topic={r.topic!r} partition={r.partition} offset={r.offset}: {e!r}"
                ) from e
            add(None, topic, k, v, part, r)


def entry_function(plan: Plan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """`mapInArrow` function: deserialize Kafka records and run them to the first boundary."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runner = _Runner(plan, ENTRY, {})
        nodes = plan.nodes
        for batch in batches:
            cols = batch.to_pydict()
            by_source: dict[str, list[Record]] = {}
            for topic, part, off, ts, k, v in zip(
                cols["topic"],
                cols["partition"],
                cols["offset"],
                cols["timestamp"],
                cols["key"],
                cols["value"],
                strict=True,
            ):
                src_name = plan.source_of_topic[topic]
                src = nodes[src_name]
                assert isinstance(src, SourceDef)
                try:
                    key = _de(src.key_serde, k, topic, True)
                    value = _de(src.value_serde, v, topic, False)
                except Exception as e:
                    raise DeserializationError(
                        f"cannot deserialize the record at topic={topic!r} partition={part} "
                        f"offset={off}: {e!r}"
                    ) from e
                by_source.setdefault(src_name, []).append(
                    Record(key, value, ts, (), topic, part, off)
                )
            for src_name, records in by_source.items():
                runner.push(src_name, records)
            if len(runner.rows):
                yield runner.rows.take()

    return run


def stateful_function(plan: Plan) -> Callable[..., Iterator[Any]]:
    """`applyInPandasWithState` function of the stateful step, grouped by (node, key)."""

    def run(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        node = str(key[0])
        rows: list[tuple[Any, ...]] = []
        for pdf in pdfs:
            rows.extend(
                zip(
                    pdf["ts"].tolist(),
                    pdf["ptopic"].tolist(),
                    pdf["ppart"].tolist(),
                    pdf["poff"].tolist(),
                    pdf["seq"].tolist(),
                    pdf["k"].tolist(),
                    pdf["v"].tolist(),
                    strict=True,
                )
            )
        rows.sort(key=lambda r: r[:5])
        stores: dict[str, dict[bytes, Any]] = pickle.loads(state.get[0]) if state.exists else {}
        records = [
            Record(key_from_bytes(bytes(k)), pickle.loads(v), ts, (), pt, pp, po)
            for ts, pt, pp, po, _seq, k, v in rows
        ]
        runner = _Runner(plan, node, stores)
        runner.captured = []
        runner._proc(node).process_batch(records)
        outputs, runner.captured = _coalesce(runner.captured), None
        if outputs:
            runner.forward(node, outputs, None)
        state.update((pickle.dumps(stores, protocol=5),))
        yield pd.DataFrame(runner.rows.take_columns(), columns=ROW_ARROW_SCHEMA.names)

    return run


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
