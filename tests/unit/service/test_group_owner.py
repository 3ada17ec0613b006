"""Query routing by a Streams group's own assignment (`rebalance_protocol="streams"`): the
owner of a partition is the endpoint the group's coordinator named, as a URL the forwarding
can use, named as the instance registry names it when it knows that endpoint."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kstream.runtime.instances import InstanceInfo
from kstream.service.query import AppService


def _service(endpoints: dict[tuple[str, int], str], registry: Any = None) -> AppService:
    app = SimpleNamespace(
        app_id="app", group_endpoint=lambda topic, partition: endpoints.get((topic, partition))
    )
    return AppService(app, probe=None, registry=registry, instance_id="me")  # type: ignore[arg-type]


def test_the_groups_endpoint_is_the_owner_as_a_url() -> None:
    service = _service({("in", 1): "10.0.0.7:8080"})
    assert service._group_owner("in", 1) == InstanceInfo("10.0.0.7:8080", "http://10.0.0.7:8080")
    assert service._group_owner("in", 0) is None


def test_the_registry_names_an_endpoint_it_knows_and_this_instance_is_itself() -> None:
    other = InstanceInfo("instance-2", "https://10.0.0.7:8080")
    registry = SimpleNamespace(endpoint="http://10.0.0.5:8080", instances=lambda: [other])
    service = _service({("in", 1): "10.0.0.7:8080", ("in", 2): "10.0.0.5:8080"}, registry)
    assert service._group_owner("in", 1) == other
    assert service._group_owner("in", 2) == InstanceInfo("me", "http://10.0.0.5:8080")


def test_other_protocols_leave_routing_to_the_registry() -> None:
    app = SimpleNamespace(app_id="app")
    service = AppService(app, probe=None, instance_id="me")  # type: ignore[arg-type]
    assert service._group_owner("in", 1) is None
