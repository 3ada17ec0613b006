"""The built-in stateless operators: filter, map, map_values, select_key, flat_map,
flat_map_values, peek, branch, the pass-through of merges and branches, and the null-key
filter before a repartition. Each keeps nothing between records and carries `stateless`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, without
from kstream.records import Record, derive
from kstream.topology.processor import ProcessorContext


class FilterProcessor(BuiltinProcessor):
    stateless = True
    forwards = "given"

    def __init__(self, predicate: Callable[[Any, Any], Any], negate: bool = False) -> None:
        self.predicate = predicate
        self.negate = negate

    def process_batch(self, records: Sequence[Record]) -> None:
        pred, on_error = self.predicate, self.ctx.on_error
        out: list[Record] = []
        keep = out.append
        # one loop per polarity: the test of each record is the predicate's truth alone
        if self.negate:
            for r in records:
                try:
                    if not pred(r.key, r.value):
                        keep(r)
                except Exception as e:
                    on_error(e, r)
        else:
            for r in records:
                try:
                    if pred(r.key, r.value):
                        keep(r)
                except Exception as e:
                    on_error(e, r)
        self.ctx.forward_batch(out)


class MapProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.fn = fn
        self.owns_input = False

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        if self.owns_input:  # nobody else sees these records: change them, copy none
            bad: set[int] | None = None
            for r in records:
                try:
                    r.key, r.value = fn(r.key, r.value)
                except Exception as e:
                    on_error(e, r)
                    bad = (bad or set()) | {id(r)}
            self.ctx.forward_batch(without(records, bad))
            return
        out = []
        for r in records:
            try:
                k, v = fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(derive(r, k, v))  # r.with_key_value(k, v), one call fewer
        self.ctx.forward_batch(out)


class MapValuesProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[..., Any], with_key: bool = False) -> None:
        self.fn = fn
        self.with_key = with_key  # fn(key, value), Kafka's ValueMapperWithKey
        self.owns_input = False

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        if self.with_key:
            out = []
            for r in records:
                try:
                    v = fn(r.key, r.value)
                except Exception as e:
                    on_error(e, r)
                    continue
                out.append(derive(r, r.key, v))
            self.ctx.forward_batch(out)
            return
        if self.owns_input:  # nobody else sees these records: change them, copy none
            bad: set[int] | None = None
            for r in records:
                try:
                    r.value = fn(r.value)
                except Exception as e:
                    on_error(e, r)
                    bad = (bad or set()) | {id(r)}
            self.ctx.forward_batch(without(records, bad))
            return
        out = []
        for r in records:
            try:
                v = fn(r.value)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(derive(r, r.key, v))  # r.with_value(v), one call fewer
        self.ctx.forward_batch(out)


class SelectKeyProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        out = []
        for r in records:
            try:
                k = fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(r.with_key(k))
        self.ctx.forward_batch(out)


class FlatMapProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        out = []
        for r in records:
            try:
                pairs = [r.with_key_value(k, v) for k, v in fn(r.key, r.value)]
            except Exception as e:
                on_error(e, r)
                continue
            out.extend(pairs)
        self.ctx.forward_batch(out)


class FlatMapValuesProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[..., Any], with_key: bool = False) -> None:
        self.fn = fn
        self.with_key = with_key  # fn(key, value), Kafka's ValueMapperWithKey

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error, with_key = self.fn, self.ctx.on_error, self.with_key
        out = []
        for r in records:
            try:
                vs = fn(r.key, r.value) if with_key else fn(r.value)
                vals = [r.with_value(v) for v in vs]
            except Exception as e:
                on_error(e, r)
                continue
            out.extend(vals)
        self.ctx.forward_batch(out)


class PeekProcessor(BuiltinProcessor):
    """`peek` (forwards) and `foreach` (terminal: no children, so nothing is forwarded)."""

    stateless = True
    forwards = "given"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        bad = None
        for r in records:
            try:
                fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                bad = (bad or set()) | {id(r)}
        self.ctx.forward_batch(without(records, bad))


class PassThroughProcessor(BuiltinProcessor):
    """Merge points and branch children: forward what comes in."""

    stateless = True
    forwards = "given"

    def process_batch(self, records: Sequence[Record]) -> None:
        self.ctx.forward_batch(list(records))


class BranchProcessor(BuiltinProcessor):
    """First matching predicate wins; records matching none go to `default` or are dropped."""

    stateless = True

    def __init__(
        self,
        predicates: Sequence[Callable[[Any, Any], Any]],
        children: Sequence[str],
        default: str | None,
    ) -> None:
        # `children` may also name the default branch, after the predicates' (as Kafka's
        # KStreamBranch: `KStream.split()` adds the branches after the splitter)
        n = len(predicates)
        self.predicates = list(predicates)
        self.children = list(children[:n])
        self.default = default if default is not None or len(children) <= n else children[n]

    def process_batch(self, records: Sequence[Record]) -> None:
        preds, on_error = self.predicates, self.ctx.on_error
        n = len(preds)
        buckets: list[list[Record]] = [[] for _ in range(n + 1)]
        for r in records:
            try:
                i = 0
                while i < n and not preds[i](r.key, r.value):
                    i += 1
            except Exception as e:
                on_error(e, r)
                continue
            buckets[i].append(r)
        for i, child in enumerate(self.children):
            if buckets[i]:
                self.ctx.forward_batch(buckets[i], to=child)
        if self.default is not None and buckets[n]:
            self.ctx.forward_batch(buckets[n], to=self.default)


class NullKeyPolicy:
    """Whether a repartition filter keeps null-key records: decided after its processor was
    added, once the DSL knows whether a join that accepts null keys reads from it (Kafka 3.7+,
    KIP-962: a left or outer join downstream keeps them)."""

    __slots__ = ("keep",)

    def __init__(self) -> None:
        self.keep = False


class DropNullKeysProcessor(BuiltinProcessor):
    """Before a repartition: a record without a key has no partition (Kafka drops it too)."""

    stateless = True

    def __init__(self, policy: NullKeyPolicy | None = None) -> None:
        self.policy = policy

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.keep = self.policy is not None and self.policy.keep

    def process_batch(self, records: Sequence[Record]) -> None:
        if self.keep:
            self.ctx.forward_batch(list(records))
            return
        out = [r for r in records if r.key is not None]
        if len(out) != len(records):
            dropped = self.ctx.record_dropped
            for r in records:
                if r.key is None:
                    dropped("null_key", r)
        self.ctx.forward_batch(out)
