"""The benchmark pipelines P1-P3 written for Quix Streams, for a side-by-side comparison.

Runs in its own virtualenv (Quix Streams pins an older confluent-kafka than kstream uses), as a
subprocess of bench/run_all.py, until SIGTERM (sent once the last output record is readable),
then prints one JSON line: `time.monotonic()` at the first record (start-up excluded, as for
kstream), CPU seconds and peak RSS. `--broker tansu` gives its consumer the short group
timeouts that broker needs (bench/brokers.py); on Kafka it keeps Quix Streams' defaults.

    python bench/quix_pipe.py --bootstrap HOST:PORT --topic IN --out OUT --group G \
        --pipeline P1|P2|P3 --guarantee at_least_once|exactly_once --state-dir DIR \
        [--broker kafka|tansu]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

from brokers import BROKERS, DEFAULT_BROKER, group_timeouts
from quixstreams import Application, State


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pipeline", choices=("P1", "P2", "P3"), required=True)
    ap.add_argument("--guarantee", choices=("at_least_once", "exactly_once"), required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--broker", choices=BROKERS, default=DEFAULT_BROKER)
    args = ap.parse_args()

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee=args.guarantee.replace("_", "-"),
        state_dir=args.state_dir,
        loglevel="WARNING",
        commit_interval=0.1 if args.guarantee == "exactly_once" else 5.0,
        # Tansu's group join takes session.timeout.ms / 2 (kstream uses the same values there)
        consumer_extra_config=dict(group_timeouts(args.broker)),
    )
    src = app.topic(args.topic, key_deserializer="string", value_deserializer="json")
    dst = app.topic(args.out, key_serializer="string", value_serializer="json")
    first: list[float] = []
    startup_cpu: list[float] = []

    def start_clock(value: Any) -> bool:
        if not first:
            first.append(time.monotonic())
            startup_cpu.append(cpu_s())
        return True

    sdf = app.dataframe(src).filter(start_clock)
    if args.pipeline == "P1":
        sdf = sdf.filter(lambda v: v["kind"] != "refund")
        sdf = sdf.apply(lambda v: {"user": v["user"], "cents": round(v["amount"] * 100)})
    elif args.pipeline == "P2":

        def count(value: Any, state: State) -> int:
            n: int = state.get("count", 0) + 1
            state.set("count", n)
            return n

        sdf = sdf.apply(count, stateful=True)
    else:
        sdf = sdf.apply(lambda v: v["amount"]).tumbling_window(10_000).sum().current()
    sdf.to_topic(dst)
    app.run()  # until SIGTERM
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "first": first[0] if first else None,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "startup_cpu_s": startup_cpu[0] if startup_cpu else None,
                "peak_rss_bytes": usage.ru_maxrss * 1024,
            }
        )
    )


def cpu_s() -> float:
    """This process's CPU seconds so far, user + sys, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
