"""Durations in every form the API accepts, normalised to integer milliseconds."""

from __future__ import annotations

import datetime as _dt
import re

from kstream.errors import ConfigError

UNITS_MS: dict[str, float] = {
    "nanoseconds": 1e-6,
    "microseconds": 1e-3,
    "milliseconds": 1.0,
    "seconds": 1000.0,
    "minutes": 60_000.0,
    "hours": 3_600_000.0,
    "days": 86_400_000.0,
}
_ALIASES = {
    "ns": "nanoseconds",
    "us": "microseconds",
    "µs": "microseconds",
    "ms": "milliseconds",
    "s": "seconds",
    "sec": "seconds",
    "m": "minutes",
    "min": "minutes",
    "h": "hours",
    "d": "days",
}
for _full in list(UNITS_MS):
    _ALIASES[_full] = _full
    _ALIASES[_full[:-1]] = _full  # singular: "second", "minute", ...

_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Zµ]+)\s*")

DurationLike = int | float | _dt.timedelta | tuple[int | float, str] | str


def _unit(unit: str, original: object, param: str) -> float:
    try:
        return UNITS_MS[_ALIASES[unit.lower()]]
    except KeyError:
        units = "ns, us, ms, s, m, h, d (or nanoseconds ... days)"
        raise ConfigError(
            f"{param}: unknown duration unit {unit!r} in {original!r}; use {units}"
        ) from None


def duration(value: DurationLike, *, name: str = "duration") -> int:
    """Return `value` as whole milliseconds.

    Accepts int milliseconds, `datetime.timedelta`, `(5, "seconds")` and strings such as
    `"500ms"`, `"5s"`, `"1m"`, `"2h"`, `"1d"` or compounds like `"1m30s"`. Negative durations
    are rejected: no API here has a use for them. `name` appears in the error message, so
    config validation can say which key was wrong.
    """
    ms: float
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a duration, got bool {value!r}")
    if isinstance(value, int | float):
        ms = float(value)
    elif isinstance(value, _dt.timedelta):
        ms = value / _dt.timedelta(milliseconds=1)
    elif isinstance(value, tuple):
        if len(value) != 2 or not isinstance(value[1], str) or isinstance(value[0], bool):
            raise ConfigError(f"{name}: expected (amount, unit), got {value!r}")
        if not isinstance(value[0], int | float):
            raise ConfigError(f"{name}: amount must be a number in {value!r}")
        ms = value[0] * _unit(value[1], value, name)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+", text):
            ms = float(text)
        else:
            pos, total = 0, 0.0
            for m in _PART.finditer(text):
                if m.start() != pos:
                    break
                total += float(m.group(1)) * _unit(m.group(2), value, name)
                pos = m.end()
            if pos != len(text) or not text:
                raise ConfigError(
                    f"{name}: cannot parse duration {value!r}; "
                    'use forms like "500ms", "5s", "1m", "2h", "1d"'
                )
            ms = total
    else:
        raise ConfigError(
            f"{name}: expected int ms, timedelta, (amount, unit) or a string like '5s', "
            f"got {type(value).__name__}"
        )
    if ms < 0:
        raise ConfigError(f"{name}: duration must not be negative, got {value!r}")
    # Half a millisecond rounds up (not to even): (1.5, "ms") is 2 and (0.5, "ms") is 1.
    return int(ms + 0.5)


def format_ms(ms: int | float) -> str:
    """`ms` milliseconds in the unit that reads best in a log line: "1.5 s", "12 min", "3.2 h",
    "1 day", "10 days", "55944 years" (a microsecond timestamp read as milliseconds)."""
    s = ms / 1000
    if abs(s) < 120:
        return f"{round(s, 3 if abs(s) < 10 else 1):g} s"
    if abs(s) < 7_200:
        return f"{round(s / 60, 1):g} min"
    if abs(s) < 86_400:
        return f"{round(s / 3_600, 1):g} h"
    if abs(s) < 3 * 365 * 86_400:
        days = round(s / 86_400, 1)
        return f"{days:g} day" if days == 1 else f"{days:g} days"
    return f"{s / (365.25 * 86_400):.0f} years"
