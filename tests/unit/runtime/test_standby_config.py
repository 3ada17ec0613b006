"""The standby keys are checked when the config is built, each error naming its key."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.config import Config
from kstream.errors import ConfigError


def test_defaults_are_kafkas() -> None:
    cfg = Config()
    assert cfg.num_standby_replicas == 0  # num.standby.replicas
    assert cfg.acceptable_recovery_lag == 10_000  # acceptable.recovery.lag
    assert cfg.enable_stale_stores is False


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_standby_replicas", -1),
        ("num_standby_replicas", 1.5),
        ("num_standby_replicas", True),
        ("num_standby_replicas", "1"),
        ("acceptable_recovery_lag", -2),
        ("acceptable_recovery_lag", "10000"),
        ("enable_stale_stores", "yes"),
    ],
)
def test_a_bad_value_names_its_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: expected"):
        Config.from_mapping({key: value})


def test_standbys_are_refused_with_the_tansu_compensations() -> None:
    with pytest.raises(ConfigError, match=r"num_standby_replicas: .*tansu"):
        Config.from_mapping({"num_standby_replicas": 1, "broker_compat": "tansu"})
    assert Config.from_mapping({"num_standby_replicas": 0, "broker_compat": "tansu"})


def test_good_values_are_kept() -> None:
    cfg = Config.from_mapping(
        {"num_standby_replicas": 2, "acceptable_recovery_lag": -1, "enable_stale_stores": True}
    )
    assert (cfg.num_standby_replicas, cfg.acceptable_recovery_lag, cfg.enable_stale_stores) == (
        2,
        -1,
        True,
    )
