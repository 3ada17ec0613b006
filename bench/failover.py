"""Failover on Apache Kafka: how long the output stops when the owner of a large state is
SIGKILLed, with and without a standby replica (`num_standby_replicas`), under a group protocol
(`--protocol`): Kafka Streams' own (`streams`, KIP-1071, the default: the broker's task
assignor places the active task and its standby) or the classic one (`cooperative`: kstream's
own standby placement).

The app counts records per key (`group_by_key().count()`, in-memory store, one input
partition, so one task holds the whole state). For each standby setting:

1. `--keys` distinct keys are produced; a first instance processes them all (its store then
   holds that many counts, and the changelog as many records).
2. A second instance starts; with a standby it follows the changelog until its lag is 0.
3. Live input flows (`--rate` records/s of new keys); the instance running the task is killed
   with SIGKILL. The time from the kill to the first output of an input produced after the
   kill, read by a plain read_committed consumer, is "output resumed". It includes the group
   noticing the dead member (the session: 2 s here, as the tests use), the rebalance, the
   restore and the first commit.
4. The survivor reports how many changelog records its restore read and how long it took.

The session. Under the classic protocol it is the client's `session.timeout.ms` (Kafka's
default 45 s), set to 2 s by the workers. Under the Streams protocol the broker owns it: the
group's `streams.session.timeout.ms`, whose default is the broker's
`group.streams.session.timeout.ms` (45 s, with a floor `group.streams.min.session.timeout.ms`
of 45 s); the benchmark's broker sets `group.streams.session.timeout.ms=2000` (its floor is
500 ms, heartbeats every 250 ms: kstream.testing.kafka), as an operator lowers it for Kafka
Streams. Under the Streams protocol the group's assignment is read from the broker
(StreamsGroupDescribe) before the kill and after the takeover: which member held the active
task and which the standby, and that the standby's member got the active task.

Each instance is a process of its own (`--worker`), which writes its state, restore counts and
standby lag to a status file. Prints a table and writes bench/results/failover.json.

    python bench/failover.py [--keys 1000000] [--guarantee exactly_once]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

SESSION_MS = 2000
#: the broker settings of a Streams-protocol run: the group's session is the broker's
STREAMS_BROKER = {"group.streams.session.timeout.ms": str(SESSION_MS)}
PROTOCOLS = ("streams", "cooperative")
#: where each protocol's results go by default (bench/results/)
OUT_NAMES = {"streams": "failover-streams.json", "cooperative": "failover.json"}
STORE = "counts"
RESTORED = re.compile(
    r"(\S+ \S+) .*task 0_0: restored store 'counts': (\d+) record\(s\) applied"
    r".*offsets (\d+)\.\.(\d+)"
)
TAKING_OVER = re.compile(r"(\S+ \S+) .*task 0_0: taking over its standby stores")
#: what the survivor's log says after the kill, first occurrence of each (seconds after it)
EVENTS = {
    "rebalance_started": re.compile(r"(\S+ \S+) .*-> REBALANCING"),
    "open_transaction_wait": re.compile(r"(\S+ \S+) .*an open transaction of a previous owner"),
    "restored": re.compile(r"(\S+ \S+) .*task 0_0: restored store"),
    "running": re.compile(r"(\S+ \S+) .*REBALANCING -> RUNNING"),
}


def timeline(text: str, killed_at: float) -> dict[str, float]:
    """Seconds from the kill to the first log line of each of `EVENTS` (log times are local
    wall-clock times with milliseconds)."""
    from datetime import datetime

    out: dict[str, float] = {}
    for name, pattern in EVENTS.items():
        m = pattern.search(text)
        if m:
            at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out[name] = round(at - killed_at, 3)
    return out


# --- the worker process --------------------------------------------------------------------


def topology(src: str, out: str) -> Any:
    from kstream.dsl import StreamBuilder

    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
        store=STORE
    ).to_stream().to(out, key_serde="string", value_serde="long")
    return b


def worker(args: argparse.Namespace) -> int:
    """Run one instance until SIGTERM, writing its status to `args.status` every 0.1 s."""
    import logging

    from kstream.runtime import App

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    from kstream.runtime.process_id import process_id

    # the classic protocol's session is the client's; the Streams protocol's the broker's
    kafka = (
        {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 250}
        if args.protocol != "streams"
        else {}
    )
    app = App(
        topology(args.input, args.output),
        app_id=args.app_id,
        bootstrap_servers=args.bootstrap,
        processing_guarantee=args.guarantee,
        config={
            "state_dir": args.state_dir,
            "num_standby_replicas": args.standbys,
            "batch_max_records": 10_000,
            "rebalance_protocol": args.protocol,
            "kafka": kafka,
        },
    )
    pid = process_id(args.state_dir, args.app_id)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(0.1):
            m = app.metrics
            status = {
                "process_id": pid,
                "state": app.state.value,
                "assigned": len(app.assigned_partitions()),
                "restored": m.restored_by_store.get(STORE, 0),
                "standby_tasks": m.standby_tasks,
                "standby_lag": sum(m.standby_lag.values()) if m.standby_lag else None,
                "standby_records": m.standby_records,
            }
            tmp = args.status + ".tmp"
            with open(tmp, "w") as f:
                json.dump(status, f)
            os.replace(tmp, args.status)

    threading.Thread(target=report, daemon=True).start()
    try:  # run() stops cleanly on SIGTERM
        app.run()
    finally:
        stop.set()
    return 0


# --- the driver ----------------------------------------------------------------------------


@dataclass
class Instance:
    name: str
    args: list[str]
    dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    @property
    def status_path(self) -> Path:
        return self.dir / f"{self.name}.status.json"

    def start(self) -> Instance:
        out = open(self.log, "wb")  # noqa: SIM115 (the child's)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--status", str(self.status_path), *self.args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        return self

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.status_path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait(what: str, done: Any, deadline_s: float, *instances: Instance) -> float:
    t0 = time.monotonic()
    while not done():
        for i in instances:
            if not i.alive():
                raise SystemExit(f"{i.name} exited while waiting for {what}; see {i.log}")
        if time.monotonic() - t0 > deadline_s:
            raise SystemExit(f"gave up waiting for {what} after {deadline_s:g}s")
        time.sleep(0.05)
    return time.monotonic() - t0


def produce_keys(bs: str, topic: str, keys: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1_000_000})
    t0 = time.monotonic()
    for i in range(keys):
        while True:
            try:
                p.produce(topic, b"x", b"k%07d" % i)
                break
            except BufferError:
                p.poll(0.05)
    p.flush()
    return time.monotonic() - t0


def committed(bs: str, group: str, topic: str) -> int:
    """The group's committed offset of the input (0 while the coordinator cannot say)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset) if tp.offset is not None and tp.offset >= 0 else 0
    except KafkaException:  # the group's coordinator is still loading, or moving
        time.sleep(0.5)
        return 0
    finally:
        c.close()


