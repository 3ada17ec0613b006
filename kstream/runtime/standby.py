"""Standby replicas (Kafka's `num.standby.replicas`): warm copies of other instances' stores.

A standby task keeps the changelogged stores of a task that another instance runs and applies
that task's changelog records to them as they are committed, with no processing and no commit
of input offsets: only its own checkpoint of the changelog offset, written with each batch of
records in the same backend write, exactly as a restore writes it. When the group then gives
the task to this instance (a failover, a rebalance), its new active task starts from the
standby's stores and restores only the tail of the changelog from that checkpoint.

One implementation of restore: a standby applies records with the restore's own step
(`kstream.state.restore.apply_batch`: the same checks, the same `on_restore_error` policy, the
same atomic checkpoint), and the hand-over passes the standby's open stores to the restore
(`open_and_restore_all(given=...)`), which goes on from their checkpoints. In-memory stores
are handed over in-process, as objects; an LMDB store the same way, and if this instance stops
its files and checkpoint stay, so a restart restores only the tail too.

Exactly-once: the standby's consumer reads `read_committed` (the engine's consumer default),
so it applies committed changelog records only, as the active task's own restore does, and the
stores it hands over hold nothing uncommitted. A store's write cache is empty when it becomes a
standby (a task commits or rolls back before it closes; whatever is left is discarded).

Which tasks: under `rebalance_protocol="streams"` the group's coordinator places them (the
standby and warm-up tasks of this member's target, handed over by `follow`). Otherwise every
instance computes the same placement (kstream.runtime.placement) from the instance registry
(kstream.runtime.instances: the live instances and the instance running each task) and keeps
the standbys that fall to it, checked every `PLACEMENT_S`; a task whose
partitions this instance gives up in a rebalance stays as a standby (its stores parked here,
Kafka's task recycling) until the next placement says otherwise. A store kept outside the
process (Redis) has no standby: its state already survives the instance.

The stream thread drives all of it between batches (`tick`), as Kafka's stream thread updates
its standby tasks: reading and applying never overlaps processing or a rebalance callback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kstream.kafka.consumer import Consumer, to_end_settings
from kstream.kafka.supplier import ClientConfig
from kstream.metrics import Metrics
from kstream.runtime.placement import TaskId, place_standbys, standbys_for
from kstream.runtime.task_restore import task_store_parts
from kstream.runtime.tasks import TP, RuntimeContext
from kstream.state import Store
from kstream.state.restore import Restoring, apply_batch, open_for_restore

log = logging.getLogger("kstream.runtime")

__all__ = ["PLACEMENT_S", "Membership", "StandbyTask", "StandbyTasks", "keepable"]

PLACEMENT_S = 0.25
"""How often the thread publishes what it holds and checks the placement of standbys."""
WARMUP_MAX_S = 600.0
"""The longest an instance warms up before it joins the group anyway: Kafka's
`probing.rebalance.interval.ms` (10 minutes), after which its assignor looks again."""
LINGER_S = 30.0
"""How long a standby the Streams group's coordinator stopped listing is kept (`follow`)."""
FOLLOW_FETCH_WAIT_MS = 100
"""The standby consumer's fetch wait: how far behind the active task's commits a standby may
lag when the changelog is quiet (a busy changelog's fetches are answered at once)."""


class Member(Protocol):
    """One instance as the registry shows it."""

    @property
    def instance_id(self) -> str: ...

    @property
    def offset(self) -> int: ...

    @property
    def partitions(self) -> dict[str, list[int]]: ...


