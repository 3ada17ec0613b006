"""A rebalance that outlasts `slow_rebalance_warning` is logged, again every such interval, and
exposed (kstream.runtime.slow_rebalance)."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest

from kstream.config import Config
from kstream.errors import ConfigError
from kstream.metrics import Metrics
from kstream.runtime.slow_rebalance import RebalanceWatch, SlowRebalance, warning


def test_a_slow_rebalance_is_due_at_each_bound_and_missed_warnings_are_not_made_up() -> None:
    slow = SlowRebalance(started=100.0, bound=60.0)
    assert slow.next_due() == 160.0
    assert slow.due(159.9) is None
    assert slow.due(160.5) == pytest.approx(60.5)
    assert slow.due(161.0) is None and slow.next_due() == 220.0
    assert slow.due(400.0) == 300.0  # late: one warning, the next one bound after the last due
    assert slow.next_due() == 460.0
    with pytest.raises(ValueError, match="positive"):
        SlowRebalance(0.0, 0.0)


def test_the_watch_warns_repeatedly_while_the_rebalance_lasts_and_stops_with_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics("orders")
    watch = RebalanceWatch("orders", 100, metrics, restoring=lambda: 0, tansu=True)
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    watch.state_changed(True)
    watch.state_changed(True)  # still the same rebalance: one watcher, one clock
    deadline = time.monotonic() + 10
    while len(caplog.records) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    watch.state_changed(False)
    seen = [r.getMessage() for r in caplog.records]
    assert len(seen) >= 3, seen
    assert seen[0].startswith("consumer group 'orders' has been rebalancing for ")
    assert "longer than slow_rebalance_warning (0.1 s)" in seen[0]
    assert "waiting for its members to join and sync" in seen[0]
    assert "on the Tansu test broker" in seen[0]
    lasted = [float(re.search(r"rebalancing for ([0-9.]+) s,", t).group(1)) for t in seen]  # type: ignore[union-attr]
    # one line per bound passed: at 0.1 s, 0.2 s, ... (a late one skips those it missed)
    assert all(x >= 0.1 * (i + 1) - 0.0005 for i, x in enumerate(lasted)), lasted
    assert lasted == sorted(set(lasted)), lasted
    assert metrics.slow_rebalances_total == 1  # one slow rebalance, however many warnings
    time.sleep(0.3)
    assert len(caplog.records) == len(seen)  # nothing said once the rebalance has ended

    watch.state_changed(True)  # the next rebalance is a new one
    deadline = time.monotonic() + 10
    while metrics.slow_rebalances_total < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    watch.state_changed(False)
    assert metrics.slow_rebalances_total == 2


def test_no_warning_comes_after_the_rebalance_ended_even_one_already_under_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The watcher is between deciding to warn and warning (asking how many tasks restore) when
    # the rebalance ends. That warning used to come out afterwards, in whatever ran next (it
    # failed another test here, its caplog catching a warning about this group).
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    asked, answer = threading.Event(), threading.Event()

    def restoring() -> int:
        asked.set()
        answer.wait(10)
        return 0

    metrics = Metrics("late")
    watch = RebalanceWatch("late", 50, metrics, restoring=restoring)
    watch.state_changed(True)
    assert asked.wait(10)
    watch.state_changed(False)  # does not wait for the watcher's question
    answer.set()
    for thread in threading.enumerate():
        if thread.name == "kstream-rebalance-watch-late":
            thread.join(10)
    assert caplog.records == []
    assert metrics.slow_rebalances_total == 0


def test_a_quick_rebalance_or_a_watch_that_is_off_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    metrics = Metrics("a")
    quick = RebalanceWatch("a", 200, metrics)
    quick.state_changed(True)
    quick.state_changed(False)
    off = RebalanceWatch("a", 0, metrics)
    off.state_changed(True)
    time.sleep(0.4)
    off.state_changed(False)
    assert caplog.records == []
    assert metrics.slow_rebalances_total == 0


def test_the_warning_says_when_the_time_goes_to_restoring_stores() -> None:
    text = warning("wc", 75.2, 60_000, restoring=3)
    assert text.startswith("consumer group 'wc' has been rebalancing for 75.2 s, longer than ")
    assert "3 task(s) are restoring their stores from their changelogs" in text
    assert text.endswith("Warned again every 60 s while it lasts")
    kafka = warning("wc", 61.0, 60_000, restoring=0)
    assert "a member that does not poll" in kafka and "Tansu" not in kafka


def test_the_rebalance_gauge_runs_from_entering_rebalancing_and_the_counter_is_exposed() -> None:
    m = Metrics("app")
    assert m.rebalance_seconds() == 0.0
    m.set_state("REBALANCING")
    since = m.rebalancing_since
    assert since is not None
    m.set_state("REBALANCING")  # a scrape's probe sets it again: the clock keeps running
    assert m.rebalancing_since == since
    assert m.rebalance_seconds(since + 42.0) == 42.0
    m.slow_rebalance()
    text = m.render().decode()
    assert 'kstream_rebalances_slow_total{app_id="app",instance_id=""} 1.0' in text
    assert 'kstream_rebalance_duration_seconds{app_id="app",instance_id=""} ' in text
    m.set_state("RUNNING")
    assert m.rebalance_seconds() == 0.0
    assert 'kstream_rebalance_duration_seconds{app_id="app",instance_id=""} 0.0' in (
        m.render().decode()
    )


def test_slow_rebalance_warning_is_a_duration_that_0_or_none_turns_off() -> None:
    assert Config().slow_rebalance_warning == 60_000
    assert Config.from_mapping({"slow_rebalance_warning": "5m"}).slow_rebalance_warning == 300_000
    assert Config.from_mapping({"slow_rebalance_warning": None}).slow_rebalance_warning == 0
    with pytest.raises(ConfigError, match="slow_rebalance_warning: cannot parse duration"):
        Config.from_mapping({"slow_rebalance_warning": "a while"})
