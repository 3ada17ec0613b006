"""The processors of a foreign-key table-table join (KIP-213; kstream.dsl.fk_join adds them to
a topology, in the order of Kafka's doJoinOnForeignKey)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, NotLatest
from kstream.dsl.processors.fk_wire import (
    DELETE_INSTRUCTIONS,
    Instruction,
    Response,
    Subscription,
    combined_prefix,
    value_hash,
)
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.table import MaterializedOnDemand, TableSourceProcessor
from kstream.records import Record
from kstream.serde import Serde, SerdeContext
from kstream.topology.processor import ProcessorContext


def _bytes(serde: Serde, value: Any, topic: str) -> bytes | None:
    return serde.serialize(value, SerdeContext(topic=topic))


class SubscriptionSendProcessor(BuiltinProcessor):
    """The left table's updates as subscriptions keyed by foreign key (Kafka's
    `SubscriptionSendProcessorSupplier`, whose instructions it sends: see the module)."""

    def __init__(
        self,
        extractor: Callable[..., Any],
        with_key: bool,
        foreign_key_serde: Serde,
        value_serde: Serde,
        left_join: bool,
        topic: str,
    ) -> None:
        self.extractor = extractor
        self.with_key = with_key
        self.fk_serde = foreign_key_serde
        self.value_serde = value_serde
        self.left_join = left_join
        self.fk_topic = f"{topic}-fk"
        self.vh_topic = f"{topic}-vh"

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        task = self.task
        self.partition = 0 if task is None else task.partition

    def _fk(self, key: Any, value: Any) -> Any:
        return self.extractor(key, value) if self.with_key else self.extractor(value)

    def _same(self, a: Any, b: Any) -> bool:
        """Foreign keys compare by their bytes, as Kafka compares them."""
        return _bytes(self.fk_serde, a, self.fk_topic) == _bytes(self.fk_serde, b, self.fk_topic)

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        for r in records:
            if type(r.value) is NotLatest:
                # an out-of-order update of a versioned left table: not joined (KIP-914)
                self.ctx.record_dropped("late_record", r)
                continue
            try:
                self._instructions(r, out)
            except Exception as e:
                self.ctx.on_error(e, r)
        self.ctx.forward_batch(out)

    def _instructions(self, r: Record, out: list[Record]) -> None:
        new, old = r.value
        k = r.key
        if new is None and old is None:
            return
        h = value_hash(_bytes(self.value_serde, new, self.vh_topic))
        found: list[tuple[Any, Instruction]] = []
        send = found.append
        new_fk = None if new is None else self._fk(k, new)
        if old is not None:
            old_fk = self._fk(k, old)
            if self.left_join:
                if old_fk is not None and not self._same(new_fk, old_fk):
                    send((old_fk, Instruction.DELETE_KEY_NO_PROPAGATE))
                send((new_fk, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
            elif old_fk is None and new_fk is None:
                self.ctx.record_dropped("null_key", r)
            elif old_fk is None:
                send((new_fk, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
            elif new_fk is None:
                send((old_fk, Instruction.DELETE_KEY_AND_PROPAGATE))
            elif not self._same(new_fk, old_fk):
                # the old foreign key forgets the row; the new one answers, None included, as
                # any result the old key gave must be replaced (inner and left joins alike)
                send((old_fk, Instruction.DELETE_KEY_NO_PROPAGATE))
                send((new_fk, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
            else:
                send((new_fk, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
        elif self.left_join:
            send((new_fk, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
        elif new_fk is None:
            self.ctx.record_dropped("null_key", r)
        else:
            send((new_fk, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
        for fk, instruction in found:
            out.append(r.with_key_value(fk, Subscription(h, instruction, k, self.partition)))


class SubscriptionReceiveProcessor(BuiltinProcessor):
    """Keeps the subscription store up to date (Kafka's `SubscriptionReceiveProcessorSupplier`)
    and hands each subscription on, keyed by (foreign key, primary key).

    A subscription without a foreign key (a left join's row without one) is not stored; only
    one that asks for an answer anyway is handed on, the others are dropped."""

    def __init__(
        self, store: str, foreign_key_serde: Serde, primary_key_serde: Serde, topic: str
    ) -> None:
        self.store_name = store
        self.fk_serde = foreign_key_serde
        self.pk_serde = primary_key_serde
        self.fk_topic = f"{topic}-fk"
        self.pk_topic = f"{topic}-pk"

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        task = self.task
        for r in records:
            fk, sub = r.key, r.value
            if sub is None:
                self.ctx.record_dropped("null_value", r)
                continue
            if fk is None:
                if sub.instruction != Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
                    self.ctx.record_dropped("null_key", r)
                    continue
            else:
                try:
                    fkb = _bytes(self.fk_serde, fk, self.fk_topic)
                    pkb = _bytes(self.pk_serde, sub.primary_key, self.pk_topic)
                    assert fkb is not None and pkb is not None
                    if task is not None:
                        task.current = r
                    if sub.instruction in DELETE_INSTRUCTIONS:
                        self.store.delete(combined_prefix(fkb) + pkb)
                    else:
                        self.store.put(combined_prefix(fkb) + pkb, sub)
                except Exception as e:
                    self.ctx.on_error(e, r)
                    continue
                finally:
                    if task is not None:
                        task.current = None
            out.append(r.with_key((fk, sub.primary_key)))
        self.ctx.forward_batch(out)


class SubscriptionJoinProcessor(BuiltinProcessor):
    """Answers a subscription with the foreign row's current value, as its instruction says
    (Kafka's `SubscriptionJoinProcessorSupplier`), stamped with the larger of the subscription's
    and the foreign row's timestamps."""

    def __init__(self, foreign: ValueGetter, timestamps: str) -> None:
        self.getter = foreign
        self.timestamps_name = timestamps

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.get = self.getter.bind(ctx)
        self.timestamps = ctx.get_store(self.timestamps_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        for r in records:
            (fk, pk), sub = r.key, r.value
            instruction = sub.instruction
            if instruction == Instruction.DELETE_KEY_NO_PROPAGATE:
                continue
            try:
                fv = None if fk is None else self.get(fk)
                ts = r.timestamp
                if fv is not None:
                    fts = self.timestamps.get(fk)
                    if fts is not None and fts > ts:
                        ts = fts
            except Exception as e:
                self.ctx.on_error(e, r)
                continue
            if instruction == Instruction.DELETE_KEY_AND_PROPAGATE:
                fv = None
            elif instruction == Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE and fv is None:
                continue
            answer = r.with_key_value(pk, Response(sub.hash, fv, sub.partition))
            out.append(answer if ts == r.timestamp else answer.with_timestamp(ts))
        self.ctx.forward_batch(out)


class ForeignTableJoinProcessor(BuiltinProcessor):
    """Answers every subscriber of a foreign key when its row changes (Kafka's
    `ForeignTableJoinProcessorSupplier`: a prefix scan of the subscription store), at the
    update's timestamp; also keeps the latest timestamp per foreign key for
    `SubscriptionJoinProcessor`."""

    def __init__(
        self,
        store: str,
        timestamps: str,
        foreign_key_serde: Serde,
        primary_key_serde: Serde,
        topic: str,
    ) -> None:
        self.store_name = store
        self.timestamps_name = timestamps
        self.fk_serde = foreign_key_serde
        self.pk_serde = primary_key_serde
        self.fk_topic = f"{topic}-fk"

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        self.timestamps = ctx.get_store(self.timestamps_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        task = self.task
        for r in records:
            fk = r.key
            if fk is None:
                self.ctx.record_dropped("null_key", r)
                continue
            if type(r.value) is NotLatest:
                # an out-of-order update of a versioned right table: not joined (KIP-914)
                self.ctx.record_dropped("late_record", r)
                continue
            new = r.value.new
            try:
                if task is not None:
                    task.current = r
                if new is None:
                    self.timestamps.delete(fk)
                else:
                    self.timestamps.put(fk, r.timestamp)
                prefix = combined_prefix(_bytes(self.fk_serde, fk, self.fk_topic) or b"")
                with self.store.prefix_scan(prefix) as found:
                    answers = [
                        r.with_key_value(
                            self.pk_serde.from_bytes(ck[len(prefix) :]),
                            Response(sub.hash, new, sub.partition),
                        )
                        for ck, sub in found
                    ]
                out.extend(answers)
            except Exception as e:
                self.ctx.on_error(e, r)
                continue
            finally:
                if task is not None:
                    task.current = None
        self.ctx.forward_batch(out)


class ResponseResolverProcessor(BuiltinProcessor):
    """Joins an answer with the left row's current value (Kafka's
    `ResponseJoinProcessorSupplier`): an answer whose hash is not the current value's is stale
    and dropped; no foreign value gives a delete, or `joiner(value, None)` in a left join."""

    def __init__(
        self,
        left: ValueGetter,
        value_serde: Serde,
        joiner: Callable[[Any, Any], Any],
        left_join: bool,
        topic: str,
    ) -> None:
        self.getter = left
        self.value_serde = value_serde
        self.joiner = joiner
        self.left_join = left_join
        self.vh_topic = f"{topic}-vh"

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.get = self.getter.bind(ctx)

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        for r in records:
            answer = r.value
            try:
                current = self.get(r.key)
                if value_hash(_bytes(self.value_serde, current, self.vh_topic)) != answer.hash:
                    self.ctx.record_dropped("stale_response", r)
                    continue
                fv = answer.foreign_value
                if fv is None and (not self.left_join or current is None):
                    result = None
                else:
                    result = self.joiner(current, fv)
            except Exception as e:
                self.ctx.on_error(e, r)
                continue
            out.append(r.with_value(result))
        self.ctx.forward_batch(out)


class FkJoinResultProcessor(TableSourceProcessor):
    """The join's results as a table (Kafka's `KTableSource` on the response): each result is
    kept in the store (None deletes) and forwarded as `Change(result, previous)`.

    When the store is Kafka's too (`materialized=`, or on demand: `on_demand.materialized()`),
    the results go through the record cache when it is on, as Kafka's materialized
    `KTableSource` forwards through its caching store; a store that is kstream's alone
    forwards every result, as Kafka's unmaterialized source does."""

    on_demand: MaterializedOnDemand | None
