"""librdkafka's repeated connection failures, logged once per interval (kstream.kafka.log_repeats):
real clients against a closed port, every line they log counted."""

from __future__ import annotations

import logging
import time

import pytest

from kstream.errors import BrokerUnreachableError
from kstream.kafka import Admin, Consumer
from kstream.kafka.broker import free_port
from kstream.kafka.client import LIBRDKAFKA_LOGGER
from kstream.kafka.log_repeats import REPEAT_INTERVAL_S, RepeatFilter


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOGGER.name]


def test_a_closed_port_is_logged_once_per_interval_from_every_client_together(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an interval no loaded machine outlasts: 3 s of reconnects took longer than the default
    # one on a busy machine, and the next interval's line is the other test's subject
    installed = next(f for f in LIBRDKAFKA_LOGGER.filters if isinstance(f, RepeatFilter))
    monkeypatch.setattr(installed, "interval", 600.0)
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    with caplog.at_level(logging.WARNING, LIBRDKAFKA_LOGGER.name):
        with pytest.raises(BrokerUnreachableError):
            Admin(closed, connect_timeout="2s")
        with pytest.raises(BrokerUnreachableError):
            Consumer(closed, connect_timeout="1s")
    lines = _lines(caplog)
    # 3 s of reconnects, ~19 lines a second unfiltered: one within the interval
    assert REPEAT_INTERVAL_S >= 3
    assert len(lines) == 1, lines
    assert "Connect to" in lines[0] and "Connection refused" in lines[0], lines


def test_after_the_interval_the_next_line_says_how_many_were_held_back(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = next(f for f in LIBRDKAFKA_LOGGER.filters if isinstance(f, RepeatFilter))
    monkeypatch.setattr(installed, "interval", 1.0)
    closed = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, LIBRDKAFKA_LOGGER.name),
        pytest.raises(BrokerUnreachableError),
    ):
        Admin(closed, connect_timeout="3s")
    lines = _lines(caplog)
    # one a second at most, over however long the 3 s took on this machine
    assert 2 <= len(lines) <= 1 + int(time.monotonic() - began) + 1, lines
    counted = [line for line in lines[1:] if "more like it not logged in the last 1s)" in line]
    assert counted, lines


def test_debug_lines_pass_and_varying_details_do_not_make_a_line_new() -> None:
    now = [0.0]
    repeats = RepeatFilter(10.0, clock=lambda: now[0])

    def record(level: int, client: str, text: str) -> logging.LogRecord:
        return logging.LogRecord(
            "x", level, __file__, 1, "%s [%s] %s", ("FAIL", client, text), None
        )

    failed = "Connect to ipv4#127.0.0.1:1 failed: Connection refused (after {}ms in state CONNECT)"
    assert repeats.filter(record(logging.ERROR, "rdkafka#producer-1", failed.format(0)))
    assert not repeats.filter(record(logging.ERROR, "rdkafka#consumer-2", failed.format(7)))
    assert repeats.filter(record(logging.DEBUG, "rdkafka#producer-1", failed.format(0)))
    assert repeats.filter(record(logging.ERROR, "rdkafka#producer-1", "another failure"))
    now[0] = 10.0
    again = record(logging.ERROR, "rdkafka#producer-1", failed.format(3))
    assert repeats.filter(again)
    assert again.getMessage().endswith("(1 more like it not logged in the last 10s)")
