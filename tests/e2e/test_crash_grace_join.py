"""Crash test of a stream-table join with a grace period (KIP-923) under exactly_once_v2.

The app (e2e.dsl_apps.grace_join, run by e2e.dsl_worker) joins a stream of orders, keyed by
product, with a versioned table of prices (KIP-889), each order with the price valid at its
own time (KIP-914), holding orders back for `GRACE_MS` of stream time first. Every price
version is produced before the app starts; orders come a chunk per kill, their timestamps
mostly rising but some older than the stream time (within the grace period, and beyond it: those
join at once). The worker is killed `KILLS` times while orders are pending (asserted at each
kill) and restarted on the same state directory, so the grace buffer and the versioned store
come back from their changelogs; then a far-future order on each partition releases the
buffer. The independent reader (e2e.independent_reader: plain confluent-kafka, read_committed,
no deduplication) then checks every order's result `"<order id>|<price>"`:

- wrong: 0. Each result names the price the order's product had at the order's time;
- duplicated: 0. No order is answered twice;
- missing: 0. Every order is answered (every product has a price before the first order).

The prices carry event times of November 2023, years past the versioned changelog's compaction
lag (history retention plus a day) if the broker measured it against the puts' own times: it
compacted the history of the first transaction of each task away within seconds, and a task
restored afterwards joined its buffered orders with nothing (one run in ten lost an answer so).
kstream stamps versioned changelog records with the time of writing (kstream.state.versioned);
tests/integration/test_versioned_changelog_compaction.py pins that on the broker directly.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from e2e.independent_reader import IndependentReader, committed_offsets
from e2e.support import create_topics, dsl_worker, produce, require_kafka, wait_reading

PARTITIONS = 2
PRODUCTS = 8
ORDERS = 1200
KILLS = 3
GRACE_MS = 200
PRICE_EVERY_MS = 300  # a new price of each product this often (of event time)
DELAY = 0.01  # seconds of work per order: a kill lands with orders pending
BASE = 1_700_000_000_000

Order = tuple[str, str, int]  # product, order id, timestamp


def _prices() -> dict[str, list[tuple[int, str]]]:
    """Per product, its price versions (timestamp, price) in time order: one before the first
    order, then one every `PRICE_EVERY_MS` (products staggered) past the last order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for i in range(PRODUCTS):
        p = f"p{i}"
        stamps = [BASE - 1_000, *range(BASE + 37 * i, BASE + 10 * ORDERS + 1_000, PRICE_EVERY_MS)]
        out[p] = [(ts, f"{p}${n}") for n, ts in enumerate(stamps)]
    return out


def _orders() -> list[Order]:
    """Orders 10 ms apart, products drawn at random; one in ten is late by up to 150 ms
    (within the grace period) and one in fifty by up to 600 ms (beyond it). A seeded draw:
    the same input each run."""
    rng = random.Random(923)
    rows: list[Order] = []
    for n in range(ORDERS):
        ts = BASE + 10 * n
        if n % 10 == 3:
            ts -= rng.randrange(150)
        elif n % 50 == 7:
            ts -= rng.randrange(300, 600)
        rows.append((f"p{rng.randrange(PRODUCTS)}", f"o{n}", max(BASE, ts)))
    return rows


def _price_at(versions: list[tuple[int, str]], ts: int) -> str:
    """The price valid at `ts`: the last version at or before it."""
    return versions[bisect.bisect_right([t for t, _ in versions], ts) - 1][1]


@pytest.mark.timeout(300)
def test_sigkill_keeps_the_grace_join_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    orders, prices, out = unique_name("orders"), unique_name("prices"), unique_name("out")
    app_id = unique_name("grace-crash")
    create_topics(bs, PARTITIONS, orders, prices, out)
    versions = _prices()
    rows = _orders()
    expected = {o: f"{o}|{_price_at(versions[p], ts)}" for p, o, ts in rows}
    produce(
        bs,
        prices,
        sorted(((p, v, ts) for p, vs in versions.items() for ts, v in vs), key=lambda r: r[2]),
        "string",
        "string",
    )

    def consumed() -> int:
        """The orders the app has committed as done."""
        return committed_offsets(bs, app_id, orders, PARTITIONS)

    def answers() -> list[str]:
        return [str(r.value) for r in reader.records[out] if not str(r.key).startswith("tick")]

    chunk = len(rows) // (KILLS + 1)
    reader = IndependentReader(bs, [out], values="string")
    topics = {"orders": orders, "prices": prices, "out": out}
    w = dsl_worker(tmp_path, "grace", bs, app_id, grace_ms=GRACE_MS, delay=DELAY, **topics)
    try:
        w.start()
        for k in range(KILLS):
            produce(bs, orders, rows[k * chunk : (k + 1) * chunk], "string", "string")
            want = k * chunk + chunk // 3

            def done(target: int = want) -> bool:
                return consumed() >= target

            # on the group's committed input offsets: a read_committed reader can stall behind
            # the killed worker's open transaction until the broker aborts it
            wait_reading(reader, f"{want} orders done", done, 120, w)
            assert consumed() < (k + 1) * chunk  # the kill lands mid-stream
            w.kill()
            w.start()
        produce(bs, orders, rows[KILLS * chunk :], "string", "string")
        # far in stream time on every partition: every held order goes
        end = BASE + 10 * ORDERS + 60_000
        for p in range(PARTITIONS):
            produce(bs, orders, [(f"tick{p}", "tick", end)], "string", "string", partition=p)
        try:
            wait_reading(reader, "every order", lambda: len(answers()) >= len(rows), 120, w)
        except AssertionError as e:
            answered = {a.split("|", 1)[0] for a in answers()}
            unanswered = [(p, o, ts) for p, o, ts in rows if o not in answered]
            raise AssertionError(
                f"{len(unanswered)} orders unanswered, e.g. {unanswered[:8]}; {_ends(bs, out)}\n{e}"
            ) from None
        assert w.stop() == 0, w.tail()
        reader.read_to_end()
    finally:
        if w.alive():
            w.kill()
        reader.close()

    got = answers()
    by_order = {a.split("|", 1)[0]: a for a in got}
    wrong = [a for a in got if expected.get(a.split("|", 1)[0]) != a]
    duplicated = [a for a, n in Counter(got).items() if n > 1]
    missing = [o for o in expected if o not in by_order]
    assert (len(wrong), len(duplicated), len(missing)) == (0, 0, 0), (
        wrong[:5],
        duplicated[:5],
        missing[:5],
    )
    assert reader.errors == []


def _ends(bs: str, topic: str) -> str:
    """Each partition of `topic`: its read_committed end (the last stable offset) and its high
    watermark. A stable end stuck below the high watermark is a transaction left open (a
    reader waits behind it), not an answer never written."""
    ends: list[list[int | str]] = []
    for iso in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bs, "group.id": "ends", "isolation.level": iso})
        try:
            ends.append(
                [
                    c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                    for p in range(PARTITIONS)
                ]
            )
        except KafkaException as e:  # a diagnosis: say why it is missing, fail on the cause
            ends.append([f"unknown ({e})"])
        finally:
            c.close()
    return f"{topic}: last stable offsets {ends[0]}, high watermarks {ends[1]}"
