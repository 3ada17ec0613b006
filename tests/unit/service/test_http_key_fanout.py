"""A key the predicted owner does not have is asked of every instance before a 404.

kstream predicts a key's partition with murmur2; a producer with another partitioner (e.g.
confluent-kafka's default `consistent_random`) puts keys elsewhere. Three HTTP servers over
fake apps stand for three instances: the key sits on instance C in a partition murmur2 would
not choose, and the instance predicted to own it (B) does not have it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from kstream.service.http import HttpServer, Problem


@dataclass
class Owner:
    instance_id: str
    endpoint: str


@dataclass
class Loc:
    store: str
    key: Any
    partition: int | None
    local: bool
    owner: Owner | None

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "local": self.local}


class FakeInstance:
    """One instance: the partitions it holds and, per partition, its keys."""

    def __init__(self, instance_id: str, data: dict[int, dict[str, int]]) -> None:
        self.app_id = "app"
        self.instance_id = instance_id
        self.data = data
        self.endpoint = ""
        self.everyone: list[FakeInstance] = []
        self.predicted = 0  # the partition murmur2 gives the key

    state = "RUNNING"

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return True

    def metrics_text(self) -> bytes:
        return b""

    def topology(self, fmt: str) -> str:
        return ""

    def stores(self) -> list[dict[str, Any]]:
        return []

    def locate(self, store: str, key_text: str, key_type: str | None = None) -> Loc:
        owner = next(i for i in self.everyone if self.predicted in i.data)
        local = owner is self
        return Loc(store, key_text, self.predicted, local, Owner(owner.instance_id, owner.endpoint))

    def get_local(self, loc: Loc, any_partition: bool = False) -> dict[str, Any]:
        parts = list(self.data) if any_partition else [loc.partition]
        for p in parts:
            value = self.data.get(p, {}).get(loc.key)  # type: ignore[arg-type]
            if value is not None:
                return {"value": value, "partition": p, "instance_id": self.instance_id}
        raise Problem(404, "key_not_found", f"key {loc.key!r} has no value")

    def peers(self) -> list[str]:
        return [i.endpoint for i in self.everyone if i is not self]


@pytest.fixture
def instances() -> Iterator[list[FakeInstance]]:
    a = FakeInstance("A", {0: {}})
    b = FakeInstance("B", {1: {"other": 7}})
    c = FakeInstance("C", {2: {"cr-key": 42}})
    everyone = [a, b, c]
    servers = []
    for inst in everyone:
        inst.everyone = everyone
        inst.predicted = 1  # murmur2 says partition 1, which B holds
        server = HttpServer(inst, "127.0.0.1", 0).start()  # type: ignore[arg-type]
        inst.endpoint = server.url
        servers.append(server)
    yield everyone
    for s in servers:
        s.close()


def _get(url: str) -> tuple[int, dict[str, Any], str | None]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read()), r.headers.get("X-Kstream-Routed-To")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("X-Kstream-Routed-To")


@pytest.mark.parametrize("asked", ["A", "B", "C"])
def test_a_key_off_its_predicted_partition_is_found_on_any_instance(
    instances: list[FakeInstance], asked: str
) -> None:
    by_id = {i.instance_id: i for i in instances}
    status, body, _ = _get(by_id[asked].endpoint + "/stores/counts/keys/cr-key")
    assert status == 200, body
    assert body == {"value": 42, "partition": 2, "instance_id": "C"}


def test_a_key_nobody_has_is_404_after_asking_everyone(instances: list[FakeInstance]) -> None:
    status, body, _ = _get(instances[0].endpoint + "/stores/counts/keys/nowhere")
    assert status == 404
    assert body["error"] == "key_not_found"
    assert "3 instance(s)" in body["message"]


def test_a_key_at_its_predicted_owner_is_answered_by_the_owner(
    instances: list[FakeInstance],
) -> None:
    status, body, routed = _get(instances[0].endpoint + "/stores/counts/keys/other")
    assert (status, body) == (200, {"value": 7, "partition": 1, "instance_id": "B"})
    assert routed == instances[1].endpoint


def test_local_true_asks_only_the_predicted_partition_of_this_instance(
    instances: list[FakeInstance],
) -> None:
    status, body, _ = _get(instances[1].endpoint + "/stores/counts/keys/cr-key?local=true")
    assert status == 404 and body["error"] == "key_not_found"
