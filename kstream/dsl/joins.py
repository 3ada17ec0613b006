"""Joins: stream-stream (windowed), stream-table, stream-global-table and table-table.

`KStream.join/left_join/outer_join` and the `KTable` join methods call `join_stream` and
`join_tables` here. The rules are Kafka Streams 3.9's, checked record by record
against ports of Kafka's own join tests (`tests/conformance`):

- Stream-stream (`kstream.dsl.processors.stream_stream_join` has the step-by-step rules): each
  side is
  kept in a window store that retains a record while `ts > newest - (before + after + grace)`.
  A left record at `t` joins every retained right record of its key in `[t - before, t +
  after]` (symmetrically for right records); a result carries the larger timestamp. Records
  arriving out of order are not dropped: they join whatever the other side still retains.
  Left/outer joins hold unmatched records in a shared "outer" store and emit `joiner(v, None)`
  / `joiner(None, v)` only once stream time has passed `ts + after + grace` (no spurious
  results, Kafka 3.1+), or at once when the record arrives after its window already ended.
  Stream time is the largest timestamp either side has seen.
- Stream-table: a stream record looks up the table's current value and the result keeps the
  stream record's timestamp; table updates alone emit nothing. Inner drops records without a
  match, left emits `joiner(v, None)`. A versioned table (kstream.dsl.versioned) is read as of
  the stream record's timestamp instead (KIP-914), and `Joined.with_grace_period` holds the
  stream records back for a grace period first (KIP-923, kstream.dsl.processors.grace_join).
- Stream-global-table: as stream-table, looked up by `key_selector(k, v)` in the global store,
  with no repartition (every instance holds the whole table).
- Table-table: an update on either side emits `Change(new result, old result)`, computed
  against the other side's current value and stamped with the larger of the two sides'
  timestamps (the update's own when the other side has no value); deletes propagate as
  deletes, stamped the same way.

None keys and values (KIP-962, Kafka 3.7+): a None value is always dropped. A None key is
dropped by inner joins, but a left join (and both sides of an outer stream-stream join)
forwards the record as `joiner(v, None)` at its own timestamp, and repartition topics in front
of such joins keep None keys. A global-table join drops a record whose `key_selector`
returns None, unless it is a left join, which forwards `joiner(v, None)` (Kafka 4.x). Every
drop is counted by reason (`ctx.record_dropped`).

A stream-stream join has Kafka's nodes: a WINDOWED node per side, a "this" and an "other" join
processor and a MERGE. The two join processors share one `StreamStreamJoin` per task (the
window stores, the outer store and stream time), so the stream time each side uses is the one
both share in Kafka.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kstream.dsl.global_table import GlobalKTable
from kstream.dsl.graph import AUTO, processor_factory
from kstream.dsl.handles import StreamHandle, StreamT, TableHandle, TableT
from kstream.dsl.joined import Joined
from kstream.dsl.processors.grace_join import BufferedStreamTableJoinProcessor
from kstream.dsl.processors.join import (
    JoinedValueGetter,
    Joiner,
    StreamTableJoinProcessor,
    TableTableJoinProcessor,
    _PassThrough,
)
from kstream.dsl.processors.stream_stream_join import (
    JoinSideProcessor,
    OuterKeySerde,
    SharedJoin,
    StreamStreamJoin,
)
from kstream.dsl.processors.versioned import VersionedValueGetter
from kstream.dsl.windows import JoinWindows
from kstream.errors import TopologyError
from kstream.serde import Serde

KINDS = ("inner", "left", "outer")
_OPS = {"inner": "JOIN", "left": "LEFTJOIN", "outer": "OUTERJOIN"}


def _check_common(kind: str, joiner: Any, what: str) -> None:
    if kind not in KINDS:
        raise TopologyError(f"{what}: join kind must be one of {KINDS}, got {kind!r}")
    if not callable(joiner):
        raise TopologyError(f"{what}: joiner must be a function (v1, v2) -> value, got {joiner!r}")


def _partitioned(stream: StreamHandle[Any], base: str, keep_null_keys: bool) -> str:
    """The node a join reads `stream` from, repartitioned first if its key may have changed.

    As in Kafka 3.7+, the repartition topic in front of a join that accepts None keys (left
    and outer joins) keeps None-key records instead of filtering them out. Joins of one stream
    share its repartition topic when they name it alike (`InternalBuilder.join_repartition`).
    """
    if not stream._repartition_required:
        return stream._node
    return stream._builder.join_repartition(
        stream._node,
        base,
        key_serde=stream._key_serde,
        value_serde=stream._value_serde,
        keep_null_keys=keep_null_keys,
    )


# --- entry points (the hooks of graph.py) -------------------------------------------------------


def join_stream(
    left: StreamT,
    other: StreamHandle[Any] | TableHandle[Any] | GlobalKTable,
    joiner: Callable[[Any, Any], Any] | None,
    *,
    kind: str,
    window: JoinWindows | None,
    key_selector: Callable[[Any, Any], Any] | None,
    name: str | None,
    with_key: bool = False,
    joined: Joined | None = None,
) -> StreamT:
    """Join a stream with a stream (windowed), a table or a global table: what
    `KStream.join/left_join/outer_join` (`kind` "inner", "left", "outer") build.

    Checks the combination (an outer join needs a stream, `key_selector` a global table, a
    stream-stream join a `JoinWindows`, `joined` a table) and raises `TopologyError` naming
    the operator."""
    what = f"KStream.{'join' if kind == 'inner' else kind + '_join'}"
    _check_common(kind, joiner, what)
    assert joiner is not None  # _check_common raised otherwise
    if joined is not None:
        if not isinstance(other, TableHandle):
            raise TopologyError(f"{what}: Joined is for a stream-table join")
        if name is not None and joined.name is not None and name != joined.name:
            raise TopologyError(f"{what}: name={name!r} and Joined name {joined.name!r} differ")
        name = name if name is not None else joined.name
    if isinstance(other, GlobalKTable):
        return _stream_global(left, other, joiner, kind, window, key_selector, name, what, with_key)
    if key_selector is not None:
        raise TopologyError(f"{what}: key_selector is only for joins with a GlobalKTable")
    if isinstance(other, TableHandle):
        grace = None if joined is None else joined.grace_period
        return _stream_table(left, other, joiner, kind, window, name, what, with_key, grace)
    if isinstance(other, StreamHandle):
        return _stream_stream(left, other, joiner, kind, window, name, what, with_key)
    raise TopologyError(
        f"{what}: can join a KStream, a KTable or a GlobalKTable, got {type(other).__name__}"
    )


def join_tables(
    left: TableT,
    other: TableHandle[Any],
    joiner: Callable[[Any, Any], Any],
    *,
    kind: str,
    name: str | None,
) -> TableT:
    """Join two tables on their keys: what `KTable.join/left_join/outer_join` build.

    The result is a table of `Change`s like any other, readable by later joins through a
    getter that applies `joiner` to both sides' current values (no store of its own)."""
    what = f"KTable.{'join' if kind == 'inner' else kind + '_join'}"
    _check_common(kind, joiner, what)
    if not isinstance(other, TableHandle):
        raise TopologyError(f"{what}: can join a KTable, got {type(other).__name__}")
    b = left._builder
    if other._builder is not b:
        raise TopologyError(f"{what}: both tables must come from the same StreamBuilder")
    # Kafka's order of names (KTableImpl.doJoin): the merge, then this side, then the other
    merge = b.name("MERGE", name, "KTABLE")
    this_node = b.name("JOINTHIS", None if name is None else f"{name}-join-this", "KTABLE")
    other_node = b.name("JOINOTHER", None if name is None else f"{name}-join-other", "KTABLE")
    from kstream import stores

    ts_spec = stores.key_value(
        f"{merge}-timestamps-store",
        key_serde=left._key_serde or AUTO,
        value_serde=TIMESTAMP_PAIR_SERDE,
    )
    b.processor(
        this_node,
        processor_factory(TableTableJoinProcessor, other._getter, joiner, kind, True, ts_spec.name),
        left._node,
    )
    b.processor(
        other_node,
        processor_factory(TableTableJoinProcessor, left._getter, joiner, kind, False, ts_spec.name),
        other._node,
    )
    for s in other._getter.stores:
        b.connect(this_node, s)
    for s in left._getter.stores:
        b.connect(other_node, s)
    # Kafka reads the timestamps from the tables' timestamped stores: it has no such store
    b.add_store(ts_spec, [this_node, other_node], described=False)
    b.processor(merge, _PassThrough, [this_node, other_node])
    getter = JoinedValueGetter(left._getter, other._getter, joiner, kind)
    return type(left)(b, merge, left._key_serde, None, getter)


