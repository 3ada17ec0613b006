"""Tumbling and hopping windowed aggregations, ported from Kafka Streams' own cases.

Each case names its source: `KStreamWindowAggregateTest` (streams/src/test/.../kstream/internals)
or the developer guide (docs/streams/developer-guide/dsl-api.html, "Hopping time windows",
"Tumbling time windows"). Kafka's cache-disabled expectations are used: every update is
forwarded. Outputs are compared as (key, value, timestamp) tuples, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

W = Windowed
Out = list[tuple[Any, Any, int]]


def run(events: list[tuple[str, str, int]], build: Callable[[Any], Any]) -> tuple[Out, dict]:
    """Pipe (key, value, ts) events; the emitted (key, value, ts) and dropped-record counts."""
    b = StreamBuilder()
    build(b.stream("in", "string", "string").group_by_key()).to_stream().to("out", "auto", "auto")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe_many(events)
        records = d.output_topic("out", "auto", "auto").read_records()
        return [(r.key, r.value, r.timestamp) for r in records], d.dropped_records()


def concat(init: str = "0") -> Callable[..., Callable[[Any], Any]]:
    """Kafka's MockInitializer.STRING_INIT + MockAggregator.TOSTRING_ADDER over `windows`."""

    def over(windows: TimeWindows, **kw: Any) -> Callable[[Any], Any]:
        return lambda g: g.windowed_by(windows).aggregate(
            lambda: init, lambda _k, v, agg: f"{agg}+{v}", **kw
        )

    return over


