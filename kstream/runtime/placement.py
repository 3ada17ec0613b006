"""Where the standby replicas of each task go: one deterministic function every instance computes.

Kafka Streams' group leader places standbys in its custom assignor and ships the result to
every member. confluent-kafka offers no custom assignor, so no one member decides here: every
instance reads the same inputs from the instance registry (kstream.runtime.instances: which
instances are live, which one holds each task's input partitions) and computes the same
placement with `place_standbys`, then keeps the standbys that fall to it. Two instances whose
views of the registry differ for a moment may both follow a task, or neither; the next view
settles it. No decision rests on the placement but where a warm copy is kept: the active task
is always the consumer group's choice.

The rules are Kafka's (DefaultStandbyTaskAssignor): a task's standbys go to distinct instances,
never to the one running it; each goes to the least loaded instance (active tasks plus
standbys placed so far), ties broken by a hash of (task, instance) rather than by name, so that
the first instances in name order do not collect every tie. With fewer other instances than
`replicas`, a task gets as many standbys as there are (Kafka logs this too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

__all__ = ["TaskId", "place_standbys", "standbys_for"]

TaskId = tuple[int, int]
"""(sub-topology, partition)"""


def _tie_break(task: TaskId, instance: str) -> bytes:
    """A stable pseudo-random order of the instances per task (the same in every process:
    Python's own `hash` of a string is salted per process)."""
    return hashlib.blake2b(f"{task[0]}_{task[1]}|{instance}".encode(), digest_size=8).digest()


def place_standbys(
    tasks: Iterable[TaskId],
    instances: Iterable[str],
    owners: Mapping[TaskId, str],
    replicas: int,
) -> dict[TaskId, tuple[str, ...]]:
    """The instances that keep a standby of each task in `tasks`.

    `instances`: the live instances; `owners`: the instance running each task (a task with no
    known owner is placed like the others, none of its standbys excluded, as Kafka places the
    standbys of a task whose active moves in the same assignment); `replicas`:
    num_standby_replicas. The result does not depend on the order of the inputs.
    """
    live = sorted(set(instances))
    load = dict.fromkeys(live, 0)
    for running in owners.values():
        if running in load:
            load[running] += 1
    out: dict[TaskId, tuple[str, ...]] = {}
    if replicas <= 0:
        return {task: () for task in sorted(set(tasks))}
    for task in sorted(set(tasks)):
        owner: str | None = owners.get(task)
        chosen: list[str] = []
        candidates = [i for i in live if i != owner]
        for _ in range(min(replicas, len(candidates))):
            best = min(
                (i for i in candidates if i not in chosen),
                key=lambda i: (load[i], _tie_break(task, i)),
            )
            chosen.append(best)
            load[best] += 1
        out[task] = tuple(sorted(chosen))
    return out


def standbys_for(instance: str, placement: Mapping[TaskId, tuple[str, ...]]) -> set[TaskId]:
    """The tasks `instance` keeps standbys of under `placement`."""
    return {task for task, holders in placement.items() if instance in holders}
