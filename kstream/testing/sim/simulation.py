"""One simulated run: a seed decides everything, and the invariants are checked at its end.

From its seed a run picks its settings (partitions, batch sizes, commit interval, store
backend, record cache, rebalance protocol), its input, how many instances start, and then, step
by step, which instance takes its next loop turn, when input arrives, and which fault strikes
(a crash, a restart, an instance joining or leaving, a pause longer than the session or
transaction timeout, a failed client call, a user function slower than the transaction
timeout, a rebalance in the middle of a commit). After the faults stop, crashed instances
restart and the run goes on until every input is processed and committed.

Invariants, checked on every run:

* liveness: once the faults stop, everything is processed and committed within
  `Options.heal_bound_s` of virtual time, and no instance's stream thread stopped on an error
  (a fence loop or a stuck rebalance fails here);
* exactly-once: the read_committed outputs equal the fault-free `TopologyTestDriver` run of the
  same input as the topology allows (`kstream.testing.sim.topologies`); under at_least_once
  every expected output is there (duplicates are allowed).

The run's trace (every step, rebalance and transaction end, with its virtual time) is hashed:
the same seed gives the same hash, which is how a failing seed is known to replay.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import tempfile
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kstream.testing.sim.broker import SimKafka
from kstream.testing.sim.clock import VirtualClock, patched_time
from kstream.testing.sim.faults import FAULTS, faults_for
from kstream.testing.sim.hooks import CallHooks
from kstream.testing.sim.instance import APP_ID, Instance
from kstream.testing.sim.oracle import Outputs, compare, expected
from kstream.testing.sim.patches import LmdbEnvironments, patched_runtime
from kstream.testing.sim.producer import SimProducer
from kstream.testing.sim.registry import SimRegistryTopic
from kstream.testing.sim.topologies import SCENARIOS, InputRecord, Work

__all__ = ["GUARANTEES", "Options", "Outcome", "pick", "simulate"]

GUARANTEES = ("exactly_once_v2", "exactly_once", "at_least_once")
MAX_SLOTS = 3


@dataclass(frozen=True)
class Options:
    """What one run is. `topology`/`guarantee` None: the seed picks them."""

    seed: int
    topology: str | None = None
    guarantee: str | None = None
    #: False: no faults at all (the runtime against the oracle alone)
    faults: bool = True
    #: a named plan instead of random faults ("slow_user_function": the fence-loop recipe)
    plan: str | None = None
    #: fault names never planted (kstream.testing.sim.faults)
    exclude: tuple[str, ...] = ()
    #: faults of a known open defect (faults.OPEN) planted too
    include: tuple[str, ...] = ()
    heal_bound_s: float = 120.0
    max_turns: int = 30_000
    verbose: bool = False


@dataclass
class Outcome:
    seed: int
    topology: str
    guarantee: str
    failures: list[str]
    trace_hash: str
    virtual_s: float
    turns: int
    stats: dict[str, int] = field(default_factory=dict)
    log_tail: list[str] = field(default_factory=list)
    #: the last events of the trace (a failed run's)
    trace_tail: list[str] = field(default_factory=list)
    #: the run's other options, as command-line flags (part of its replay command)
    flags: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures

    def replay(self) -> str:
        return (
            f".venv/bin/python -m kstream.testing.sim --seed {self.seed} "
            f"--topology {self.topology} --guarantee {self.guarantee}{self.flags}"
        )


def _flags(opts: Options) -> str:
    """The command-line flags of `opts` beyond seed, topology and guarantee."""
    out = ""
    for flag, names in (("--exclude", opts.exclude), ("--include", opts.include)):
        if names:
            out += f" {flag} {','.join(names)}"
    if opts.plan:
        out += f" --plan {opts.plan}"
    if not opts.faults:
        out += " --no-faults"
    return out


def pick(seed: int, topology: str | None, guarantee: str | None) -> tuple[str, str]:
    """The topology and guarantee of `seed` (those given are kept)."""
    rng = random.Random(f"pick-{seed}")
    name = topology or rng.choice(sorted(SCENARIOS))
    allowed = SCENARIOS[name].guarantees
    return name, guarantee or rng.choice(allowed)


class _Tail(logging.Handler):
    """Keeps the runtime's last log lines (for a failure's report), counts rejoins and the
    active tasks that started from a standby's stores (a standby failover)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(logging.INFO)
        self.clock = clock
        self.lines: deque[str] = deque(maxlen=60)
        self.rejoins = 0
        self.standby_takeovers = 0
        self.current = ""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "leaving and rejoining the group" in text:
            self.rejoins += 1
        elif "taking over its standby stores" in text:
            self.standby_takeovers += 1
        self.lines.append(f"{self.clock.now:9.3f} {self.current} {record.levelname} {text[:300]}")


