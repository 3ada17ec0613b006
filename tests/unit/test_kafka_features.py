"""The broker compatibility lanes' feature gate (tests/support/kafka_features.py): a test of a
feature an older Apache Kafka lacks is skipped there with a reason naming both versions."""

from __future__ import annotations

import pytest
from support import kafka_features


def test_an_older_broker_lacks_the_consumer_group_protocol() -> None:
    reason = kafka_features.missing("consumer_group_protocol", "3.9.2")
    assert reason is not None
    assert "Apache Kafka 4.0 or later" in reason and "3.9.2" in reason and "KIP-848" in reason


@pytest.mark.parametrize("version", ["4.0.0", "4.1.2", "4.4.0", "4.10.1", "5.0.0-rc1"])
def test_a_newer_broker_has_it(version: str) -> None:
    assert kafka_features.missing("consumer_group_protocol", version) is None


def test_the_version_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kafka_features.VERSION_ENV, "3.9.2")
    assert kafka_features.broker_version() == "3.9.2"
    assert kafka_features.missing("consumer_group_protocol") is not None


def test_an_unknown_feature_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown feature"):
        kafka_features.missing("time_travel", "4.4.0")


def test_a_skip_naming_the_kip_of_a_feature_the_broker_lacks_is_expected() -> None:
    reason = "the broker at 127.0.0.1:1 does not offer Streams groups (KIP-1071)"
    assert kafka_features.expected_skip(reason, "4.1.2")
    assert kafka_features.expected_skip(reason, "3.9.2")
    # on a broker that has it, the same skip means something is wrong
    assert not kafka_features.expected_skip(reason, "4.4.0")
    assert not kafka_features.expected_skip("redis-server is not installed", "3.9.2")
    worded = "the test broker (Apache Kafka 3.9.2) does not offer Streams groups (...)"
    assert kafka_features.expected_skip(worded, "3.9.2")
