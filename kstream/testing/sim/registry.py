"""The instance registry of a simulated run, for standby replicas (`num_standby_replicas`).

The runtime's standbys (kstream.runtime.standby: the placement, the standby tasks over the
client supplier's restore consumer, the hand-over of their stores to a new active task) ask
the instance registry which instances live and which tasks each holds. The product's registry
(kstream.runtime.instances) follows its compacted topic and heartbeats on a thread of its
own, which a deterministic run cannot have; this one gives the standbys the same answers from
the run's shared table, kept as that topic would be:

* `publish` replaces the instance's entry (its active and standby input partitions) and
  stamps it with the next offset and the virtual wall clock, as a record in the topic;
* `heartbeat`, called at each of the instance's loop turns, publishes the last entry again
  once `HEARTBEAT_S` has passed, as the registry's thread does (a paused or crashed instance
  does not, and drops out of `live` after `LIVE_S`);
* a graceful close writes the tombstone (the entry goes); a crash leaves the entry;
* the registry is always read to its end (`wait_caught_up`): in one process, every publication
  is seen at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kstream.runtime.instances import HEARTBEAT_S, LIVE_S, InstanceInfo, group_partitions
from kstream.testing.sim.clock import VirtualClock

__all__ = ["SimRegistry", "SimRegistryTopic"]


@dataclass
class SimRegistryTopic:
    """The `<app_id>-instances` topic of one run: the latest entry per instance id."""

    clock: VirtualClock
    entries: dict[str, InstanceInfo] = field(default_factory=dict)
    offset: int = 0

    def write(self, info: InstanceInfo) -> None:
        self.offset += 1
        self.entries[info.instance_id] = InstanceInfo(
            info.instance_id,
            info.endpoint,
            info.partitions,
            self.offset,
            info.standbys,
            self.clock.wall_ms(),
        )


class SimRegistry:
    """One instance's registry (kstream.runtime.standby.Membership) over `topic`."""

    def __init__(self, topic: SimRegistryTopic, instance_id: str) -> None:
        self.topic = topic
        self._id = instance_id
        self._published: tuple[dict[str, list[int]], dict[str, list[int]]] | None = None
        self._published_at = 0.0

    @property
    def instance_id(self) -> str:
        return self._id

    def publish(
        self, partitions: Iterable[tuple[str, int]], standbys: Iterable[tuple[str, int]] = ()
    ) -> bool:
        grouped = (group_partitions(partitions), group_partitions(standbys))
        if grouped == self._published:
            return False
        self._send(*grouped)
        return True

    def _send(self, partitions: dict[str, list[int]], standbys: dict[str, list[int]]) -> None:
        self.topic.write(InstanceInfo(self._id, "", partitions, -1, standbys))
        self._published = (partitions, standbys)
        self._published_at = self.topic.clock.now

    def heartbeat(self) -> None:
        if self._published is not None and self.topic.clock.now - self._published_at >= (
            HEARTBEAT_S
        ):
            self._send(*self._published)

    def live(self) -> list[InstanceInfo]:
        horizon = self.topic.clock.wall_ms() - int(LIVE_S * 1000)
        return [
            i
            for _, i in sorted(self.topic.entries.items())
            if i.published_ms >= horizon or i.instance_id == self._id
        ]

    def wait_caught_up(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        """The tombstone of a graceful close."""
        self.topic.entries.pop(self._id, None)
