"""How a processor reads a table's current value for a key: `ValueGetter`, and
`WindowedValueGetter` for a windowed table (the joined, transformed, versioned and suppressed
getters extend it in their families)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.records import Windowed
from kstream.topology.processor import ProcessorContext


class ValueGetter:
    """Reads a table's current value for a key from inside another processor.

    Every table chain starts at a materialized store; filters and map_values on top of it are
    replayed on the stored value (`transforms`), so derived tables need no store of their own.
    """

    def __init__(self, store: str, transforms: tuple[Callable[[Any, Any], Any], ...] = ()) -> None:
        self.store = store
        self.transforms = transforms

    @property
    def stores(self) -> tuple[str, ...]:
        """The stores a processor using this getter must be connected to."""
        return (self.store,)

    def then(self, fn: Callable[[Any, Any], Any]) -> ValueGetter:
        """A getter applying `fn(key, value) -> value | None` after this one."""
        return ValueGetter(self.store, (*self.transforms, fn))

    def bind(self, ctx: ProcessorContext) -> Callable[[Any], Any]:
        """`get(key) -> value | None` for use inside a processor initialised with `ctx`."""
        get: Callable[[Any], Any] = ctx.get_store(self.store).get
        fns = self.transforms
        if not fns:
            return get

        def value(key: Any) -> Any:
            v = get(key)
            for fn in fns:
                if v is None:
                    return None
                v = fn(key, v)
            return v

        return value


class WindowedValueGetter(ValueGetter):
    """`get(Windowed) -> value` over a window store (`session=False`) or a session store."""

    def __init__(
        self,
        store: str,
        session: bool,
        transforms: tuple[Callable[[Any, Any], Any], ...] = (),
    ) -> None:
        super().__init__(store, transforms)
        self.session = session

    def then(self, fn: Callable[[Any, Any], Any]) -> ValueGetter:
        return WindowedValueGetter(self.store, self.session, (*self.transforms, fn))

    def bind(self, ctx: ProcessorContext) -> Callable[[Any], Any]:
        store = ctx.get_store(self.store)
        fns = self.transforms
        session = self.session

        def value(w: Windowed) -> Any:
            found = None
            if session:
                with store.find_sessions(w.key, w.end, w.start) as cur:
                    for s, v in cur:
                        if s == w:
                            found = v
            else:
                with store.fetch(w.key, w.start, w.start) as cur:
                    for _, v in cur:
                        found = v
            for fn in fns:
                if found is None:
                    return None
                found = fn(w, found)
            return found

        return value
