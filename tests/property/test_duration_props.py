"""Every input form of a duration agrees with the others."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from kstream.duration import duration

MS_PER = {
    "milliseconds": 1,
    "seconds": 1000,
    "minutes": 60_000,
    "hours": 3_600_000,
    "days": 86_400_000,
}
SHORT = {"milliseconds": "ms", "seconds": "s", "minutes": "m", "hours": "h", "days": "d"}
amounts = st.integers(min_value=0, max_value=10_000)


@given(amounts, st.sampled_from(sorted(MS_PER)))
def test_all_forms_agree(n: int, unit: str) -> None:
    expected = n * MS_PER[unit]
    forms = [
        (n, unit),
        f"{n}{SHORT[unit]}",
        f"{n} {unit}",
        f" {n}{SHORT[unit]} ",
        dt.timedelta(**{unit: n}),
    ]
    if unit == "milliseconds":
        forms += [n, float(n), str(n)]
    for form in forms:
        assert duration(form) == expected, form


@given(amounts, amounts, amounts)
def test_compound_strings_add_up(h: int, m: int, s: int) -> None:
    expected = h * 3_600_000 + m * 60_000 + s * 1000
    assert duration(f"{h}h{m}m{s}s") == expected
    assert duration(f"{h}h {m}m {s}s") == expected
    assert duration(dt.timedelta(hours=h, minutes=m, seconds=s)) == expected


@given(st.integers(min_value=0, max_value=10**9))
def test_sub_millisecond_units(us: int) -> None:
    assert duration((us, "microseconds")) == duration(dt.timedelta(microseconds=us))
    assert duration(f"{us * 1000}ns") == duration(f"{us}us")
