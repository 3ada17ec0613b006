"""The windowing and deduplication examples, end to end through the test driver."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

from kstream.dsl.windowed import time_windowed_serde
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

ROOT = pathlib.Path(__file__).resolve().parents[3]
MIN = 60_000


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_clicks_per_minute_emits_each_minute_once_when_it_closes() -> None:
    ex = load("clicks_per_minute")
    with TopologyTestDriver(ex.build_topology(), app_id="clicks") as d:
        clicks = d.input_topic("clicks", "string", "json")
        out = d.output_topic("clicks-per-minute", time_windowed_serde("string", MIN), "long")
        clicks.pipe("alice", {"page": "/"}, 1_000)
        clicks.pipe("bob", {"page": "/a"}, 30_000)
        clicks.pipe("alice", {"page": "/b"}, 59_999)
        clicks.pipe("alice", {"page": "/c"}, 60_000)  # next minute
        clicks.pipe("bob", {"page": "/d"}, 65_000)  # first minute still open (grace 10 s)
        clicks.pipe("bob", {"page": "/late"}, 50_000)  # inside grace: counts
        assert out.read_key_values() == []
        clicks.pipe("alice", {"page": "/e"}, 70_000)  # 60 s + 10 s grace: the minute closes
        assert out.read_key_values() == [
            (Windowed("alice", 0, MIN), 2),
            (Windowed("bob", 0, MIN), 2),
        ]
        clicks.pipe("bob", {"page": "/too-late"}, 59_000)  # dropped
        # no more clicks: the second minute closes on the wall clock
        for _ in range(61):  # one to note the time, then 60 s of silence
            d.advance_wall_clock("1s")
        assert out.read_key_values() == [
            (Windowed("alice", MIN, 2 * MIN), 2),
            (Windowed("bob", MIN, 2 * MIN), 1),
        ]
        assert ex.topology is not None


def test_payments_dedup_passes_each_idempotency_key_once() -> None:
    ex = load("payments_dedup")
    with TopologyTestDriver(ex.build_topology(), app_id="pay") as d:
        inp = d.input_topic("payments", "string", "json")
        out = d.output_topic("payments-deduped", "string", "json")
        p1 = {"idempotency_key": "k1", "amount": 10}
        p2 = {"idempotency_key": "k2", "amount": 5}
        inp.pipe("acct-1", p1, 0)
        inp.pipe("acct-1", p1, 1_000)  # retry
        inp.pipe("acct-2", p2, 2_000)
        inp.pipe("acct-3", {"amount": 1}, 3_000)  # no idempotency key: passes
        inp.pipe("acct-3", {"amount": 1}, 3_000)
        inp.pipe("acct-1", p1, 3_600_000)  # still within the hour of the first one
        inp.pipe("acct-1", p1, 3_600_001)  # an hour and a bit later: new again
        assert out.read_key_values() == [
            ("acct-1", p1),
            ("acct-2", p2),
            ("acct-3", {"amount": 1}),
            ("acct-3", {"amount": 1}),
            ("acct-1", p1),
        ]
        assert d.get_store("payment-ids").contains("k2")
