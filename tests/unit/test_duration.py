"""Duration parsing: every accepted form and the errors for the rest."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import kstream
from kstream.duration import duration
from kstream.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (250, 250),
        (1.6, 2),
        ("500ms", 500),
        ("5s", 5_000),
        ("1m", 60_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1m30s", 90_000),
        ("1.5s", 1_500),
        ("2 hours", 7_200_000),
        ("1 minute", 60_000),
        ("3sec", 3_000),
        ("1500000ns", 2),
        ("2000us", 2),
        ("750", 750),
        ((5, "seconds"), 5_000),
        ((2, "minutes"), 120_000),
        ((1, "days"), 86_400_000),
        ((3, "hours"), 10_800_000),
        ((7, "milliseconds"), 7),
        ((3000, "microseconds"), 3),
        ((4_000_000, "nanoseconds"), 4),
        ((0.5, "seconds"), 500),
        (dt.timedelta(seconds=3, milliseconds=7), 3_007),
        (dt.timedelta(days=1), 86_400_000),
    ],
)
def test_forms(value: Any, ms: int) -> None:
    assert duration(value) == ms
    assert kstream.duration(value) == ms


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", 'window: cannot parse duration \'\'; use forms like "500ms", "5s"'),
        ("-5s", "window: cannot parse duration '-5s'"),
        ("soon", "window: cannot parse duration 'soon'; use forms like"),
        ("5s later", "window: cannot parse duration '5s later'"),
        (-1, "window: duration must not be negative, got -1"),
        (dt.timedelta(seconds=-1), "window: duration must not be negative"),
        (True, "window: expected a duration, got bool True"),
        ((5,), "window: expected (amount, unit), got (5,)"),
        (("5", "seconds"), "window: amount must be a number in ('5', 'seconds')"),
        ([5], "window: expected int ms, timedelta, (amount, unit) or a string like '5s', got list"),
    ],
)
def test_errors_name_the_parameter(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        duration(value, name="window")
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("5 fortnights", "unknown duration unit 'fortnights' in '5 fortnights'; use ns, us, ms,"),
        ((5, "weeks"), "unknown duration unit 'weeks' in (5, 'weeks')"),
    ],
)
def test_unknown_units_are_named(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        duration(value, name="window")
    assert message in str(e.value)


def test_unknown_unit_error_names_the_parameter() -> None:
    with pytest.raises(ConfigError) as e:
        duration("5 fortnights", name="window")
    assert str(e.value).startswith("window: ")


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        duration("x")
