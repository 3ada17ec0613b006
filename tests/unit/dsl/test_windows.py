"""Windowed aggregations through the test driver: exact outputs at window boundaries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl.windowed import session_windowed_serde, time_windowed_serde
from kstream.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
from kstream.errors import ConfigError, SerdeError, TopologyError
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

W = Windowed
Events = list[tuple[Any, Any, int]]


def run(
    events: Events,
    build: Callable[[Any], Any],
    then: Callable[[TopologyTestDriver], Any] | None = None,
) -> Any:
    """Pipe `events` (key, value, ts) and return the emitted (Windowed, agg) pairs."""
    b = StreamBuilder()
    build(b.stream("in", "string", "json").group_by_key()).to_stream().to("out", "auto", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(events)
        out = d.output_topic("out", "auto", "json").read_key_values()
        if then is not None:
            return out, then(d)
        return out


def late_drops(d: TopologyTestDriver) -> int:
    return d.dropped_records().get("late_record", 0)


# --- window definitions ----------------------------------------------------------------------


def test_window_definitions_validate_and_accept_durations() -> None:
    assert TimeWindows.of("1m") == TimeWindows(60_000, 60_000, 0)
    assert TimeWindows.of(10, advance=5, grace="1s") == TimeWindows(10, 5, 1000)
    assert TimeWindows.of(10, 3).window_starts(12) == [3, 6, 9, 12]
    assert TimeWindows.of(10, 5).window_starts(3) == [0]  # no window starts before the epoch
    assert SlidingWindows.of("5s", grace=1) == SlidingWindows(5000, 1)
    assert SessionWindows.with_gap((2, "minutes")) == SessionWindows(120_000, 0)
    j = JoinWindows.of("5s")
    assert (j.before_ms, j.after_ms, j.grace_ms) == (5000, 5000, 0)
    assert JoinWindows.of(1, after=2, grace=3) == JoinWindows(1, 2, 3)
    for bad in (
        lambda: TimeWindows.of(0),
        lambda: TimeWindows.of(10, advance=11),
        lambda: TimeWindows.of(10, advance=0),
        lambda: SlidingWindows.of(0),
        lambda: SessionWindows.with_gap(0),
        lambda: JoinWindows.of(-1),
    ):
        with pytest.raises(ConfigError):
            bad()


def test_invalid_arguments_fail_when_the_topology_is_built() -> None:
    g = StreamBuilder().stream("in").group_by_key()
    with pytest.raises(TopologyError, match="windowed_by expects"):
        g.windowed_by(5)
    with pytest.raises(ConfigError, match="emit"):
        g.windowed_by(TimeWindows.of(10)).count(emit="sometimes")
    with pytest.raises(TopologyError, match="retention"):
        from kstream import stores

        g.windowed_by(TimeWindows.of(10, grace=5)).count(store=stores.window("w", 10, 10))


# --- tumbling and hopping --------------------------------------------------------------------


def test_tumbling_window_start_inclusive_end_exclusive() -> None:
    out = run(
        [("a", 1, 0), ("a", 1, 9), ("a", 1, 10), ("b", 1, 19), ("a", 1, 20)],
        lambda g: g.windowed_by(TimeWindows.of(10)).count(),
    )
    assert out == [
        (W("a", 0, 10), 1),
        (W("a", 0, 10), 2),
        (W("a", 10, 20), 1),
        (W("b", 10, 20), 1),
        (W("a", 20, 30), 1),
    ]


def test_hopping_windows_overlap() -> None:
    out = run(
        [("a", 1, 3), ("a", 2, 7), ("a", 4, 12)],
        lambda g: g.windowed_by(TimeWindows.of(10, advance=5)).reduce(lambda x, y: x + y),
    )
    assert out == [
        (W("a", 0, 10), 1),
        (W("a", 0, 10), 3),
        (W("a", 5, 15), 2),
        (W("a", 5, 15), 6),
        (W("a", 10, 20), 4),
    ]


def test_aggregate_skips_null_keys_and_values_and_is_queryable() -> None:
    def store_rows(d: TopologyTestDriver) -> list[Any]:
        with d.get_store("agg").all() as cur:
            return list(cur)

    out, rows = run(
        [("a", 5, 1), (None, 1, 2), ("a", None, 3), ("a", 6, 4)],
        lambda g: g.windowed_by(TimeWindows.of(10)).aggregate(
            lambda: [], lambda k, v, agg: [*agg, v], store="agg"
        ),
        store_rows,
    )
    assert out == [(W("a", 0, 10), [5]), (W("a", 0, 10), [5, 6])]
    assert rows == [(W("a", 0, 10), [5, 6])]


def test_grace_accepts_out_of_order_then_drops_late_records() -> None:
    # size 10, grace 5: window [0, 10) accepts records until stream time reaches 15
    out, dropped = run(
        [("a", 1, 2), ("a", 1, 14), ("a", 1, 8), ("a", 1, 15), ("a", 1, 9), ("a", 1, 12)],
        lambda g: g.windowed_by(TimeWindows.of(10, grace=5)).count(),
        late_drops,
    )
    assert out == [
        (W("a", 0, 10), 1),
        (W("a", 10, 20), 1),
        (W("a", 0, 10), 2),  # 8 arrives at stream time 14 < 10 + 5: in grace
        (W("a", 10, 20), 2),
        # 9 arrives at stream time 15 >= 10 + 5: late, dropped
        (W("a", 10, 20), 3),
    ]
    assert dropped == 1


def test_emit_final_one_result_per_window_when_it_closes() -> None:
    out, dropped = run(
        [
            ("a", 1, 1),
            ("a", 1, 5),
            ("b", 1, 9),
            ("a", 1, 11),
            ("a", 1, 3),
            ("a", 1, 12),
            ("b", 1, 14),
            ("a", 1, 15),
            ("a", 1, 30),
        ],
        lambda g: g.windowed_by(TimeWindows.of(10, grace=4)).count(emit="final"),
        late_drops,
    )
    # [0,10) closes at stream time 14 (end + grace); 3 arrived before that, inside grace
    assert out == [(W("a", 0, 10), 3), (W("b", 0, 10), 1), (W("a", 10, 20), 3), (W("b", 10, 20), 1)]
    assert dropped == 0


def test_emit_final_closes_on_wall_clock_without_new_records() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "json").group_by_key().windowed_by(TimeWindows.of(10_000)).count(
        emit="final", idle_close="1s"
    ).to_stream().to("out", "auto", "json")
    with TopologyTestDriver(b, initial_wall_clock=0) as d:
        inp = d.input_topic("in", "string", "json")
        out = d.output_topic("out", "auto", "json")
        inp.pipe("a", 1, 1_000)
        inp.pipe("a", 1, 8_000)
        d.advance_wall_clock("1s")  # notes stream time 8000 at wall clock 1000
        assert out.read_key_values() == []
        d.advance_wall_clock("1s")  # idle: stream time moves to 9000
        assert out.read_key_values() == []
        d.advance_wall_clock("1s")  # 10000 >= end + grace: closed
        assert out.read_key_values() == [(W("a", 0, 10_000), 2)]
        inp.pipe("a", 1, 9_500)  # now late: the window was emitted
        d.advance_wall_clock("5s")
        assert out.read_key_values() == []
        assert late_drops(d) == 1


def test_emit_final_without_idle_close_waits_for_stream_time() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "json").group_by_key().windowed_by(TimeWindows.of(10)).count(
        emit="final", idle_close=None
    ).to_stream().to("out", "auto", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe("a", 1, 1)
        d.advance_wall_clock("1h")
        out = d.output_topic("out", "auto", "json")
        assert out.read_key_values() == []
        d.input_topic("in", "string", "json").pipe("a", 1, 10)
        assert out.read_key_values() == [(W("a", 0, 10), 1)]


def test_windowed_keys_use_kafka_windowed_serdes() -> None:
    b = StreamBuilder()
    g = b.stream("in", "string", "string").group_by_key()
    g.windowed_by(TimeWindows.of(10)).count().to_stream().to("time")
    g.windowed_by(SessionWindows.with_gap(5)).count().to_stream().to("sess")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe("k", "v", 12)
        raw = d.output_topic("time").read_records()[0]
        assert raw.key == b"k" + (10).to_bytes(8, "big")
        assert raw.value == (1).to_bytes(8, "big")
        d.input_topic("in", "string", "string").pipe("k", "v", 13)
        timed = d.output_topic("time", time_windowed_serde("string", 10), "long")
        assert timed.read_key_values() == [(W("k", 10, 20), 2)]
        sess = d.output_topic("sess", session_windowed_serde("string"), "long").read_key_values()
        assert sess == [(W("k", 12, 12), 1), (W("k", 12, 12), None), (W("k", 12, 13), 2)]


# --- sessions --------------------------------------------------------------------------------


def test_session_merging_and_tombstones() -> None:
    out = run(
        [("a", 1, 0), ("a", 1, 4), ("a", 1, 20), ("b", 1, 21)],
        lambda g: g.windowed_by(SessionWindows.with_gap(5)).count(),
    )
    assert out == [
        (W("a", 0, 0), 1),
        (W("a", 0, 0), None),  # merged into [0, 4]
        (W("a", 0, 4), 2),
        (W("a", 20, 20), 1),
        (W("b", 21, 21), 1),
    ]


def test_out_of_order_record_bridges_two_sessions() -> None:
    out = run(
        [("a", "x", 0), ("a", "y", 10), ("a", "z", 5)],
        lambda g: g.windowed_by(SessionWindows.with_gap(5, grace=20)).aggregate(
            lambda: "", lambda k, v, agg: agg + v, lambda k, a1, a2: a1 + a2
        ),
    )
    assert out == [
        (W("a", 0, 0), "x"),
        (W("a", 10, 10), "y"),
        (W("a", 0, 0), None),
        (W("a", 10, 10), None),
        (W("a", 0, 10), "xyz"),
    ]


def test_record_inside_a_session_deletes_then_rewrites_it() -> None:
    # as in Kafka: the merged window differs from the record's own [7, 7], so the session is
    # removed (a delete goes downstream) and put back with the new aggregate
    out = run(
        [("a", 1, 0), ("a", 1, 10), ("a", 1, 5), ("a", 1, 7)],
        lambda g: g.windowed_by(SessionWindows.with_gap(5, grace=10)).reduce(lambda x, y: x + y),
    )
    assert out[-3:] == [(W("a", 0, 10), 3), (W("a", 0, 10), None), (W("a", 0, 10), 4)]


def test_session_late_record_dropped_and_final_emission() -> None:
    # gap 5, grace 2: session [0, 3] closes once stream time - 2 > 3 + 5, i.e. at 11
    out, dropped = run(
        [("a", 1, 0), ("a", 1, 3), ("a", 1, 10), ("a", 1, 11), ("a", 1, 1), ("a", 1, 30)],
        lambda g: g.windowed_by(SessionWindows.with_gap(5, grace=2)).count(emit="final"),
        late_drops,
    )
    assert out == [(W("a", 0, 3), 2), (W("a", 10, 11), 2)]
    assert dropped == 1


# --- sliding ---------------------------------------------------------------------------------


def test_sliding_windows_as_kafka_defines_them() -> None:
    # d = 10: a window [t - 10, t] per record, plus the window just after a record
    out = run(
        [("a", 1, 20), ("a", 1, 25), ("a", 1, 40)],
        lambda g: g.windowed_by(SlidingWindows.of(10, grace=100)).count(),
    )
    assert out == [
        (W("a", 10, 20), 1),  # left window of 20
        (W("a", 21, 31), 1),  # right window of 20 (holds 25), made when 25 arrives
        (W("a", 15, 25), 2),  # left window of 25, from 20's left window
        (W("a", 30, 40), 1),
    ]


def test_sliding_out_of_order_record_updates_all_windows_it_falls_in() -> None:
    out = run(
        [("a", 1, 20), ("a", 1, 25), ("a", 1, 22)],
        lambda g: g.windowed_by(SlidingWindows.of(10, grace=100)).count(),
    )
    # the windows holding 22 (latest start first), then its new left and right windows
    assert out[3:] == [
        (W("a", 21, 31), 2),  # right window of 20 now holds 25 and 22
        (W("a", 15, 25), 3),
        (W("a", 12, 22), 2),  # new left window of 22: {20, 22}
        (W("a", 23, 33), 1),  # right window of 22 (holds 25)
    ]


def test_sliding_early_records_share_the_first_window() -> None:
    out = run(
        [("a", 1, 2), ("a", 1, 5)],
        lambda g: g.windowed_by(SlidingWindows.of(10)).count(),
    )
    # Kafka's early-record path: 2's right window first, then the shared [0, 10]
    assert out == [(W("a", 0, 10), 1), (W("a", 3, 13), 1), (W("a", 0, 10), 2)]


def test_sliding_emit_final_and_late_drop() -> None:
    out, dropped = run(
        [("a", 1, 20), ("a", 1, 25), ("a", 1, 50), ("a", 1, 5)],
        lambda g: g.windowed_by(SlidingWindows.of(10)).count(emit="final"),
        late_drops,
    )
    assert out == [(W("a", 10, 20), 1), (W("a", 15, 25), 2), (W("a", 21, 31), 1)]
    assert dropped == 1


# --- stored timestamps across restarts -------------------------------------------------------


def _counts_topology() -> StreamBuilder:
    b = StreamBuilder()
    g = b.stream("in", "string", "string").group_by_key()
    g.windowed_by(TimeWindows.of(10, grace=20)).count(store="counts").to_stream().to(
        "out", "auto", "auto"
    )
    return b


def _records(d: TopologyTestDriver, events: Events) -> list[tuple[Any, Any, int]]:
    d.input_topic("in", "string", "string").pipe_many(events)
    return [
        (r.key, r.value, r.timestamp) for r in d.output_topic("out", "auto", "auto").read_records()
    ]


def test_window_timestamps_survive_a_restart(tmp_path: Any) -> None:
    with TopologyTestDriver(
        _counts_topology(), state_dir=str(tmp_path), default_backend="lmdb"
    ) as d:
        assert _records(d, [("a", "x", 3), ("a", "x", 5)])[-1] == (W("a", 0, 10), 2, 5)
    with TopologyTestDriver(
        _counts_topology(), state_dir=str(tmp_path), default_backend="lmdb"
    ) as d:
        assert _records(d, [("a", "x", 1)]) == [(W("a", 0, 10), 3, 5)]


def test_negative_timestamps_have_no_time_or_sliding_window() -> None:
    # Kafka's windows start at 0 (its sources reject negative timestamps); here the record
    # reaches the aggregation, belongs to no window and is counted as a late record
    for windows in (TimeWindows.of(10), SlidingWindows.of(10)):
        out, dropped = run(
            [("a", 1, -5), ("a", 1, 0)],
            lambda g, w=windows: g.windowed_by(w).count(),
            lambda d: d.dropped_records(),
        )
        assert out == [(W("a", 0, 10), 1)]
        assert dropped == {"late_record": 1}


def test_time_windowed_serde_writes_every_inner_key_as_the_inner_serde_does() -> None:
    """The serde tries the inner serde's C function first (str.encode, orjson.dumps): where it
    cannot write a key, the inner serde's own function decides (a value or its error)."""
    start = (20).to_bytes(8, "big")
    strings = time_windowed_serde("string", 10)
    assert strings.to_bytes(W("k\u00e9", 20, 30)) == "k\u00e9".encode() + start
    assert strings.to_bytes(W(None, 20, 30)) == start  # a null key: the start alone
    with pytest.raises(SerdeError, match="string serde expects str, got int"):
        strings.to_bytes(W(7, 20, 30))
    jsons = time_windowed_serde("json", 10)
    assert jsons.to_bytes(W({1: "a"}, 20, 30)) == b'{"1":"a"}' + start  # non-str keys: the full one
    assert jsons.to_bytes(W(["x", 1], 20, 30)) == b'["x",1]' + start
    assert strings.from_bytes(strings.to_bytes(W("k", 20, 30))) == W("k", 20, 30)