class _Run:
    """The state of one run (see the module docstring)."""

    def __init__(self, opts: Options, topology: str, guarantee: str, tmp: str) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.scenario = SCENARIOS[topology]
        self.guarantee = guarantee
        self.tmp = tmp
        self.clock = VirtualClock()
        self.trace: list[str] = []
        self.cluster = SimKafka(self.clock, self.event)
        self.work = Work()
        self.envs = LmdbEnvironments()
        self.failures: list[str] = []
        self.turns = 0
        self.stats: dict[str, int] = {}
        self.tail = _Tail(self.clock)
        rng = self.rng
        self.partitions = rng.choice([1, 2, 3, 4])
        self.records = self.scenario.records(rng, rng.randint(20, 80))
        self.config: dict[str, Any] = {
            "commit_interval": rng.choice([20, 100, 500, 2000]),
            "batch_max_records": rng.choice([1, 4, 16, 200]),
            "batch_max_wait": rng.choice([10, 50, 100]),
            "default_backend": rng.choice(["memory", "lmdb://?sync=false"]),
            "cache_max_bytes": rng.choice([0, 0, 1 << 20]),
            "rebalance_protocol": rng.choice(["cooperative", "eager"]),
            "repartition_purge_interval": rng.choice([100, 30_000]),
            "broker_compat": "none",
            "slow_rebalance_warning": 0,
            "future_timestamp_warning": 0,
            # standby replicas (kstream.runtime.standby) over the run's instance registry
            "num_standby_replicas": rng.choice([0, 0, 1]),
        }
        if opts.plan == "slow_user_function":
            # one record per batch and a commit a second: a transaction is open (its first
            # records written) when the slow call comes, as under a steady flow of input
            self.config.update(batch_max_records=1, commit_interval=1000, cache_max_bytes=0)
        elif opts.plan == "standby_failover":
            self.config.update(num_standby_replicas=1)
        self.event(
            f"run {topology} {guarantee} partitions={self.partitions} "
            f"records={len(self.records)} {sorted(self.config.items())}"
        )
        for topic in self.scenario.inputs:
            self.cluster.create_topic(topic, self.partitions)
        for topic in self.scenario.outputs:
            self.cluster.create_topic(topic, self.partitions)
        self.registry = SimRegistryTopic(self.clock)
        self.feeder = SimProducer(self.cluster, CallHooks("feeder"))
        preload = [r for r in self.records if r.topic in self.scenario.preload]
        self.pending: deque[InputRecord] = deque(
            r for r in self.records if r.topic not in self.scenario.preload
        )
        for r in preload:
            self._write(r)
        self.instances: dict[int, Instance] = {}
        self.incarnations = [0] * MAX_SLOTS
        #: slots whose instance crashed (restarted once the faults stop)
        self.crashed: set[int] = set()
        #: slots whose instance is in its graceful close: its state directory (and the LMDB
        #: environments in it) is still in use until the close returns, so no instance may
        #: start there meanwhile, as a second process could not take the directory's lock
        self.closing: set[int] = set()
        #: instances with a call under way (a turn, an open, a close), innermost last: a hook
        #: in one may act on another, whose own hook may act again (`mid_commit`)
        self.active: list[Instance] = []

    # --- the trace ---------------------------------------------------------------------------

    def event(self, text: str) -> None:
        self.trace.append(f"{self.clock.now:.3f} {text}")

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    # --- input -------------------------------------------------------------------------------

    def _write(self, r: InputRecord) -> None:
        self.feeder.produce(r.topic, r.value, r.key, None, r.timestamp)

    def feed(self, n: int) -> None:
        for _ in range(min(n, len(self.pending))):
            self._write(self.pending.popleft())

    # --- instances ---------------------------------------------------------------------------

    def start(self, slot: int) -> Instance:
        self.incarnations[slot] += 1
        config = {**self.config, "state_dir": os.path.join(self.tmp, f"slot{slot}")}
        inst = Instance(
            slot,
            self.incarnations[slot],
            self.scenario.build(self.work),
            self.guarantee,
            config,
            self.cluster,
            self.clock,
            self.registry if self.config["num_standby_replicas"] else None,
        )
        self.instances[slot] = inst
        self.crashed.discard(slot)
        self.event(f"start {inst.name}")
        return inst

    def crash(self, inst: Instance) -> None:
        assert self.instances.get(inst.slot) is inst
        inst.crash()
        self.envs.close_under(inst.state_dir)
        del self.instances[inst.slot]
        self.crashed.add(inst.slot)
        self.event(f"crash {inst.name}")
        self.count("crashes")

    def free_slots(self) -> list[int]:
        """The slots where an instance may start: none runs or is closing there."""
        return [s for s in range(MAX_SLOTS) if s not in self.instances and s not in self.closing]

    def leave(self, inst: Instance) -> None:
        assert self.instances.get(inst.slot) is inst
        self.event(f"close {inst.name}")
        self.count("leaves")
        del self.instances[inst.slot]
        self.closing.add(inst.slot)
        try:
            self.guarded(inst, inst.close)
        finally:
            self.closing.discard(inst.slot)

    def turn(self, inst: Instance) -> None:
        self.turns += 1
        self.trace.append(f"{self.clock.now:.3f} turn {inst.name}")
        self.guarded(inst, inst.turn)
        self.clock.advance(0.001)

    def guarded(self, inst: Instance, fn: Any) -> None:
        self.work.current = inst.name
        self.tail.current = inst.name
        self.active.append(inst)
        try:
            fn()
        except BaseException as e:
            if inst.hooks.dead and self.instances.get(inst.slot) is not inst:
                # a client of an instance dropped inside this very call (its slot may hold a
                # new instance by now: a join in the same call's hooks), as if its process
                # had exited: what it raises on the way out is nobody's
                return
            inst.error = e
            self.event(f"{inst.name} stopped on {type(e).__name__}: {e}")
            self.failures.append(
                f"instance {inst.name}'s stream thread stopped on {type(e).__name__}: {e}"
            )
            # what is left of it is gone, as if its process exited
            inst.crash()
            self.envs.close_under(inst.state_dir)
            if self.instances.get(inst.slot) is inst:
                del self.instances[inst.slot]
        finally:
            self.active.pop()

    def update_pauses(self) -> None:
        for inst in self.instances.values():
            if inst.paused_until and self.clock.now >= inst.paused_until:
                inst.paused_until = 0.0
                inst.hooks.beating = True
                self.event(f"resume {inst.name}")

    def runnable(self) -> list[Instance]:
        self.update_pauses()
        return [i for _, i in sorted(self.instances.items()) if not i.paused_until and i.alive]

    # --- faults ------------------------------------------------------------------------------

    def fault_step(self) -> None:
        rng = self.rng
        runnable = self.runnable()
        free = self.free_slots()
        choices: list[tuple[str, float]] = [("run", 12.0), ("feed", 3.0)]
        if runnable:
            choices += [("crash", 0.25), ("pause", 0.2), ("error", 1.0), ("slow", 0.12)]
            choices += [("mid_commit", 0.25)]
            if len(runnable) > 1:
                choices.append(("leave", 0.12))
        if free:
            choices.append(("join", 0.25))
        action = rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        if action == "run" and runnable:
            self.turn(rng.choice(runnable))
        elif action == "feed":
            self.feed(rng.randint(1, 5))
        elif action == "crash":
            self.crash(rng.choice(runnable))
        elif action == "pause":
            inst = rng.choice(runnable)
            seconds = rng.choice([2.0, 8.0, 12.0, 25.0])
            inst.paused_until = self.clock.now + seconds
            inst.hooks.beating = False
            self.event(f"pause {inst.name} {seconds}s")
            self.count("pauses")
        elif action == "error":
            self.plant(rng.choice(runnable))
        elif action == "slow":
            inst = rng.choice(runnable)
            seconds = rng.choice([11.0, 15.0, 22.0])
            self.work.slow[inst.name] = seconds
            self.event(f"slow user function in {inst.name}: {seconds}s")
            self.count("slow")
        elif action == "mid_commit":
            self.mid_commit(rng.choice(runnable), free)
        elif action == "leave":
            self.leave(rng.choice(runnable))
        elif action == "join" and free:
            self.start(rng.choice(free))
            self.count("joins")

    def plant(self, inst: Instance) -> None:
        names = faults_for(
            self.guarantee, self.opts.exclude, self.scenario.global_tables, self.opts.include
        )
        if not names:
            return
        name = self.rng.choice(names)
        _, call, make = FAULTS[name]
        inst.hooks.arm(call, make(self.cluster))
        self.event(f"fault {name} armed in {inst.name} before {call}")
        self.count(f"fault:{name}")

    def mid_commit(self, inst: Instance, free: list[int]) -> None:
        """Another instance joins, leaves or crashes just before `inst`'s next commit call."""
        call = "consumer.commit" if self.guarantee == "at_least_once" else "producer.send_offsets"
        others = [i for i in self.instances.values() if i is not inst and not i.paused_until]
        kinds = (["join"] if free else []) + (["leave", "crash"] if others else [])
        if not kinds:
            return
        kind = self.rng.choice(kinds)
        target = self.rng.choice(others) if others else None

        def act(_client: Any) -> None:
            # decided now: the world may have changed since the fault was armed
            self.event(f"mid-commit of {inst.name}: {kind}")
            if kind == "join":
                open_slots = self.free_slots()
                if open_slots:
                    joined = self.start(open_slots[0])
                    self.guarded(joined, joined.open)
            elif target is not None and self.instances.get(target.slot) is target:
                if kind == "leave" and target in self.active:
                    # its own call is under way further up (this commit is inside it, as in
                    # its close's commit): a graceful close comes from outside a process's
                    # stream thread and waits for it, never runs inside that thread's call
                    self.event(f"mid-commit of {inst.name}: no leave of {target.name}, mid-call")
                elif kind == "leave":
                    self.leave(target)
                else:
                    self.crash(target)
            self.work.current = inst.name
            self.tail.current = inst.name

        inst.hooks.arm(call, act)
        self.event(f"rebalance ({kind}) armed in {inst.name} before {call}")
        self.count("mid_commit")

    def run_plan(self) -> None:
        """`Options.plan`: a fixed fault instead of random ones."""
        if self.opts.plan == "slow_user_function":
            # one instance; a user function sleeps past the transaction timeout mid-stream
            inst = self.start(0)
            for _ in range(12):
                self.feed(1)
                self.turn(inst)
            self.work.slow[inst.name] = 12.0
            self.event(f"slow user function in {inst.name}: 12.0s")
        elif self.opts.plan == "standby_failover":
            # two instances, each keeping a standby of the other's tasks; once the input
            # flows, the one running more tasks is killed: the survivor's new active tasks
            # start from its standbys' stores (Outcome.stats["standby_takeovers"])
            pair = [self.start(0), self.start(1)]
            for _ in range(40):
                self.feed(2)
                for inst in pair:
                    self.turn(inst)
            victim = max(pair, key=lambda i: (len(i.thread.tasks), -i.slot))
            survivor = pair[1 - pair.index(victim)]
            self.crash(victim)
            # the survivor alone until the group gives it the victim's tasks (its session
            # times out), before the victim restarts once the faults stop
            crashed_at = self.clock.now
            while not self.tail.standby_takeovers and self.clock.now - crashed_at < 30.0:
                self.feed(1)
                self.turn(survivor)
        else:
            raise ValueError(f"unknown plan {self.opts.plan!r}")

    # --- the run -----------------------------------------------------------------------------

    def done(self) -> bool:
        """All input processed and committed: nothing fed is left, no transaction is open, and
        the group's committed offset of every partition it reads is past its last record."""
        if self.pending or self.cluster.open_transactions():
            return False
        live = next(iter(self.instances.values()), None)
        if live is None:
            return False
        for topic in live.thread.ctx.compiled.source_topics:
            for p in range(self.cluster.partitions(topic)):
                log = self.cluster.log(topic, p)
                at = self.cluster.committed(APP_ID, topic, p)
                if log.next_visible(log.start if at is None else at, True) is not None:
                    return False
        return True

    def run(self) -> None:
        rng = self.rng
        if self.opts.plan:
            self.run_plan()
        else:
            for slot in range(rng.randint(1, MAX_SLOTS)):
                self.start(slot)
            steps = rng.randint(50, 400) if self.opts.faults else 0
            for _ in range(steps):
                self.fault_step()
                if self.turns > self.opts.max_turns:
                    break
        # the faults stop: crashed instances restart, paused ones resume
        for inst in self.instances.values():
            inst.paused_until = 0.0
            inst.hooks.beating = True
            # the client faults planted and not met yet go too: one met after the stop (a leave
            # or crash in the middle of a commit, from a nested one) is no part of the heal
            inst.hooks.armed.clear()
        for slot in sorted(self.crashed):
            self.start(slot)
        if not self.instances:
            self.start(0)
        healed = self.clock.now
        self.event("faults stop")
        while not self.done():
            if self.clock.now - healed > self.opts.heal_bound_s or self.turns > self.opts.max_turns:
                self.failures.append(self.stuck(healed))
                return
            if not self.instances:
                self.failures.append("no instance left running")
                return
            self.feed(rng.randint(1, 8))
            order = list(self.runnable())
            rng.shuffle(order)
            for inst in order:
                if inst.slot in self.instances:
                    self.turn(inst)

    def stuck(self, healed: float) -> str:
        lag = []
        for topic in sorted(
            {t for i in self.instances.values() for t in i.thread.ctx.compiled.source_topics}
        ):
            for p in range(self.cluster.partitions(topic)):
                log = self.cluster.log(topic, p)
                at = self.cluster.committed(APP_ID, topic, p)
                if log.next_visible(log.start if at is None else at, True) is not None:
                    lag.append(f"{topic}[{p}] committed {at} of {log.high_watermark}")
        return (
            f"liveness: not all input processed and committed {self.clock.now - healed:.1f}s "
            f"(virtual) after the faults stopped ({self.turns} turns): "
            f"{len(self.pending)} input records not fed, open transactions "
            f"{self.cluster.open_transactions()}, behind: {'; '.join(lag[:6]) or 'none'}; "
            f"{self.tail.rejoins} rejoins"
        )

    def outputs(self) -> Outputs:
        out: Outputs = {}
        for topic in self.scenario.outputs:
            recs = []
            for p in range(self.cluster.partitions(topic)):
                log = self.cluster.log(topic, p)
                recs += [(e.key, e.value) for e in log.entries if e.visible(True)]
            out[topic] = recs
        return out