def placement(bs: str, group: str, who: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    """The Streams group's assignment as its coordinator describes it: per instance (by the
    process id each worker reports: `who` maps it to the instance's name), the active and
    standby tasks it holds ("0_0")."""
    from kstream.kafka.streams_group import StreamsGroupClient

    with StreamsGroupClient(bs) as client:
        described = client.describe(group)
    out: dict[str, dict[str, list[str]]] = {}
    for m in described["members"]:
        name = who.get(m["process_id"], m["process_id"])
        out[name] = {
            kind: sorted(
                f"{sub}_{p}" for sub, parts in m["assignment"][kind].items() for p in parts
            )
            for kind in ("active", "standby")
        }
    return out


@dataclass
class Live:
    """Input of new keys at a steady rate, and the arrival of their outputs (read_committed)."""

    bs: str
    src: str
    out: str
    rate: int
    sent: int = 0
    arrivals: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._produce, daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

    def _produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bs, "linger.ms": 1})
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                p.produce(self.src, b"x", b"live-%09d" % self.sent)
                self.sent += 1
            p.poll(0)
            time.sleep(0.005)
        p.flush()

    def _read(self) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bs,
                "group.id": f"bench-reader-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        c.assign([TopicPartition(self.out, 0, OFFSET_END)])
        try:
            while not self.stop.is_set():
                for m in c.consume(1000, 0.05):
                    key = m.key() or b""
                    if m.error() is None and key.startswith(b"live-"):
                        self.arrivals.setdefault(int(key[5:]), time.monotonic())
        finally:
            c.close()


