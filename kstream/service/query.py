"""What the HTTP server asks of a running app, answered for a `kstream.App`.

The server only sees the `Served` protocol (kstream.service.http); this class implements it
over an App, its instance registry and its metrics. Store queries find the key's partition the
way producers do (the store's key serde, then murmur2 over the partition count of the store's
input topic), so the instance that holds the partition holds the key when its producer used
murmur2 too; the HTTP server asks every instance before it calls a key absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kstream.kafka.partitioner import default_partition
from kstream.serde import serde
from kstream.service.http import Problem
from kstream.service.instances import InstanceInfo, InstanceRegistry
from kstream.service.keys import BadKey, jsonable, key_type_of, parse_key
from kstream.service.probe import Probe, assigned_partitions
from kstream.service.versioned_query import VersionQuery
from kstream.service.versioned_query import answer as versioned_answer

__all__ = ["AppService", "Location"]

_FOREVER = 2**62


@dataclass(frozen=True)
class Location:
    """Where a key of a store lives."""

    store: str
    key: Any
    topic: str | None
    partition: int | None
    local: bool
    owner: InstanceInfo | None
    # this instance keeps a standby copy of the key's partition (stale reads may use it)
    standby_local: bool = False
    # a versioned store's version query (as_of, or versions in a range): service.versioned_query
    versions: VersionQuery | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "key": jsonable(self.key),
            "topic": self.topic,
            "partition": self.partition,
            "local": self.local,
            "instance_id": self.owner.instance_id if self.owner else None,
            "endpoint": self.owner.endpoint if self.owner else None,
            "standby_local": self.standby_local,
        }


class AppService:
    """An App as the HTTP server serves it."""

    def __init__(
        self,
        app: Any,
        probe: Probe,
        registry: InstanceRegistry | None = None,
        instance_id: str = "",
    ) -> None:
        self.app = app
        self.probe = probe
        self.registry = registry
        self.instance_id = instance_id or (registry.instance_id if registry else "")
        self.app_id = str(app.app_id)
        self._counts: dict[str, int] = {}

    # --- health and metrics ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        s = self.app.state
        return str(getattr(s, "value", s))

    def is_live(self) -> bool:
        live = getattr(self.app, "live", None)  # the stream thread's heartbeat too
        if isinstance(live, bool):
            return live
        return self.state != "ERROR"

    def not_live_reason(self) -> str | None:
        """Why /health/live answers 503 while the state is not ERROR (a stream thread stuck
        for longer than the watchdog's bound); None otherwise, the state being reason enough."""
        why = getattr(self.app, "not_live_reason", None)
        if self.state == "ERROR" or not callable(why):
            return None
        reason: str | None = why()
        return reason

    def is_ready(self) -> bool:
        ready = getattr(self.app, "ready", None)
        if isinstance(ready, bool):
            return ready
        return self.state == "RUNNING"

    def not_ready_reason(self) -> str | None:
        """Why /health/ready answers 503 while the state is RUNNING (a restore, a remote store
        that does not answer); None otherwise, the state being reason enough."""
        why = getattr(self.app, "not_ready_reason", None)
        if self.state != "RUNNING" or not callable(why):
            return None
        reason: str | None = why()
        return reason

    def metrics_text(self) -> bytes:
        self.probe.sample()
        return self.probe.metrics.render()

    def topology(self, fmt: str) -> str:
        d = self.app.topology.describe()
        if fmt == "mermaid":
            return str(d.to_mermaid())
        if fmt == "dot":
            return str(d.to_dot())
        return str(d)

    # --- stores ---------------------------------------------------------------------------------

    def _specs(self) -> dict[str, tuple[Any, bool]]:
        topo = self.app.topology
        out: dict[str, tuple[Any, bool]] = {n: (s, False) for n, s in topo.stores.items()}
        for n, g in topo.global_stores.items():
            out[n] = (g.spec, True)
        return out

    def stores(self) -> list[dict[str, Any]]:
        out = []
        for name, (spec, is_global) in sorted(self._specs().items()):
            parts = sorted(
                int(getattr(v, "partition", 0)) for v in self.app.store(name).partitions()
            )
            out.append(
                {
                    "name": name,
                    "kind": spec.kind,
                    "global": is_global,
                    "key_type": key_type_of(serde(spec.key_serde or "auto")),
                    "local_partitions": parts,
                }
            )
        return out

    def _spec(self, store: str) -> tuple[Any, bool]:
        found = self._specs().get(store)
        if found is None:
            known = ", ".join(sorted(self._specs())) or "none"
            raise Problem(404, "unknown_store", f"no store {store!r}; stores: {known}")
        return found

    def locate(self, store: str, key_text: str, key_type: str | None = None) -> Location:
        spec, is_global = self._spec(store)
        ks = serde(spec.key_serde or "auto")
        try:
            key = parse_key(key_text, key_type or key_type_of(ks), ks.name)
            key_bytes = ks.to_bytes(key)
        except BadKey as e:
            raise Problem(400, "bad_key", f"store {store!r}: {e}") from None
        except Exception as e:
            raise Problem(400, "bad_key", f"store {store!r}: cannot encode key: {e}") from None
        if is_global:
            me = InstanceInfo(self.instance_id, self.registry.endpoint if self.registry else "")
            return Location(store, key, None, None, True, me)
        topic = self._input_topic(store)
        n = self._partition_count(topic)
        if key_bytes is None:
            raise Problem(400, "bad_key", f"store {store!r}: a null key has no owner")
        partition = default_partition(key_bytes, n)
        local = (topic, partition) in set(assigned_partitions(self.app))
        owner = self._group_owner(topic, partition)
        if owner is None and self.registry is not None:
            owner = self.registry.owner(topic, partition)
        if local and (owner is None or owner.instance_id != self.instance_id):
            owner = InstanceInfo(self.instance_id, self.registry.endpoint if self.registry else "")
        standbys = getattr(self.app, "standby_partitions", None)
        standby_local = callable(standbys) and (topic, partition) in set(standbys())
        return Location(store, key, topic, partition, local, owner, standby_local)

    def _group_owner(self, topic: str, partition: int) -> InstanceInfo | None:
        """The owner by the Streams group's own assignment (`rebalance_protocol="streams"`:
        the coordinator tells each member every member's endpoint and partitions), named as
        the registry names it when it knows the endpoint; None under other protocols."""
        ask = getattr(self.app, "group_endpoint", None)
        endpoint = ask(topic, partition) if callable(ask) else None
        if not endpoint:
            return None
        # the group knows "host:port" (the app's `http`); the registry and the forwarding use
        # URLs (`advertised_url`, else the server's): matched by host and port
        reg = self.registry
        known = [i for i in reg.instances() if _netloc(i.endpoint) == endpoint] if reg else []
        if reg is not None and _netloc(reg.endpoint) == endpoint:
            return InstanceInfo(self.instance_id, reg.endpoint)
        if known:
            return InstanceInfo(known[0].instance_id, known[0].endpoint)
        return InstanceInfo(endpoint, f"http://{endpoint}")

    def _input_topic(self, store: str) -> str:
        for sub in self.app.compiled.subtopologies:
            if store in sub.stores:
                return str(sub.source_topics[0])
        raise Problem(404, "unknown_store", f"store {store!r} is not part of any sub-topology")

    def _partition_count(self, topic: str) -> int:
        counts = getattr(getattr(self.app, "_ctx", None), "partition_counts", None) or {}
        if topic in counts:
            return int(counts[topic])
        if topic not in self._counts:
            from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier

            supplier = getattr(self.app, "client_supplier", None) or KafkaClientSupplier()
            admin = supplier.admin(ClientConfig(self.app.bootstrap_servers, self.app.config.kafka))
            found = admin.partition_counts([topic])
            if topic not in found:
                raise Problem(503, "not_ready", f"topic {topic!r} does not exist yet")
            self._counts[topic] = found[topic]
        return self._counts[topic]

    def peers(self) -> list[str]:
        """The HTTP endpoints of the app's other instances, as the registry knows them."""
        if self.registry is None:
            return []
        return [
            i.endpoint
            for i in self.registry.instances()
            if i.instance_id != self.instance_id and i.endpoint
        ]

    @property
    def stale_by_default(self) -> bool:
        """Key queries may answer from standby copies unless they say `stale=false`
        (config `enable_stale_stores`)."""
        return bool(getattr(self.app.config, "enable_stale_stores", False))

    def get_local(
        self, loc: Location, any_partition: bool = False, stale: bool = False
    ) -> dict[str, Any]:
        """The key's value from this instance's stores; Problem if absent or unavailable.

        `any_partition`: look in every local partition, not only the predicted one (for keys
        written with another partitioner than murmur2). `stale`: the standby copies this
        instance keeps count too (Kafka's enableStaleStores; they may be behind).
        """
        spec, _ = self._spec(loc.store)
        views = (
            self.app.store(loc.store, enable_stale_stores=True).partitions()
            if stale
            else self.app.store(loc.store).partitions()
        )
        if loc.partition is not None and not any_partition:
            views = [v for v in views if getattr(v, "partition", loc.partition) == loc.partition]
        if not views:
            raise Problem(
                503,
                "not_available",
                f"store {loc.store!r} partition {loc.partition} is not open on this instance "
                f"(state {self.state}; restoring or rebalancing)",
            )
        versioned = versioned_answer(loc, spec.kind, views, self.instance_id)
        if versioned is not None:
            return versioned
        value: Any = None
        found_in: int | None = None
        if spec.kind == "key_value":
            for v in views:
                value = v.get(loc.key)
                if value is not None:
                    found_in = getattr(v, "partition", None)
                    break
        elif spec.kind == "window":
            rows: list[dict[str, Any]] = []
            size = int(spec.window_size or 0)
            for v in views:
                with v.fetch(loc.key, 0, _FOREVER) as cur:
                    rows.extend({"start": s, "end": s + size, "value": jsonable(x)} for s, x in cur)
            value = sorted(rows, key=lambda r: r["start"]) or None
        elif spec.kind == "session":
            rows = []
            for v in views:
                with v.find_sessions(loc.key, 0, _FOREVER) as cur:
                    rows.extend(
                        {"start": w.start, "end": w.end, "value": jsonable(x)} for w, x in cur
                    )
            value = rows or None
        else:
            raise Problem(400, "not_queryable", f"store {loc.store!r} ({spec.kind}) is internal")
        if value is None:
            raise Problem(
                404, "key_not_found", f"key {loc.key!r} has no value in store {loc.store!r}"
            )
        return {
            "store": loc.store,
            "key": jsonable(loc.key),
            "value": jsonable(value),
            "partition": found_in if found_in is not None else loc.partition,
            "instance_id": self.instance_id,
        }


def _netloc(url: str) -> str:
    """ "host:port" of an endpoint URL ("http://host:port/..."), or the text itself."""
    return url.split("://", 1)[-1].split("/", 1)[0]
