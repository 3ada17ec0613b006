"""A foreign-key join under exactly-once when the worker is SIGKILLed mid-stream.

The app (`fk_join_worker.py`, built by `fk_join_support.build`) joins orders (2 partitions)
with customers (3 partitions) on each order's customer id. Every input value is unique (it
carries its position in the input), orders change customer often, and customers change
value; no row is deleted. The worker is killed several times while input is pending and
restarted on the same state dir. An independent read_committed reader (plain confluent-kafka)
then checks every output record:

- wrong: 0. A result `"<order value>+<customer value>"` joins a value the order had with a
  value of the customer that order value names, never the customer of another order value
  (the stale-answer check) and never anything made up;
- duplicated: 0. No result is emitted twice (with unique inputs each (order value, customer
  value) pair is answered once; an aborted transaction's copy is never read);
- missing: 0. Each order's last result is its last value joined with its customer's last
  value.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from e2e.independent_reader import committed_offsets
from fk_join_support import StringReader, customer_of

from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer

WORKER = str(Path(__file__).with_name("fk_join_worker.py"))
ORDER_PARTITIONS, CUSTOMER_PARTITIONS = 2, 3
ORDERS, CUSTOMERS = 16, 6
UPDATES = 640  # after one first value per customer: a quarter customers, the rest orders
KILLS = 3
BASE = 1_700_000_000_000

Row = tuple[str, str, str, int]  # topic, key, value, timestamp


class Run:
    def __init__(self, bs: str, unique_name: Callable[[str], str], tmp: Path) -> None:
        self.bs, self.tmp = bs, tmp
        self.orders, self.customers = unique_name("orders"), unique_name("customers")
        self.out = unique_name("out")
        self.app_id = unique_name("app")
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self) -> None:
        log = self.tmp / f"worker-{len(self.logs)}.log"
        self.logs.append(log)
        args = ["--bootstrap", self.bs, "--app-id", self.app_id, "--orders", self.orders]
        args += ["--customers", self.customers, "--out", self.out]
        args += ["--state-dir", str(self.tmp / "s")]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, WORKER, *args], stdout=out, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.tail()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        return self.logs[-1].read_text(errors="replace")[-3000:] if self.logs else ""

    def consumed(self) -> int:
        """The input records the app has committed as done, on both inputs."""
        return committed_offsets(
            self.bs, self.app_id, self.orders, ORDER_PARTITIONS
        ) + committed_offsets(self.bs, self.app_id, self.customers, CUSTOMER_PARTITIONS)


def _rows(run: Run) -> list[Row]:
    """One first value per customer, then updates: every fourth a customer's, the others an
    order's, each naming a customer drawn at random (a seeded draw: the same input each run)."""
    rng = random.Random(213)
    rows: list[Row] = [(run.customers, f"c{c}", f"c{c}#{c}", BASE + c) for c in range(CUSTOMERS)]
    for n in range(CUSTOMERS, CUSTOMERS + UPDATES):
        ts = BASE + 10 * n
        if n % 4 == 0:
            c = n // 4 % CUSTOMERS
            rows.append((run.customers, f"c{c}", f"c{c}#{n}", ts))
        else:
            o = n % ORDERS
            rows.append((run.orders, f"o{o}", f"o{o}#{n}|c{rng.randrange(CUSTOMERS)}", ts))
    return rows


def _produce(bs: str, rows: Sequence[Row]) -> None:
    with Producer(bs, idempotent=True) as p:
        for topic, key, value, ts in rows:
            p.produce(topic, value.encode(), key.encode(), None, ts)
        p.flush()


def _wait(run: Run, reader: StringReader, what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        reader.poll()
        if check():
            return
        if not run.alive():
            raise AssertionError(f"worker exited while waiting for {what}:\n{run.tail()}")
    raise AssertionError(f"timed out waiting for {what}:\n{run.tail()}")


@pytest.mark.timeout(600)
def test_sigkill_keeps_the_fk_join_exact(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    run = Run(bootstrap_servers, unique_name, tmp_path)
    with Admin(run.bs) as admin:
        admin.create_topic(run.orders, ORDER_PARTITIONS)
        admin.create_topic(run.customers, CUSTOMER_PARTITIONS)
        admin.create_topic(run.out, ORDER_PARTITIONS)
    rows = _rows(run)
    final_values = {key: value for _t, key, value, _ts in rows}
    expected = {
        key: f"{value}+{final_values[customer_of(value)]}"
        for key, value in final_values.items()
        if key.startswith("o")
    }
    chunk = len(rows) // (KILLS + 1)
    reader = StringReader(run.bs, run.out)
    try:
        run.start()
        for k in range(KILLS):
            lo, mid, hi = k * chunk, k * chunk + chunk // 2, (k + 1) * chunk
            _produce(run.bs, rows[lo:mid])
            want = lo + chunk // 4

            def enough(w: int = want) -> bool:
                return run.consumed() >= w

            # on the group's committed input offsets: a read_committed reader can stall behind
            # the killed worker's open transaction until the broker aborts it
            _wait(run, reader, f"{want} inputs done", enough)
            # the rest of the chunk goes in just before the kill: it lands mid-stream
            _produce(run.bs, rows[mid:hi])
            assert run.consumed() < hi
            run.kill()
            run.start()
        _produce(run.bs, rows[KILLS * chunk :])
        _wait(run, reader, "every final result", lambda: reader.latest() == expected)
        run.stop()
        reader.settle()
    finally:
        if run.alive():
            run.kill()
        reader.close()

    produced: dict[str, set[str]] = {}
    for _t, key, value, _ts in rows:
        produced.setdefault(key, set()).add(value)
    wrong = []
    for r in reader.records:
        if r.value is None:
            continue  # an order that moved to a customer not yet read has no result for now
        order_value, _, customer_value = r.value.partition("+")
        customer = customer_of(order_value)
        if order_value not in produced.get(r.key, ()) or customer_value not in produced[customer]:
            wrong.append(r)
    duplicated = [
        pair
        for pair, n in Counter((r.key, r.value) for r in reader.records if r.value).items()
        if n > 1
    ]
    missing = {k: v for k, v in expected.items() if reader.latest().get(k) != v}
    assert (wrong, duplicated, missing) == ([], [], {})
    assert reader.errors == []