# --- stream-table and stream-global-table ----------------------------------------------------


def _stream_table(
    left: StreamT,
    table: TableHandle[Any],
    joiner: Joiner,
    kind: str,
    window: Any,
    name: str | None,
    what: str,
    with_key: bool = False,
    grace: int | None = None,
) -> StreamT:
    if kind == "outer":
        raise TopologyError(f"{what}: a stream-table join is inner or left, not outer")
    if window is not None:
        raise TopologyError(f"{what}: a stream-table join takes no window")
    b = left._builder
    if table._builder is not b:
        raise TopologyError(f"{what}: the stream and the table must come from one StreamBuilder")
    if left._repartition_required and left._key_serde is None:
        # Co-partitioning is by key bytes: repartition with the table's key serde, or the
        # stream's records land in other partitions than the table's keys.
        left = type(left)(b, left._node, table._key_serde, left._value_serde, True)
    # As Kafka (`KStreamImpl.doStreamTableJoin`): the stream is repartitioned before the join
    # is named, through a topic named after the join's given name or else the stream's node
    base = left._node if name is None else name
    parent = _partitioned(left, base, keep_null_keys=kind == "left")
    node = b.name(_OPS[kind], name)
    if grace is None:
        factory = processor_factory(
            StreamTableJoinProcessor, table._getter, joiner, kind == "left", None, with_key
        )
        b.processor(node, factory, parent)
    else:
        _grace_join(left, table, joiner, kind == "left", with_key, grace, node, parent, what)
    for s in table._getter.stores:
        b.connect(node, s)
    return type(left)(b, node, left._key_serde, None, False)


