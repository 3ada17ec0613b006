"""Features of Apache Kafka that older brokers lack, for the broker compatibility lanes.

`make test-kafka-3.9` and `make test-kafka-4.1` (docs/testing.md) run tests against an older
Kafka than the reference. A test of a feature that came later carries the mark
`@pytest.mark.kafka_feature("<name>")` (a name of `FEATURES`); on a broker older than the
feature it is skipped with a reason naming the feature and both versions, and that skip stays
a skip under `CI=true` (tests/conftest.py), since it is what the lane means to test. So does a
skip a test decides itself by asking the broker, when its reason names the feature (its KIP or
its words) and the broker is older than the feature (`expected_skip`).

The broker's version is `KSTREAM_TEST_KAFKA_VERSION` (set by the run's process that starts the
shared broker, inherited by the pytest-xdist workers; set it yourself for a broker given by
`KSTREAM_TEST_BOOTSTRAP`), else that of the jars the tests start brokers from
(`kstream.testing.kafka.kafka_version`), else unknown: every feature is then taken as there.
"""

from __future__ import annotations

import os

from kstream.kafka.errors import BrokerStartError
from kstream.testing.kafka import kafka_version

VERSION_ENV = "KSTREAM_TEST_KAFKA_VERSION"

#: feature -> (the first Apache Kafka version that has it, the words a skip for its absence
#: names it by (its KIP first), what it is)
FEATURES: dict[str, tuple[tuple[int, int], tuple[str, ...], str]] = {
    "consumer_group_protocol": (
        (4, 0),
        ("KIP-848", "consumer group protocol"),
        "Kafka's consumer group protocol (KIP-848, rebalance_protocol='consumer'), generally "
        "available from Apache Kafka 4.0 (off on 3.9 brokers: group.coordinator.rebalance."
        "protocols=classic)",
    ),
    "streams_group_protocol": (
        (4, 2),
        ("KIP-1071", "Streams groups"),
        "Kafka Streams' rebalance protocol (KIP-1071, rebalance_protocol='streams'), which "
        "brokers offer from Apache Kafka 4.2 (not 4.1.2 nor 3.9.2)",
    ),
}


def broker_version() -> str | None:
    """The tests' Apache Kafka version, e.g. "3.9.2"; None when unknown."""
    env = os.environ.get(VERSION_ENV)
    if env:
        return env
    try:
        return kafka_version()
    except (BrokerStartError, StopIteration):
        return None


def _parse(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def missing(feature: str, version: str | None = None) -> str | None:
    """Why the tests' broker lacks `feature` (a skip reason naming both versions), or None
    when it has it (or its version is unknown)."""
    if feature not in FEATURES:
        raise ValueError(f"kafka_feature: unknown feature {feature!r} (known: {list(FEATURES)})")
    first, _words, what = FEATURES[feature]
    version = version or broker_version()
    if version is None or _parse(version)[:2] >= first:
        return None
    since = ".".join(map(str, first))
    return f"needs Apache Kafka {since} or later, the broker is {version}: {what}"


def expected_skip(reason: str, version: str | None = None) -> bool:
    """Whether a skip a test decided itself (it asked the broker) is one for a feature the
    tests' broker is too old for: its reason names the feature (its KIP, or its words: "does
    not offer Streams groups (KIP-1071)") and the broker is older than the feature's first
    version. On a broker that should have the feature, such a skip fails under CI like any
    other."""
    version = version or broker_version()
    return any(
        any(w in reason for w in words) and missing(feature, version) is not None
        for feature, (_first, words, _what) in FEATURES.items()
    )
