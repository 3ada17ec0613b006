"""The record cache on P2 (a running count per key), cache off against on, on Apache Kafka.

P2 is the benchmark's stateful pipeline (docs/performance.md, bench/kstream_pipe.py):
`group_by_key().count()` -> `to_stream()` -> an output topic, `exactly_once_v2`, a 100 ms
commit interval. The same input (N records, 4 partitions, 1,000 keys) is run once per
`cache_max_bytes` setting, one after the other on one broker; each run goes on until its output
holds every key's final count, then the app closes. Then a read_committed reader counts what
each run wrote: output records and changelog records (`<app_id>-counts-changelog`), and
rebuilds the final table from the output (the last value per key), which must equal the input's
counts in every run.

What to expect: with the cache on, a key updated several times between two commits is
forwarded once, so the output shrinks by roughly the updates per key per commit. The changelog
does not: kstream already writes one changelog record per key per commit with the cache off (the
write cache, kstream.state.cache, holds a commit's writes and logs the last per key), where Kafka
Streams without its cache logs every update. So the changelog ratio is ~1 by design.

Prints a table and writes bench/results/cache.json.

    python bench/cache.py [--records 200000] [--cache-bytes 0 10485760] [--commit-interval 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from brokers import TOPIC_CONFIG, start_broker  # noqa: E402
from pipeline import KEYS, PARTITIONS, produce_input  # noqa: E402

from kstream.broker_compat.reader import TopicReader  # noqa: E402
from kstream.dsl import StreamBuilder  # noqa: E402
from kstream.kafka.admin import Admin  # noqa: E402
from kstream.runtime import App, AppState  # noqa: E402

TEN_MB = 10 * 1024 * 1024


def p2(src: str, dst: str) -> StreamBuilder:
    """bench/kstream_pipe.py's P2, keys and counts as they are on the wire."""
    b = StreamBuilder()
    b.stream(src, key_serde="bytes").group_by_key().count(store="counts").to_stream().to(
        dst, key_serde="bytes", value_serde="long"
    )
    return b


def expected_counts(n: int) -> dict[bytes, int]:
    """The final count of each key `produce_input` writes (key i % KEYS)."""
    return {b"key-%d" % k: n // KEYS + (1 if k < n % KEYS else 0) for k in range(min(n, KEYS))}


def wait_for_final(bs: str, topic: str, want: dict[bytes, int], timeout_s: float) -> float:
    """Seconds until `topic` (read_committed) holds `want` as its latest value per key."""
    t0 = time.perf_counter()
    latest: dict[bytes, int] = {}
    behind = len(want)
    with TopicReader(bs, topic, "bytes", "long") as r:
        while behind:
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"{topic}: {behind} key(s) short of their final count")
            for rec in r.poll(0.2):
                before = latest.get(rec.key)
                latest[rec.key] = rec.value
                target = want.get(rec.key)
                if target is None:
                    raise RuntimeError(f"{topic}: unexpected key {rec.key!r}")
                if rec.value == target and before != target:
                    behind -= 1
                elif before == target and rec.value != target:
                    behind += 1
    return time.perf_counter() - t0


def read_all(bs: str, topic: str, key_serde: str, value_serde: str) -> list[Any]:
    with TopicReader(bs, topic, key_serde, value_serde) as r:
        return r.read_to_end()


def run(
    bs: str, src: str, n: int, cache_bytes: int, commit_interval: int, state_dir: str
) -> dict[str, Any]:
    app_id = f"bench-cache-{uuid.uuid4().hex[:8]}"
    dst = f"out-cache-{cache_bytes}-{uuid.uuid4().hex[:6]}"
    Admin(bs).create_topic(dst, PARTITIONS, config=TOPIC_CONFIG)
    app = App(
        p2(src, dst),
        app_id,
        bs,
        "exactly_once_v2",
        {
            "state_dir": os.path.join(state_dir, app_id),
            "batch_max_records": 10_000,
            "commit_interval": commit_interval,
            "cache_max_bytes": cache_bytes,
        },
    )
    app.start()
    try:
        if not app.wait_for(AppState.RUNNING, AppState.ERROR, timeout=120):
            raise RuntimeError("the app did not start")
        seconds = wait_for_final(bs, dst, expected_counts(n), timeout_s=600)
    finally:
        app.close()
        if app.error is not None:
            raise app.error
    outputs = read_all(bs, dst, "bytes", "long")
    changelog = read_all(bs, f"{app_id}-counts-changelog", "bytes", "bytes")
    table: dict[bytes, int] = {}
    for rec in outputs:
        table[rec.key] = rec.value
    return {
        "cache_max_bytes": cache_bytes,
        "commit_interval_ms": commit_interval,
        "output_records": len(outputs),
        "changelog_records": len(changelog),
        "seconds_to_final": round(seconds, 3),
        "final_table_ok": table == expected_counts(n),
        "keys": len(table),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--cache-bytes", type=int, nargs="+", default=[0, TEN_MB])
    ap.add_argument("--commit-interval", type=int, nargs="+", default=[100])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cache.json"))
    args = ap.parse_args(argv)
    n = args.records
    rows: list[dict[str, Any]] = []
    with start_broker("kafka") as broker, tempfile.TemporaryDirectory() as state_dir:
        bs = broker.bootstrap_servers
        src = f"bench-cache-in-{uuid.uuid4().hex[:6]}"
        Admin(bs).create_topic(src, PARTITIONS, config=TOPIC_CONFIG)
        produce_input(bs, src, n)
        for interval in args.commit_interval:
            for cache_bytes in args.cache_bytes:
                rows.append(run(bs, src, n, cache_bytes, interval, state_dir))
        version = broker.version
    bases = {r["commit_interval_ms"]: r for r in rows if r["cache_max_bytes"] == 0}
    for r in rows:
        base = bases.get(r["commit_interval_ms"])
        if base is not None:
            r["output_ratio_vs_off"] = round(r["output_records"] / base["output_records"], 4)
            r["changelog_ratio_vs_off"] = round(
                r["changelog_records"] / base["changelog_records"], 4
            )
    print(f"P2 on Apache Kafka {version}: {n:,} records, {PARTITIONS} partitions, {KEYS} keys")
    print(
        f"{'commit ms':>9} {'cache bytes':>11} {'outputs':>9} {'changelog':>9} "
        f"{'out ratio':>9} {'log ratio':>9} {'final ok':>8} {'seconds':>8}"
    )
    for r in rows:
        print(
            f"{r['commit_interval_ms']:>9} {r['cache_max_bytes']:>11,} {r['output_records']:>9,} "
            f"{r['changelog_records']:>9,} {r.get('output_ratio_vs_off', 1):>9.4f} "
            f"{r.get('changelog_ratio_vs_off', 1):>9.4f} {r['final_table_ok']!s:>8} "
            f"{r['seconds_to_final']:>8.2f}"
        )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "pipeline": "P2 count per key",
                "guarantee": "exactly_once_v2",
                "broker": f"kafka {version}",
                "records": n,
                "partitions": PARTITIONS,
                "keys": KEYS,
                "results": rows,
            },
            f,
            indent=2,
        )
    print(f"wrote {args.out}")
    return 0 if all(r["final_table_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