def run_one(
    bs: str, keys: int, standbys: int, guarantee: str, rate: int, tmp: Path, protocol: str
) -> dict[str, Any]:
    from kstream.kafka.admin import Admin

    tag = uuid.uuid4().hex[:6]
    src, out, app_id = f"failover-in-{tag}", f"failover-out-{tag}", f"failover-{tag}"
    admin = Admin(bs)
    for t in (src, out):
        admin.create_topic(t, 1, {"retention.ms": "-1"})
    produce_s = produce_keys(bs, src, keys)
    common = [
        "--bootstrap", bs, "--app-id", app_id, "--input", src, "--output", out,
        "--standbys", str(standbys), "--guarantee", guarantee, "--protocol", protocol,
    ]  # fmt: skip
    a = Instance("a", [*common, "--state-dir", str(tmp / "a")], tmp).start()
    instances = [a]
    try:
        process_s = wait(
            f"the first instance to process {keys:,} keys",
            lambda: committed(bs, app_id, src) >= keys,
            1800,
            a,
        )
        b = Instance("b", [*common, "--state-dir", str(tmp / "b")], tmp).start()
        instances.append(b)

        def settled() -> bool:
            sa, sb = a.status(), b.status()
            if sa.get("state") != "RUNNING" or sb.get("state") != "RUNNING":
                return False
            if sa.get("assigned", 0) + sb.get("assigned", 0) != 1:
                return False
            if standbys == 0:
                return True
            follower = sb if sa.get("assigned") else sa
            return follower.get("standby_tasks") == 1 and follower.get("standby_lag") == 0

        catch_up_s = wait("the second instance (and its standby) to settle", settled, 1800, a, b)
        owner, survivor = (a, b) if a.status().get("assigned") else (b, a)
        who = {str(i.status().get("process_id")): i.name for i in (a, b)}
        before = placement(bs, app_id, who) if protocol == "streams" else None
        live = Live(bs, src, out, rate)
        live.start()
        wait("live outputs", lambda: len(live.arrivals) >= rate, 60, a, b)
        restored_before = survivor.status().get("restored", 0)
        log_at = survivor.log.stat().st_size
        assert owner.proc is not None
        time.sleep(1.0)
        sent_at_kill = live.sent
        owner.proc.send_signal(signal.SIGKILL)
        killed, killed_at = time.monotonic(), time.time()
        owner.proc.wait()

        def resumed() -> bool:
            return any(i >= sent_at_kill for i in list(live.arrivals))

        wait("the output to resume", resumed, 600, survivor)
        first = min(t for i, t in list(live.arrivals.items()) if i >= sent_at_kill)
        live.stop.set()
        after = None
        if protocol == "streams":
            # the dead member is gone from the group once its session ran out: the survivor
            # alone, holding the task its standby was
            wait(
                "the group to hold the survivor alone",
                lambda: len(placement(bs, app_id, who)) == 1,
                60,
                survivor,
            )
            after = placement(bs, app_id, who)
        time.sleep(0.2)
        restored = survivor.status().get("restored", 0) - restored_before
        text = survivor.log.read_bytes()[log_at:].decode(errors="replace")
        m = RESTORED.search(text)
        return {
            "standbys": standbys,
            "keys": keys,
            "guarantee": guarantee,
            "output_resumed_s": round(first - killed, 3),
            "restored_records": restored,
            "restore_offsets": [int(m[3]), int(m[4])] if m else None,
            "from_standby": bool(TAKING_OVER.search(text)),
            "survivor_after_kill_s": timeline(text, killed_at),
            "produce_s": round(produce_s, 1),
            "first_processing_s": round(process_s, 1),
            "settle_s": round(catch_up_s, 1),
            "protocol": protocol,
            "session_timeout_ms": SESSION_MS,
            "session_set_by": (
                "broker group.streams.session.timeout.ms"
                if protocol == "streams"
                else "client session.timeout.ms"
            ),
            "group_before_kill": before,
            "group_after_takeover": after,
            "killed": owner.name,
            "survivor": survivor.name,
            "broker_standby_was_on_survivor": (
                None if before is None else before[survivor.name]["standby"] == ["0_0"]
            ),
        }
    finally:
        for i in instances:
            i.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--standbys", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--guarantee", default="exactly_once")
    ap.add_argument("--rate", type=int, default=500, help="live input records per second")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each standby setting")
    ap.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="streams",
        help="rebalance_protocol: the Streams protocol (KIP-1071) or the classic one",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="the JSON results (default: bench/results/failover-streams.json under the Streams "
        "protocol, failover.json under the classic one); the table goes beside it (.txt)",
    )
    # the worker process
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--status", help=argparse.SUPPRESS)
    for name in ("--bootstrap", "--app-id", "--input", "--output", "--state-dir"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.standbys = args.standbys[0]
        return worker(args)
    from brokers import start_broker

    rows = []
    overrides = STREAMS_BROKER if args.protocol == "streams" else {}
    with start_broker("kafka", **overrides) as broker, tempfile.TemporaryDirectory() as tmp:
        for run in range(args.repeat):
            for n in args.standbys:
                run_dir = Path(tmp) / f"run-{run}-standbys-{n}"
                run_dir.mkdir()
                bs = broker.bootstrap_servers
                row = run_one(bs, args.keys, n, args.guarantee, args.rate, run_dir, args.protocol)
                rows.append(row)
                print(json.dumps(row), flush=True)
        version = broker.version
    session = (
        f"broker group.streams.session.timeout.ms={SESSION_MS}"
        if args.protocol == "streams"
        else f"client session.timeout.ms={SESSION_MS}"
    )
    table = [
        f"Apache Kafka {version}; rebalance_protocol={args.protocol} ({session}); "
        f"{args.keys:,} keys in one task; {args.guarantee}; SIGKILL of the active instance; "
        f"{args.rate} records/s flowing; output read by a plain read_committed consumer",
        f"{'standbys':>8} {'runs':>5} {'median':>8} {'output resumed (each run)':>34} "
        f"{'restored records':>17} {'from standby':>13}",
    ]
    summary = []
    for n in args.standbys:
        mine = [r for r in rows if r["standbys"] == n]
        times = sorted(r["output_resumed_s"] for r in mine)
        restored = sorted(r["restored_records"] for r in mine)
        summary.append(
            {
                "standbys": n,
                "runs": len(mine),
                "output_resumed_s": {"median": times[len(times) // 2], "max": times[-1]},
                "restored_records": {"median": restored[len(restored) // 2], "max": restored[-1]},
                "every_run_from_standby": all(r["from_standby"] for r in mine),
                "broker_standby_on_survivor_every_run": (
                    all(r["broker_standby_was_on_survivor"] for r in mine)
                    if args.protocol == "streams" and n > 0
                    else None
                ),
            }
        )
        table.append(
            f"{n:>8} {len(mine):>5} {times[len(times) // 2]:>7.2f}s "
            f"{', '.join(f'{t:.2f}s' for t in times):>34} "
            f"{restored[len(restored) // 2]:>17,} "
            f"{sum(r['from_standby'] for r in mine):>7}/{len(mine)}"
        )
    print("\n" + "\n".join(table))
    out = args.out or os.path.join(HERE, "results", OUT_NAMES[args.protocol])
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(
            {
                "broker": f"Apache Kafka {version}",
                "protocol": args.protocol,
                "session": session,
                "keys": args.keys,
                "guarantee": args.guarantee,
                "rate": args.rate,
                "summary": summary,
                "results": rows,
            },
            f,
            indent=2,
        )
    Path(out).with_suffix(".txt").write_text("\n".join(table) + "\n")
    print(f"wrote {out} and its table {Path(out).with_suffix('.txt')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
