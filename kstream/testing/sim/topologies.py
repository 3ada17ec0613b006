"""The topologies the simulator runs, each with its input generator and how its outputs compare.

Every topology here is deterministic (the same input gives the same output), so a run's
read_committed output must equal what `TopologyTestDriver` gives for the same input, up to
what the topology's semantics leave open:

* `per_key`: each output key's values in order. A key's updates come from one task, which
  processes its input in order, so exactly-once fixes every key's sequence; the interleaving of
  different keys (across partitions, and through repartition topics) is free.
* `final`: each key's last value (a tombstone is no value). For a foreign-key join, whose
  intermediate results depend on the interleaving of its two sides through its internal topics.
  Its last value depends on it too in one case, as in Kafka Streams (`_fk_stale`).
* `once`: each key emitted at most once, and only keys the driver emits. For windows that also
  close on the wall clock (`emit="final"`'s idle close): which windows close before their late
  records arrive depends on timing by design.

The oracle runs one driver over all input (`single`), or one per input partition
(`per_partition`) for topologies without a repartition whose results depend on stream time,
which a task keeps per partition (grace periods, windows that close, dedup retention).

User functions call `Work.step()`, where the scheduler can plant a slow call (a user function
slower than the transaction timeout) for one instance.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.dsl.joined import Joined
from kstream.dsl.windows import TimeWindows
from kstream.serde import serde
from kstream.topology import Topology

__all__ = ["SCENARIOS", "InputRecord", "Scenario", "Work"]

#: input timestamps start here (ms): far ahead of the virtual wall clock, so that stream time
#: never follows the wall clock (which would make results depend on timing)
BASE_TS = 1_800_000_000_000


@dataclass(frozen=True)
class InputRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass
class Work:
    """What user functions call: a planted slow call sleeps (virtual time) once, in the
    instance it was planted for."""

    current: str = ""
    slow: dict[str, float] = field(default_factory=dict)

    def step(self) -> None:
        seconds = self.slow.pop(self.current, None)
        if seconds:
            import time

            time.sleep(seconds)


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[Work], Topology]
    #: input topic -> (key serde, value serde)
    inputs: dict[str, tuple[str, str]]
    outputs: list[str]
    generate: Callable[[random.Random, int], list[tuple[str, Any, Any]]]
    compare: str = "per_key"
    #: `final` only: for the input, the keys whose last value may also be one of these others
    #: than the driver's (`_fk_stale`), each key with the values it may end with instead
    final_also: Callable[[list[InputRecord]], dict[bytes | None, set[bytes | None]]] | None = None
    oracle: str = "single"
    #: topics whose records are all written before the instances start (a table the
    #: topology's joins must see complete, e.g. a global table)
    preload: tuple[str, ...] = ()
    #: the topology reads a global table (the `global_poll` fault applies)
    global_tables: bool = False
    #: no two input records share a timestamp: a stream-table join's result for a stream
    #: record and a table update of the same timestamp depends on which the task takes first,
    #: which Kafka leaves open (the driver takes them in input order)
    distinct_timestamps: bool = False
    #: the guarantees whose invariant holds (at_least_once: duplicates are allowed then)
    guarantees: tuple[str, ...] = ("exactly_once_v2", "exactly_once")

    def records(self, rng: random.Random, n: int) -> list[InputRecord]:
        """`n` input records, serialized, with increasing timestamps."""
        ts = BASE_TS
        out = []
        for topic, key, value in self.generate(rng, n):
            ts += rng.randint(1 if self.distinct_timestamps else 0, 4000)
            ks, vs = self.inputs[topic]
            out.append(
                InputRecord(
                    topic,
                    None if key is None else serde(ks).serialize(key, None),
                    None if value is None else serde(vs).serialize(value, None),
                    ts,
                )
            )
        return out


# --- the topologies --------------------------------------------------------------------------

WORDS = ("apple", "pear", "plum", "fig", "kiwi", "lime", "date")


def _count(work: Work) -> Topology:
    """A count over a repartition topic (group_by + count): two sub-topologies."""

    def word(_k: str, v: str) -> str:
        work.step()
        return v

    b = StreamBuilder()
    (
        b.stream("words", "string", "string")
        .group_by(word, key_serde="string")
        .count(store="counts")
        .to_stream()
        .to("counts", "string", "long")
    )
    return b.build()


def _words(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    return [("words", f"k{rng.randint(0, 9)}", rng.choice(WORDS)) for _ in range(n)]


def _windowed(work: Work) -> Topology:
    """Counts per key per 10 s tumbling window (no repartition), window keys flattened."""

    def flat(k: Any, _v: Any) -> str:
        work.step()
        return f"{k.key}@{k.start}"

    b = StreamBuilder()
    (
        b.stream("clicks", "string", "string")
        .group_by_key()
        .windowed_by(TimeWindows.of("10s", grace="5s"))
        .count(store="window-counts")
        .to_stream()
        .select_key(flat)
        .to("window-counts", "string", "long")
    )
    return b.build()


def _clicks(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    return [("clicks", f"u{rng.randint(0, 5)}", f"c{i}") for i in range(n)]


def _stream_table(work: Work) -> Topology:
    """Orders joined with a customers table on the same key (co-partitioned, no repartition)."""

    def joiner(order: str, customer: str) -> str:
        work.step()
        return f"{order}+{customer}"

    b = StreamBuilder()
    customers = b.table("customers", "string", "string", store="customers")
    b.stream("orders", "string", "string").join(customers, joiner).to(
        "enriched", "string", "string"
    )
    return b.build()


def _orders_customers(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for i in range(n):
        c = f"c{rng.randint(0, 5)}"
        if rng.random() < 0.35:
            out.append(("customers", c, f"{c}-v{i}"))
        else:
            out.append(("orders", c, f"o{i}"))
    return out


def _fk_join(work: Work) -> Topology:
    """Orders (a table) joined with customers on the order's customer id (KIP-213)."""

    def extract(order_value: str) -> str:
        work.step()
        return order_value.rsplit("|", 1)[1]

    b = StreamBuilder()
    left = b.table("fk-orders", "string", "string", store="fk-orders")
    right = b.table("fk-customers", "string", "string", store="fk-customers")
    joined = left.join(right, extract, lambda o, c: f"{o}+{c}", materialized="fk-joined")
    joined.to_stream().to("fk-out", "string", "string")
    return b.build()


