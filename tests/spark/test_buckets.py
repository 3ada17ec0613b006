"""User keys in hash buckets of a task's Spark state (`kstream.spark.buckets`).

No Spark needed: `DictMap` stands in for a `MapState`; each batch opens a new `BucketedMap`
over the same map and layout, as a task does per micro-batch.
"""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.spark.buckets import BUCKET_TAG, FIRST, LOAD, BucketedMap
from kstream.spark.task_state import DictMap

TAG = b"g"


def _stored(m: DictMap) -> dict[int, dict[bytes, bytes]]:
    return {
        int.from_bytes(k[1:], "big"): pickle.loads(v)
        for k, v in m.data.items()
        if k.startswith(BUCKET_TAG)
    }


ops = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 400).map(lambda i: TAG + b"%d" % i),
            st.one_of(st.none(), st.binary(max_size=8)),
        ),
        max_size=150,
    ),
    min_size=1,
    max_size=8,
)


@given(ops)
@settings(max_examples=60, deadline=None)
def test_reads_match_a_dict_across_batches(batches: list[list[tuple[bytes, bytes | None]]]) -> None:
    inner, layout = DictMap(), {}  # type: ignore[var-annotated]
    ref: dict[bytes, bytes] = {}
    for batch in batches:
        m = BucketedMap(inner, layout, TAG)
        keys = [k for k, _ in batch]
        assert m.get_many(keys) == [ref.get(k) for k in keys]
        m.write_many(batch)
        for k, v in batch:
            if v is None:
                ref.pop(k, None)
            else:
                ref[k] = v
        fresh = BucketedMap(inner, layout, TAG)
        assert dict(fresh.items()) == ref
        assert layout["keys"] == len(ref)
        assert ref == {} or layout["keys"] <= LOAD * fresh.buckets
        for b, entries in _stored(inner).items():
            assert entries and all(fresh.bucket_of(k) == b for k in entries)


def test_buckets_grow_with_the_keys_and_stay_about_load_full() -> None:
    inner, layout = DictMap(), {}  # type: ignore[var-annotated]
    for batch in range(20):
        m = BucketedMap(inner, layout, TAG)
        m.write_many(
            [(TAG + b"key-%d" % i, b"v%d" % i) for i in range(batch * 1000, batch * 1000 + 1000)]
        )
    m = BucketedMap(inner, layout, TAG)
    assert layout["keys"] == 20_000
    assert m.buckets == -(-20_000 // LOAD)  # the fewest that keep LOAD keys per bucket
    assert layout["level"] == (m.buckets // FIRST).bit_length() - 1
    sizes = [len(b) for b in _stored(inner).values()]
    assert len(sizes) == m.buckets and sum(sizes) == 20_000
    assert max(sizes) <= 4 * LOAD  # linear hashing: buckets not split yet hold up to twice
    assert m.get_many([TAG + b"key-7", TAG + b"key-19999", TAG + b"nope"]) == [
        b"v7",
        b"v19999",
        None,
    ]


def test_a_batch_costs_a_read_and_a_write_per_bucket_it_touches() -> None:
    inner, layout = DictMap(), {}  # type: ignore[var-annotated]
    BucketedMap(inner, layout, TAG).write_many([(TAG + b"%d" % i, b"x") for i in range(100_000)])
    buckets = BucketedMap(inner, layout, TAG).buckets
    assert len(inner.data) == buckets
    inner.reads = inner.writes = inner.rounds = 0
    m = BucketedMap(inner, layout, TAG)
    touched = [TAG + b"%d" % i for i in range(0, 100_000, 997)]  # 101 of 100,000 keys
    assert m.get_many(touched) == [b"x"] * len(touched)
    m.write_many([(k, b"y") for k in touched])
    spread = len({m.bucket_of(k) for k in touched})
    assert (inner.rounds, inner.reads, inner.writes) == (2, spread, spread)
    assert 0 < spread <= len(touched)


def test_other_keys_pass_through_one_by_one() -> None:
    inner = DictMap()
    m = BucketedMap(inner, {}, TAG)
    m.put(b"m-meta", b"1")
    m.write_many([(b"d-page", b"2"), (TAG + b"k", b"3")])
    assert m.get(b"m-meta") == b"1" and inner.single_reads == 1
    assert m.get_many([b"d-page", TAG + b"k", b"d-none"]) == [b"2", b"3", None]
    assert sorted(m.items()) == [(b"d-page", b"2"), (TAG + b"k", b"3"), (b"m-meta", b"1")]
    m.remove(b"m-meta")
    m.remove(TAG + b"k")
    assert sorted(inner.data) == [b"d-page"]


class _Meta:
    """A task's metadata `ValueState`, as written by a kstream before the buckets."""

    def __init__(self, saved: dict[str, Any]) -> None:
        self.saved = pickle.dumps(saved, protocol=5)

    def exists(self) -> bool:
        return True

    def get(self) -> tuple[bytes]:
        return (self.saved,)


def test_a_task_refuses_state_kept_in_another_layout() -> None:
    """State a task cannot read as it is must not pass for empty: the task names what to do."""
    import pytest

    from kstream.dsl import StreamBuilder
    from kstream.errors import TopologyError
    from kstream.spark.task_processor import TaskProcessor
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("in").group_by_key().count().to_stream().to("out")
    plan = build_task_plan(b.build(), "layout-app")
    (sub,) = plan.stateful
    stores = plan.compiled.subtopologies[sub].stores
    task = TaskProcessor(plan.blob(), sub, [7], slots=1)
    task.partition_of = {7: 0}
    task.maps = {name: DictMap() for name in stores}  # type: ignore[misc]
    task.meta = _Meta({"stream_time": 5, "dirs": {}})  # type: ignore[assignment]
    with pytest.raises(TopologyError, match=f"sub-topology {sub}'s Spark state .* new checkpoint"):
        list(task.handleInputRows((7,), iter([]), None))
