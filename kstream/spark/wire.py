"""What crosses between the driver, Spark's JVM and its Python workers: schemas, headers, pickles.

A leaf module (it imports nothing else of `kstream.spark`), so the source, the tasks, the
packing and the sink all depend on it and none on another for these definitions: the package
has no import cycle.

- `SOURCE_SCHEMA` / `SOURCE_ARROW_SCHEMA`: a record as the `kstream_kafka` source reads it,
  key and value still bytes; `input_records` turns a batch of them into `Record`s. A read
  task holds what it read as `SourceChunk`s, which give either form (`ArrowChunk`: a batch
  already in Arrow).
- `ROW_SCHEMA` / `ROW_ARROW_SCHEMA`: a record a task sends to a topic, key and value
  serialized, with the provenance (`ptopic`, `ppart`, `poff`, `seq`) of the input record that
  caused it, from which the sink derives deterministic provenance ids.
- headers in one `binary` column (`encode_headers`), and batches as Arrow IPC blobs (`pack`).
- `dumps` / `loads`: cloudpickle with built-in serdes sent by name and `struct.Struct`s by
  format, which appear in serdes' closures and do not pickle; the workers have both anyway.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import pyarrow as pa

from kstream.records import KAFKA_TIMESTAMP_TYPES, Record
from kstream.serde import BUILTIN, Serde

# `headers`: the record's headers as `encode_headers` writes them (null when it has none);
# `timestamp_type`: the timestamp's type as confluent-kafka gives it (0 none, 1 CreateTime,
# 2 LogAppendTime: `records.KAFKA_TIMESTAMP_TYPES`), which a record keeps as on the native engine
SOURCE_SCHEMA = (
    "topic string, partition int, offset long, timestamp long, key binary, value binary, "
    "headers binary, timestamp_type byte"
)
SOURCE_ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.binary()),
        ("timestamp_type", pa.int8()),
    ]
)
ROW_ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("k", pa.binary()),
        ("v", pa.binary()),
        ("ts", pa.int64()),
        ("part", pa.int32()),
        ("ptopic", pa.string()),
        ("ppart", pa.int32()),
        ("poff", pa.int64()),
        ("seq", pa.int64()),
        ("h", pa.binary()),
    ]
)
ROW_SCHEMA = (
    "topic string, k binary, v binary, ts long, part int, ptopic string, ppart int, "
    "poff long, seq long, h binary"
)
COLUMNS: list[str] = ROW_ARROW_SCHEMA.names


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes | None:
    """Headers in a `binary` column: a pickled list of (key, value) pairs (None when none).

    A list of structs would be the natural type, but Spark's Arrow writers size nested
    vectors row by row, which costs more than the rest of the row; one binary value does not.
    """
    return pickle.dumps(list(headers), protocol=5) if headers else None


def decode_headers(data: bytes | None) -> Any:
    """The headers of `encode_headers` (an empty tuple when none)."""
    return pickle.loads(data) if data is not None else ()


def input_records(batch: pa.RecordBatch) -> list[Record]:
    """The source's Arrow batch (`SOURCE_ARROW_SCHEMA`) as records, key and value still bytes."""
    col = {n: batch.columns[i] for i, n in enumerate(batch.schema.names)}
    if "headers" in col and col["headers"].null_count < batch.num_rows:
        headers = [decode_headers(h) for h in col["headers"].to_pylist()]
    else:
        headers = [()] * batch.num_rows
    types = KAFKA_TIMESTAMP_TYPES
    return [
        Record(k, v, ts, h, t, p, o, types[tt])
        for t, p, o, ts, k, v, h, tt in zip(
            col["topic"].to_pylist(),
            col["partition"].to_pylist(),
            col["offset"].to_pylist(),
            col["timestamp"].to_pylist(),
            col["key"].to_pylist(),
            col["value"].to_pylist(),
            headers,
            col["timestamp_type"].to_pylist(),
            strict=True,
        )
    ]


class SourceChunk(Protocol):
    """Consecutive records of one Kafka partition, as a read task of the source holds them.

    Spark takes them as Arrow (`arrow`, of `SOURCE_ARROW_SCHEMA`); a sub-topology run inside
    the read takes them as records (`records`, key and value still bytes), which a chunk of
    consumed messages makes without an Arrow batch between (`source.MessageChunk`).
    """

    topic: str
    partition: int

    def arrow(self) -> pa.RecordBatch: ...

    def records(self) -> list[Record]: ...


class ArrowChunk:
    """A `SourceChunk` given as a source batch in Arrow (one partition's records)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.topic = batch.column("topic")[0].as_py() if batch.num_rows else ""
        self.partition = batch.column("partition")[0].as_py() if batch.num_rows else 0

    def arrow(self) -> pa.RecordBatch:
        return self.batch

    def records(self) -> list[Record]:
        return input_records(self.batch)


def pack(batch: pa.RecordBatch) -> bytes:
    """`batch` as one Arrow IPC message (its schema is implied by where it goes)."""
    return batch.serialize().to_pybytes()


def unpack(blob: bytes, schema: pa.Schema) -> pa.RecordBatch:
    return pa.ipc.read_record_batch(pa.py_buffer(blob), schema)


def unpack_output(blobs: Iterable[bytes]) -> pa.Table:
    """The rows of one write slot's packed outputs, as one table of `ROW_ARROW_SCHEMA`."""
    return pa.Table.from_batches(
        [unpack(b, ROW_ARROW_SCHEMA) for b in blobs], schema=ROW_ARROW_SCHEMA
    )


# --- pickling ---------------------------------------------------------------------------------


def _pickler_class() -> type:
    from pyspark import cloudpickle

    class _Pickler(cloudpickle.Pickler):
        """cloudpickle, with built-in serdes by name and `struct.Struct`s by format."""

        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, Serde) and BUILTIN.get(obj.name) is obj:
                return ("serde", obj.name)
            if isinstance(obj, struct.Struct):
                return ("struct", obj.format)
            return None

    return _Pickler


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        kind, arg = pid
        if kind == "serde":
            return BUILTIN[arg]
        if kind == "struct":
            return struct.Struct(arg)
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def dumps(obj: Any) -> bytes:
    """`obj` pickled for Spark's workers (functions and closures included)."""
    buf = io.BytesIO()
    _pickler_class()(buf, protocol=5).dump(obj)
    return buf.getvalue()


def loads(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()
