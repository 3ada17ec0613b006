"""Refreshes the gauges of an App's metrics that are read at scrape time.

The runtime feeds `app.metrics` itself (counters, histograms, lag) from its stream thread;
what is left for scrape time is cheap state that any thread may read: the app state, the
assigned partitions and the number of tasks still restoring.
"""

from __future__ import annotations

from typing import Any

from kstream.metrics import Metrics

__all__ = ["Probe", "assigned_partitions", "attach"]


def assigned_partitions(app: Any) -> list[tuple[str, int]]:
    """The input (topic, partition) pairs this instance holds right now."""
    fn = getattr(app, "assigned_partitions", None)
    if callable(fn):
        return sorted((str(t), int(p)) for t, p in fn())
    stream = getattr(app, "_stream", None)
    tasks = getattr(stream, "tasks", None) or {}
    out: list[tuple[str, int]] = []
    for rt in list(tasks.values()):
        out.extend((str(t), int(p)) for t, p in getattr(rt, "tps", ()))
    return sorted(out)


class Probe:
    """Keeps the scrape-time gauges of `metrics` in step with `app`."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    def sample(self) -> None:
        """Refresh state, assignment and restoring before a scrape."""
        m, app = self.metrics, self.app
        state = getattr(app, "state", None)
        if state is not None:
            m.set_state(str(getattr(state, "value", state)))
        m.set_assigned(assigned_partitions(app))
        ctx = getattr(app, "_ctx", None)
        if ctx is not None:
            m.set_restoring(int(getattr(ctx, "restoring", 0) or 0))


def attach(app: Any, instance_id: str = "") -> Probe:
    """The probe of a kstream `App`, whose runtime keeps `app.metrics`."""
    metrics = getattr(app, "metrics", None)
    if not isinstance(metrics, Metrics):
        raise TypeError(f"{app!r} has no kstream metrics (expected a kstream.App)")
    if instance_id:
        metrics.instance_id = instance_id
    return Probe(app, metrics)
