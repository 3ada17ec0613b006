"""The multi-topic app of the incremental-rebalance tests (test_incremental_rebalance), and a
worker process running it under exactly_once_v2 with a broker-assigned group protocol (the
consumer group protocol, KIP-848, or Kafka Streams' own, KIP-1071) until SIGTERM.

    incremental_worker.py --bootstrap B --app-id A --orders T --customers T --joined T
                          --counts T --state-dir D [--instance-id I] [--protocol consumer|streams]
                          [--standbys N]

The app reads three topics in two sub-topologies: orders joined with a table of customers
(co-partitioned: partition n of both is one task), and the joined orders counted per region
after a repartition. Every order value is unique, so a missing, repeated or wrong join result
shows in the output, and every region's count goes 1, 2, ... n.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kstream.dsl import StreamBuilder
from kstream.runtime import App

REGION = 1_000_000
"""A joined value is region * REGION + order number: which order was joined with which region."""


def join_count(orders: str, customers: str, joined: str, counts: str) -> StreamBuilder:
    """Orders (key: customer id, value: order number) joined with customers (value: region
    number) to `joined` (region * REGION + order), and counted per region (`"r<region>"`,
    re-keyed, so through a repartition topic) to `counts`."""
    b = StreamBuilder()
    regions = b.table(customers, "string", "long", store="customers")
    matched = b.stream(orders, "string", "long").join(
        regions, lambda order, region: region * REGION + order
    )
    matched.to(joined, "string", "long")
    per_region = matched.group_by(lambda _k, v: f"r{v // REGION}", key_serde="string")
    per_region.count(store="per-region").to_stream().to(counts, "string", "long")
    return b


def app(
    bootstrap: str,
    app_id: str,
    topics: tuple[str, str, str, str],
    state_dir: str,
    **cfg: Any,
) -> App:
    """The app under exactly_once_v2 with the consumer group protocol (`cfg` may set another
    `rebalance_protocol`, and more config)."""
    return App(
        join_count(*topics),
        app_id,
        bootstrap,
        "exactly_once_v2",
        config={
            "state_dir": state_dir,
            "commit_interval": 100,
            "batch_max_wait": 50,
            "batch_max_records": 200,
            "rebalance_protocol": "consumer",
            **cfg,
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    for flag in ("bootstrap", "app-id", "orders", "customers", "joined", "counts", "state-dir"):
        ap.add_argument(f"--{flag}", required=True)
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--protocol", default="consumer", choices=("consumer", "streams"))
    ap.add_argument("--standbys", type=int, default=0, help="num_standby_replicas")
    args = ap.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("kstream.kafka.librdkafka").setLevel(logging.ERROR)
    topics = (args.orders, args.customers, args.joined, args.counts)
    extra: dict[str, Any] = {
        "rebalance_protocol": args.protocol,
        "num_standby_replicas": args.standbys,
    }
    if args.instance_id:
        extra["group_instance_id"] = args.instance_id
    app(args.bootstrap, args.app_id, topics, args.state_dir, **extra).run()


if __name__ == "__main__":
    main()
