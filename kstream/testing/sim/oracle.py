"""The expected outputs of a run: `TopologyTestDriver` over the same input, fault-free, and the
comparison of a run's read_committed outputs with them (kstream.testing.sim.topologies says
which comparison each topology allows)."""

from __future__ import annotations

from kstream.kafka.partitioner import default_partition
from kstream.testing.driver import TopologyTestDriver
from kstream.testing.sim.topologies import InputRecord, Scenario, Work

__all__ = ["Outputs", "compare", "expected"]

KV = tuple[bytes | None, bytes | None]
#: output topic -> its records (key, value) in the order a reader of one partition sees them
Outputs = dict[str, list[KV]]


def expected(scenario: Scenario, records: list[InputRecord], partitions: int) -> Outputs:
    """The driver's outputs for `records`: one driver for all, or one per input partition
    (`Scenario.oracle`), each record piped in timestamp order."""
    if scenario.oracle == "per_partition":
        split: dict[int, list[InputRecord]] = {}
        for r in records:
            p = 0 if r.key is None else default_partition(r.key, partitions)
            split.setdefault(p, []).append(r)
        groups = [split[p] for p in sorted(split)]
    else:
        groups = [records]
    out: Outputs = {t: [] for t in scenario.outputs}
    for group in groups:
        with TopologyTestDriver(scenario.build(Work()), app_id="oracle") as driver:
            for r in group:
                driver.pipe_raw(r.topic, r.key, r.value, r.timestamp)
            if scenario.compare == "once":
                for _ in range(2):  # every window closes on the wall clock
                    driver.advance_wall_clock(10 * 365 * 86_400_000)
            for topic in scenario.outputs:
                out[topic] += [(rec.key, rec.value) for rec in driver._take(topic)]
    return out


def _by_key(records: list[KV]) -> dict[bytes | None, list[bytes | None]]:
    out: dict[bytes | None, list[bytes | None]] = {}
    for k, v in records:
        out.setdefault(k, []).append(v)
    return out


def _subsequence(got: list[bytes | None], want: list[bytes | None]) -> bool:
    """`got` is `want` less some values, in order, with the same last value."""
    if not got or not want or got[-1] != want[-1]:
        return got == want
    it = iter(want)
    return all(any(v == w for w in it) for v in got)


def compare(
    scenario: Scenario,
    want: Outputs,
    got: Outputs,
    cached: bool = False,
    records: list[InputRecord] | None = None,
) -> list[str]:
    """The differences between the expected and the actual outputs (empty: equal), at most a
    few lines per topic. `cached`: the run's record cache was on, which forwards only some of a
    key's updates (those at a commit or an eviction): a key's values must then be the
    expected ones less some, in order, ending with the same value. `records`: the input, for
    a `final` comparison's `Scenario.final_also`."""
    also = scenario.final_also(records or []) if scenario.final_also else {}
    problems: list[str] = []
    for topic in scenario.outputs:
        w, g = _by_key(want.get(topic, [])), _by_key(got.get(topic, []))
        if scenario.compare == "final":
            # a table's last value per key; a tombstone is the same as no value
            w = {k: v[-1:] for k, v in w.items() if v[-1] is not None}
            g = {k: v[-1:] for k, v in g.items() if v[-1] is not None}
            # a key whose last value may also be one of `also`'s is compared as if it ended
            # with the driver's (`Scenario.final_also`)
            for k in list(g):
                if k not in w and g[k][0] in also.get(k, set()):
                    del g[k]
        elif scenario.compare == "once":
            # windows closed on the wall clock (emit="final" with idle_close): which windows
            # close before their late records arrive depends on timing, so only this holds:
            # each window is emitted at most once, and only a window the driver emits
            problems += [
                f"{topic} key {k!r}: emitted {len(v)} times: {_short(v)}"
                for k, v in sorted(g.items(), key=repr)
                if len(v) > 1 or k not in w
            ][:3]
            continue
        if cached:
            bad = [
                k
                for k in sorted(set(w) | set(g), key=repr)
                if not _subsequence(g.get(k, []), w.get(k, []))
            ]
        else:
            bad = [k for k in sorted(set(w) | set(g), key=repr) if w.get(k, []) != g.get(k, [])]
        for k in bad[:3]:
            problems.append(
                f"{topic} key {k!r}: expected {_short(w.get(k, []))}, got {_short(g.get(k, []))}"
            )
        if len(bad) > 3:
            problems.append(f"{topic}: {len(bad) - 3} more keys differ")
    return problems


def _short(values: list[bytes | None]) -> str:
    text = repr(values)
    return text if len(text) <= 300 else f"{text[:300]}... ({len(values)} values)"
