"""Many seeds at once, on every core: what `make simulate` runs.

Each worker process runs seeds one after another (a run is single-threaded and takes tens of
milliseconds to a second); the parent prints every failing seed with its replay command as it
comes in, and at the end the rate in seeds per second. A time budget stops handing out seeds.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from kstream.testing.sim.simulation import Options, Outcome, simulate

__all__ = ["Sweep", "sweep"]


@dataclass
class Sweep:
    ran: int = 0
    seconds: float = 0.0
    failed: list[Outcome] = field(default_factory=list)
    by_topology: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ran / self.seconds if self.seconds else 0.0


def _one(opts: Options) -> Outcome:
    try:
        return simulate(opts)
    except Exception as e:  # a harness error is a failure of its seed, with its replay
        return Outcome(
            opts.seed, opts.topology or "?", opts.guarantee or "?", [f"harness: {e!r}"], "", 0.0, 0
        )


def _options(first: int, count: int, base: Options) -> Iterator[Options]:
    for seed in range(first, first + count):
        yield Options(
            seed=seed,
            topology=base.topology,
            guarantee=base.guarantee,
            faults=base.faults,
            exclude=base.exclude,
            include=base.include,
        )


def sweep(
    first: int, count: int, base: Options, jobs: int, budget_s: float, quiet: bool = False
) -> Sweep:
    """Run seeds `first`..`first + count - 1` on `jobs` processes for at most `budget_s`."""
    result = Sweep()
    started = time.monotonic()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, maxtasksperchild=200) as pool:
        for outcome in pool.imap_unordered(_one, _options(first, count, base), chunksize=4):
            result.ran += 1
            result.by_topology[outcome.topology] = result.by_topology.get(outcome.topology, 0) + 1
            if not outcome.ok:
                result.failed.append(outcome)
                if not quiet:
                    print(
                        f"FAIL seed {outcome.seed} ({outcome.topology}, {outcome.guarantee}): "
                        f"{outcome.failures[0][:400]}"
                    )
                    print(f"  replay: {outcome.replay()}", flush=True)
            if time.monotonic() - started > budget_s:
                pool.terminate()
                break
    result.seconds = time.monotonic() - started
    return result
