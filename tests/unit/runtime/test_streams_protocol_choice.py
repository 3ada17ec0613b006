"""Which protocol an app starts under (kstream.runtime.streams_protocol.choose), from what the
broker said about Streams groups and the app's group: "auto" resolved, and a protocol the
group's type refuses raised with the group, its type, the protocol asked and what to do.
What Apache Kafka answers in each case is measured in
tests/integration/test_streams_protocol_switch.py."""

from __future__ import annotations

import pytest

from kstream.config import Config
from kstream.errors import ConfigError, KafkaClientError
from kstream.kafka.streams_group import GroupListing
from kstream.runtime.streams_protocol import (
    GroupFacts,
    GroupProtocolMismatch,
    choose,
    resolve,
    with_protocol,
)

BS = "kafka:9092"
OFFERED, NOT_OFFERED = True, False
NO_GROUP = None
CLASSIC_LIVE = GroupListing("classic", "Stable")
CLASSIC_EMPTY = GroupListing("classic", "Empty")
CONSUMER_LIVE = GroupListing("consumer", "Stable")
CONSUMER_EMPTY = GroupListing("consumer", "Empty")
STREAMS_LIVE = GroupListing("streams", "Stable")
STREAMS_EMPTY = GroupListing("streams", "Empty")


def test_auto_is_the_default() -> None:
    assert Config().rebalance_protocol == "auto"
    assert Config.from_mapping({"rebalance_protocol": " Auto "}).rebalance_protocol == "auto"


@pytest.mark.parametrize(
    ("offered", "group", "runs"),
    [
        # a new group: streams where the broker offers it, the classic protocol elsewhere
        (OFFERED, NO_GROUP, "streams"),
        (NOT_OFFERED, NO_GROUP, "cooperative"),
        # an empty classic group converts (its offsets kept): the full stop was made
        (OFFERED, CLASSIC_EMPTY, "streams"),
        (NOT_OFFERED, CLASSIC_EMPTY, "cooperative"),
        # instances run in the group: a rolling upgrade keeps the group's protocol
        (OFFERED, CLASSIC_LIVE, "cooperative"),
        (OFFERED, STREAMS_LIVE, "streams"),
        (OFFERED, STREAMS_EMPTY, "streams"),
        # a KIP-848 group never becomes a streams group, even empty
        (OFFERED, CONSUMER_LIVE, "consumer"),
        (OFFERED, CONSUMER_EMPTY, "consumer"),
        (NOT_OFFERED, CONSUMER_EMPTY, "consumer"),
    ],
)
def test_auto(offered: bool, group: GroupListing | None, runs: str) -> None:
    assert choose("auto", GroupFacts(offered, group), "app", BS) == runs


@pytest.mark.parametrize(
    ("asked", "group"),
    [
        ("streams", NO_GROUP),
        ("streams", STREAMS_LIVE),
        ("streams", CLASSIC_EMPTY),  # the coordinator converts it
        ("cooperative", STREAMS_EMPTY),  # JoinGroup converts an empty streams group back
        ("eager", CLASSIC_LIVE),
        ("cooperative", CONSUMER_LIVE),  # classic <-> consumer: the broker's migration policy
        ("consumer", CLASSIC_LIVE),
    ],
)
def test_an_explicit_protocol_the_group_takes_runs(asked: str, group: GroupListing | None) -> None:
    assert choose(asked, GroupFacts(OFFERED, group), "app", BS) == asked


@pytest.mark.parametrize(
    ("asked", "group", "advice"),
    [
        ("streams", CLASSIC_LIVE, "stop every instance of the app first"),
        ("streams", CONSUMER_LIVE, "never becomes a streams group"),
        ("streams", CONSUMER_EMPTY, "delete the group"),
        ("cooperative", STREAMS_LIVE, "stop every instance of the app first"),
        ("eager", STREAMS_LIVE, "stop every instance of the app first"),
        ("consumer", STREAMS_LIVE, "never becomes a consumer group"),
        ("consumer", STREAMS_EMPTY, "never becomes a consumer group"),
    ],
)
def test_a_protocol_the_group_refuses_names_group_types_and_what_to_do(
    asked: str, group: GroupListing, advice: str
) -> None:
    with pytest.raises(GroupProtocolMismatch) as refused:
        choose(asked, GroupFacts(OFFERED, group), "orders-app", BS)
    text = str(refused.value)
    assert f"rebalance_protocol={asked!r}" in text
    assert f"group 'orders-app' at {BS} is a {group.type} group ({group.state})" in text
    assert advice in text


def test_streams_on_a_broker_without_streams_groups_says_which_broker_and_why() -> None:
    with pytest.raises(Exception, match=r"kafka:9092 does not offer Streams groups .*rebalance"):
        choose("streams", GroupFacts(NOT_OFFERED, NO_GROUP), "app", BS)


@pytest.mark.parametrize(
    ("asked", "runs"), [("auto", "cooperative"), ("eager", "eager"), ("consumer", "consumer")]
)
def test_apps_with_their_own_clients_or_on_tansu_ask_no_broker(asked: str, runs: str) -> None:
    # an address nothing listens on: asking would fail or wait
    for own, tansu in ((True, False), (False, True)):
        assert resolve(asked, "app", "127.0.0.1:9", {}, 0.1, own_clients=own, tansu=tansu) == runs


def test_a_broker_that_does_not_answer_leaves_the_classic_protocols_as_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # nothing listens on port 9: the check, a courtesy to these protocols, gives up
    for asked, runs in (("auto", "cooperative"), ("cooperative", "cooperative")):
        assert resolve(asked, "app", "127.0.0.1:9", {}, 0.2, own_clients=False, tansu=False) == runs
    assert "could not ask the broker at 127.0.0.1:9 about group 'app'" in caplog.text


def test_streams_asked_of_a_broker_that_does_not_answer_fails() -> None:
    with pytest.raises(KafkaClientError, match=r"127\.0\.0\.1:9"):
        resolve("streams", "app", "127.0.0.1:9", {}, 0.2, own_clients=False, tansu=False)


def test_auto_following_a_consumer_group_names_why_a_setting_is_refused() -> None:
    cfg = Config.from_mapping({"kafka": {"session.timeout.ms": 6000}})
    assert with_protocol(cfg, "cooperative", "app").rebalance_protocol == "cooperative"
    with pytest.raises(ConfigError) as refused:
        with_protocol(cfg, "consumer", "orders")
    text = str(refused.value)
    assert "rebalance_protocol='auto' joins group 'orders' as 'consumer'" in text, text
    assert "session.timeout.ms" in text, text
