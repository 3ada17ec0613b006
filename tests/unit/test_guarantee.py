"""The processing guarantee's one parser (kstream.guarantee): every setting that names a
guarantee reads it here, and a wrong one is refused naming the setting it came from."""

from __future__ import annotations

import pytest

from kstream.errors import ConfigError
from kstream.guarantee import DEFAULT_GUARANTEE, GUARANTEES, parse_guarantee


@pytest.mark.parametrize("name", GUARANTEES)
def test_each_guarantee_parses_to_itself(name: str) -> None:
    assert parse_guarantee(name) == name


def test_the_default_is_kafka_streams_exactly_once_v2() -> None:
    assert DEFAULT_GUARANTEE == "exactly_once_v2"
    assert DEFAULT_GUARANTEE in GUARANTEES


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("exactly-once", "processing_guarantee"),
        ("EXACTLY_ONCE", "service.processing_guarantee"),
        (None, "guarantee"),
        (2, "processing_guarantee"),
    ],
)
def test_a_wrong_guarantee_is_refused_naming_its_setting(value: object, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_guarantee(value, key)
    message = str(e.value)
    assert message.startswith(f"{key}: expected one of ")
    assert all(name in message for name in GUARANTEES)
    assert repr(value) in message
