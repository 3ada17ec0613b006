"""A worker process for the record-cache crash test: the DSL's running count and windowed sum
per key, with the record cache on, until SIGTERM.

The outputs have the formats of the other crash tests' pipeline (e2e.pipelines), so their
checks apply: the counts topic gets `key -> count`, the sums topic `key@minute -> sum`. Unlike
that pipeline's processor, these are the DSL's aggregations, whose stores the record cache holds
back: a key's updates between two commits are forwarded once.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.groups import fast_group

from e2e.pipelines import WINDOW_MS
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.runtime import App


def cached_topology(input_topic: str, counts: str, sums: str, delay_s: float) -> StreamBuilder:
    """count and a one-minute windowed sum per key, from one grouped stream."""
    b = StreamBuilder()
    stream = b.stream(input_topic, "string", "long")
    if delay_s:  # bounds how fast the app goes, so that kills land mid-stream

        def slow(_k: Any, _v: Any) -> None:
            time.sleep(delay_s)

        stream = stream.peek(slow)
    grouped = stream.group_by_key()
    grouped.count(store="running").to_stream().to(counts, "string", "long")
    windows = TimeWindows.of(WINDOW_MS, grace=86_400_000)
    grouped.windowed_by(windows).reduce(lambda a, v: a + v, store="sums").to_stream(
        lambda w, _v: f"{w.key}@{w.start}"
    ).to(sums, "string", "long")
    return b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--app-id", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--counts", required=True)
    ap.add_argument("--sums", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--guarantee", default="exactly_once_v2")
    ap.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    ap.add_argument("--commit-ms", type=int, default=200)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--session-ms", type=int, default=1000)
    args = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    app = App(
        cached_topology(args.input, args.counts, args.sums, args.delay),
        app_id=args.app_id,
        bootstrap_servers=args.bootstrap,
        processing_guarantee=args.guarantee,
        config=fast_group(
            {
                "state_dir": args.state_dir,
                "batch_max_records": args.batch,
                "commit_interval": args.commit_ms,
                "batch_max_wait": 50,
                "cache_max_bytes": args.cache_bytes,
                "kafka": {
                    "session.timeout.ms": args.session_ms,
                    "heartbeat.interval.ms": max(100, args.session_ms // 5),
                },
            }
        ),
    )
    app.run()


if __name__ == "__main__":
    main()