def _grace_join(
    left: StreamHandle[Any],
    table: TableHandle[Any],
    joiner: Joiner,
    is_left: bool,
    with_key: bool,
    grace: int,
    node: str,
    parent: str,
    what: str,
) -> None:
    """The join node behind a buffer of `grace` ms (KIP-923,
    kstream.dsl.processors.grace_join), with Kafka's checks: the table is versioned and keeps
    at least `grace` of history."""
    from kstream import stores

    getter = table._getter
    if not isinstance(getter, VersionedValueGetter):
        raise TopologyError(
            f"{what}: KTable must be versioned to use a grace period in a stream table join."
        )
    if getter.history_retention < grace:
        raise TopologyError(f"{what}: History retention must be at least grace period.")
    b = left._builder
    buffer = stores.key_value(f"{node}-Buffer", key_serde="bytes", value_serde="bytes")
    ks, vs = left._key_serde or AUTO, left._value_serde or AUTO
    factory = processor_factory(
        BufferedStreamTableJoinProcessor,
        getter,
        joiner,
        is_left,
        with_key,
        grace,
        buffer.name,
        ks,
        vs,
    )
    b.processor(node, factory, parent)
    b.add_store(buffer, [node])


def _stream_global(
    left: StreamT,
    table: GlobalKTable,
    joiner: Joiner,
    kind: str,
    window: Any,
    key_selector: Any,
    name: str | None,
    what: str,
    with_key: bool = False,
) -> StreamT:
    if kind == "outer":
        raise TopologyError(f"{what}: a stream-global-table join is inner or left, not outer")
    if window is not None:
        raise TopologyError(f"{what}: a stream-global-table join takes no window")
    if not callable(key_selector):
        raise TopologyError(
            f"{what}: a join with a GlobalKTable needs key_selector(k, v) -> table key, "
            f"as in join(global_table, key_selector, joiner); got {key_selector!r}"
        )
    b = left._builder
    if table.store_name not in b.topology.global_stores:
        raise TopologyError(
            f"{what}: global table {table.store_name!r} is not part of this StreamBuilder"
        )
    # Kafka names a join with a global table KSTREAM-LEFTJOIN-..., inner ones too
    node = b.name("LEFTJOIN", name)
    factory = processor_factory(
        StreamTableJoinProcessor, table._getter, joiner, kind == "left", key_selector, with_key
    )
    b.processor(node, factory, left._node)
    return type(left)(b, node, left._key_serde, None, left._repartition_required)


# --- stream-stream --------------------------------------------------------------------------


