"""A time-windowed aggregation behind the record cache folds a batch per (key, window)
(kstream.state.window_fold): the same outputs, changelog records (provenance and timestamps
included), store contents, cache state (entries, sizes, dirty order, recency order,
evictions), stream time, drop counts and error reports as the per-record path, on random
batches of random keys with out-of-order and late records, tumbling and hopping windows,
grace 0 and above, and budgets small enough that some batches have no room (and go record
by record) and evictions happen between batches.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.encoded_batches import encoded
from support.sent import Sent

from kstream.dsl import StreamBuilder
from kstream.dsl.processors.windowed import TimeWindowAggregateProcessor
from kstream.dsl.windows import TimeWindows
from kstream.errors import ProcessingError
from kstream.records import Record
from kstream.serde import serde
from kstream.state import open_store
from kstream.state.caching import ENTRY_OVERHEAD, RecordCache, cached
from kstream.state.metrics import instrument
from kstream.state.spec import StoreSpec
from kstream.state.window_fold import WindowFold
from kstream.topology.nodes import ProcessorNode
from kstream.topology.task import Task

STR, LONG, DOUBLE = serde("str"), serde("long"), serde("double")


class Ops:
    """The store operations a metering layer records."""

    def __init__(self) -> None:
        self.ops: list[str] = []

    def record_operation(
        self, store: str, partition: int, op: str, seconds: float, count: int = 1
    ) -> None:
        self.ops.append(op)

    def record_restore(
        self, store: str, partition: int, restored: int, end_offset: int | None
    ) -> None:
        pass


def _bad_sum(a: float, b: float) -> float:
    if b == 13:
        raise ValueError("13 is refused")
    return a + b


AGGREGATIONS: dict[str, Callable[[Any], Any]] = {
    # P3's: a windowed sum of doubles
    "reduce": lambda w: w.reduce(lambda a, b: a + b, store="agg"),
    "count": lambda w: w.count(store="agg"),
    # an int aggregate into a double store: each step gets the float the store gives back
    "aggregate": lambda w: w.aggregate(
        lambda: 0, lambda k, v, agg: agg + int(v), store="agg", value_serde="double"
    ),
    # a step that raises for some values: on_error at the same point of the batch
    "raising": lambda w: w.reduce(_bad_sum, store="agg"),
}


class Run:
    """A windowed aggregation in one task, every store cached with `cache_bytes`; `fold`
    False makes the aggregation take the per-record path for every batch."""

    def __init__(
        self,
        tmp: Path,
        cache_bytes: int,
        fold: bool,
        windows: TimeWindows,
        aggregation: str,
        backend: str = "memory",
        metered: bool = False,
    ) -> None:
        b = StreamBuilder()
        w = b.stream("in", "str", "double").group_by_key().windowed_by(windows)
        AGGREGATIONS[aggregation](w).to_stream().to("out")
        compiled = b.build().compile("app")
        compiled.resolve_partitions({t: 1 for t in compiled.external_source_topics})
        self.cache = RecordCache(cache_bytes)
        self.sent = Sent()
        self.changelog: list[Any] = []
        self.errors: list[tuple[str, int | None]] = []

        def opener(spec: StoreSpec, part: int) -> Any:
            store = open_store(
                spec, app_id="app", partition=part, state_dir=str(tmp), default_backend=backend
            )
            layered = cached(store, self.cache)
            return instrument(layered, self.metrics) if metered else layered

        self.metrics = Ops()

        def on_error(e: Exception, r: Record) -> None:
            self.errors.append((str(e), r.offset))

        self.task = Task(
            compiled, 0, 0, collector=self.sent, open_store=opener, error_handler=on_error
        )
        procs = [
            n.processor
            for n in self.task.nodes.values()
            if isinstance(n, ProcessorNode)
            and isinstance(n.processor, TimeWindowAggregateProcessor)
        ]
        assert len(procs) == 1
        self.proc = procs[0]
        assert self.proc.fold is not None, "the aggregation should fold its batches"
        self.window_fold: WindowFold = self.proc.fold
        assert self.window_fold.direct is not metered  # a metered store is read as it is
        self.folds = 0
        if fold:
            fold_batch = self.proc.fold
            # every batch that can fold does, however few records its windows take
            fold_batch.min_records_per_window = 0

            def counted(records: Any) -> bool:
                # folded: it returned True, or raised (what it gives up on, it gives up on
                # before any step runs, and returns False)
                try:
                    done = fold_batch(records)
                except Exception:
                    self.folds += 1
                    raise
                self.folds += done
                return done

            self.proc.fold = counted  # type: ignore[assignment]
        else:
            self.proc.fold = None
        self.store = self.task.stores["agg"]

    def process(self, records: list[Record]) -> None:
        """Copies: a source may decode its input records in place."""
        self.task.process([copy.copy(r) for r in records])

    def commit(self) -> None:
        self.task.flush_caches()
        self.changelog.append(
            [self.task.stores[s].changelog_records("app") for s in sorted(self.task.stores)]
        )
        self.task.flush_stores()

    def state(self) -> Any:
        layer = self.store
        entries = [
            (k, e.size, e.dirty, e.old, e.record.key, e.record.value, e.record.timestamp)
            for k, e in layer._entries.items()
        ]
        typed = layer._typed
        return (
            entries,
            list(layer._dirty),
            self.cache.size,
            self.cache.evictions,
            self.cache.flushes,
            list(typed._cache.data.items()),
            {k: (getattr(o, "offset", o)) for k, o in typed._origins.items()},
            typed.observed,
            (self.proc.observed, self.proc.record_time, self.proc.emitted_close),
            dict(self.task.dropped),
            list(self.errors),
        )


def events(rnd: random.Random, n: int, keys: list[str], spread: int) -> list[list[Record]]:
    """`n` input records in batches of 1-60 (about a third of them of 1-3), keys drawn
    unevenly, times mostly rising with records out of order, some late by more than any
    grace, and a few jumps ahead that close windows mid-batch."""
    batches: list[list[Record]] = []
    offset = 0
    now = 0
    while offset < n:
        size = rnd.randint(1, 3) if rnd.random() < 0.3 else rnd.randint(1, 60)
        batch = []
        for _ in range(size):
            k = keys[min(int(rnd.expovariate(0.4)), len(keys) - 1)]
            roll = rnd.random()
            if roll < 0.02:
                now += rnd.randint(spread, 4 * spread)  # a jump: closes windows mid-batch
                ts = now
            elif roll < 0.1:
                ts = max(0, now - rnd.randint(0, 3 * spread))  # late, perhaps too late
            else:
                now += rnd.randint(0, spread // 20 + 1)
                ts = max(0, now - rnd.randint(0, spread // 4))
            value = float(rnd.choice([1, 2, 3, 13, 0.5]))
            batch.append(Record(k, value, ts, [("h", str(offset).encode())], "in", 0, offset))
            offset += 1
        batches.append(batch)
    return encoded(batches, STR, DOUBLE)


def entry_bytes(key: str) -> int:
    """A cache entry's size: the window store key (segment, key, terminator, start), the
    timestamp and the 8-byte value, and the overhead."""
    return 8 + len(key.encode()) + 1 + 8 + 16 + ENTRY_OVERHEAD


WINDOWS = {
    "tumbling": TimeWindows.of(100),
    "tumbling-grace": TimeWindows.of(100, grace=60),
    "hopping": TimeWindows.of(100, advance=40),
    "hopping-grace": TimeWindows.of(100, advance=30, grace=45),
}


def compare(
    tmp: Path,
    seed: int,
    windows: str,
    aggregation: str,
    budget_entries: int,
    backend: str = "memory",
    metered: bool = False,
) -> tuple[Run, Run]:
    rnd = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    batches = events(rnd, 700, keys, WINDOWS[windows].size_ms)
    budget = budget_entries * entry_bytes("k0")
    folded = Run(tmp / "a", budget, True, WINDOWS[windows], aggregation, backend, metered)
    plain = Run(tmp / "b", budget, False, WINDOWS[windows], aggregation, backend, metered)
    try:
        for i, batch in enumerate(batches):
            folded.process(batch)
            plain.process(batch)
            assert folded.sent.records == plain.sent.records, f"batch {i}"
            assert folded.state() == plain.state(), f"batch {i}"
            if rnd.random() < 0.3 or i == len(batches) - 1:
                folded.commit()
                plain.commit()
                assert folded.changelog == plain.changelog, f"batch {i}"
                assert folded.sent.records == plain.sent.records, f"batch {i}"
                assert folded.state() == plain.state(), f"batch {i}"
    finally:
        folded.task.close()
        plain.task.close()
    return folded, plain


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("windows", sorted(WINDOWS))
@pytest.mark.parametrize("budget_entries", [3, 12, 1000])
def test_folded_windowed_batches_leave_what_record_by_record_leaves(
    tmp_path: Path, seed: int, windows: str, budget_entries: int
) -> None:
    folded, plain = compare(tmp_path, seed, windows, "reduce", budget_entries)
    assert plain.sent.records  # the run forwarded something to compare
    assert plain.task.dropped.get("late_record", 0) > 0  # late records were in the batches
    if windows.startswith("hopping"):
        assert plain.task.dropped.get("expired_window", 0) > 0
    if budget_entries >= 12:
        assert folded.folds > 0  # and batches were folded
    else:  # a cache this small has no room for most batches, and evicts
        assert plain.cache.evictions > 0
    assert any(plain.changelog)


@pytest.mark.parametrize("aggregation", ["count", "aggregate", "raising"])
@pytest.mark.parametrize("windows", ["tumbling-grace", "hopping"])
def test_other_aggregations_and_errors_fold_alike(
    tmp_path: Path, aggregation: str, windows: str
) -> None:
    folded, plain = compare(tmp_path, 7, windows, aggregation, 1000)
    assert folded.folds > 0
    if aggregation == "raising":
        assert plain.errors and len(plain.errors) == len(folded.errors)


def test_lmdb_store_folds_alike(tmp_path: Path) -> None:
    folded, _ = compare(tmp_path, 11, "hopping-grace", "reduce", 12, backend="lmdb")
    assert folded.folds > 0


def test_a_metered_store_folds_alike_through_its_layers(tmp_path: Path) -> None:
    # with a metering layer the fold reads and writes through it (one get and one put per
    # window, counted), not through the typed store underneath
    folded, plain = compare(tmp_path, 5, "hopping-grace", "reduce", 1000, metered=True)
    assert folded.folds > 0
    assert "put_timestamped" in folded.metrics.ops
    assert folded.metrics.ops.count("put_timestamped") < plain.metrics.ops.count("put_timestamped")


def test_an_error_handler_that_raises_leaves_what_record_by_record_leaves(
    tmp_path: Path,
) -> None:
    # the default handler raises: the windows aggregated before the failing record are
    # written (and cached) as record by record, and stream time moved up to that record
    runs = []
    for name, fold in (("a", True), ("b", False)):
        run = Run(tmp_path / name, 100_000, fold, WINDOWS["hopping"], "raising")
        run.task.error_handler = _raise
        runs.append(run)
    batch = [
        Record(STR.to_bytes(k), DOUBLE.to_bytes(v), ts, [], "in", 0, i)
        for i, (k, v, ts) in enumerate(
            [("a", 1.0, 10), ("b", 2.0, 50), ("a", 3.0, 120), ("a", 13.0, 130), ("b", 1.0, 140)]
        )
    ]
    try:
        for run in runs:
            run.process(batch[:1])
            with pytest.raises(ProcessingError, match="13 is refused"):
                run.process(batch[1:])
        folded, plain = runs
        assert folded.folds == 2
        assert folded.state() == plain.state()
        assert folded.sent.records == plain.sent.records
    finally:
        for run in runs:
            run.task.close()


def _raise(e: Exception, r: Record) -> None:
    raise e


def test_batches_that_cannot_fold_go_record_by_record(tmp_path: Path) -> None:
    # a null key, and a batch with no room in the cache, take the per-record path
    folded = Run(tmp_path / "a", 2 * entry_bytes("k0"), True, WINDOWS["tumbling"], "reduce")
    plain = Run(tmp_path / "b", 2 * entry_bytes("k0"), False, WINDOWS["tumbling"], "reduce")
    one = DOUBLE.to_bytes(1.0)
    batches = [
        [Record(STR.to_bytes("k0"), one, 5, [], "in", 0, 0)],
        [Record(None, one, 6, [], "in", 0, 1), Record(STR.to_bytes("k1"), one, 7, [], "in", 0, 2)],
        [Record(STR.to_bytes(f"k{i}"), one, 8 + i, [], "in", 0, 3 + i) for i in range(3)],
    ]
    try:
        for batch in batches:
            folded.process(batch)
            plain.process(batch)
            assert folded.state() == plain.state()
            assert folded.sent.records == plain.sent.records
        assert folded.folds == 1  # the first batch only
        assert plain.task.dropped == {"null_key": 1}
        assert plain.cache.evictions > 0
    finally:
        folded.task.close()
        plain.task.close()


def test_batches_with_about_a_record_per_window_go_record_by_record(tmp_path: Path) -> None:
    folded = Run(tmp_path / "a", 100_000, True, WINDOWS["tumbling"], "reduce")
    plain = Run(tmp_path / "b", 100_000, False, WINDOWS["tumbling"], "reduce")
    del folded.window_fold.min_records_per_window  # the class's threshold, not the tests' 0
    one = DOUBLE.to_bytes(1.0)

    def batch(keys: list[str], times: list[int]) -> list[Record]:
        return [
            Record(STR.to_bytes(k), one, t, [], "in", 0, i)
            for i, (k, t) in enumerate(zip(keys, times, strict=True))
        ]

    batches = [
        batch(["a", "b", "c"], [1, 1, 1]),  # a record per key: not planned
        batch(["a", "b", "a", "b"], [5, 5, 105, 105]),  # two per key, one per window: planned
        batch(["a", "a", "b", "b"], [160, 170, 180, 190]),  # two per window: folded
    ]
    try:
        for i, b in enumerate(batches):
            folded.process(b)
            plain.process(b)
            assert folded.state() == plain.state(), f"batch {i}"
            assert folded.sent.records == plain.sent.records
        assert folded.folds == 1
    finally:
        folded.task.close()
        plain.task.close()
