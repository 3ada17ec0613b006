"""A worker process for the cogroup + suppress crash test: runs the app until SIGTERM.

Two inputs are cogrouped into running sums (`c` re-keyed, so through the cogroup's repartition
topic) and the sums are suppressed for `--hold-ms` of stream time per key. A per-record delay
bounds the speed, so that a SIGKILL lands mid-stream.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.groups import fast_group

from kstream.dsl import StreamBuilder
from kstream.dsl.suppress import BufferConfig, Suppressed
from kstream.runtime import App


def build(a: str, c: str, sums: str, held: str, hold_ms: int, delay: float) -> StreamBuilder:
    """The app: `sums` gets every running sum, `held` the suppressed ones."""

    def slow(_k: Any, _v: Any) -> None:
        time.sleep(delay)

    b = StreamBuilder()
    ga = b.stream(a, "string", "long").peek(slow).group_by_key()
    gc = b.stream(c, "string", "long").peek(slow).group_by(lambda k, _v: k, key_serde="string")
    totals = (
        ga.cogroup(lambda _k, v, s: s + v)
        .cogroup(gc, lambda _k, v, s: s + v)
        .aggregate(lambda: 0, store="sums", value_serde="long")
    )
    totals.to_stream().to(sums, "string", "long")
    suppressed = Suppressed.until_time_limit(hold_ms, BufferConfig.unbounded()).with_name("held")
    totals.suppress(suppressed).to_stream().to(held, "string", "long")
    return b


def main() -> None:
    ap = argparse.ArgumentParser()
    for flag in ("--bootstrap", "--app-id", "--a", "--c", "--sums", "--held", "--state-dir"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--hold-ms", type=int, default=200)
    ap.add_argument("--delay", type=float, default=0.005)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    app = App(
        build(args.a, args.c, args.sums, args.held, args.hold_ms, args.delay),
        app_id=args.app_id,
        bootstrap_servers=args.bootstrap,
        processing_guarantee="exactly_once_v2",
        config=fast_group(
            {
                "state_dir": args.state_dir,
                "commit_interval": 50,
                "batch_max_records": 20,
                "batch_max_wait": 50,
            }
        ),
    )
    app.run()


if __name__ == "__main__":
    main()
