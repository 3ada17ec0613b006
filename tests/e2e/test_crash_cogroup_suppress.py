"""Crash test of cogroup (KIP-150) and suppress under exactly_once_v2: SIGKILLed mid-stream.

The app (e2e.dsl_apps.cogroup_suppress, run by e2e.dsl_worker) cogroups two inputs into
running sums and suppresses them for `HOLD_MS` of stream time per key; every key gets records
from one input only, all of value 1, so a key's running sums are 1, 2, ..., N whatever the
interleaving of the inputs. The worker is killed `KILLS` times while input is pending (asserted
at each kill) and restarted on the same state directory; then a far-future record on each
input partition flushes every held key. The independent reader (e2e.independent_reader: plain
confluent-kafka, read_committed, no deduplication) then checks:

- sums: each key's updates are exactly 1..N, in order (no update lost, repeated or wrong);
- held: each key's suppressed updates are strictly increasing running sums (a held update is
  never emitted twice, even if the kill fell between emitting it and committing) and end with
  N (the buffer, restored from its changelog after each kill, lost nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.independent_reader import IndependentReader, committed_offsets
from e2e.support import create_topics, dsl_worker, produce, require_kafka, wait_reading

PARTITIONS = 2
KEYS = 10  # per input
PER_KEY = 60
KILLS = 3
HOLD_MS = 3000  # 300 records of stream time: about a chunk
DELAY = 0.005  # seconds of work per input record: a kill lands with input pending
BASE = 1_700_000_000_000

Row = tuple[str, str, int]  # topic, key, timestamp


def _produce(bs: str, rows: list[Row], partition: int | None = None) -> None:
    """Value 1 for each row, in their order per topic."""
    for topic in dict.fromkeys(t for t, *_ in rows):
        produce(bs, topic, [(k, 1, ts) for t, k, ts in rows if t == topic], partition=partition)


def _keys() -> list[str]:
    return [f"{side}{i}" for side in "ac" for i in range(KEYS)] + [f"once{k}" for k in range(KILLS)]


def _final(key: str) -> int:
    return 1 if key.startswith("once") else PER_KEY


@pytest.mark.timeout(300)
def test_sigkill_keeps_cogroup_and_suppress_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    a, c, sums, held = unique_name("a"), unique_name("c"), unique_name("sums"), unique_name("held")
    app_id = unique_name("cogroup-crash")
    create_topics(bs, PARTITIONS, a, c, sums, held)
    rows: list[Row] = [
        (a if n % 2 == 0 else c, f"{'ac'[n % 2]}{n // 2 % KEYS}", BASE + 10 * n)
        for n in range(2 * KEYS * PER_KEY)
    ]
    chunk = len(rows) // (KILLS + 1)
    # key `once<k>` gets one record, early in chunk k: it is held (HOLD_MS is about a chunk of
    # stream time) when the worker is killed, and only the restored buffer can still emit it
    for k in reversed(range(KILLS)):
        at = k * chunk + chunk // 6
        rows.insert(at, (a, f"once{k}", rows[at][2]))
    chunk += 1  # each of the first KILLS chunks has its `once` record
    total = len(rows)

    def consumed() -> int:
        """The input records the app has committed as done, on both inputs."""
        return sum(committed_offsets(bs, app_id, t, PARTITIONS) for t in (a, c))

    def per_key(topic: str) -> dict[str, list[Any]]:
        return {k: v for k, v in reader.updates(topic).items() if not k.startswith("tick")}

    reader = IndependentReader(bs, [sums, held])
    topics = {"a": a, "c": c, "sums": sums, "held": held}
    w = dsl_worker(tmp_path, "cogroup", bs, app_id, hold_ms=HOLD_MS, delay=DELAY, **topics)
    try:
        w.start()
        for k in range(KILLS):
            _produce(bs, rows[k * chunk : (k + 1) * chunk])
            want = k * chunk + chunk // 3
            # on the group's committed input offsets: a read_committed reader can stall behind
            # the killed worker's open transaction until the broker aborts it
            wait_reading(reader, f"{want} inputs done", lambda w_=want: consumed() >= w_, 120, w)
            assert consumed() < (k + 1) * chunk  # the kill lands mid-stream
            w.kill()
            w.start()
        _produce(bs, rows[KILLS * chunk :])
        wait_reading(reader, "every sum", lambda: reader.count(sums) >= total, 120, w)
        # far in stream time on every partition of `a`: every held key goes
        end = BASE + 10 * total + 60_000
        for p in range(PARTITIONS):
            _produce(bs, [(a, f"tick{p}", end)], partition=p)

        def all_held() -> bool:
            got = per_key(held)
            return all(got.get(k, [None])[-1] == _final(k) for k in _keys())

        wait_reading(reader, "the held sums", all_held, 120, w)
        assert w.stop() == 0, w.tail()
        reader.read_to_end()
    finally:
        if w.alive():
            w.kill()
        reader.close()

    assert per_key(sums) == {k: list(range(1, _final(k) + 1)) for k in _keys()}
    got_held = per_key(held)
    assert set(got_held) == set(_keys())
    for key, values in got_held.items():
        assert values == sorted(set(values)), (key, values)  # no repeats, in order
        assert values[-1] == _final(key) and all(1 <= v <= _final(key) for v in values)
    assert reader.errors == []
