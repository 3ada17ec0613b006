"""The rebalance settings: `rebalance_protocol` and `group_instance_id` are validated at
start-up, become the stream thread's consumer settings, and give each worker process a static
member id of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError
from kstream.runtime.rebalance import effective_protocol, group_settings
from kstream.service.settings import Settings
from kstream.service.supervisor import Supervisor
from kstream.topology.compiled import CompiledTopology


def test_auto_is_the_default_and_eager_a_choice() -> None:
    # auto: streams where the broker offers it, else cooperative (test_streams_protocol_choice)
    assert Config().rebalance_protocol == "auto"
    assert Config.from_mapping({"rebalance_protocol": "EAGER"}).rebalance_protocol == "eager"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"rebalance_protocol": "sticky"}, "rebalance_protocol"),
        ({"group_instance_id": ""}, "group_instance_id"),
        ({"group_instance_id": "a b"}, "group_instance_id"),
        ({"group_instance_id": 7}, "group_instance_id"),
        ({"kafka": {"group.instance.id": "x"}}, "group_instance_id"),
        ({"kafka": {"partition.assignment.strategy": "range"}}, "rebalance_protocol"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(config: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_mapping(config)


def _compiled(shape: str) -> CompiledTopology:
    b = StreamBuilder()
    s = b.stream("left", key_serde="string", value_serde="string")
    if shape == "join":
        t = b.table("right", key_serde="string", value_serde="string", store="t")
        s = s.join(t, lambda v, w: v)
    if shape == "repartition":
        s.group_by(lambda k, v: v, key_serde="string").count(store="c").to_stream().to(
            "out", key_serde="string", value_serde="long"
        )
    else:
        s.to("out")
    return b.build().compile("app")


def test_only_a_group_reading_one_topic_rebalances_cooperatively() -> None:
    cfg = Config.from_mapping({"rebalance_protocol": "cooperative"})
    assert effective_protocol(_compiled("plain"), cfg) == "cooperative"
    # a join's task needs both topics' partition n; a repartition topic's tasks must be spread
    # apart from the source's: cooperative-sticky does not know either
    assert effective_protocol(_compiled("join"), cfg) == "eager"
    assert effective_protocol(_compiled("repartition"), cfg) == "eager"
    eager = Config.from_mapping({"rebalance_protocol": "eager"})
    assert effective_protocol(_compiled("plain"), eager) == "eager"


def test_the_group_consumer_gets_the_assignor_and_the_static_id() -> None:
    assert group_settings(Config(), "cooperative") == {
        "partition.assignment.strategy": "cooperative-sticky"
    }
    cfg = Config.from_mapping({"group_instance_id": "node-1"})
    assert group_settings(cfg, "eager") == {
        "partition.assignment.strategy": "range",
        "group.instance.id": "node-1",
    }


def test_each_worker_process_gets_a_stable_member_id_of_its_own(tmp_path: Path) -> None:
    settings = Settings(
        app_id="app", config={"state_dir": str(tmp_path), "group_instance_id": "node-1"}
    )
    sup = Supervisor("m:t", settings, 3)
    ids = [sup._worker_settings(slot, 8000).config["group_instance_id"] for slot in sup.slots]
    assert ids == ["node-1-0", "node-1-1", "node-1-2"]
    again = Supervisor("m:t", settings, 3)
    assert again._worker_settings(again.slots[1], 9000).config["group_instance_id"] == "node-1-1"
    plain = Supervisor("m:t", Settings(app_id="app", config={"state_dir": str(tmp_path)}), 2)
    assert "group_instance_id" not in plain._worker_settings(plain.slots[0], 8000).config
