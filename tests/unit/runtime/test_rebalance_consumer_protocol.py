"""The consumer group protocol (KIP-848, `rebalance_protocol="consumer"`): validated at start-up
(not on Tansu, no client-side session settings), kept for topologies that read several topics,
the broker's range assignor asked for, split tasks found, and a broker without the protocol
named once the consumer has waited `connect_timeout` for a member epoch."""

from __future__ import annotations

import struct

import pytest

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError
from kstream.runtime.rebalance import JoinWatch, effective_protocol, group_settings, split_tasks
from kstream.topology.compiled import CompiledTopology


def test_the_consumer_protocol_is_a_choice() -> None:
    cfg = Config.from_mapping({"rebalance_protocol": "Consumer"})
    assert cfg.rebalance_protocol == "consumer"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"broker_compat": "tansu"}, "broker_compat='tansu'"),
        ({"kafka": {"session.timeout.ms": 2000}}, "group.consumer.session.timeout.ms"),
        ({"kafka": {"heartbeat.interval.ms": 250}}, "group.consumer.heartbeat.interval.ms"),
        ({"kafka": {"group.remote.assignor": "uniform"}}, "rebalance_protocol"),
    ],
)
def test_what_the_consumer_protocol_cannot_take_is_a_config_error(
    config: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_mapping({"rebalance_protocol": "consumer", **config})


def test_the_group_protocol_is_the_engines_to_choose() -> None:
    with pytest.raises(ConfigError, match="rebalance_protocol"):
        Config.from_mapping({"kafka": {"group.protocol": "consumer"}})


def test_client_session_settings_stay_valid_under_the_classic_protocols() -> None:
    cfg = Config.from_mapping({"kafka": {"session.timeout.ms": 2000}})
    assert cfg.kafka["session.timeout.ms"] == 2000


def _join() -> CompiledTopology:
    """A stream-table join (sub-topology 0 reads left and right) and a count after a
    repartition (sub-topology 1 reads the repartition topic)."""
    b = StreamBuilder()
    t = b.table("right", key_serde="string", value_serde="string", store="t")
    s = b.stream("left", key_serde="string", value_serde="string").join(t, lambda v, w: v)
    s.group_by(lambda k, v: v, key_serde="string").count(store="c").to_stream().to(
        "out", key_serde="string", value_serde="long"
    )
    return b.build().compile("app")


def test_a_multi_topic_group_keeps_the_consumer_protocol() -> None:
    cfg = Config.from_mapping({"rebalance_protocol": "consumer"})
    assert effective_protocol(_join(), cfg) == "consumer"


def test_the_group_consumer_asks_for_the_brokers_range_assignor() -> None:
    cfg = Config.from_mapping({"rebalance_protocol": "consumer", "group_instance_id": "n1"})
    assert group_settings(cfg, "consumer") == {
        "group.protocol": "consumer",
        "group.remote.assignor": "range",
        "group.instance.id": "n1",
    }


def test_a_task_holding_only_some_of_its_partitions_is_found() -> None:
    compiled = _join()
    repartition = compiled.subtopologies[1].source_topics[0]
    whole = [("left", 0), ("right", 0), ("left", 1), ("right", 1), (repartition, 1)]
    assert split_tasks(compiled, whole) == {}
    split = split_tasks(compiled, [("left", 0), ("right", 1), (repartition, 0)])
    assert split == {(0, 0): [("right", 0)], (0, 1): [("left", 1)]}


class _Member:
    """A consumer whose group metadata carries `epoch` (librdkafka's CGMDv2 layout)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def consumer_group_metadata(self) -> bytes:
        return b"CGMDv2:" + struct.pack("=i", self.epoch) + b"app\x00member\x00\x01"


def test_a_consumer_that_never_gets_a_member_epoch_names_the_broker() -> None:
    watch = JoinWatch("consumer", 10.0, "broker:9092")
    watch.subscribed(100.0)
    never = _Member(-1)
    watch.check(never, 109.0)  # still waiting
    with pytest.raises(ConfigError, match=r"broker at broker:9092 .*KIP-848"):
        watch.check(never, 110.5)


def test_a_member_epoch_ends_the_watch() -> None:
    watch = JoinWatch("consumer", 10.0, "broker:9092")
    watch.subscribed(100.0)
    member = _Member(1)
    watch.check(member, 101.0)
    member.epoch = -1  # leaving and rejoining later is not a broker without the protocol
    watch.check(member, 200.0)


def test_the_classic_protocols_are_not_watched() -> None:
    watch = JoinWatch("cooperative", 10.0, "broker:9092")
    watch.subscribed(100.0)
    watch.check(_Member(-1), 500.0)


def test_the_split_check_of_a_closing_consumer_does_not_raise_out_of_the_callback() -> None:
    """The last revoke of a consumer being closed runs the split check, and librdkafka then
    answers `assignment()` with "broker handle destroyed": raised out of the rebalance
    callback, it ended the stream thread on an exception nobody handled (seen once in CI)."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from kstream.runtime.partitions import TaskPartitions

    class Closing:
        def assignment(self) -> list[object]:
            raise KafkaException(KafkaError(KafkaError._DESTROY))

    partitions = SimpleNamespace(
        consumer=Closing(), ctx=None, split_assignments=0, broker_assigned=True
    )
    TaskPartitions.check_split(partitions)  # type: ignore[arg-type]
    assert partitions.split_assignments == 0
