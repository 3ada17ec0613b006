"""Store operation metrics belong to the debug recording level, as in Kafka Streams: at the
default (info) a store's calls are neither counted nor timed, and its other metrics stay."""

from __future__ import annotations

import inspect
from pathlib import Path

from support.mock_runtime import cluster_with_input, latest, running


def _count_words(tmp_path: Path, **config: str) -> tuple[dict[tuple[str, str], int], bool]:
    """The store operations counted while counting words, and whether the store's `put` is
    the typed store's own method (bound, through any layer), not a timing wrapper."""
    cluster = cluster_with_input(*["w"] * 32, partitions=1)
    with running(cluster, tmp_path, "exactly_once", **config) as r:
        r.turn(3)
        assert latest(cluster) == {"w": 32}
        stores = [
            s for t in r.thread.tasks.values() for s in t.task.stores.values() if s.name == "counts"
        ]
        assert stores
        unwrapped = all(inspect.ismethod(s.put) for s in stores)
        return dict(r.app.metrics.store_ops), unwrapped


def test_info_records_no_store_operations(tmp_path: Path) -> None:
    ops, unwrapped = _count_words(tmp_path)
    assert ops == {}
    assert unwrapped


def test_debug_counts_every_store_operation(tmp_path: Path) -> None:
    ops, unwrapped = _count_words(tmp_path, metrics_recording_level="debug")
    assert not unwrapped
    # 32 words, each read and written once in the counts store; counts move in steps of 16
    # (kstream.metrics.STORE_TIMING_SAMPLE_EVERY), which the three commits' flushes do not fill
    assert ops == {("counts", "get"): 32, ("counts", "put"): 32}
