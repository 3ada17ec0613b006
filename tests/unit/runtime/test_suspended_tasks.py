"""Tasks given up in a rebalance keep their stores until its assignment (Kafka Streams'
suspended tasks): an eager rebalance revokes every task, and those it gives back resume from
the stores they had, restoring only what their changelogs gained meanwhile; the others' stores
close at the assignment. Driven on the mock cluster, under each guarantee."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from support.mock_runtime import SRC, cluster_with_input, counts, running, send

from kstream.dsl import StreamBuilder
from kstream.runtime.tasks import RuntimeTask

WORDS = [f"w{i} x{i % 3}" for i in range(40)]
GUARANTEES = ["at_least_once", "exactly_once", "exactly_once_v2"]


def _count_words() -> StreamBuilder:
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").flat_map_values(
        lambda line: line.split()
    ).group_by(lambda _k, word: word, key_serde="string").count(store="counts").to_stream().to(
        "counts", key_serde="string", value_serde="long"
    )
    return b


def _store(rt: RuntimeTask) -> object:
    """The task's count store as restored (the object a resumed task must get back)."""
    (store,) = [s for s in rt.restored_stores if s.name == "counts"]
    return store


def _final_counts(cluster: object) -> dict[str, int]:
    last: dict[str, int] = {}
    for word, n in counts(cluster):  # type: ignore[arg-type]
        last[word] = n
    return last


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_an_eager_rebalance_resumes_the_tasks_it_gives_back_from_their_stores(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(cluster, tmp_path, guarantee, topology=_count_words()) as r:
        assert r.thread.rebalance_protocol == "eager"
        r.turn(3)
        tm = r.thread.task_manager
        before = {k: _store(rt) for k, rt in tm.tasks.items() if k[0] == 1}
        assert len(before) == 2  # the count tasks, behind the repartition topic
        everything = [TopicPartition(t, p) for t, p in tm.task_of]
        tm.on_revoke(everything)
        assert tm.tasks == {}
        tm.on_assign(everything)
        after = {k: _store(rt) for k, rt in tm.tasks.items() if k[0] == 1}
        assert all(after[k] is before[k] for k in before)
        assert tm.tasks_resumed == len(before)  # the stateless tasks have no stores to keep
        send(cluster, *WORDS)
        r.turn(4)
    # every word seen twice: counts went on from the resumed stores
    assert _final_counts(cluster) == {w: 2 * n for w, n in _expected().items()}


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_the_stores_of_tasks_not_given_back_close_at_the_assignment(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(cluster, tmp_path, guarantee, topology=_count_words()) as r:
        r.turn(3)
        tm = r.thread.task_manager
        given_up = _store(tm.tasks[(1, 1)])
        kept = _store(tm.tasks[(1, 0)])
        everything = [TopicPartition(t, p) for t, p in tm.task_of]
        tm.on_revoke(everything)
        tm.on_assign([tp for tp in everything if tp.partition == 0])
        assert set(tm.tasks) == {(0, 0), (1, 0)}
        assert _store(tm.tasks[(1, 0)]) is kept
        with pytest.raises(Exception, match="closed"):
            given_up.get("w1")  # type: ignore[attr-defined]


def _expected() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in WORDS:
        for w in line.split():
            out[w] = out.get(w, 0) + 1
    return out
