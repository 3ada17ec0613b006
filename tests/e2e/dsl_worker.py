"""A worker process for the DSL operators' crash tests: runs one app of e2e.dsl_apps, under
exactly_once_v2, until SIGTERM.

    dsl_worker.py fk      --orders T --customers T --out T          COMMON
    dsl_worker.py cogroup --a T --c T --sums T --held T --hold-ms N COMMON
    dsl_worker.py grace   --orders T --prices T --out T --grace-ms N COMMON

COMMON: --bootstrap, --app-id, --state-dir, --delay (seconds of work per input record).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.groups import fast_group

from e2e import dsl_apps
from kstream.dsl import StreamBuilder
from kstream.runtime import App

# per app: its topic flags and the batch size that keeps a kill mid-stream
TOPICS = {
    "fk": ("orders", "customers", "out"),
    "cogroup": ("a", "c", "sums", "held"),
    "grace": ("orders", "prices", "out"),
}
BATCH = {"fk": 10, "cogroup": 20, "grace": 20}


def _app(args: argparse.Namespace) -> StreamBuilder:
    if args.app == "fk":
        return dsl_apps.fk_join(args.orders, args.customers, args.out, args.delay)
    if args.app == "cogroup":
        return dsl_apps.cogroup_suppress(
            args.a, args.c, args.sums, args.held, args.hold_ms, args.delay
        )
    return dsl_apps.grace_join(args.orders, args.prices, args.out, args.grace_ms, args.delay)


def main() -> None:
    ap = argparse.ArgumentParser()
    apps = ap.add_subparsers(dest="app", required=True)
    for name, topics in TOPICS.items():
        sub = apps.add_parser(name)
        for flag in ("bootstrap", "app-id", "state-dir", *topics):
            sub.add_argument(f"--{flag}", required=True)
        sub.add_argument("--delay", type=float, default=0.0)
        if name == "cogroup":
            sub.add_argument("--hold-ms", type=int, required=True)
        if name == "grace":
            sub.add_argument("--grace-ms", type=int, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    app = App(
        _app(args),
        app_id=args.app_id,
        bootstrap_servers=args.bootstrap,
        processing_guarantee="exactly_once_v2",
        config=fast_group(
            {
                "state_dir": args.state_dir,
                "commit_interval": 50,
                "batch_max_records": BATCH[args.app],
                "batch_max_wait": 50,
            }
        ),
    )
    app.run()


if __name__ == "__main__":
    main()
