"""The standby placement (kstream.runtime.placement): the one function every instance computes
the same way from the instance registry, so that no assignor is needed to agree on it."""

from __future__ import annotations

import itertools
import random

import pytest

from kstream.runtime.placement import TaskId, place_standbys, standbys_for

TASKS: list[TaskId] = [(s, p) for s in range(2) for p in range(6)]
INSTANCES = ["a", "b", "c"]


def round_robin(tasks: list[TaskId], instances: list[str]) -> dict[TaskId, str]:
    return {t: instances[i % len(instances)] for i, t in enumerate(tasks)}


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_standby_is_never_placed_with_its_active_task(replicas: int) -> None:
    owners = round_robin(TASKS, INSTANCES)
    placed = place_standbys(TASKS, INSTANCES, owners, replicas)
    for task, holders in placed.items():
        assert owners[task] not in holders, task
        assert len(holders) == replicas == len(set(holders)), task


def test_standbys_spread_evenly_over_the_instances() -> None:
    owners = round_robin(TASKS, INSTANCES)
    for replicas in (1, 2):
        placed = place_standbys(TASKS, INSTANCES, owners, replicas)
        load = {i: sum(i in h for h in placed.values()) for i in INSTANCES}
        assert sum(load.values()) == len(TASKS) * replicas
        assert max(load.values()) - min(load.values()) <= 1, load


def test_load_counts_active_tasks() -> None:
    """An instance that runs no task (more instances than tasks need) is the least loaded,
    so standbys go there first, and active plus standby tasks stay balanced."""
    tasks: list[TaskId] = [(0, 0), (0, 1), (0, 2), (0, 3)]
    owners = {(0, 0): "a", (0, 1): "a", (0, 2): "b", (0, 3): "b"}
    placed = place_standbys(tasks, ["a", "b", "idle"], owners, 1)
    assert placed[(0, 0)] == ("idle",)  # the first task placed goes to the idle instance
    load = {i: sum(i in h for h in placed.values()) for i in ("a", "b", "idle")}
    load["a"] += 2
    load["b"] += 2
    assert max(load.values()) - min(load.values()) <= 1, load


def test_the_placement_does_not_depend_on_the_order_of_its_inputs() -> None:
    owners = round_robin(TASKS, INSTANCES)
    expected = place_standbys(TASKS, INSTANCES, owners, 1)
    rng = random.Random(7)
    for perm in itertools.islice(itertools.permutations(INSTANCES), 6):
        tasks = list(TASKS)
        rng.shuffle(tasks)
        shuffled_owners = dict(rng.sample(sorted(owners.items()), len(owners)))
        assert place_standbys(tasks, list(perm), shuffled_owners, 1) == expected


def test_fewer_instances_than_replicas_give_as_many_standbys_as_there_are() -> None:
    owners = {(0, 0): "a"}
    assert place_standbys([(0, 0)], ["a", "b"], owners, 3) == {(0, 0): ("b",)}
    assert place_standbys([(0, 0)], ["a"], owners, 1) == {(0, 0): ()}


def test_a_task_without_a_known_owner_still_gets_its_standbys() -> None:
    placed = place_standbys([(0, 0)], ["a", "b"], {}, 1)
    assert len(placed[(0, 0)]) == 1


def test_no_replicas_places_nothing() -> None:
    owners = round_robin(TASKS, INSTANCES)
    assert all(h == () for h in place_standbys(TASKS, INSTANCES, owners, 0).values())


def test_each_instance_finds_its_own_share() -> None:
    owners = round_robin(TASKS, INSTANCES)
    placed = place_standbys(TASKS, INSTANCES, owners, 1)
    shares = [standbys_for(i, placed) for i in INSTANCES]
    assert set().union(*shares) == set(TASKS)
    assert sum(len(s) for s in shares) == len(TASKS)  # each task's one standby, once
