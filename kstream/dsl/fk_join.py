"""Foreign-key table-table joins (KIP-213): `KTable.join(other, foreign_key_extractor, joiner)`.

Each row of the left table names a row of the right ("foreign") table by a key extracted from
its value, `foreign_key_extractor(value)` (or `(key, value)` with `with_key=True`, Kafka 4.1's
`BiFunction` form). The two tables need not be co-partitioned: the join is Kafka's
(`KTableImpl.doJoinOnForeignKey`), in two round trips through internal topics.

1. Subscription. The left table's updates are turned into subscriptions keyed by foreign key
   (`SubscriptionSendProcessor`) and written to `<app>-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-
   <n>-topic` (co-partitioned with the right table). On the right side, a subscription store
   (`KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-<n>`, keyed by foreign key then primary key)
   remembers who subscribes to which foreign key (`SubscriptionReceiveProcessor`), and each
   subscription is answered with the right table's current value (`SubscriptionJoinProcessor`).
   A right-table update answers every subscriber of its key, found by a prefix scan of the
   store (`ForeignTableJoinProcessor`).
2. Response. Answers go back, keyed by primary key, through `<app>-KTABLE-FK-JOIN-SUBSCRIPTION-
   RESPONSE-<n>-topic` to the partition the subscription came from, where
   `ResponseResolverProcessor` joins them with the left table's current value, and
   `FkJoinResultProcessor` makes the result a table (`KTABLE-FK-JOIN-OUTPUT-<n>`).

Every subscription carries a hash of the left value it was made from, and every answer carries
it back: an answer whose hash is not that of the left row's current value is stale (the row
changed, or moved to another foreign key, while the answer was in flight) and is dropped, so a
row never joins the value of a foreign key it no longer has. What a subscription asks for is
Kafka's `SubscriptionWrapper.Instruction`:

- `DELETE_KEY_NO_PROPAGATE`: unsubscribe from the old foreign key of a row whose key changed;
  nothing is answered (the subscription to the new key answers).
- `DELETE_KEY_AND_PROPAGATE`: unsubscribe and answer "no match" (an inner join whose row was
  deleted or lost its foreign key: the result is deleted).
- `PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE`: subscribe and always answer, with None when the
  foreign key has no row (a left join, or a changed foreign key: any earlier result must be
  replaced or deleted).
- `PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE`: subscribe and answer only when the foreign row exists
  (an inner join whose foreign key did not change).

Results are stamped as Kafka stamps them: an answer to a subscription with the larger of the
left update's and the right row's timestamps, an answer to a right-table update with that
update's. Kafka reads the right row's timestamp from its timestamped store; kstream's tables
keep none, so the join keeps the latest timestamp per foreign key in a store of its own
(`<foreign-join node>-timestamps-store`, left out of `describe()` as the table-table join's is).
The result table always has a store, which is only Kafka's (described, queryable) when
`materialized=` names it or an operator below needs the result's values or old values (a join,
a `group_by`), as Kafka materializes it on demand; otherwise it is kstream's alone.

The value hash is a 128-bit BLAKE2b of the left value's serialized bytes (Kafka: Murmur3),
and the subscription and response records use kstream's own layout (version byte first): the
internal topics are read by kstream alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, NamedTuple

from kstream.dsl.graph import AUTO, StoreLike, processor_factory
from kstream.dsl.handles import TableHandle, TableT
from kstream.dsl.materialized import table_store, value_serde_of
from kstream.dsl.processors.fk_join import (
    FkJoinResultProcessor,
    ForeignTableJoinProcessor,
    ResponseResolverProcessor,
    SubscriptionJoinProcessor,
    SubscriptionReceiveProcessor,
    SubscriptionSendProcessor,
)
from kstream.dsl.processors.fk_wire import (
    Instruction,
    Response,
    Subscription,
    response_serde,
    subscription_serde,
)
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.table import MaterializedOnDemand
from kstream.errors import TopologyError

__all__ = [
    "FkJoinResultProcessor",
    "ForeignTableJoinProcessor",
    "Instruction",
    "Response",
    "ResponseResolverProcessor",
    "Subscription",
    "SubscriptionJoinProcessor",
    "SubscriptionReceiveProcessor",
    "SubscriptionSendProcessor",
    "join_on_foreign_key",
    "parse_join_args",
]


# --- processors ----------------------------------------------------------------------------


# --- building ------------------------------------------------------------------------------


def join_on_foreign_key(
    left: TableT,
    other: TableHandle[Any],
    extractor: Callable[..., Any],
    joiner: Callable[[Any, Any], Any],
    *,
    left_join: bool,
    name: str | None,
    materialized: StoreLike,
    with_key: bool,
) -> TableT:
    """Add a foreign-key join of `left` with `other` (the nodes, topics and stores of Kafka's
    `KTableImpl.doJoinOnForeignKey`, named in its order); returns the result table."""
    what = "KTable.left_join" if left_join else "KTable.join"
    if not isinstance(other, TableHandle):
        raise TopologyError(
            f"{what}: a foreign-key join needs a KTable, got {type(other).__name__}"
        )
    if other._builder is not left._builder:
        raise TopologyError(f"{what}: both tables must come from the same StreamBuilder")
    if not callable(extractor):
        raise TopologyError(f"{what}: foreign_key_extractor must be callable, got {extractor!r}")
    if not callable(joiner):
        raise TopologyError(f"{what}: joiner must be a function (v, fv) -> value, got {joiner!r}")
    fk = _FkJoin(left, other, name, left_join)
    # the four parts in Kafka's order, which is the order their nodes are numbered in
    receive = fk.subscriptions(extractor, with_key)
    answerers = fk.foreign_side(receive)
    resolver = fk.responses(answerers, joiner)
    return fk.result(resolver, materialized)


class _FkJoin(Generic[TableT]):
    """What the parts of one foreign-key join share: the builder, the two tables, the serdes
    and the topics and stores one part names and a later one uses."""

    def __init__(
        self, left: TableT, other: TableHandle[Any], name: str | None, left_join: bool
    ) -> None:
        self.left, self.other, self.left_join = left, other, left_join
        self.b = left._builder
        self.topo = self.b.topology
        self._name = name
        self.pk_serde, self.fk_serde = left._key_serde or AUTO, other._key_serde or AUTO
        self.value_serde = left._value_serde or AUTO
        self.foreign_value_serde = other._value_serde or AUTO
        self.sub_serde = subscription_serde(self.pk_serde)
        self.sub_topic = ""
        self.store = ""

    def named(self, suffix: str, op: str) -> str:
        # Kafka's `NamedInternal.suffixWithOrElseGet`: the given name + suffix, an index taken
        return self.b.name(op, None if self._name is None else f"{self._name}{suffix}", "KTABLE")

    def subscriptions(self, extractor: Callable[..., Any], with_key: bool) -> str:
        """The left table's subscriptions, sent through their topic to the foreign key's
        partition and kept there in the subscription store; the receiving node."""
        from kstream import stores

        b, topo, named = self.b, self.topo, self.named
        registration = "FK-JOIN-SUBSCRIPTION-REGISTRATION"
        self.sub_topic = named("-subscription-registration", registration) + "-topic"
        topo.add_repartition_topic(self.sub_topic)
        send = named("-subscription-registration-processor", registration)
        factory = processor_factory(
            SubscriptionSendProcessor,
            extractor,
            with_key,
            self.fk_serde,
            self.value_serde,
            self.left_join,
            self.sub_topic,
        )
        b.processor(send, factory, self.left._node)
        sub_sink = named("-subscription-registration-sink", "SINK")
        topo.add_sink(sub_sink, self.sub_topic, send, self.fk_serde, self.sub_serde)
        sub_source = named("-subscription-registration-source", "SOURCE")
        topo.add_source(sub_source, self.sub_topic, self.fk_serde, self.sub_serde)
        self.store = named("-subscription-store", "FK-JOIN-SUBSCRIPTION-STATE-STORE")
        receive = named("-subscription-receive", "FK-JOIN-SUBSCRIPTION-PROCESSOR")
        factory = processor_factory(
            SubscriptionReceiveProcessor, self.store, self.fk_serde, self.pk_serde, self.sub_topic
        )
        b.processor(receive, factory, sub_source)
        spec = stores.key_value(self.store, key_serde="bytes", value_serde=self.sub_serde)
        b.add_store(spec, [receive])
        return receive

    def foreign_side(self, receive: str) -> list[str]:
        """A subscription joined with the foreign row it names, and a foreign row's change
        joined with every subscription to it; the two answering nodes."""
        from kstream import stores

        b, named, processor = self.b, self.named, "FK-JOIN-SUBSCRIPTION-PROCESSOR"
        join_foreign = named("-subscription-join-foreign", processor)
        foreign_join = named("-foreign-join-subscription", processor)
        stamps = f"{foreign_join}-timestamps-store"
        b.processor(
            join_foreign,
            processor_factory(SubscriptionJoinProcessor, self.other._getter, stamps),
            receive,
        )
        for s in self.other._getter.stores:
            b.connect(join_foreign, s)
        factory = processor_factory(
            ForeignTableJoinProcessor,
            self.store,
            stamps,
            self.fk_serde,
            self.pk_serde,
            self.sub_topic,
        )
        b.processor(foreign_join, factory, self.other._node)
        b.connect(foreign_join, self.store)
        # Kafka reads the foreign row's timestamp from its table's timestamped store
        stamps_spec = stores.key_value(stamps, key_serde=self.fk_serde, value_serde="long")
        b.add_store(stamps_spec, [foreign_join, join_foreign], described=False)
        return [join_foreign, foreign_join]

    def responses(self, answerers: list[str], joiner: Callable[[Any, Any], Any]) -> str:
        """The answers, sent back through their topic to the subscriber's partition and
        resolved there against the left row as it is now; the resolving node."""
        b, topo, named = self.b, self.topo, self.named
        response_topic = named("-subscription-response", "FK-JOIN-SUBSCRIPTION-RESPONSE") + "-topic"
        topo.add_repartition_topic(response_topic)
        resp_serde = response_serde(self.foreign_value_serde)
        response_sink = named("-subscription-response-sink", "SINK")
        # an answer goes back to the partition its subscription came from
        topo.add_sink(
            response_sink, response_topic, answerers, self.pk_serde, resp_serde, _to_subscriber
        )
        response_source = named("-subscription-response-source", "SOURCE")
        topo.add_source(response_source, response_topic, self.pk_serde, resp_serde)
        resolver = named(
            "-subscription-response-resolver", "FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR"
        )
        factory = processor_factory(
            ResponseResolverProcessor,
            self.left._getter,
            self.value_serde,
            joiner,
            self.left_join,
            self.sub_topic,
        )
        b.processor(resolver, factory, response_source)
        for s in self.left._getter.stores:
            b.connect(resolver, s)
        return resolver

    def result(self, resolver: str, materialized: StoreLike) -> TableT:
        """The result table: materialized as asked, or on demand for a later join."""
        b, topo = self.b, self.topo
        result = self.named("-result", "FK-JOIN-OUTPUT")
        spec = table_store(b, materialized, "FK-JOIN-OUTPUT", self.left._key_serde, None)
        on_demand = (
            None if materialized is not None else MaterializedOnDemand(result, spec.name, topo)
        )
        factory = processor_factory(FkJoinResultProcessor, spec.name, on_demand)
        b.processor(result, factory, resolver)
        b.add_store(spec, [result], described=materialized is not None)
        vs = value_serde_of(spec, None)
        given = materialized is not None
        table = type(self.left)(
            b, result, self.left._key_serde, vs, ValueGetter(spec.name), given, on_demand
        )
        if on_demand is not None:
            b.on_demand(on_demand)
        return table


def _to_subscriber(_key: Any, response: Response, _partitions: int) -> int:
    return response.partition


# --- the arguments of KTable.join / left_join -----------------------------------------------


def _key_join(
    joiner: Callable[[Any, Any], Any], name: str | None = None, materialized: StoreLike = None
) -> None: ...


def _fk_join(
    foreign_key_extractor: Callable[..., Any],
    joiner: Callable[[Any, Any], Any],
    *,
    name: str | None = None,
    materialized: StoreLike = None,
    with_key: bool = False,
) -> None: ...


_KEY_JOIN = inspect.signature(_key_join)
_FK_JOIN = inspect.signature(_fk_join)


class JoinArgs(NamedTuple):
    """`KTable.join`'s arguments sorted out: `extractor` is None for a join on the key."""

    extractor: Callable[..., Any] | None
    joiner: Callable[[Any, Any], Any]
    name: str | None
    materialized: StoreLike
    with_key: bool


def parse_join_args(what: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JoinArgs:
    """Tell the two forms of `KTable.join(other, ...)` apart, as Java's overloads do: a
    foreign-key join is `(foreign_key_extractor, joiner, *, name, materialized, with_key)` (two
    functions, or either named), the join on the key `(joiner, name, materialized)`."""
    fk_form = (
        "foreign_key_extractor" in kwargs
        or "with_key" in kwargs
        or (len(args) >= 2 and callable(args[1]))
        or (len(args) >= 1 and "joiner" in kwargs)
    )
    sig = _FK_JOIN if fk_form else _KEY_JOIN
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what}(other, {_form(sig)}): {e}") from None
    bound.apply_defaults()
    a = bound.arguments
    if fk_form:
        return JoinArgs(
            a["foreign_key_extractor"], a["joiner"], a["name"], a["materialized"], a["with_key"]
        )
    return JoinArgs(None, a["joiner"], a["name"], a["materialized"], False)


def _form(sig: inspect.Signature) -> str:
    return ", ".join(sig.parameters)
