"""The metering layer: a store's operation counts and latency, and the restore-progress hook.

`instrument(store, metrics)` returns a `MeteredStore` around the store, the outermost layer of
the chain (kstream.state's docstring): Kafka Streams' `MeteredKeyValueStore`, one class for
every store kind. The runtime adds it at the debug recording level only; at info no layer is
added at all, so a store call costs nothing for metrics when they are off (the engine's CPU
per record is measured in µs, bench/engine_cpu.py).

The service layer implements `StoreMetrics` (Prometheus, kstream.metrics).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any, Protocol

from kstream.state import Store
from kstream.state.base import ReadOnlyView

TIMED_OPERATIONS = frozenset(
    {
        "get",
        "put",
        "put_if_absent",
        "delete",
        "range",
        "prefix_scan",
        "all",
        "fetch",
        "fetch_range",
        "get_timestamped",
        "put_timestamped",
        "fetch_timestamped",
        "fetch_all_timestamped",
        "find_sessions",
        "remove",
        "check_and_mark",
        "contains",
        "flush",
    }
)


class StoreMetrics(Protocol):
    def record_operation(
        self, store: str, partition: int, op: str, seconds: float, count: int = 1
    ) -> None:
        """A store operation took `seconds`; it stands for `count` operations (sampling)."""

    def record_restore(
        self, store: str, partition: int, restored: int, end_offset: int | None
    ) -> None:
        """Restore progress: `restored` records applied so far, end offset if known."""


def instrument(store: Store, metrics: StoreMetrics, *, sample_every: int = 1) -> Any:
    """`store` seen through a `MeteredStore` recording into `metrics` (the store itself is
    left as it was: the layer is a new object, use the one returned).

    Scans are timed until the cursor is created, not while the caller iterates it. With
    `sample_every=N` (N > 1) every call is counted but only one in N is timed, and it is
    reported as `record_operation(..., count=N)`: operation counts stay exact in steps of N and
    the per-record path pays for a counter, not for a clock.
    """
    return MeteredStore(store, metrics, sample_every=sample_every)


class MeteredStore:
    """The metering layer around one store: its timed operations (`TIMED_OPERATIONS` that the
    store has) record into `StoreMetrics`; everything else is the inner store's.

    Only what the caller calls is counted: a `delete` that reads and writes inside the store is
    one `delete`, as in Kafka's metered stores. The timed operations are per-instance functions
    made when the layer is built rather than methods, so a call through the layer is one
    Python call (a method would be two: itself and the sampling); the other attributes, read
    once per commit or query, go through `__getattr__`. Attributes set on the layer (the
    task's `context`) are set on the inner store, where the writes read them.
    """

    inner: Store

    def __init__(self, inner: Store, metrics: StoreMetrics, *, sample_every: int = 1) -> None:
        own = object.__setattr__
        own(self, "inner", inner)
        name, part = inner.name, inner.partition
        record = metrics.record_operation

        def wrap(fn: Callable[..., Any], op: str) -> Callable[..., Any]:
            if sample_every > 1:
                return _sampled(fn, name, part, op, record, sample_every)
            return _timed(fn, name, part, op, record)

        for op in TIMED_OPERATIONS:
            fn = getattr(inner, op, None)
            if fn is not None and callable(fn):
                own(self, op, wrap(fn, op))
        fused = getattr(inner, "timestamped_access", None)
        if fused is not None and callable(fused):
            # Aggregations take a fused (get, put) pair once and call it per record: time those
            # two as the store's get and put, or aggregation stores would vanish from the
            # metrics.
            def timestamped_access() -> tuple[Callable[..., Any], Callable[..., Any]]:
                get, put = fused()
                return wrap(get, "get"), wrap(put, "put")

            own(self, "timestamped_access", timestamped_access)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self.inner, attr, value)

    def read_only(self) -> ReadOnlyView:
        """Queries see the metered operations too."""
        return ReadOnlyView(self)

    def __repr__(self) -> str:
        return f"Metered({self.inner!r})"


def _sampled(
    fn: Callable[..., Any],
    name: str,
    part: int,
    op: str,
    record: Callable[..., None],
    every: int,
) -> Callable[..., Any]:
    """`fn`, counted on every call and timed on one call in `every`.

    This runs once or twice per record in an aggregation, so the untimed path is kept to a
    countdown and a call, and the clock and `record` run only on the timed call. When `fn`
    takes a fixed list of parameters (the stores' hot operations do), the wrapper is made with
    the same parameters: CPython then calls through it without packing an argument tuple,
    which took 60-80 ns off each call, a third of the wrapper's cost (bench/engine_cpu.py).
    """
    params = _fixed_parameters(fn)
    if params is not None:
        factory = _factory(params)
        wrapper: Callable[..., Any] = factory(fn, time.perf_counter, record, name, part, op, every)
        return functools.wraps(fn)(wrapper)
    clock = time.perf_counter
    left = every

    @functools.wraps(fn)
    def any_wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal left
        left -= 1
        if left:
            return fn(*args, **kwargs) if kwargs else fn(*args)
        left = every
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            record(name, part, op, clock() - t0, count=every)

    return any_wrapper


_SAMPLED_TEMPLATE = """
def factory(fn, clock, record, name, part, op, every):
    left = every
    def wrapper({params}):
        nonlocal left
        left -= 1
        if left:
            return fn({args})
        left = every
        t0 = clock()
        try:
            return fn({args})
        finally:
            record(name, part, op, clock() - t0, count=every)
    return wrapper
"""


def _fixed_parameters(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """The parameter names of `fn` if it takes only plain required or defaulted
    positional-or-keyword parameters, else None (a generic wrapper then)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    names = []
    for p in sig.parameters.values():
        if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or not p.name.isidentifier():
            return None
        if p.default is not inspect.Parameter.empty:
            return None  # a default would have to be copied: keep such calls generic
        names.append(p.name)
    if len(set(names)) != len(names) or set(names) & _FACTORY_NAMES:
        return None
    return tuple(names)


_FACTORY_NAMES = frozenset({"fn", "clock", "record", "name", "part", "op", "every", "left", "t0"})


@functools.cache
def _factory(params: tuple[str, ...]) -> Callable[..., Callable[..., Any]]:
    """A wrapper factory for functions of these parameters, compiled once per shape."""
    joined = ", ".join(params)
    # the wrapper takes the same names, so callers may pass them by keyword; it passes them on
    # by position, the cheapest call
    namespace: dict[str, Any] = {}
    exec(_SAMPLED_TEMPLATE.format(params=joined, args=joined), namespace)
    factory: Callable[..., Callable[..., Any]] = namespace["factory"]
    return factory


def _timed(
    fn: Callable[..., Any],
    name: str,
    part: int,
    op: str,
    record: Callable[[str, int, str, float], None],
) -> Callable[..., Any]:
    clock = time.perf_counter

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            record(name, part, op, clock() - t0)

    return wrapper