def _fk_stale(records: list[InputRecord]) -> dict[bytes | None, set[bytes | None]]:
    """The inner foreign-key join's one interleaving-dependent last value (Kafka's, 4.1.1 and
    4.4.0 alike, which kstream follows record for record, as tests/oracle checks): an update of
    a row whose foreign key did not change is answered only if the foreign row exists
    (PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE), on the reasoning that the previous value did not
    join either. But when a row moves to a foreign key without a row and changes again before
    the answer to the move (a delete of its result) comes back, that answer is stale and
    dropped, and nothing answers the last update: the row keeps the result of an older value.

    So for a row whose last foreign key never gets a row, the last value may also be a join of
    one of the row's earlier values with a version of that value's foreign row; every other
    row's last value must be the driver's exactly."""
    string = serde("string")
    left: dict[bytes, list[str]] = {}
    right: dict[str, list[str]] = {}
    for r in records:
        if r.key is None or r.value is None:
            continue
        value = string.deserialize(r.value, None)
        if r.topic == "fk-orders":
            left.setdefault(r.key, []).append(value)
        else:
            right.setdefault(string.deserialize(r.key, None), []).append(value)
    out: dict[bytes | None, set[bytes | None]] = {}
    for key, values in left.items():
        if values[-1].rsplit("|", 1)[1] in right:
            continue
        out[key] = {
            string.serialize(f"{v}+{c}", None)
            for v in values[:-1]
            for c in right.get(v.rsplit("|", 1)[1], [])
        }
    return out


