"""How the stream thread splits a consumed batch by partition (`task_executor.by_partition`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kstream.runtime.task_executor import by_partition


@dataclass
class Msg:
    t: str
    p: int
    offset: int

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p


def _expected(msgs: list[Msg]) -> dict[tuple[str, int], list[Msg]]:
    out: dict[tuple[str, int], list[Msg]] = {}
    for m in msgs:
        out.setdefault((m.t, m.p), []).append(m)
    return out


def test_one_topic_runs_are_joined_per_partition_in_consumed_order() -> None:
    msgs = [Msg("a", p, o) for p, o in [(1, 0), (1, 1), (0, 0), (1, 2), (2, 0), (0, 1)]]
    got = by_partition(msgs)
    assert got == _expected(msgs)
    assert list(got) == [("a", 1), ("a", 0), ("a", 2)]  # partitions as they first appear


def test_several_topics_are_told_apart_by_topic_and_partition() -> None:
    msgs = [Msg(t, p, o) for t, p, o in [("a", 0, 0), ("b", 0, 0), ("a", 0, 1), ("b", 1, 0)]]
    got = by_partition(msgs)
    assert got == _expected(msgs)
    assert list(got) == [("a", 0), ("b", 0), ("b", 1)]


def test_an_empty_batch_has_no_partitions() -> None:
    assert by_partition([]) == {}


@dataclass
class Other:
    where: tuple[str, int]

    def topic(self) -> str:
        return self.where[0]

    def partition(self) -> int:
        return self.where[1]


def test_messages_of_several_classes_are_each_asked_their_own() -> None:
    msgs: list[Any] = [Msg("a", 0, 0), Other(("a", 1)), Msg("a", 0, 1)]
    got = by_partition(msgs)
    assert got == {("a", 0): [msgs[0], msgs[2]], ("a", 1): [msgs[1]]}
