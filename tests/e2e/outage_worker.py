"""worker.py's app, whose user function may stall once: `--sleep-once-s S` makes it wait S
seconds (a slow external call, a long GC pause) once per process, after `--sleep-at` records;
every other flag is worker.py's. Outputs stay those of the stateful pipeline (e2e.pipelines),
so the independent reader checks them the same way."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import e2e.pipelines as pipelines
import e2e.worker as worker
from kstream.records import Record
from kstream.topology import ProcessorContext


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
    """The pipeline's processor, whose wall-clock punctuation sleeps `SLEEP_S` once, at its
    first turn after `SLEEP_AT` records.

    In a punctuation, not while processing a record: a task's outputs leave for the broker at
    the end of its batch, so a sleep inside a record's processing may sit in a transaction
    the broker has not heard of yet (nothing sent in it), whose timeout then never runs. A
    punctuation runs after the batch, in its transaction, whose outputs the producer sends
    within its linger: the broker's clock for the transaction runs through the sleep."""

    seen = 0
    slept = False

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        ctx.schedule(50, "wall_clock", self._maybe_sleep)

    def process(self, record: Record) -> None:
        super().process(record)
        SlowOnce.seen += 1

    def _maybe_sleep(self, now_ms: int) -> None:
        cls = SlowOnce
        if SLEEP_S and not cls.slept and cls.seen >= SLEEP_AT:
            cls.slept = True
            print(f"user function: sleeping {SLEEP_S:g}s after {cls.seen} records", flush=True)
            time.sleep(SLEEP_S)
            print("user function: woke up", flush=True)


if __name__ == "__main__":
    # stateful_topology builds its processor from the module's `Tally` when the app starts
    pipelines.Tally = SlowOnce  # type: ignore[misc]
    worker.main()
