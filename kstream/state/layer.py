"""`StoreLayer`: how a layer of a store's chain forwards to the store inside it, written once.

The change-logging and caching layers (kstream.state.changelog, kstream.state.caching) add a
few methods of their own to a store and leave the rest to the store inside them. A call through
a layer must cost no forwarding step, as the stores' operations run once or more per record:
so the typed store's public operations that a layer does not define itself are bound onto the
layer when it is built, and `store.put(...)` through any number of layers is one call of the
typed store's own method (or of the nearest layer's that defines it). Data attributes
(`observed`, `value_serde`, `spec`) are read through `__getattr__`, once per commit or query.

The metering layer (kstream.state.metrics.MeteredStore) binds timed wrappers instead of the
operations themselves, so it keeps its own construction.
"""

from __future__ import annotations

from typing import Any

from kstream.state.base import ReadOnlyView, StateStore


def typed_store(store: Any) -> StateStore:
    """The typed store at the bottom of a chain of layers."""
    while not isinstance(store, StateStore):
        store = store.inner
    return store


class StoreLayer:
    """A layer around `inner` (a typed store or another layer).

    Attributes set on a layer (the task's `context`) are set on the inner store, where the
    writes read them; an operation bound onto the layer is then bound again, so a call through
    the layer reaches the replacement. A layer's own state is set with `object.__setattr__`.
    """

    inner: Any

    def __init__(self, inner: Any) -> None:
        own = object.__setattr__
        own(self, "inner", inner)
        for name in _operations(type(self), type(typed_store(inner))):
            own(self, name, getattr(inner, name))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self.inner, attr, value)
        if attr in self.__dict__:  # an operation bound onto the layer: bind the new one
            object.__setattr__(self, attr, getattr(self.inner, attr))

    def read_only(self) -> ReadOnlyView:
        """Queries see the store through this layer."""
        return ReadOnlyView(self)


_OPERATIONS: dict[tuple[type, type], tuple[str, ...]] = {}


def _operations(layer: type, typed: type) -> tuple[str, ...]:
    """The public methods of typed store class `typed` that layer class `layer` does not
    define itself (`own_names`), computed once per pair."""
    found = _OPERATIONS.get((layer, typed))
    if found is None:
        own = own_names(layer)
        found = _OPERATIONS[layer, typed] = tuple(
            name
            for name in dir(typed)
            if not name.startswith("_")
            and name not in own
            and callable(attr := getattr(typed, name, None))
            and not isinstance(attr, type)
        )
    return found


def own_names(layer: type) -> frozenset[str]:
    """What a layer class defines itself or inherits (`StoreLayer.read_only`): the layer's
    own versions win over the typed store's."""
    return frozenset(name for klass in layer.__mro__ if klass is not object for name in vars(klass))
