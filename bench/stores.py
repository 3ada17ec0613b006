"""Store backend throughput: get / put / write_batch / range operations per second.

Runs each backend (memory, lru, lmdb, and redis when redis-server is installed) through the
same workload, prints a table and writes bench/results/stores.json.

    python bench/stores.py [--n 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))  # test support: a throw-away redis-server
sys.path.insert(0, ROOT)

import store_backends  # noqa: E402
from store_backends import Backend  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def rate(n: int, fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return n / max(time.perf_counter() - t0, 1e-9)


def run_backend(be: Backend, n: int) -> dict[str, float]:
    rnd = random.Random(7)
    keys = [b"key-%08d" % i for i in range(n)]
    shuffled = keys[:]
    rnd.shuffle(shuffled)
    value = b"v" * 100
    out: dict[str, float] = {}

    def puts() -> None:
        for k in shuffled:
            be.put(k, value)

    def batch() -> None:
        for i in range(0, n, 1000):
            be.write_batch(dict.fromkeys(keys[i : i + 1000], value), (), {"changelog_offset": i})

    def gets() -> None:
        for k in shuffled:
            be.get(k)

    ranges = max(n // 100, 1)

    def scans() -> None:
        for i in range(ranges):
            lo = keys[(i * 97) % (n - 100)]
            with be.range(lo, None) as cur:
                for _j, _ in zip(range(100), cur, strict=False):
                    pass

    n_put = min(n, 5000) if "LMDB" in type(be).__name__ else n
    shuffled = shuffled[:n_put]
    out["put_per_s"] = rate(n_put, puts)
    shuffled = keys[:]
    rnd.shuffle(shuffled)
    out["write_batch_puts_per_s"] = rate(n, batch)
    out["get_per_s"] = rate(n, gets)
    out["range_100_per_s"] = rate(ranges, scans)
    out["range_entries_per_s"] = out["range_100_per_s"] * 100
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "stores.json"))
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="kstream-bench-")
    results: dict[str, Any] = {"n": args.n, "value_bytes": 100, "backends": {}}
    urls = {
        "memory": "memory://",
        "lru": f"lru://?max_entries={args.n * 2}",
        "lmdb": "lmdb://bench?sync=false",
    }
    server = None
    try:
        from support.redis_server import RedisServer, available

        if available():
            server = RedisServer().start()
            urls["redis"] = server.url
        for name, url in urls.items():
            be = store_backends.open(url, name="bench", state_dir=tmp, namespace="bench")
            try:
                results["backends"][name] = run_backend(be, args.n)
            finally:
                be.destroy()
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    cols = ["put_per_s", "write_batch_puts_per_s", "get_per_s", "range_entries_per_s"]
    print(f"{'backend':<8} " + " ".join(f"{c:>24}" for c in cols))
    for name, r in results["backends"].items():
        print(f"{name:<8} " + " ".join(f"{r[c]:>24,.0f}" for c in cols))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
