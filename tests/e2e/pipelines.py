"""The stateful pipeline the process-level tests run: a running count and a windowed sum per key.

Both outputs are checkable from the input alone: the n-th record of a key must produce count
n, and the last sum written for (key, minute) must equal the sum of that key's values in that
minute.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from kstream import stores
from kstream.records import Record
from kstream.topology import Processor, ProcessorContext, Topology

WINDOW_MS = 60_000


class Tally(Processor):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def init(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self.running = ctx.get_store("running")
        self.sums = ctx.get_store("sums")

    def process(self, record: Record) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        key, ts = record.key, record.timestamp
        n = (self.running.get(key) or 0) + 1
        self.running.put(key, n)
        start = ts - ts % WINDOW_MS
        with self.sums.fetch(key, start, start) as cur:
            found = [v for _, v in cur]
        total = (found[0] if found else 0) + record.value
        self.sums.put(key, total, start)
        self.ctx.forward(Record(key, n, ts), to="counts-sink")
        self.ctx.forward(Record(f"{key}@{start}", total, ts), to="sums-sink")


def stateful_topology(
    input_topic: str, counts_topic: str, sums_topic: str, delay_s: float = 0.0
) -> Topology:
    topo = Topology()
    topo.add_source("input", [input_topic], key_serde="string", value_serde="long")
    topo.add_processor("tally", lambda: Tally(delay_s), ["input"])
    topo.add_state_store(
        stores.key_value("running", key_serde="string", value_serde="long"), ["tally"]
    )
    topo.add_state_store(
        stores.window(
            "sums",
            retention=3_650 * 86_400_000,
            window_size=WINDOW_MS,
            key_serde="string",
            value_serde="long",
        ),
        ["tally"],
    )
    topo.add_sink("counts-sink", counts_topic, ["tally"], key_serde="string", value_serde="long")
    topo.add_sink("sums-sink", sums_topic, ["tally"], key_serde="string", value_serde="long")
    return topo


def make_input(n: int, keys: int, start_ts: int = 1_700_000_000_000) -> list[tuple[str, int, int]]:
    """(key, value, timestamp) records: keys round-robin-ish, 10 ms apart."""
    return [(f"k{(i * 7919) % keys:04d}", i % 7 + 1, start_ts + i * 10) for i in range(n)]


def expected(records: Iterable[tuple[str, int, int]]) -> tuple[dict[str, int], dict[str, int]]:
    counts: dict[str, int] = defaultdict(int)
    sums: dict[str, int] = defaultdict(int)
    for key, value, ts in records:
        counts[key] += 1
        sums[f"{key}@{ts - ts % WINDOW_MS}"] += value
    return dict(counts), dict(sums)


def expected_updates(
    records: Iterable[tuple[str, int, int]],
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Every update the pipeline must emit, per key in order: a key's running counts 1..n on
    the counts topic, and each (key, minute)'s running sums on the sums topic.

    A key's records are on one input partition, processed in their order, so these sequences
    are exact; both strictly increase (values are at least 1), so a repeat is visible.
    """
    counts: dict[str, list[int]] = defaultdict(list)
    sums: dict[str, list[int]] = defaultdict(list)
    for key, value, ts in records:
        counts[key].append(len(counts[key]) + 1)
        wk = f"{key}@{ts - ts % WINDOW_MS}"
        sums[wk].append((sums[wk][-1] if sums[wk] else 0) + value)
    return dict(counts), dict(sums)
