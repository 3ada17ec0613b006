"""A count behind the record cache aggregates a batch per key (`AggregateProcessor._fold_counts`):
the same outputs, changelog records (with their provenance and timestamps), store contents and
cache state (entries, sizes, dirty order, recency order, evictions) as the per-record path, on
random batches of random keys and out-of-order times, with budgets small enough that some
batches have no room (and take the per-record path) and evictions happen between batches.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
from support.encoded_batches import encoded
from support.sent import Sent

from kstream.dsl import StreamBuilder
from kstream.dsl.processors import AggregateProcessor
from kstream.records import Record
from kstream.serde import serde
from kstream.state import open_store
from kstream.state.caching import ENTRY_OVERHEAD, RecordCache, cached
from kstream.state.spec import StoreSpec
from kstream.topology.nodes import ProcessorNode
from kstream.topology.task import Task

STR, LONG, JSON = serde("str"), serde("long"), serde("json")


class Run:
    """P2's count in one task, every store cached with `cache_bytes`; `fold` False makes the
    count take the per-record path for every batch."""

    def __init__(self, tmp: Path, cache_bytes: int, fold: bool, key_serde: str = "str") -> None:
        b = StreamBuilder()
        counts = b.stream("in", key_serde, "long").group_by_key().count(store="counts")
        counts.to_stream().to("out", key_serde, "long")
        compiled = b.build().compile("app")
        compiled.resolve_partitions({t: 1 for t in compiled.external_source_topics})
        self.cache = RecordCache(cache_bytes)
        self.sent = Sent()
        self.changelog: list[Any] = []

        def opener(spec: StoreSpec, part: int) -> Any:
            store = open_store(spec, app_id="app", partition=part, state_dir=str(tmp))
            return cached(store, self.cache)

        self.task = Task(compiled, 0, 0, collector=self.sent, open_store=opener)
        procs = [
            n.processor
            for n in self.task.nodes.values()
            if isinstance(n, ProcessorNode) and isinstance(n.processor, AggregateProcessor)
        ]
        assert len(procs) == 1
        self.proc = procs[0]
        assert self.proc.folding is not None, "the count should fold its batches"
        if not fold:
            self.proc.folding = None
        self.store = self.task.stores["counts"]

    def process(self, records: list[Record]) -> None:
        """Copies: a source may decode its input records in place."""
        self.task.process([copy.copy(r) for r in records])

    def commit(self) -> None:
        self.task.flush_caches()
        self.changelog.append(self.store.changelog_records("app"))
        self.task.flush_stores()

    def state(self) -> Any:
        layer = self.store
        entries = [
            (k, e.size, e.dirty, e.old, e.record.key, e.record.value, e.record.timestamp)
            for k, e in layer._entries.items()
        ]
        return (
            entries,
            list(layer._dirty),
            self.cache.size,
            self.cache.evictions,
            self.cache.flushes,
            list(layer._typed._cache.data.items()),
        )


def events(
    rnd: random.Random, n: int, keys: list[Any], ordered: bool = False
) -> list[list[Record]]:
    """`n` input records in batches of 1-40, keys drawn unevenly, times out of order (or, if
    `ordered`, in order within each batch, ties included: the fold's shortcut for each key's
    latest time)."""
    batches: list[list[Record]] = []
    offset = 0
    while offset < n:
        size = rnd.randint(1, 40)
        batch = []
        for _ in range(size):
            k = keys[min(int(rnd.expovariate(0.4)), len(keys) - 1)]
            ts = rnd.randint(0, 1000)
            batch.append(Record(k, offset, ts, [("h", str(offset).encode())], "in", 0, offset))
            offset += 1
        if ordered:  # the same keys, times in order and coarser, so that some tie
            for r, ts in zip(batch, sorted(r.timestamp // 20 for r in batch), strict=True):
                r.timestamp = ts
        batches.append(batch)
    return batches


def entry(key: str) -> int:
    return len(key.encode()) + 16 + ENTRY_OVERHEAD


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget_entries", [2, 5, 9, 1000])
def test_folded_batches_leave_what_record_by_record_leaves(
    tmp_path: Path, seed: int, budget_entries: int, ordered: bool
) -> None:
    rnd = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    batches = encoded(events(rnd, 600, keys, ordered), STR, LONG)
    budget = budget_entries * entry("k0")
    folded = Run(tmp_path / "a", budget, fold=True)
    plain = Run(tmp_path / "b", budget, fold=False)
    try:
        for i, batch in enumerate(batches):
            folded.process(batch)
            plain.process(batch)
            assert folded.sent.records == plain.sent.records
            assert folded.state() == plain.state()
            if rnd.random() < 0.3 or i == len(batches) - 1:
                folded.commit()
                plain.commit()
                assert folded.changelog == plain.changelog
                assert folded.sent.records == plain.sent.records
        assert folded.sent.records  # the run forwarded something to compare
        assert len(plain.changelog[-1]) > 0
    finally:
        folded.task.close()
        plain.task.close()


def test_keys_equal_in_python_but_not_in_bytes_and_batches_with_a_null_key(
    tmp_path: Path,
) -> None:
    # JSON keys: 1 and 1.0 are equal in Python and two store keys (the batch is grouped by
    # encoded key); a batch with a null key takes the per-record path, which drops it
    folded = Run(tmp_path / "a", 10_000, fold=True, key_serde="json")
    plain = Run(tmp_path / "b", 10_000, fold=False, key_serde="json")
    batch = [
        Record(JSON.to_bytes(1), LONG.to_bytes(1), 5, [], "in", 0, 0),
        Record(JSON.to_bytes(1.0), LONG.to_bytes(1), 7, [], "in", 0, 1),
        Record(JSON.to_bytes(1), LONG.to_bytes(1), 3, [], "in", 0, 2),
    ]
    with_null = [*batch, Record(None, LONG.to_bytes(1), 9, [], "in", 0, 3)]
    try:
        for b in (batch, with_null, batch):
            folded.process(b)
            plain.process(b)
            assert folded.state() == plain.state()
        folded.commit()
        plain.commit()
        assert folded.sent.records == plain.sent.records
        assert folded.changelog == plain.changelog
        got = [(JSON.from_bytes(k), LONG.from_bytes(v)) for _, k, v, _, _ in plain.sent.records]
        assert got == [(1, 6), (1.0, 3)]
    finally:
        folded.task.close()
        plain.task.close()