def _fk_records(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for i in range(n):
        if rng.random() < 0.4:
            c = f"c{rng.randint(0, 4)}"
            out.append(("fk-customers", c, f"{c}-v{i}"))
        else:
            out.append(("fk-orders", f"o{rng.randint(0, 9)}", f"o{i}|c{rng.randint(0, 4)}"))
    return out


def _grace_join(work: Work) -> Topology:
    """Orders joined with a versioned prices table as of each order's time, with a grace
    period (KIP-914, KIP-923), as the grace-join crash test runs it."""

    def joiner(order: str, price: str) -> str:
        work.step()
        return f"{order}|{price}"

    b = StreamBuilder()
    table = b.table("prices", "string", "string", store="prices", versioned="1h")
    (
        b.stream("grace-orders", "string", "string")
        .join(table, joiner, joined=Joined.with_grace_period(3000))
        .to("priced", "string", "string")
    )
    return b.build()


def _prices(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for i in range(n):
        p = f"p{rng.randint(0, 4)}"
        if rng.random() < 0.35:
            out.append(("prices", p, f"{p}={i}"))
        else:
            out.append(("grace-orders", p, f"o{i}"))
    return out


def _dedup(work: Work) -> Topology:
    """Payments deduplicated by their id (a dedup store), as the payments example does."""

    def payment_id(_k: str, v: str) -> str:
        work.step()
        return v.split(":", 1)[0]

    b = StreamBuilder()
    (
        b.stream("payments", "string", "string")
        .deduplicate(payment_id, within="1h", store="payment-ids")
        .to("payments-unique", "string", "string")
    )
    return b.build()


def _payments(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    return [
        ("payments", f"a{rng.randint(0, 5)}", f"pay{rng.randint(0, n // 2)}:{i}") for i in range(n)
    ]


def _example_word_count(work: Work) -> Topology:
    from kstream.examples.word_count import build_topology

    return build_topology()


def _lines(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    return [
        ("lines", None, " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))))
        for _ in range(n)
    ]


def _example_dedup(work: Work) -> Topology:
    from kstream.examples.payments_dedup import build_topology

    return build_topology()


def _example_payments(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    return [
        (
            "payments",
            f"acct{rng.randint(0, 4)}",
            {"idempotency_key": f"pk{rng.randint(0, n // 2)}", "amount": i},
        )
        for i in range(n)
    ]


def _example_clicks(work: Work) -> Topology:
    from kstream.examples.clicks_per_minute import build_topology

    return build_topology()


def _example_click_events(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    return [("clicks", f"user{rng.randint(0, 4)}", {"page": f"/p{i}"}) for i in range(n)]


def _example_orders(work: Work) -> Topology:
    from kstream.examples.orders_enriched import build_topology

    return build_topology()


def _example_order_events(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = [
        ("customers", f"c{i}", {"name": f"customer {i}", "region": f"r{i % 2}"}) for i in range(5)
    ]
    out += [("products", f"p{i}", {"name": f"product {i}", "price": i + 1}) for i in range(4)]
    for i in range(n):
        order = {
            "customer_id": f"c{rng.randint(0, 4)}",
            "product_id": f"p{rng.randint(0, 4)}",
            "quantity": rng.randint(1, 3),
        }
        out.append(("orders", f"order{i}", order))
    return out


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "count",
            _count,
            {"words": ("string", "string")},
            ["counts"],
            _words,
            guarantees=("exactly_once_v2", "exactly_once", "at_least_once"),
        ),
        Scenario(
            "windowed",
            _windowed,
            {"clicks": ("string", "string")},
            ["window-counts"],
            _clicks,
            oracle="per_partition",
        ),
        Scenario(
            "stream_table",
            _stream_table,
            {"orders": ("string", "string"), "customers": ("string", "string")},
            ["enriched"],
            _orders_customers,
            oracle="per_partition",
            distinct_timestamps=True,
        ),
        Scenario(
            "fk_join",
            _fk_join,
            {"fk-orders": ("string", "string"), "fk-customers": ("string", "string")},
            ["fk-out"],
            _fk_records,
            compare="final",
            final_also=_fk_stale,
        ),
        Scenario(
            "grace_join",
            _grace_join,
            {"grace-orders": ("string", "string"), "prices": ("string", "string")},
            ["priced"],
            _prices,
            oracle="per_partition",
        ),
        Scenario(
            "dedup",
            _dedup,
            {"payments": ("string", "string")},
            ["payments-unique"],
            _payments,
            oracle="per_partition",
        ),
        Scenario(
            "word_count",
            _example_word_count,
            {"lines": ("string", "string")},
            ["word-counts"],
            _lines,
        ),
        Scenario(
            "payments_dedup",
            _example_dedup,
            {"payments": ("string", "json")},
            ["payments-deduped"],
            _example_payments,
            oracle="per_partition",
        ),
        Scenario(
            "clicks_per_minute",
            _example_clicks,
            {"clicks": ("string", "json")},
            ["clicks-per-minute"],
            _example_click_events,
            compare="once",
            oracle="per_partition",
        ),
        Scenario(
            "orders_enriched",
            _example_orders,
            {
                "orders": ("string", "json"),
                "customers": ("string", "json"),
                "products": ("string", "json"),
            },
            ["orders-enriched"],
            _example_order_events,
            preload=("customers", "products"),
            global_tables=True,
        ),
    )
}
