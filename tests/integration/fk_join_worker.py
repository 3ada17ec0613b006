"""A worker process for the foreign-key join crash test: runs the app until SIGTERM.

The app is `fk_join_support.build` (orders joined with customers on the order's customer id),
exactly-once; a delay per order update bounds its speed, so that a SIGKILL lands mid-stream.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fk_join_support import build
from support.groups import fast_group

from kstream.runtime import App


def main() -> None:
    ap = argparse.ArgumentParser()
    for flag in ("--bootstrap", "--app-id", "--orders", "--customers", "--out", "--state-dir"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--delay", type=float, default=0.05)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    app = App(
        build(args.orders, args.customers, args.out, args.delay),
        app_id=args.app_id,
        bootstrap_servers=args.bootstrap,
        processing_guarantee="exactly_once_v2",
        config=fast_group(
            {
                "state_dir": args.state_dir,
                "commit_interval": 50,
                "batch_max_records": 10,
                "batch_max_wait": 50,
            }
        ),
    )
    app.run()


if __name__ == "__main__":
    main()