class Membership(Protocol):
    """What the standbys need of the instance registry (kstream.runtime.instances)."""

    @property
    def instance_id(self) -> str: ...

    def live(self) -> Iterable[Member]:
        """The instances heard of lately."""
        ...

    def publish(
        self, partitions: Iterable[tuple[str, int]], standbys: Iterable[tuple[str, int]] = ()
    ) -> bool:
        """Publish the input partitions of this instance's active and standby tasks."""
        ...

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until the registry has been read to its end (True), at most `timeout` s."""
        ...


@dataclass
class StandbyTask:
    """The standby replica of one task: its changelogged stores and how far each has read."""

    key: TaskId
    stores: dict[str, Store]
    # changelog (topic, partition) -> the store reading it
    states: dict[TP, Restoring] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.key[0]}_{self.key[1]}"

    def close(self) -> None:
        for store in self.stores.values():
            try:
                store.close()
            except Exception as e:
                log.warning("standby task %s: closing store %r: %s", self.id, store.name, e)


def keepable(stores: Iterable[Store]) -> tuple[dict[str, Store], list[Store]]:
    """Split the stores of a task this instance gives up into those a copy of the task may
    keep (by name: changelogged stores held in the process, their uncommitted writes discarded,
    so the copy holds committed data only and a restore goes on from its checkpoint) and the
    rest, which the caller closes (no changelog to catch up from, or kept outside the
    process)."""
    kept: dict[str, Store] = {}
    rest: list[Store] = []
    for store in stores:
        if store.spec.changelog and getattr(store.backend, "check_intact", None) is None:
            store.discard()
            kept[store.name] = store
        else:
            rest.append(store)
    return kept, rest


class StandbyTasks:
    """The standby tasks of one stream thread, and the consumer that keeps them current."""

    def __init__(
        self,
        ctx: RuntimeContext,
        membership: Membership | None,
        metrics: Metrics,
        batch: int = 10_000,
    ) -> None:
        """`membership`: the instance registry (None: this instance knows no others, so it
        publishes nothing and keeps no standbys)."""
        self.ctx = ctx
        self.replicas = ctx.config.num_standby_replicas
        self.membership = membership
        self.metrics = metrics
        self.tasks: dict[TaskId, StandbyTask] = {}
        self._batch = batch
        self._consumer: Consumer | None = None
        self._assigned: set[TP] = set()
        self._eof_applied: dict[TP, int] = {}
        self._next_check = 0.0
        # tasks whose stores live outside the process (no standby: nothing to keep warm)
        self._remote: set[TaskId] = set()
        # the standbys the Streams group's coordinator placed here (None: not that protocol),
        # and those it stopped listing, kept until a deadline (`follow`)
        self._broker_placed: set[TaskId] | None = None
        self._lingering: set[TaskId] = set()
        self._linger_until = 0.0

    @property
    def enabled(self) -> bool:
        return self.replicas > 0 and (
            self.membership is not None or self._broker_placed is not None
        )

    def follow(self, tasks: Iterable[TaskId], now: float | None = None) -> None:
        """Keep standbys of `tasks` from the next turn on (the Streams group's coordinator
        placed them: `rebalance_protocol="streams"`), not the registry's placement.

        A standby the coordinator stops listing stays for `LINGER_S` more (or until the next
        call): the coordinator lists a task it moves here as neither standby nor active while
        its owner still runs it, and the task then arrives as active. Dropped at once, its
        copy would be rebuilt from its changelog's start (seen: 564 records restored from 0
        where the standby had them all); kept, the new active task takes it over."""
        now = time.monotonic() if now is None else now
        new = set(tasks)
        # what it holds now, the copies warmed up before joining (`warm_up`) included
        self._lingering = set(self.tasks) - new
        self._linger_until = now + LINGER_S
        self._broker_placed = new
        self._next_check = 0.0

    # --- the stream thread's turn -----------------------------------------------------------

    def tick(self, active: Mapping[TaskId, Any], now: float | None = None) -> int:
        """Between batches: every `PLACEMENT_S` publish what this instance holds and follow
        the placement; then apply what the changelogs brought. `active`: the thread's tasks
        by id (each with `tps`). Returns the records applied."""
        now = time.monotonic() if now is None else now
        placing = self.membership is not None or self._broker_placed is not None
        if placing and now >= self._next_check:
            self._next_check = now + PLACEMENT_S
            if self.enabled:
                self._follow_placement(active)
            if self.membership is not None:
                self._publish(active)
        return self._poll()

    def _publish(self, active: Mapping[TaskId, Any]) -> None:
        assert self.membership is not None
        parts = sorted(tp for rt in active.values() for tp in rt.tps)
        try:
            self.membership.publish(parts, self.standby_partitions())
        except Exception as e:
            log.warning("publishing the assignment: %s", e)

    def standby_partitions(self) -> list[TP]:
        """The input partitions of the tasks this instance keeps standbys of."""
        subs = self.ctx.compiled.subtopologies
        # a copy of the keys: the HTTP server's threads ask while the stream thread changes them
        return sorted((t, p) for sid, p in list(self.tasks) for t in subs[sid].source_topics)

    def eligible(self) -> list[TaskId]:
        """Every task that has a changelogged store (and so can have a standby)."""
        compiled, counts = self.ctx.compiled, self.ctx.partition_counts
        out: list[TaskId] = []
        for sub in compiled.subtopologies:
            specs = [compiled.topology.stores[n] for n in sub.stores]
            if not any(s.changelog for s in specs) or not sub.source_topics:
                continue
            n = max(counts.get(t, 0) for t in sub.source_topics)
            out += [(sub.id, p) for p in range(n) if (sub.id, p) not in self._remote]
        return out

    def placement(self, active: Mapping[TaskId, Any]) -> set[TaskId]:
        """The tasks this instance should keep standbys of, by the registry's view now."""
        return self._placed(active)[0]

    def _placed(self, active: Mapping[TaskId, Any]) -> tuple[set[TaskId], set[TaskId]]:
        """`placement(active)`, and the tasks no instance runs by the registry's view now (on
        their way from one instance to another in a rebalance, say)."""
        if self._broker_placed is not None:
            keep = self._lingering if time.monotonic() < self._linger_until else set()
            return self._broker_placed - set(active) - self._remote, keep
        assert self.membership is not None
        me = self.membership.instance_id
        live = list(self.membership.live())
        topic_sub = {
            sub.source_topics[0]: sub.id
            for sub in self.ctx.compiled.subtopologies
            if sub.source_topics
        }
        owners: dict[TaskId, str] = {}
        for member in sorted(live, key=lambda m: m.offset):  # the newest claim wins
            if member.instance_id == me:
                continue  # this instance's own tasks: from the thread, not its last record
            for topic, parts in member.partitions.items():
                sid = topic_sub.get(topic)
                if sid is not None:
                    for p in parts:
                        owners[(sid, p)] = member.instance_id
        for key in active:
            owners[key] = me
        instances = {m.instance_id for m in live} | {me}
        eligible = self.eligible()
        placed = place_standbys(eligible, instances, owners, self.replicas)
        return standbys_for(me, placed) - set(active), set(eligible) - set(owners)

    def _follow_placement(self, active: Mapping[TaskId, Any]) -> None:
        wanted, ownerless = self._placed(active)
        changed = False
        # A task that no instance runs yet is placed as if its owner were unknown, which may
        # put its standby elsewhere for now. Its copy here stays until its new owner claims
        # it: this instance just gave it up (a task kept as a standby), and once the owner is
        # known the placement may well want it here (with two instances it always does), when
        # dropping it meant rebuilding it from its changelog's start.
        for key in [k for k in self.tasks if k not in wanted and k not in ownerless]:
            self._drop(key)
            changed = True
        for key in sorted(wanted - set(self.tasks)):
            changed |= self._add(key)
        if changed:
            self._reassign()
            log.info("standby tasks now %s", sorted(t.id for t in self.tasks.values()))

    # --- warming up before joining (KIP-441) ------------------------------------------------

    def warm_up(self, stop: threading.Event, acceptable: int, max_s: float = WARMUP_MAX_S) -> bool:
        """Before this instance joins the group: follow the standbys the placement gives it
        until each is within `acceptable` changelog records of its end (Kafka's
        acceptable.recovery.lag), so that a task the group then moves here starts warm.

        Only while other instances run tasks: they go on processing meanwhile, which is what
        waiting buys (an instance starting alone joins at once). The placement counts this
        instance, which runs nothing yet, as the least loaded: the standbys go to it first.
        Which tasks the group gives it is the group assignor's choice, not this one's; a task
        it gets without a standby here restores in full, as without a warm-up. Returns True
        if it waited for anything."""
        if not self.enabled or acceptable < 0:
            return False
        assert self.membership is not None
        cfg = self.ctx.config
        if not self.membership.wait_caught_up(cfg.connect_timeout / 1000):
            log.warning("warm-up: the instance registry was not read to its end; joining")
            return False
        me = self.membership.instance_id
        if not any(m.partitions for m in self.membership.live() if m.instance_id != me):
            return False
        t0 = time.monotonic()
        self._next_check = 0.0
        self.tick({}, t0)
        if not self.tasks:
            return False
        log.info(
            "warming up standby tasks %s before joining the group (acceptable_recovery_lag %d)",
            sorted(t.id for t in self.tasks.values()),
            acceptable,
        )
        while not stop.is_set():
            behind = self._behind(acceptable)
            if not behind:
                log.info(
                    "warmed up standby tasks %s in %.1fs; joining the group",
                    sorted(t.id for t in self.tasks.values()),
                    time.monotonic() - t0,
                )
                return True
            if time.monotonic() - t0 > max_s:
                log.warning(
                    "warm-up: changelog partitions %s still behind after %gs; joining anyway",
                    behind,
                    max_s,
                )
                return True
            if self.tick({}) == 0:
                stop.wait(0.01)
        return True

    def _behind(self, acceptable: int) -> list[str]:
        """The changelog partitions of the standbys more than `acceptable` records behind
        their end, or whose end no fetch has told yet."""
        lag = self.lag()
        return sorted(
            f"{t}[{p}]"
            for task in self.tasks.values()
            for t, p in task.states
            if lag.get((t, p)) is None or lag[(t, p)] > acceptable
        )

    # --- adding, parking, handing over -----------------------------------------------------

    def _add(self, key: TaskId) -> bool:
        """Open the changelogged stores of task `key` as a standby (False: it has none kept in
        the process)."""
        cfg, ctx = self.ctx.config, self.ctx
        stores: dict[str, Store] = {}
        try:
            for spec, partition in task_store_parts(ctx, *key):
                if not spec.changelog:
                    continue
                store, _ = open_for_restore(
                    spec,
                    app_id=ctx.app_id,
                    partition=partition,
                    state_dir=cfg.state_dir,
                    default_backend=cfg.default_backend,
                )
                stores[spec.name] = store
                if getattr(store.backend, "check_intact", None) is not None:
                    raise _Remote(spec.name)
        except _Remote as e:
            for store in stores.values():
                store.close()
            self._remote.add(key)
            log.info("task %d_%d: store %r is kept outside the process: no standby", *key, e)
            return False
        except BaseException:
            for store in stores.values():
                store.close()
            raise
        if not stores:
            return False
        self._keep(key, stores)
        return True

    def _keep(self, key: TaskId, stores: Mapping[str, Store]) -> None:
        task = StandbyTask(key, dict(stores))
        for store in stores.values():
            tp = (store.spec.changelog_topic(self.ctx.app_id), store.partition)
            task.states[tp] = Restoring(store, False, None)
        self.tasks[key] = task
        self.metrics.set_standby_tasks(len(self.tasks))

    def park(self, key: TaskId, stores: Iterable[Store]) -> list[Store]:
        """Keep the stores of active task `key`, which this instance gives up, as its standby
        (Kafka recycles such a task into a standby); the placement drops it later if another
        instance is to keep it. Returns the stores not kept (the caller closes them): all of
        them when standbys are off, those without a changelog, remote ones."""
        given = list(stores)
        if not self.enabled or key in self.tasks:
            return given
        kept, rest = keepable(given)
        if kept:
            self._keep(key, kept)
            self._reassign()
            log.info("task %d_%d: kept as a standby", *key)
            # as every change of the set is logged (the placement may leave it as it is)
            log.info("standby tasks now %s", sorted(t.id for t in self.tasks.values()))
        return rest

    def take(self, key: TaskId) -> dict[str, Store]:
        """Hand the stores of standby task `key` to its new active task (empty when there is
        no standby of it here): the restore goes on from their checkpoints."""
        task = self.tasks.pop(key, None)
        if task is None:
            return {}
        self._forget(task)
        self._reassign()
        log.info(
            "task %s: taking over its standby stores at changelog offsets %s",
            task.id,
            {f"{t}[{p}]": st.next for (t, p), st in sorted(task.states.items())},
        )
        return task.stores

    def _drop(self, key: TaskId) -> None:
        task = self.tasks.pop(key)
        self._forget(task)
        task.close()
        log.info("standby task %s dropped (placed elsewhere)", task.id)

    def _forget(self, task: StandbyTask) -> None:
        """Drop what is kept about `task`'s changelog partitions (its lag series included)."""
        for tp, st in task.states.items():
            self._eof_applied.pop(tp, None)
            self.metrics.set_standby_lag(st.store.name, tp[1], None)
        self.metrics.set_standby_tasks(len(self.tasks))

    # --- following the changelogs -----------------------------------------------------------

    def _states(self) -> dict[TP, Restoring]:
        return {tp: st for task in self.tasks.values() for tp, st in task.states.items()}

    def _reassign(self) -> None:
        """Point the consumer at every standby store's changelog partition, each from the
        offset its store has reached."""
        states = self._states()
        if not states and self._consumer is None:
            return
        consumer = self._consumer_now()
        consumer.assign([(t, p, st.next) for (t, p), st in sorted(states.items())])
        self._assigned = set(states)

    def _consumer_now(self) -> Consumer:
        if self._consumer is None:
            cfg = self.ctx.config
            kafka = {**to_end_settings(cfg.kafka), "fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS}
            self._consumer = self.ctx.client_supplier.restore_consumer(
                ClientConfig(self.ctx.bootstrap_servers, kafka, cfg.connect_timeout)
            )
        return self._consumer

    def _poll(self) -> int:
        """Apply what the consumer has (no wait), and set the standbys' lag."""
        consumer = self._consumer
        if consumer is None or not self._assigned:
            return 0
        states = self._states()
        msgs = consumer.consume_batch(self._batch, 0)
        ended: dict[TP, int] = {}
        for tp, st in states.items():
            eof = consumer.eof_offset(*tp)
            if eof is not None and eof >= st.next and self._eof_applied.get(tp) != eof:
                ended[tp] = eof
                self._eof_applied[tp] = eof
        applied = 0
        if msgs or ended:
            applied = apply_batch(states, msgs, ended, None, self.ctx.config.on_restore_error)
            self.metrics.standby_applied(applied)
        for tp, st in states.items():
            high = consumer.high_watermark(*tp)
            if high is not None:
                self.metrics.set_standby_lag(st.store.name, tp[1], max(0, high - st.next))
        return applied

    def lag(self) -> dict[TP, int]:
        """Records each standby store is behind its changelog's end, as last fetched."""
        consumer = self._consumer
        out: dict[TP, int] = {}
        if consumer is None:
            return out
        for tp, st in self._states().items():
            high = consumer.high_watermark(*tp)
            if high is not None:
                out[tp] = max(0, high - st.next)
        return out

    # --- queries and the end ----------------------------------------------------------------

    def views(self, name: str) -> list[Any]:
        """Read-only views of the standby copies of store `name` (stale reads)."""
        return [
            task.stores[name].read_only()
            for task in list(self.tasks.values())
            if name in task.stores
        ]

    def close(self) -> None:
        """Close the consumer and every standby store (an LMDB store keeps its files and
        checkpoint: a restart goes on from there)."""
        for key in list(self.tasks):
            task = self.tasks.pop(key)
            self._forget(task)
            task.close()
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception as e:
                log.warning("closing the standby consumer: %s", e)
            self._consumer = None


class _Remote(Exception):
    """A task's store is kept outside the process (its name is the message)."""
