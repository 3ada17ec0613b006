"""kstream before and after a change, side by side: the same pipelines from two source trees,
run interleaved on one broker over one input and measured as the fair benchmark measures them.

Why: a change to the per-record path moves CPU per record by a few percent, less than two
sittings of the same code differ on a shared 2-core machine. Runs of both trees in one sitting,
in a shuffled order per repeat, put the machine's drift on both alike.

Each tree is a directory holding `kstream/` and `bench/` (a checkout, or `git archive REV
kstream bench | tar -x -C DIR`); its `bench/kstream_pipe.py` puts its own `kstream` first on
the path. A run is bench/fair.py's (`run_row`): exactly_once_v2, 100 ms commits, the window
between 20% and 80% of the outputs, records/s from the committed inputs, CPU from /proc.
`--profile DIR` samples every kstream run with py-spy (`BENCH_PYSPY`, GIL-holding thread only)
into DIR; profiled runs are not timed like the others (py-spy takes CPU), so profile apart.

    python bench/ab_pipe.py --tree before=/tmp/before --tree after=. \\
        [--rows P1,P2:memory:on,P3:memory:on] [--records 2000000] [--repeats 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fair  # noqa: E402
from fair import PARTITIONS, TOPIC_CONFIG, AdminClient, NewTopic, Row  # noqa: E402


def parse_rows(spec: str) -> list[Row]:
    """`P1`, or `P2:<store>:<on|off>` (the record cache), comma-separated."""
    rows = []
    for item in spec.split(","):
        parts = item.split(":")
        if len(parts) == 1:
            rows.append(Row("kstream", parts[0]))
        else:
            rows.append(Row("kstream", parts[0], parts[1], parts[2] == "on"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR, two or more")
    ap.add_argument("--rows", default="P1,P2:memory:on,P3:memory:on")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", default="", help="a directory: py-spy every kstream run")
    args = ap.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    rows = parse_rows(args.rows)
    chosen = {"tree": ""}
    make_command = fair.command

    def command(row: Row, *rest: Any) -> list[str]:
        cmd = make_command(row, *rest)
        if row.engine == "kstream":  # the raw loop that warms the broker is the harness's
            tree = os.path.abspath(trees[chosen["tree"]])
            cmd[1] = os.path.join(tree, "bench", "kstream_pipe.py")
        return cmd

    fair.command = command  # run_row builds each run's command with it
    rnd = random.Random(args.seed)
    order = []
    for k in range(args.repeats):
        chunk = [(name, row, k) for name in trees for row in rows]
        rnd.shuffle(chunk)
        order += chunk
    results: list[dict[str, Any]] = []
    with fair.start_broker("kafka") as broker:
        bs = broker.bootstrap_servers
        topic = f"ab-in-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=TOPIC_CONFIG)])[topic].result(30)
        fair.produce_input(bs, topic, args.records)
        fair.run_row(Row("raw", "raw"), 0, broker, topic, args.records)  # warms the broker
        for name, row, k in order:
            chosen["tree"] = name
            if args.profile:
                tag = f"{name}-{row.name.replace(' ', '_')}-{k}"
                os.environ["BENCH_PYSPY"] = os.path.join(os.path.abspath(args.profile), tag)
                os.environ["BENCH_PYSPY_GIL"] = "1"
            r = fair.run_row(row, k, broker, topic, args.records)
            out = {
                "tree": name,
                "row": row.name,
                "repeat": k,
                "records_per_s": round(r.records_per_s),
                "cpu_us_per_record": round(r.cpu_us_per_record, 3),
                "cores": round(r.cores, 3),
                "outputs": r.outputs,
                "changelog_records": r.changelog_records,
            }
            print(json.dumps(out), flush=True)
            results.append(out)
    print(f"medians (min-max) of {args.repeats} runs, {args.records:,} records, seed {args.seed}")
    for row in rows:
        for name in trees:
            got = [x for x in results if x["tree"] == name and x["row"] == row.name]
            rps = [x["records_per_s"] for x in got]
            us = [x["cpu_us_per_record"] for x in got]
            print(
                f"{row.name:<28} {name:<8} {statistics.median(rps):>9,.0f} rec/s "
                f"({min(rps):,}-{max(rps):,})  {statistics.median(us):.3f} us/rec "
                f"({min(us):.3f}-{max(us):.3f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