def simulate(opts: Options) -> Outcome:
    """Run `opts` (see the module docstring) and return its outcome."""
    topology, guarantee = pick(opts.seed, opts.topology, opts.guarantee)
    tmp = tempfile.mkdtemp(prefix="kstream-sim-")
    logger = logging.getLogger("kstream")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    try:
        run = _Run(opts, topology, guarantee, tmp)
        want = expected(run.scenario, run.records, run.partitions)
        logger.handlers = [run.tail]
        logger.setLevel(logging.INFO)
        logger.propagate = bool(opts.verbose)
        with patched_time(run.clock), patched_runtime(run.envs):
            try:
                run.run()
            finally:
                for inst in list(run.instances.values()):
                    inst.crash()
        got = run.outputs()
        problems = compare(run.scenario, want, got, run.config["cache_max_bytes"] > 0, run.records)
        if guarantee == "at_least_once":
            problems = _missing(want, got, cached=run.config["cache_max_bytes"] > 0)
        if problems and not run.failures:
            run.failures.append("outputs differ from the driver's: " + " | ".join(problems))
        elif problems:
            run.failures.append("outputs differ too: " + " | ".join(problems[:2]))
        digest = hashlib.sha256()
        for line in run.trace:
            digest.update(line.encode())
            digest.update(b"\n")
        for topic in sorted(got):
            digest.update(repr(got[topic]).encode())
        run.stats["rejoins"] = run.tail.rejoins
        run.stats["standby_takeovers"] = run.tail.standby_takeovers
        run.stats["timed_out_transactions"] = run.cluster.timed_out
        return Outcome(
            opts.seed,
            topology,
            guarantee,
            run.failures,
            digest.hexdigest()[:16],
            round(run.clock.now, 3),
            run.turns,
            run.stats,
            list(run.tail.lines) if run.failures else [],
            [t for t in run.trace if " turn " not in t][-60:] if run.failures else [],
            _flags(opts),
        )
    finally:
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.handlers = saved[2]
        shutil.rmtree(tmp, ignore_errors=True)


def _missing(want: Outputs, got: Outputs, cached: bool) -> list[str]:
    """at_least_once: the expected records that never appeared (duplicates are allowed).
    `cached`: the record cache forwards only some updates, and a replay after a failure may
    count an input twice before the cache forwards anything, so that even a key's last
    expected value need not appear: only that every expected key has some output."""
    problems = []
    for topic, records in want.items():
        if cached:
            keys = {k for k, _ in got.get(topic, [])}
            lost = [(k, v) for k, v in {k: v for k, v in records}.items() if k not in keys]
        else:
            have = set(got.get(topic, []))
            lost = [kv for kv in records if kv not in have]
        if lost:
            problems.append(f"{topic}: {len(lost)} expected records missing, e.g. {lost[:3]!r}")
    return problems