def _stream_stream(
    left: StreamT,
    right: StreamHandle[Any],
    joiner: Joiner,
    kind: str,
    window: Any,
    name: str | None,
    what: str,
    with_key: bool = False,
) -> StreamT:
    if not isinstance(window, JoinWindows):
        raise TopologyError(
            f"{what}: a stream-stream join needs window=JoinWindows.of(...), got {window!r}"
        )
    if window.before_ms + window.after_ms < 0:
        raise TopologyError(f"{what}: JoinWindows before + after must be >= 0, got {window}")
    if window.grace_ms < 0:
        raise TopologyError(f"{what}: JoinWindows grace must be >= 0, got {window}")
    b = left._builder
    if right._builder is not b:
        raise TopologyError(f"{what}: both streams must come from the same StreamBuilder")
    from kstream import stores

    # Left and outer joins take None-key records (KIP-962): repartitioning must keep them.
    keep_null_keys = kind != "inner"
    # As Kafka (`KStreamImpl.doJoin`): each side is repartitioned before the join's nodes are
    # named, through a topic named after the join (`<name>-left`, `<name>-right`) or else after
    # the side's own node (`KSTREAM-MAP-0000000005-repartition`); one stream on both sides
    # is repartitioned once
    left_parent = _partitioned(left, left._node if name is None else f"{name}-left", keep_null_keys)
    if right._node == left._node:
        right_parent = left_parent
    else:
        right_base = right._node if name is None else f"{name}-right"
        right_parent = _partitioned(right, right_base, keep_null_keys)
    # Kafka's nodes and the order they take names (`KStreamImplJoin.join`): a WINDOWED node
    # per side (where Kafka puts the side's records into its window store), the two join
    # sides (OUTER... on a side whose partner's unmatched records are emitted) and a MERGE
    this_windowed = b.name("WINDOWED", _suffixed(name, "-this-windowed"))
    other_windowed = b.name("WINDOWED", _suffixed(name, "-other-windowed"))
    this_generated = b.name("OUTERTHIS" if kind == "outer" else "JOINTHIS")
    other_generated = b.name("JOINOTHER" if kind == "inner" else "OUTEROTHER")
    this_join = this_generated if name is None else f"{name}{_this_suffix(kind)}"
    other_join = other_generated if name is None else f"{name}{_other_suffix(kind)}"
    merge = b.name("MERGE", _suffixed(name, "-merge"))

    size = window.before_ms + window.after_ms
    retention = max(size + window.grace_ms, 1)
    # Kafka names the stores after the generated side names; a named join keeps kstream's
    # store names `<name>-this-join-store`, `<name>-other-join-store` (state of existing apps)
    this_store = f"{this_generated}-store" if name is None else f"{name}-this-join-store"
    other_store = f"{other_generated}-store" if name is None else f"{name}-other-join-store"
    this_spec = stores.window(
        this_store, retention, size, retain_duplicates=True
    ).with_default_serdes(left._key_serde, left._value_serde)
    other_spec = stores.window(
        other_store, retention, size, retain_duplicates=True
    ).with_default_serdes(right._key_serde, right._value_serde)
    outer_spec = None
    if kind != "inner":
        # Kafka: `KSTREAM-OUTERSHARED-<the number of this side's name>-store`
        number = this_generated.rsplit("-", 1)[1]
        outer_base = f"{name}-outer-shared-join" if name else f"KSTREAM-OUTERSHARED-{number}"
        outer_spec = stores.key_value(
            f"{outer_base}-store", key_serde=OuterKeySerde(left._key_serde or AUTO)
        ).with_default_serdes(None, AUTO)

    shared = SharedJoin(
        this_spec.name,
        other_spec.name,
        None if outer_spec is None else outer_spec.name,
        joiner,
        window,
        kind,
        with_key,
    )
    b.processor(this_windowed, _PassThrough, left_parent)
    b.processor(other_windowed, _PassThrough, right_parent)
    b.processor(this_join, processor_factory(JoinSideProcessor, shared, True), this_windowed)
    b.processor(other_join, processor_factory(JoinSideProcessor, shared, False), other_windowed)
    b.processor(merge, _PassThrough, [this_join, other_join])
    # the stores where Kafka connects them: each window store to its side's WINDOWED node and
    # to the other side's join, the outer store to both joins
    b.add_store(this_spec, [this_windowed, other_join])
    b.add_store(other_spec, [other_windowed, this_join])
    if outer_spec is not None:
        b.add_store(outer_spec, [this_join, other_join])
    return type(left)(b, merge, left._key_serde, None, False)


def _suffixed(name: str | None, suffix: str) -> str | None:
    return None if name is None else f"{name}{suffix}"


def _this_suffix(kind: str) -> str:
    """Kafka's suffix of a named join's "this" side: "outer" when the right side's unmatched
    records are emitted (an outer join)."""
    return "-outer-this-join" if kind == "outer" else "-this-join"


def _other_suffix(kind: str) -> str:
    return "-other-join" if kind == "inner" else "-outer-other-join"


# --- table-table ----------------------------------------------------------------------------


_PAIR = struct.Struct(">qq")

TIMESTAMP_PAIR_SERDE = Serde(
    lambda pair: _PAIR.pack(*pair),
    lambda data: list(_PAIR.unpack(data)),
    "timestamp-pair",
)
"""`[left_ts, right_ts]` of a table-table join key, 16 bytes (-1: that side has no value)."""


__all__ = [
    "JoinSideProcessor",
    "JoinedValueGetter",
    "OuterKeySerde",
    "SharedJoin",
    "StreamStreamJoin",
    "StreamTableJoinProcessor",
    "TableTableJoinProcessor",
    "join_stream",
    "join_tables",
]
