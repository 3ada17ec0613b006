"""worker.py's app, whose user function may stall once: `--sleep-once-s S` makes the
`--sleep-at`-th record this process handles wait S seconds (a slow external call, a long GC
pause), once per process; every other flag is worker.py's. Outputs stay those of the stateful
pipeline (e2e.pipelines), so the independent reader checks them the same way."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import e2e.pipelines as pipelines
import e2e.worker as worker
from kstream.records import Record


def _take(flag: str, default: str) -> str:
    """`flag`'s value, removed from sys.argv (worker.py refuses flags it does not know)."""
    if flag not in sys.argv:
        return default
    i = sys.argv.index(flag)
    value = sys.argv[i + 1]
    del sys.argv[i : i + 2]
    return value


SLEEP_S = float(_take("--sleep-once-s", "0"))
SLEEP_AT = int(_take("--sleep-at", "3000"))


class SlowOnce(pipelines.Tally):
    """The pipeline's processor, sleeping `SLEEP_S` at the `SLEEP_AT`-th record, once."""

    seen = 0
    slept = False

    def process(self, record: Record) -> None:
        cls = SlowOnce
        cls.seen += 1
        if SLEEP_S and not cls.slept and cls.seen >= SLEEP_AT:
            cls.slept = True
            print(f"user function: sleeping {SLEEP_S:g}s on {record.key}", flush=True)
            time.sleep(SLEEP_S)
            print("user function: woke up", flush=True)
        super().process(record)


if __name__ == "__main__":
    # stateful_topology builds its processor from the module's `Tally` when the app starts
    pipelines.Tally = SlowOnce  # type: ignore[misc]
    worker.main()