AGG_BASIC_INPUT = [
    ("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 4),
    ("A", "1", 5), ("B", "2", 6), ("D", "4", 7), ("B", "2", 8), ("C", "3", 9),
    ("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14),
    ("B", "1", 3), ("B", "2", 2), ("B", "3", 9),
]  # fmt: skip


def test_agg_basic_hopping_windows_carry_the_largest_record_timestamp() -> None:
    """KStreamWindowAggregateTest.testAggBasic (emit on update, no cache): out-of-order
    records keep the window's timestamp at its largest record time (B@[0,10) stays 8)."""
    out, dropped = run(AGG_BASIC_INPUT, concat()(TimeWindows.of(10, advance=5, grace=100)))
    assert out == [
        (W("A", 0, 10), "0+1", 0),
        (W("B", 0, 10), "0+2", 1),
        (W("C", 0, 10), "0+3", 2),
        (W("D", 0, 10), "0+4", 3),
        (W("A", 0, 10), "0+1+1", 4),
        (W("A", 0, 10), "0+1+1+1", 5),
        (W("A", 5, 15), "0+1", 5),
        (W("B", 0, 10), "0+2+2", 6),
        (W("B", 5, 15), "0+2", 6),
        (W("D", 0, 10), "0+4+4", 7),
        (W("D", 5, 15), "0+4", 7),
        (W("B", 0, 10), "0+2+2+2", 8),
        (W("B", 5, 15), "0+2+2", 8),
        (W("C", 0, 10), "0+3+3", 9),
        (W("C", 5, 15), "0+3", 9),
        (W("A", 5, 15), "0+1+1", 10),
        (W("A", 10, 20), "0+1", 10),
        (W("B", 5, 15), "0+2+2+2", 11),
        (W("B", 10, 20), "0+2", 11),
        (W("D", 5, 15), "0+4+4", 12),
        (W("D", 10, 20), "0+4", 12),
        (W("B", 5, 15), "0+2+2+2+2", 13),
        (W("B", 10, 20), "0+2+2", 13),
        (W("C", 5, 15), "0+3+3", 14),
        (W("C", 10, 20), "0+3", 14),
        (W("B", 0, 10), "0+2+2+2+1", 8),
        (W("B", 0, 10), "0+2+2+2+1+2", 8),
        (W("B", 0, 10), "0+2+2+2+1+2+3", 9),
        (W("B", 5, 15), "0+2+2+2+2+3", 13),
    ]
    assert dropped == {}


def test_agg_basic_emit_final_emits_nothing_while_no_window_closes() -> None:
    """KStreamWindowAggregateTest.testAggBasic (emit on window close): grace 100 keeps all open."""
    out, dropped = run(
        AGG_BASIC_INPUT, concat()(TimeWindows.of(10, advance=5, grace=100), emit="final")
    )
    assert (out, dropped) == ([], {})


EXPIRED_INPUT = [
    ("k", "100", 100), ("k", "0", 0), ("k", "1", 1), ("k", "2", 2), ("k", "3", 3),
    ("k", "4", 4), ("k", "5", 5), ("k", "6", 6), ("k", "105", 105), ("k", "106", 106),
]  # fmt: skip


def test_skipping_expired_window_hopping() -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow (update): at
    stream time 100 with grace 90, [0,10) is closed; 5 and 6 still go into [5,15). Kafka
    meters 7 drops, one per skipped window: 0..4 are late records, 5 and 6 skip a window."""
    out, dropped = run(EXPIRED_INPUT, concat("")(TimeWindows.of(10, advance=5, grace=90)))
    assert out == [
        (W("k", 95, 105), "+100", 100),
        (W("k", 100, 110), "+100", 100),
        (W("k", 5, 15), "+5", 5),
        (W("k", 5, 15), "+5+6", 6),
        (W("k", 100, 110), "+100+105", 105),
        (W("k", 105, 115), "+105", 105),
        (W("k", 100, 110), "+100+105+106", 106),
        (W("k", 105, 115), "+105+106", 106),
    ]
    assert dropped == {"late_record": 5, "expired_window": 2}


def test_skipping_expired_window_hopping_emit_final() -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow (window close):
    stream time 105 closes [5,15), emitted with its largest record time 6."""
    out, dropped = run(
        EXPIRED_INPUT, concat("")(TimeWindows.of(10, advance=5, grace=90), emit="final")
    )
    assert out == [(W("k", 5, 15), "+5+6", 6)]
    assert dropped == {"late_record": 5, "expired_window": 2}


def test_skipping_expired_window_by_grace_tumbling() -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace."""
    events = [
        ("k", "100", 200), ("k", "0", 100), ("k", "1", 101), ("k", "2", 102),
        ("k", "3", 103), ("k", "4", 104), ("k", "5", 105), ("k", "6", 6),
    ]  # fmt: skip
    out, dropped = run(events, concat("")(TimeWindows.of(10, grace=90)))
    assert out == [(W("k", 200, 210), "+100", 200)]
    assert dropped == {"late_record": 7}


def test_not_progressing_enough_updates() -> None:
    """KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough (update)."""
    events = [("A", "1", 0), ("B", "2", 5), ("C", "3", 15), ("D", "4", 15), ("E", "5", 19)]
    out, _ = run(events, concat()(TimeWindows.of(10, advance=5, grace=5)))
    assert out == [
        (W("A", 0, 10), "0+1", 0),
        (W("B", 0, 10), "0+2", 5),
        (W("B", 5, 15), "0+2", 5),
        (W("C", 10, 20), "0+3", 15),
        (W("C", 15, 25), "0+3", 15),
        (W("D", 10, 20), "0+4", 15),
        (W("D", 15, 25), "0+4", 15),
        (W("E", 10, 20), "0+5", 19),
        (W("E", 15, 25), "0+5", 19),
    ]


def test_emit_with_interval_0_updates() -> None:
    """KStreamWindowAggregateTest.shouldEmitWithInterval0 (update)."""
    events = [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)]
    out, _ = run(events, concat()(TimeWindows.of(10, advance=5, grace=5)))
    assert out == [
        (W("A", 0, 10), "0+1", 0),
        (W("A", 0, 10), "0+1+1", 5),
        (W("A", 5, 15), "0+1", 5),
        (W("B", 5, 15), "0+2", 10),
        (W("B", 10, 20), "0+2", 10),
        (W("C", 10, 20), "0+3", 15),
        (W("C", 15, 25), "0+3", 15),
        (W("D", 15, 25), "0+4", 20),
        (W("D", 20, 30), "0+4", 20),
    ]


def test_hopping_windows_are_aligned_to_the_epoch() -> None:
    """Developer guide, "Hopping time windows": size 5000, advance 3000 gives [0;5000),
    [3000;8000), ... whatever the first record's time."""
    events = [("k", "a", 4500), ("k", "b", 1000), ("k", "c", 7999), ("k", "d", 8000)]
    out, _ = run(events, lambda g: g.windowed_by(TimeWindows.of(5000, 3000, grace=10_000)).count())
    assert out == [
        (W("k", 0, 5000), 1, 4500),
        (W("k", 3000, 8000), 1, 4500),
        (W("k", 0, 5000), 2, 4500),
        (W("k", 3000, 8000), 2, 7999),
        (W("k", 6000, 11000), 1, 7999),
        (W("k", 6000, 11000), 2, 8000),
    ]


def test_tumbling_windows_lower_bound_inclusive_upper_exclusive() -> None:
    """Developer guide, "Tumbling time windows": [0;5000), [5000;10000), ..."""
    events = [("k", "a", 0), ("k", "b", 4999), ("k", "c", 5000), ("k", "d", 9999)]
    out, _ = run(events, lambda g: g.windowed_by(TimeWindows.of(5000)).count())
    assert out == [
        (W("k", 0, 5000), 1, 0),
        (W("k", 0, 5000), 2, 4999),
        (W("k", 5000, 10000), 1, 5000),
        (W("k", 5000, 10000), 2, 9999),
    ]


def test_window_end_plus_grace_equal_to_stream_time_is_closed() -> None:
    """KStreamWindowAggregate.process: a window takes records while end > stream time - grace.
    At stream time 15, [0,10) with grace 5 is closed (10 + 5 <= 15); at 14 it is open."""
    events = [("k", "a", 14), ("k", "b", 9), ("k", "c", 15), ("k", "d", 9)]
    out, dropped = run(events, lambda g: g.windowed_by(TimeWindows.of(10, grace=5)).count())
    assert out == [(W("k", 10, 20), 1, 14), (W("k", 0, 10), 1, 9), (W("k", 10, 20), 2, 15)]
    assert dropped == {"late_record": 1}


def test_reduce_keeps_the_largest_timestamp_of_out_of_order_records() -> None:
    """TimeWindowedKStream.reduce: Kafka's window store keeps ValueAndTimestamp, so an
    out-of-order record does not pull the window's timestamp back."""
    events = [("k", "1", 7), ("k", "2", 3), ("k", "3", 5)]
    out, _ = run(
        events,
        lambda g: g.windowed_by(TimeWindows.of(10, grace=10)).reduce(lambda a, b: f"{a}+{b}"),
    )
    assert out == [(W("k", 0, 10), "1", 7), (W("k", 0, 10), "1+2", 7), (W("k", 0, 10), "1+2+3", 7)]


def test_null_keys_and_values_are_dropped_and_counted() -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingNullKey."""
    b = StreamBuilder()
    b.stream("in", "string", "string").group_by_key().windowed_by(
        TimeWindows.of(10)
    ).count().to_stream().to("out", "auto", "auto")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe_many([(None, "1", 0), ("k", "1", 1)])
        out = [
            (r.key, r.value, r.timestamp)
            for r in d.output_topic("out", "auto", "auto").read_records()
        ]
        assert out == [(W("k", 0, 10), 1, 1)]
        assert d.dropped_records().get("null_key") == 1
