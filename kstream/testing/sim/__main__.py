"""`python -m kstream.testing.sim`: replay one seed, or sweep many (`make simulate`).

    python -m kstream.testing.sim --seed 1234 --topology count --guarantee exactly_once_v2
    python -m kstream.testing.sim --seeds 2000 --jobs 2 --budget 600
    python -m kstream.testing.sim --mutants

Runs use PYTHONHASHSEED=0 (the process re-executes itself with it when needed): the order of
a set of strings must be the same in every run of a seed.
"""

from __future__ import annotations

import argparse
import os
import sys

from kstream.testing.sim.simulation import GUARANTEES, Options, simulate
from kstream.testing.sim.topologies import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kstream.testing.sim", description=__doc__)
    parser.add_argument("--seed", type=int, help="replay this seed and print its outcome")
    parser.add_argument("--seeds", type=int, default=0, help="sweep this many seeds")
    parser.add_argument("--first", type=int, default=0, help="the sweep's first seed")
    parser.add_argument("--topology", choices=sorted(SCENARIOS))
    parser.add_argument("--guarantee", choices=GUARANTEES)
    parser.add_argument("--no-faults", action="store_true", help="runs without faults")
    parser.add_argument("--exclude", default="", help="fault names never planted (a,b)")
    parser.add_argument(
        "--include", default="", help="faults of known open defects planted too (poll_taken)"
    )
    parser.add_argument("--plan", help="a named fault plan (slow_user_function, standby_failover)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for a sweep")
    parser.add_argument("--mutants", action="store_true", help="the planted-defects table")
    parser.add_argument("--verbose", action="store_true", help="the runtime's log too")
    args = parser.parse_args(argv)
    exclude = tuple(x for x in args.exclude.split(",") if x)
    base = Options(
        seed=args.seed or 0,
        topology=args.topology,
        guarantee=args.guarantee,
        faults=not args.no_faults,
        exclude=exclude,
        include=tuple(x for x in args.include.split(",") if x),
        plan=args.plan,
        verbose=args.verbose,
    )
    if args.mutants:
        from kstream.testing.sim.mutants import print_table

        return print_table(args.jobs, args.budget)
    if args.seed is not None:
        out = simulate(base)
        print(f"seed {out.seed} {out.topology} {out.guarantee}: {'ok' if out.ok else 'FAILED'}")
        print(f"  trace hash {out.trace_hash}, {out.turns} turns, {out.virtual_s}s virtual")
        print(f"  {out.stats}")
        for failure in out.failures:
            print(f"  {failure}")
        if not out.ok:
            print("  last events:")
            print("\n".join(f"    {line}" for line in out.trace_tail[-25:]))
            print("  last log lines:")
            print("\n".join(f"    {line}" for line in out.log_tail[-25:]))
        return 0 if out.ok else 1
    from kstream.testing.sim.sweep import sweep

    result = sweep(args.first, args.seeds or 1000, base, args.jobs, args.budget)
    topologies = dict(sorted(result.by_topology.items()))
    print(
        f"{result.ran} seeds in {result.seconds:.1f}s: {result.rate:.1f} seeds/s on {args.jobs} "
        f"process(es); {len(result.failed)} failed; by topology {topologies}"
    )
    return 1 if result.failed else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "kstream.testing.sim", *sys.argv[1:]])
    sys.exit(main())
