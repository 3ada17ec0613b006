"""Versioned tables (KIP-889/914): a table whose store keeps every value a key had.

`StreamBuilder.table(topic, versioned=history_retention)` (or a table or `to_table` given a
`kstream.stores.versioned_key_value` store) materializes the topic in a versioned store
(kstream.state.versioned). What changes against a plain table, as in Kafka Streams 4.x:

- the source (Kafka's `KTableSource` over a versioned store) puts each update at its
  timestamp. An update older than the key's latest version goes into history only, and is
  forwarded marked as such (`NotLatest`, with the latest value as its old value): filters,
  `map_values` and `transform_values` keep the mark and `to_stream` emits it, while
  table-table joins, foreign-key joins and regroupings (aggregations) drop it, so they see the
  latest value change only when it does. An update older than history retention is dropped
  (counted as `late_record`);
- a filter below a versioned table forwards an update invisible before and after as a
  delete (Kafka's `KTableFilter` with versioned semantics), where below a plain table it may
  drop it; `suppress` of a versioned table (or of a table derived from one without a store of
  its own) is refused when the topology is built, as Kafka refuses it;
- a stream-table join reads the table as of each stream record's timestamp (KIP-914): a
  stream record joins the value the table had when the record happened, not the one it has
  when the record arrives. With `Joined.with_grace_period` the stream side is held back for the
  grace period first (KIP-923; kstream.dsl.processors.grace_join).

Filters, `map_values` and `transform_values` without a store of their own keep a versioned
table versioned (their getters replay the transforms on the version read); `versioned_upstream`
tells whether a table is one, as Kafka's `InternalStreamsBuilder` decides its nodes' versioned
semantics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kstream.dsl.graph import InternalBuilder, StoreLike
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.transform_values import TransformedValueGetter
from kstream.dsl.processors.versioned import VersionedValueGetter
from kstream.duration import DurationLike
from kstream.errors import TopologyError

if TYPE_CHECKING:
    from kstream.serde import Serde
    from kstream.state.spec import StoreSpec

__all__ = [
    "VERSIONED",
    "is_versioned",
    "versioned_spec",
    "versioned_upstream",
]

VERSIONED = "versioned_key_value"
"""The store kind of a versioned table (`kstream.stores.versioned_key_value`)."""


def is_versioned(store: StoreLike) -> bool:
    """`store` is a versioned store spec."""
    return getattr(store, "kind", None) == VERSIONED


def versioned_spec(
    b: InternalBuilder,
    store: StoreLike,
    versioned: DurationLike | None,
    op: str,
    key_serde: Serde | None,
    value_serde: Serde | None,
) -> StoreSpec | None:
    """The versioned store of a table given `store=` and `versioned=`, or None for a plain
    table. `versioned` (a history retention) makes a versioned store named `store` (or named
    after `op`, as `InternalBuilder.store_spec` names stores); a versioned spec is used as
    given, and giving both is refused."""
    if versioned is None and not is_versioned(store):
        return None
    if versioned is not None and store is not None and not isinstance(store, str):
        raise TopologyError(
            f"store {getattr(store, 'name', store)!r}: give versioned= or a versioned store "
            "spec (kstream.stores.versioned_key_value), not both"
        )
    extra: dict[str, Any] = {} if versioned is None else {"history_retention": versioned}
    return b.store_spec(
        store, op, kind=VERSIONED, key_serde=key_serde, value_serde=value_serde, **extra
    )


def versioned_upstream(getter: ValueGetter) -> bool:
    """Whether a table whose getter is `getter` gives a versioned table's updates: a versioned
    table itself, or one derived from it by filters, `map_values` and `transform_values` that
    keep no store (Kafka's `isVersionedOrVersionedUpstream`; a store of another kind, a join,
    an aggregation or a suppress ends it).

    Example:
        >>> b = StreamBuilder()
        >>> t = b.table("t", "string", "string", versioned="1h")
        >>> versioned_upstream(t.filter(lambda k, v: True).map_values(str.upper)._getter)
        True
        >>> versioned_upstream(t.filter(lambda k, v: True, materialized="plain")._getter)
        False
    """
    while isinstance(getter, TransformedValueGetter):
        getter = getter.parent
    return isinstance(getter, VersionedValueGetter)
