"""A worker process for the process-level tests: runs the stateful pipeline until SIGTERM."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.groups import fast_group

from e2e.pipelines import stateful_topology
from kstream.runtime import App


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--app-id", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--counts", required=True)
    ap.add_argument("--sums", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--guarantee", default="exactly_once")
    ap.add_argument("--backend", default="memory")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--delay", type=float, default=0.0)
    # the group session (FAST_GROUP's when unset): how soon a killed worker's tasks move on
    ap.add_argument("--session-ms", type=int, default=None)
    # "cooperative" or "eager" (the engine's default when unset)
    ap.add_argument("--rebalance-protocol", default=None)
    # more librdkafka settings, KEY=VALUE (repeatable)
    ap.add_argument("--kafka", action="append", default=[])
    # num_standby_replicas (the engine's default when unset)
    ap.add_argument("--standbys", type=int, default=None)
    # acceptable_recovery_lag (the engine's default when unset)
    ap.add_argument("--acceptable-recovery-lag", type=int, default=None)
    args = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    if os.environ.get("KSTREAM_WORKER_DEBUG"):  # kstream.runtime's debug log, to trace a run
        logging.getLogger("kstream.runtime").setLevel(logging.DEBUG)
    kafka: dict[str, int | str] = {}
    if args.session_ms is not None:
        kafka["session.timeout.ms"] = args.session_ms
        kafka["heartbeat.interval.ms"] = max(100, args.session_ms // 5)
    if os.environ.get("KSTREAM_WORKER_DEBUG") == "rdkafka":  # librdkafka's group log too
        kafka["debug"] = "cgrp,topic"
        logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.DEBUG)
    for setting in args.kafka:
        key, _, value = setting.partition("=")
        kafka[key] = value
    # the tests' short client-side session, except under the consumer group protocol, which
    # refuses it: its session is the group's, set on the broker
    group = (lambda cfg: cfg) if args.rebalance_protocol == "consumer" else fast_group
    app = App(
        stateful_topology(args.input, args.counts, args.sums, args.delay),
        app_id=args.app_id,
        bootstrap_servers=args.bootstrap,
        processing_guarantee=args.guarantee,
        config=group(
            {
                "state_dir": args.state_dir,
                "default_backend": args.backend,
                "batch_max_records": args.batch,
                "commit_interval": 50,
                "batch_max_wait": 50,
                "kafka": kafka,
                **(
                    {"rebalance_protocol": args.rebalance_protocol}
                    if args.rebalance_protocol
                    else {}
                ),
                **({"num_standby_replicas": args.standbys} if args.standbys is not None else {}),
                **(
                    {"acceptable_recovery_lag": args.acceptable_recovery_lag}
                    if args.acceptable_recovery_lag is not None
                    else {}
                ),
            }
        ),
    )
    app.run()


if __name__ == "__main__":
    main()
