"""Interactive queries over one instance's partitions: `App.store(name)` (Kafka's
`KafkaStreams.store` with its `QueryableStoreTypes` views, local only).

The view asks the app for the store's partitions at every read, so it stays valid across
rebalances: it sees the partitions held at the time of the read, committed data only (and,
with `stale`, the standby copies after the active ones). Routing a key to the instance that
owns it is the service's job (kstream.service.query).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LocalStore"]


class LocalStore:
    """A store as one instance sees it: every local partition, committed data only (and the
    standby copies with `stale`)."""

    def __init__(self, name: str, partitions: Callable[[], list[Any]], stale: bool = False) -> None:
        """`partitions`: the read-only stores of `name` this instance holds now (asked anew
        at each read, so a view outlives rebalances)."""
        self.name = name
        self._partitions = partitions
        self.stale = stale

    def partitions(self) -> list[Any]:
        return self._partitions()

    def get(self, key: Any, *as_of: int) -> Any:
        """The key's value from the first local partition that has it; a versioned store also
        takes a time (`get(key, as_of)`: the version valid then)."""
        for s in self.partitions():
            v = s.get(key, *as_of)
            if v is not None:
                return v
        return None

    def versions(
        self,
        key: Any,
        from_time: int | None = None,
        to_time: int | None = None,
        ascending: bool = False,
    ) -> list[Any]:
        """A versioned store's versions of `key` valid at some time in [from_time, to_time],
        newest first unless `ascending` (Kafka's `MultiVersionedKeyQuery`, KIP-968; see
        `VersionedKeyValueStore.versions`), from the first local partition that has any."""
        for s in self.partitions():
            found: list[Any] = s.versions(key, from_time, to_time, ascending)
            if found:
                return found
        return []

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every entry of every local partition (partition by partition)."""
        for s in self.partitions():
            with s.all() as cur:
                yield from cur

    def fetch(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, Any]]:
        """Window stores: `(start, value)` of `key` over the local partitions."""
        out: list[tuple[int, Any]] = []
        for s in self.partitions():
            with s.fetch(key, time_from, time_to) as cur:
                out.extend(cur)
        return sorted(out)
