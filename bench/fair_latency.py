"""End-to-end latency against its floor, measured as distributions in the same run (`make
bench`'s last part; docs/performance.md "The fair protocol").

A consume -> process -> produce pipeline under exactly-once cannot answer faster than the same
loop with no processing at all: a confluent-kafka consumer handing each record to a
transactional producer that commits on the same cadence (bench/kstream_pipe.py `--engine raw`).
That loop is the floor; its latency is a distribution, measured like the pipeline's: records
produced at a fixed rate by an upstream producer stamping the wall clock, read back by a plain
read_committed consumer (run_all.Watcher), the first `run_all.WARMUP_S` seconds apart.

The earlier harness added the p99 of two single hops to make a floor, but percentiles do not
add, and a floor measured once says nothing of its own noise. Here the floor and kstream run
in interleaved pairs (floor then kstream, or kstream then floor, the order shuffled with the
run's seed), each pair on the same broker within seconds of each other; each pair gives one
ratio of p99s (and of p50s), and the result is the median ratio over the pairs with a 95%
bootstrap confidence interval (resampling the pairs), beside each side's medians and spread.

`make bench` runs it after its throughput runs; alone, on a broker of its own warmed by one
discarded pair:

    python bench/fair_latency.py [--pairs 5] [--seed 1] [--out FILE] [--other-floor PIPE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
from typing import Any

from brokers import BenchBroker, start_broker
from run_all import LATENCY_KNOBS, latency_run

# the pipelines run as kstream's latency settings do: 20 ms commits, 5 ms fetch waits
KNOBS = LATENCY_KNOBS
RATE = 5_000  # records/s offered by the upstream producer
SECONDS = 8.0  # measured per run, after the warm-up
PAIRS = 5
RESAMPLES = 2_000
TARGET = 1.3  # kstream's p99 over the floor's, at most (issue goal)
SIDES = (("floor", "raw", "exactly_once"), ("kstream", "kstream", "exactly_once_v2"))


def bootstrap_ci(values: list[float], rng: random.Random) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the median of `values`."""
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(RESAMPLES)
    )
    return medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


def latency_pairs(
    broker: BenchBroker,
    pairs: int,
    seed: int,
    rate: int = RATE,
    seconds: float = SECONDS,
    other_floor: str | None = None,
) -> dict[str, Any]:
    """`pairs` interleaved floor/kstream runs on `broker`; the ratios with their interval.
    `other_floor`: a `kstream_pipe.py` whose raw loop runs as a third side of every pair
    ("other floor": another tree's loop, to compare two floors in one sitting)."""
    rng = random.Random(seed)
    runs: list[dict[str, Any]] = []
    sides = list(SIDES)
    if other_floor:
        sides.append(("other floor", "raw", "exactly_once"))
    for k in range(1, pairs + 1):
        order = list(sides)
        rng.shuffle(order)
        pair = {}
        for side, engine, guarantee in order:
            pipe = other_floor if side == "other floor" else None
            with tempfile.TemporaryDirectory() as tmp:
                r = latency_run(
                    broker, rate, seconds, tmp, guarantee, KNOBS, engine=engine, pipe=pipe
                )
            pair[side] = r
            print(
                f"latency pair {k}/{pairs} {side}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms "
                f"({r['outputs']:,} outputs)",
                flush=True,
            )
        runs.append({"pair": k, "order": [s for s, _, _ in order], **pair})
    out: dict[str, Any] = {
        "rate_per_s": rate,
        "seconds": seconds,
        "knobs": KNOBS,
        "pairs": pairs,
        "target_p99_over_floor": TARGET,
        "runs": runs,
    }
    if other_floor:
        out["other_floor"] = other_floor
    for side, _, _ in sides:
        for q in ("p50_ms", "p99_ms"):
            values = [r[side][q] for r in runs]
            out[f"{side}_{q}"] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    for q in ("p50", "p99"):
        ratios = [r["kstream"][f"{q}_ms"] / r["floor"][f"{q}_ms"] for r in runs]
        low, high = bootstrap_ci(ratios, rng)
        out[f"{q}_over_floor"] = {
            "median": statistics.median(ratios),
            "ci95": [low, high],
            "per_pair": ratios,
        }
    return out


def latency_table(lat: dict[str, Any]) -> str:
    """The latency result as markdown lines."""

    def cell(x: dict[str, float]) -> str:
        return f"{x['median']:.1f} ({x['min']:.1f}-{x['max']:.1f})"

    lines = [
        f"Latency at {lat['rate_per_s']:,} records/s, {lat['pairs']} interleaved pairs of "
        f"{lat['seconds']:.0f} s runs ({lat['knobs']['commit_interval']} ms commits): medians "
        "(min-max) over the runs, ms",
        "",
        "| path | p50 | p99 |",
        "|---|---|---|",
    ]
    for side in [s for s, _, _ in SIDES] + (["other floor"] if "other floor_p50_ms" in lat else []):
        lines.append(f"| {side} | {cell(lat[f'{side}_p50_ms'])} | {cell(lat[f'{side}_p99_ms'])} |")
    lines.append("")
    for q in ("p50", "p99"):
        r = lat[f"{q}_over_floor"]
        lines.append(
            f"kstream {q} over the floor's: {r['median']:.2f}x "
            f"(95% CI {r['ci95'][0]:.2f}-{r['ci95'][1]:.2f})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="floor/kstream latency pairs on a broker of their own")
    ap.add_argument("--pairs", type=int, default=PAIRS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="", help="write the result (JSON) here")
    ap.add_argument(
        "--other-floor", default="", help="another kstream_pipe.py: its raw loop as a third side"
    )
    args = ap.parse_args(argv)
    other = os.path.abspath(args.other_floor) if args.other_floor else None
    with start_broker("kafka") as broker:
        # a fresh broker's first seconds are compiling (run_all.latency_runs): one pair, unused
        latency_pairs(broker, 1, args.seed + 1)
        lat = latency_pairs(broker, args.pairs, args.seed, other_floor=other)
    lat["seed"] = args.seed
    print(latency_table(lat))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(lat, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
