"""`build_store`: the one place a store spec becomes the chain of layers processors use.

The chain (kstream.state's docstring), outermost first, is Kafka Streams'
`Metered(Caching(ChangeLogging(typed store)))`. Its two halves are added at different times:

- the *inner chain* (the typed store over its backend, inside the change-logging layer when
  the spec keeps a changelog) is what restore writes into and what a standby keeps; it is
  opened by `open_store`.
- the *outer layers* (`StoreLayers`: the record cache's `CachingStore`, the metering
  `MeteredStore`) only matter to processors. The runtime adds them once a store is restored,
  as Kafka wraps its stores before `init` but restores around the outer layers.

Every engine builds its stores here: the runtime's tasks (kstream.runtime.tasks) with the
layers its config asks for, standbys and restore (kstream.state.restore, no outer layers) and
the test driver (kstream.testing.driver). A caller that already holds the inner chain (a
restored store) passes it as `inner` and gets the same outer layers as a fresh one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kstream.state import Store, open_store
from kstream.state.caching import RecordCache, cached
from kstream.state.metrics import StoreMetrics, instrument
from kstream.state.spec import StoreSpec

INTERNAL_PREFIX = "kstream-"
"""Stores kstream keeps for itself (the duplicate marks) are named so; they are never metered,
as users did not ask for them."""


@dataclass(frozen=True)
class StoreLayers:
    """Which outer layers a store gets.

    `record_cache`: the stream thread's cache (`cache_max_bytes`); None or a disabled cache adds
    no caching layer, and neither does a store whose kind or spec cannot cache
    (kstream.state.caching.cached). `metrics`: where operations are counted and timed; None
    adds no metering layer (the runtime passes None below the debug recording level, so a store
    call costs nothing for metrics then). `sample_every`: time one call in N
    (kstream.state.metrics.instrument).
    """

    record_cache: RecordCache | None = None
    metrics: StoreMetrics | None = None
    sample_every: int = 1

    def around(self, inner: Any) -> Any:
        """`inner` (an inner chain) inside these layers: caching under metering, as in Kafka."""
        store = cached(inner, self.record_cache)
        if self.metrics is not None and not inner.spec.name.startswith(INTERNAL_PREFIX):
            store = instrument(store, self.metrics, sample_every=self.sample_every)
        return store


NO_LAYERS = StoreLayers()
"""The inner chain alone: what restore, standbys and the test driver use."""


def build_store(
    spec: StoreSpec,
    *,
    partition: int,
    app_id: str = "",
    state_dir: str = "",
    default_backend: str = "memory",
    backend: Any = None,
    layers: StoreLayers = NO_LAYERS,
    inner: Store | None = None,
) -> Any:
    """Store `spec` of one task partition, as processors use it: the inner chain (`open_store`
    with `app_id`, `state_dir`, `default_backend` and `backend`, which overrides the spec's),
    inside `layers`.

    `inner`: the inner chain, already open (a store restored from its changelog); it is used as
    it is and the open arguments are not read. With `NO_LAYERS` the result is the inner chain
    itself, a `Store`.
    """
    if inner is None:
        inner = open_store(
            spec,
            app_id=app_id,
            partition=partition,
            state_dir=state_dir,
            default_backend=default_backend,
            backend=backend,
        )
    elif inner.spec is not spec and inner.spec.name != spec.name:
        raise ValueError(
            f"build_store: store {spec.name!r} partition {partition} was given the open store "
            f"{inner.spec.name!r}"
        )
    return layers.around(inner)
