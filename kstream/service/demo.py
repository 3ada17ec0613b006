"""`kstreamd demo`: the whole system on one screen, or (`--kafka-only`) a tour of the Kafka layer.

The showcase (`run_showcase`, the default): an embedded broker (unless one is given), a load
generator producing click events keyed by user, and an app that enriches each click with its
user's region (a stream-table join) and counts clicks per user in 10-second windows, served over
HTTP like `kstreamd run` serves apps. Every two seconds the terminal shows throughput, lag and
end-to-end latency read from the app's own metrics; at the end a summary checks that every click
was processed.

The Kafka tour (`run_demo`): produces JSON click events keyed by user for a while, reads them
back with a group consumer and prints what arrived where. It doubles as a smoke test of a fresh
installation: it exits non-zero if any event is missing or sits on a partition murmur2 did not
choose.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.partitioner import default_partition
from kstream.kafka.producer import Producer
from kstream.metrics import Metrics
from kstream.serde import serde

if TYPE_CHECKING:
    from kstream.runtime.app import App
    from kstream.topology.topology import Topology

__all__ = ["DemoSummary", "ShowcaseResult", "build_topology", "run_demo", "run_showcase"]

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup", "/login")
REGIONS = ("eu", "us", "apac")
USERS = tuple(f"user-{i:02d}" for i in range(20))
WINDOW = "10s"


def _enrich(click: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {**click, "region": user["region"]}


def build_topology(
    clicks: str = "clicks", users: str = "users", output: str = "clicks-per-user"
) -> Any:
    """Clicks joined with users (region), counted per user in tumbling 10 s windows."""
    from kstream.dsl import StreamBuilder
    from kstream.dsl.windows import TimeWindows

    b = StreamBuilder()
    profiles = b.table(users, key_serde="string", value_serde="json", store="users")
    (
        b.stream(clicks, key_serde="string", value_serde="json")
        .join(profiles, _enrich)
        .group_by_key(key_serde="string", value_serde="json")
        .windowed_by(TimeWindows.of(WINDOW))
        .count(store="clicks-per-user")
        .to_stream()
        .map(lambda wk, n: (f"{wk.key}@{wk.start}", n))
        .to(output, key_serde="string", value_serde="long")
    )
    return b.build()


@dataclass
class ShowcaseResult:
    produced: int = 0
    consumed: int = 0
    seconds: float = 0.0
    partitions: Counter[int] = field(default_factory=Counter)
    app_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.produced > 0 and self.consumed >= self.produced and self.app_error is None


@contextlib.contextmanager
def _bootstrap(bootstrap_servers: str | None, out: TextIO) -> Iterator[str]:
    if bootstrap_servers:
        yield bootstrap_servers
        return
    with EmbeddedBroker() as broker:
        print(f"embedded broker on {broker.bootstrap_servers} (log: {broker.log_path})", file=out)
        yield broker.bootstrap_servers


class _Load(threading.Thread):
    """Produces clicks at `rate` per second until stopped."""

    def __init__(self, producer: Producer, topic: str, rate: int, seed: int | None) -> None:
        super().__init__(name="kstream-demo-load", daemon=True)
        self.producer, self.topic, self.rate = producer, topic, rate
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        keys, values = serde("string"), serde("json")
        start = time.monotonic()
        try:
            while not self.stop.wait(0.02):
                due = int((time.monotonic() - start) * self.rate) - self.sent
                for _ in range(max(0, min(due, 5000))):
                    user = self.rng.choice(USERS)
                    click = {"page": self.rng.choice(PAGES), "ms": self.rng.randint(5, 900)}
                    self.producer.produce(self.topic, values.to_bytes(click), keys.to_bytes(user))
                    self.sent += 1
                self.producer.poll(0)
            self.producer.flush(30)
        except BaseException as e:
            self.error = e


def _quantile(m: Metrics, q: float) -> float | None:
    h = m.latency
    total = sum(h.counts)
    if not total:
        return None
    want, acc = q * total, 0
    for bound, n in zip((*h.bounds, float("inf")), h.counts, strict=True):
        acc += n
        if acc >= want:
            return bound
    return None


def _line(m: Metrics, clicks: str, prev: int, dt: float, elapsed: float, sent: int) -> str:
    consumed = sum(n for (t, _), n in m.consumed.items() if t == clicks)
    lag = sum(m.lag.values())
    p50, p99 = _quantile(m, 0.5), _quantile(m, 0.99)
    lat = f"p50<={p50:g}s p99<={p99:g}s" if p50 is not None and p99 is not None else "-"
    rate = (consumed - prev) / dt if dt > 0 else 0.0
    return (
        f"  {elapsed:5.1f}s  produced={sent:<7d} processed={consumed:<7d} "
        f"in={rate:7.0f}/s  lag={lag:<6d} latency {lat}  state={m.state}"
    )


def run_showcase(
    duration_s: float,
    *,
    rate: int = 500,
    partitions: int = 3,
    bootstrap_servers: str | None = None,
    http: str = "127.0.0.1:0",
    out: TextIO,
    seed: int | None = None,
    connect_timeout_s: float = 10.0,
) -> ShowcaseResult:
    from kstream.service.http import HttpServer
    from kstream.service.probe import attach
    from kstream.service.query import AppService

    result = ShowcaseResult()
    suffix = f"-{int(time.time() * 1000)}" if bootstrap_servers else ""
    clicks, users, output = f"clicks{suffix}", f"users{suffix}", f"clicks-per-user{suffix}"
    app_id = f"kstream-demo{suffix}"
    # a state directory of its own: the demo's state means nothing after it (each run has a
    # new embedded broker, or a new app id and topics), and two demos at once must not
    # contend for one directory's lock (kstream.runtime.state_lock)
    with (
        _bootstrap(bootstrap_servers, out) as bootstrap,
        tempfile.TemporaryDirectory(prefix="kstream-demo-state-") as state_dir,
    ):
        timeout = int(connect_timeout_s * 1000)
        producer = _topics_with_users(bootstrap, timeout, (clicks, users, output), partitions)
        app = _demo_app(
            build_topology(clicks, users, output),
            app_id,
            bootstrap,
            state_dir,
            timeout,
            tansu=not bootstrap_servers,
        )
        probe = attach(app, instance_id="demo")
        host, _, port = http.rpartition(":")
        server = HttpServer(AppService(app, probe, None, "demo"), host or "127.0.0.1", int(port))
        server.start()
        app.start()
        print(
            f"app {app_id!r}: clicks joined with users, counted per user in {WINDOW} windows; "
            f"HTTP on {server.url} (try {server.url}/metrics, "
            f"{server.url}/stores/clicks-per-user/keys/user-01)",
            file=out,
            flush=True,
        )
        print(
            f"producing clicks to {clicks!r} ({partitions} partitions) for {duration_s:g}s "
            f"at ~{rate}/s ...",
            file=out,
            flush=True,
        )
        load = _Load(producer, clicks, rate, seed)
        start = time.monotonic()
        load.start()
        m = probe.metrics
        try:
            _report_while_loading(app, probe.sample, m, load, clicks, duration_s, result, out)
        finally:
            load.stop.set()
            app.close(30)
            server.close()
        result.seconds = time.monotonic() - start
        for (t, p), n in m.consumed.items():
            if t == clicks:
                result.consumed += n
                result.partitions[p] += n
        if app.error is not None:
            result.app_error = str(app.error)
        elif load.error is not None:
            result.app_error = f"load generator: {load.error}"
    _summary(result, clicks, m, out)
    return result


def _topics_with_users(
    bootstrap: str, timeout_ms: int, topics: tuple[str, str, str], partitions: int
) -> Producer:
    """Create the clicks, users and output topics and write the users' profiles; the
    producer, which then writes the clicks."""
    users = topics[1]
    admin = Admin(bootstrap, connect_timeout=timeout_ms)
    for t in topics:
        admin.create_topic(t, partitions, {"retention.ms": "-1"})
    producer = Producer(bootstrap, idempotent=True, connect_timeout=timeout_ms)
    keys, values = serde("string"), serde("json")
    for i, user in enumerate(USERS):
        profile = {"name": user, "region": REGIONS[i % len(REGIONS)]}
        producer.produce(users, values.to_bytes(profile), keys.to_bytes(user))
    producer.flush(30)
    return producer


def _demo_app(
    topology: Topology, app_id: str, bootstrap: str, state_dir: str, timeout_ms: int, tansu: bool
) -> App:
    from kstream.runtime import App

    return App(
        topology,
        app_id=app_id,
        bootstrap_servers=bootstrap,
        config={
            "state_dir": state_dir,
            "commit_interval": 200,
            "connect_timeout": timeout_ms,
            # the embedded broker is Tansu: its compensations on (kstream.broker_compat)
            **({"broker_compat": "tansu"} if tansu else {}),
        },
    )


def _report_while_loading(
    app: App,
    sample: Callable[[], None],
    m: Metrics,
    load: _Load,
    clicks: str,
    duration_s: float,
    result: ShowcaseResult,
    out: TextIO,
) -> None:
    """A progress line every 2 s while the clicks are produced, then wait (up to 60 s) until
    the app has consumed every click produced, and a last line."""
    start = time.monotonic()
    prev, last = 0, start
    end = start + duration_s
    while (now := time.monotonic()) < end and app.error is None:
        time.sleep(min(2.0, max(0.0, end - now)))
        sample()
        now = time.monotonic()
        print(_line(m, clicks, prev, now - last, now - start, load.sent), file=out, flush=True)
        prev, last = sum(n for (t, _), n in m.consumed.items() if t == clicks), now
    load.stop.set()
    load.join(60)
    result.produced = load.sent
    drain_until = time.monotonic() + 60
    while time.monotonic() < drain_until and app.error is None:
        if sum(n for (t, _), n in m.consumed.items() if t == clicks) >= result.produced:
            break
        time.sleep(0.2)
    sample()
    now = time.monotonic()
    print(_line(m, clicks, prev, now - last, now - start, load.sent), file=out, flush=True)


def _summary(r: ShowcaseResult, topic: str, m: Metrics, out: TextIO) -> None:
    print(f"\nsummary for topic {topic!r}", file=out)
    print(f"  produced  {r.produced}", file=out)
    print(f"  consumed  {r.consumed} in {r.seconds:.1f}s", file=out)
    print(f"  users     {len(USERS)}", file=out)
    print(
        "  by partition: " + ", ".join(f"{p}={n}" for p, n in sorted(r.partitions.items())),
        file=out,
    )
    outputs = ", ".join(f"{t}={n}" for t, n in sorted(m.produced_by_topic.items()))
    print(f"  outputs   {outputs or 'none'}", file=out)
    p99 = _quantile(m, 0.99)
    print(f"  latency   p99 <= {p99:g}s" if p99 is not None else "  latency   -", file=out)
    if r.app_error:
        print(f"  app error: {r.app_error}", file=out)
    print("demo OK" if r.ok else "demo FAILED: not every click was processed", file=out, flush=True)


# --- the Kafka tour (--kafka-only) ------------------------------------------------------


@dataclass
class DemoSummary:
    produced: int = 0
    consumed: int = 0
    misplaced: int = 0
    seconds: float = 0.0
    pages: Counter[str] = field(default_factory=Counter)
    partitions: Counter[int] = field(default_factory=Counter)
    users: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return self.produced > 0 and self.consumed == self.produced and self.misplaced == 0


def run_demo(
    duration_s: float,
    *,
    rate: int = 500,
    partitions: int = 3,
    bootstrap_servers: str | None = None,
    topic: str = "clicks",
    out: TextIO,
    seed: int | None = None,
    connect_timeout_s: float = 10.0,
) -> DemoSummary:
    """Produce click events for `duration_s` seconds at about `rate`/s and consume them."""
    rng = random.Random(seed)
    keys, values = serde("string"), serde("json")
    summary = DemoSummary()
    with _bootstrap(bootstrap_servers, out) as bootstrap:
        timeout = connect_timeout_s * 1000
        admin = Admin(bootstrap, connect_timeout=timeout)
        topic = f"{topic}-{int(time.time() * 1000)}" if bootstrap_servers else topic
        admin.create_topic(topic, partitions, {"retention.ms": "-1"})
        producer = Producer(bootstrap, idempotent=True, connect_timeout=timeout)
        consumer = Consumer(bootstrap, group_id=f"{topic}-demo", connect_timeout=timeout)
        consumer.subscribe([topic])
        print(
            f"producing click events to {topic!r} ({partitions} partitions) for "
            f"{duration_s:g}s at ~{rate}/s ...",
            file=out,
            flush=True,
        )
        start = time.monotonic()
        end = start + duration_s
        next_report = start + 5
        while (now := time.monotonic()) < end:
            due = int((now - start) * rate) - summary.produced
            for _ in range(max(0, min(due, 5000))):
                user = rng.choice(USERS)
                event = {"user": user, "page": rng.choice(PAGES), "ms": rng.randint(5, 900)}
                producer.produce(topic, values.to_bytes(event), keys.to_bytes(user))
                summary.produced += 1
            producer.poll(0)
            _take(consumer, summary, partitions, timeout=0.05)
            if now >= next_report:
                print(
                    f"  {now - start:5.1f}s produced={summary.produced} "
                    f"consumed={summary.consumed}",
                    file=out,
                    flush=True,
                )
                next_report += 5
        producer.flush(30)
        drain_until = time.monotonic() + 30
        while summary.consumed < summary.produced and time.monotonic() < drain_until:
            _take(consumer, summary, partitions, timeout=0.2)
        summary.seconds = time.monotonic() - start
        consumer.commit()
        consumer.close()
    _print_summary(summary, topic, out)
    return summary


def _take(consumer: Consumer, summary: DemoSummary, partitions: int, timeout: float) -> None:
    keys, values = serde("string"), serde("json")
    for m in consumer.consume_batch(2000, timeout):
        key, partition = m.key(), m.partition() or 0
        event = values.from_bytes(m.value())
        summary.consumed += 1
        summary.pages[event["page"]] += 1
        summary.partitions[partition] += 1
        summary.users.add(keys.from_bytes(key))
        if key is None or default_partition(key, partitions) != partition:
            summary.misplaced += 1


def _print_summary(s: DemoSummary, topic: str, out: TextIO) -> None:
    print(f"\nsummary for topic {topic!r}", file=out)
    print(f"  produced  {s.produced}", file=out)
    print(f"  consumed  {s.consumed} in {s.seconds:.1f}s", file=out)
    print(f"  users     {len(s.users)}", file=out)
    print(
        "  by partition: " + ", ".join(f"{p}={n}" for p, n in sorted(s.partitions.items())),
        file=out,
    )
    print("  by page:", file=out)
    for page, n in s.pages.most_common():
        print(f"    {page:<10} {n}", file=out)
    if s.misplaced:
        print(f"  {s.misplaced} record(s) on a partition murmur2 did not choose", file=out)
    print("demo OK" if s.ok else "demo FAILED: not every event came back", file=out, flush=True)
