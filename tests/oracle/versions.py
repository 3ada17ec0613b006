"""What changed in Kafka Streams between two versions, as the oracle sees it.

`make oracle-versions` (ORACLE_OLD=4.1.1, ORACLE_CASES) builds the harness
(`tools/kafka-streams-oracle`) at an older Kafka Streams beside the pinned one and runs here:
the same cases go through both harnesses (two JVMs, one case at a time each) and every case
whose answers differ is printed with both answers, shortest case first. The cases are those
the oracle lane judges kstream by: `--cases` generated ones (tests/oracle/generate.py, from a
fixed seed unless `--seed`), the processor-API cases and regressions of test_oracle.py, the
ported operators' cases and regressions of test_ported_operators.py and the conformance cases
(tests/oracle/conformance_cases.py), and first `KNOWN`, the minimal cases of the differences
docs/differences.md marks "(oracle)", each also run on kstream: one that kstream no longer
differs on is printed as gone. An answer is compared whole: outputs, store contents,
`describe()` text; an error by its exception chain (class and message of each cause, not the
stack frames, whose line numbers move between versions). docs/differences.md records the
result of an upgrade of the reference.

    python tests/oracle/versions.py --old tools/kafka-streams-oracle/target-4.1.1 \\
        --new tools/kafka-streams-oracle/target --cases 10000

Exits 1 if any case's answer differs, or a known difference is gone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' packages

from hypothesis import HealthCheck, given, seed, settings

from oracle import spec
from oracle.compare import differences
from oracle.generate import cases
from oracle.harness import Oracle
from oracle.spec import Answer, Case


def _version(target: Path) -> str:
    jar = next((target / "libs").glob("kafka-streams-[0-9]*.jar"))
    return jar.name[len("kafka-streams-") : -len(".jar")]


def generated(n: int, at: int | None) -> list[Case]:
    """`n` cases drawn as the oracle test draws them: a fixed seed, or `at`."""
    drawn: list[Case] = []
    if n <= 0:
        return drawn

    @settings(
        max_examples=n,
        derandomize=at is None,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def draw(case: Case) -> None:
        drawn.append(case)

    (draw if at is None else seed(at)(draw))()
    return drawn


def fixed() -> list[tuple[str, Case]]:
    """The hand-written cases of the oracle lane, with their ids."""
    from oracle import conformance_cases, test_oracle, test_ported_operators

    po = test_ported_operators
    groups = {
        "processor-api": test_oracle.PROCESSOR_API,
        "regression": test_oracle.REGRESSIONS,
        "ported": [
            *po.COGROUP,
            *po.SUPPRESS,
            *po.FK_JOIN,
            *po.TRANSFORM_VALUES,
            *po.VERSIONED,
            *po.VERSIONED_OUT_OF_ORDER,
            *po.OTHERS,
            *po.SUPPRESS_VERSIONED,
        ],
        "ported-regression": po.REGRESSIONS,
        "conformance": conformance_cases.CASES,
    }
    out: list[tuple[str, Case]] = []
    for group, params in groups.items():
        for i, p in enumerate(params):
            case = p.values[0] if hasattr(p, "values") else p
            name = getattr(p, "id", None) or str(i)
            out.append((f"{group}:{name}", case))
    return out


def _n(nid: int, op: str, vt: str, *inputs: int, **fields: Any) -> dict[str, Any]:
    return {"id": nid, "op": op, "vt": vt, **({"in": list(inputs)} if inputs else {}), **fields}


S, L = "string", "long"
_buffered = {"processor": "buffer_stream_time", "interval": 5, "store_kind": "kv"}
#: the minimal cases of the differences kstream keeps from Kafka Streams, marked "(oracle)" in
#: docs/differences.md, which the generator avoids: each must still differ from kstream on the
#: newer Kafka Streams (else the document is out of date), and its answer is compared between
#: the versions like any other case's
KNOWN: list[tuple[str, Case]] = [
    (
        "grace-left-join-none-key",  # "Dropped records": Kafka's grace buffer fails on it
        Case(
            [_n(0, "stream", S, topic="in0"),
             _n(1, "table", S, topic="in1", store="s1", store_kind="kv", versioned=10),
             _n(2, "leftJoin", S, 0, 1, fn="pair", grace=3),
             _n(3, "to", S, 2, topic="out3")],
            [["in1", "a", "ab", 0], ["in0", "a", "x", 12], ["in0", None, "x", 13]],
        ),
    ),
    (
        "global-table-negative-extractor",  # "Dropped records"
        Case(
            [_n(0, "stream", S, topic="in0"),
             _n(1, "globalTable", S, topic="in1", store="s1", store_kind="kv",
                extractor="negative_for_null"),
             _n(2, "leftJoin", S, 0, 1, fn="pair", selector="same_key"),
             _n(3, "to", S, 2, topic="out3")],
            [["in1", "b", "ab", 25], ["in1", "b", None, 93], ["in0", "b", "x", 94]],
        ),
    ),
    (
        "session-results-without-headers",  # "Output and emission"
        Case(
            [_n(0, "stream", S, topic="in0"),
             _n(1, "groupByKey", S, 0),
             _n(2, "windowedBy", S, 1, windows={"type": "session", "gap": 3, "grace": 0},
                emit="update"),
             _n(3, "count", L, 2, store="s3", store_kind="session"),
             _n(4, "toStream", L, 3, windowed=True),
             _n(5, "to", L, 4, topic="out5")],
            [["in0", "a", "x", 0, [["h", "1"]]]],
        ),
    ),
    (
        "fanout-into-both-join-inputs",  # "Output and emission": forwarding order
        Case(
            [_n(0, "stream", L, topic="in0"),
             _n(1, "flatMap", L, 0, fn="fanout"),
             _n(2, "mapValues", L, 1, fn="inc"),
             _n(3, "outerJoin", S, 2, 1, fn="pair", window={"before": 0, "after": 0, "grace": 0}),
             _n(4, "to", S, 3, topic="out4")],
            [["in0", "a", None, 1], ["in0", "a", 0, 0]],
        ),
    ),
    (
        "three-punctuations-due-at-once",  # "Output and emission": the heap's order
        Case(
            [_n(0, "stream", S, topic="in0"),
             _n(1, "process", S, 0, store="s1", **_buffered),
             _n(2, "process", S, 1, store="s2", **_buffered),
             _n(3, "process", S, 2, store="s3", **_buffered),
             _n(4, "to", S, 3, topic="out4")],
            [["in0", "a", "x", 0]],
        ),
    ),
    (
        "table-join-of-one-update-both-sides",  # "State": the result's timestamp
        Case(
            [_n(0, "table", S, topic="in0", store="s0", store_kind="kv"),
             _n(1, "filter", S, 0, fn="value_not_null"),
             _n(2, "join", S, 1, 0, fn="pair"),
             _n(3, "toStream", S, 2),
             _n(4, "to", S, 3, topic="out4")],
            [["in0", "c", "x", 4], ["in0", "c", "ab", 2]],
        ),
    ),
    (
        "driver-punctuates-across-sub-topologies",  # "Test driver"
        Case(
            [_n(0, "stream", S, topic="in0"),
             _n(1, "repartition", S, 0),
             _n(2, "process", S, 1, store="s2", **_buffered),
             _n(3, "to", S, 2, topic="out3")],
            [["in0", "a", "x", 0], ["in0", "a", "y", 7]],
        ),
    ),
    (
        "suppress-bytes-count-old-values",  # "Output and emission"
        Case(
            [_n(0, "stream", S, topic="in0"),
             _n(1, "groupByKey", S, 0),
             _n(2, "windowedBy", S, 1, windows={"type": "sliding", "size": 5, "grace": 100},
                emit="update"),
             _n(3, "count", L, 2, store="s3", store_kind="window"),
             _n(4, "suppress", L, 3, until="timeLimit", time_limit=3,
                buffer={"max_bytes": 60, "full": "emit"}),
             _n(5, "toStream", L, 4, windowed=True),
             _n(6, "to", L, 5, topic="out6")],
            [["in0", "a", "x", 0], ["in0", "a", "x", 0], ["in0", "a", "x", 2],
             ["in0", "a", "x", 5], ["in0", "a", "ab", 5]],
        ),
    ),
]  # fmt: skip


def normalized(answer: Answer) -> Any:
    """The answer as compared: an error's stack frames dropped (they move between versions)."""
    if "error" not in answer:
        return answer
    lines = str(answer["error"]).splitlines()
    kept = [ln.strip() for ln in lines if not ln.lstrip().startswith(("at ", "... "))]
    return {**answer, "error": kept}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python tests/oracle/versions.py", description=__doc__)
    ap.add_argument("--old", type=Path, required=True, help="the older harness's target dir")
    ap.add_argument("--new", type=Path, required=True, help="the newer harness's target dir")
    ap.add_argument("--cases", type=int, default=300, help="generated cases (300)")
    ap.add_argument("--seed", type=int, default=None, help="their seed (default: fixed)")
    ap.add_argument("--out", type=Path, help="write each differing case as JSON lines here")
    args = ap.parse_args()
    old_v, new_v = _version(args.old), _version(args.new)
    t0 = time.monotonic()
    work = fixed() + [(f"generated:{i}", c) for i, c in enumerate(generated(args.cases, args.seed))]
    print(f"{len(work)} cases ({args.cases} generated, {len(work) - args.cases} fixed): "
          f"Kafka Streams {old_v} against {new_v}", flush=True)  # fmt: skip
    changed: list[tuple[str, Case, Answer, Answer]] = []
    errors = 0
    with Oracle.start(args.old) as old, Oracle.start(args.new) as new:
        # the known differences: still there on the newer version?
        gone = []
        for name, case in KNOWN:
            old.submit(case)
            new.submit(case)
            a, b = old.answer(), new.answer()
            try:
                mine: Answer = spec.run(case)
            except Exception:
                mine = {"error": traceback.format_exc()}
            # a case kstream cannot run shows nothing (a spec of the wrong shape)
            still = "error" not in mine and bool(differences(case, mine, b))
            print(f"  known difference {name}: {'kstream still differs' if still else 'GONE'} "
                  f"on {new_v}; Kafka Streams' answer "
                  f"{'unchanged' if normalized(a) == normalized(b) else 'CHANGED'}",
                  flush=True)  # fmt: skip
            if not still:
                gone.append(name)
            if normalized(a) != normalized(b):
                changed.append((f"known:{name}", case, a, b))
        for n, (name, case) in enumerate(work, 1):
            old.submit(case)
            new.submit(case)
            a, b = old.answer(), new.answer()
            errors += "error" in b
            if normalized(a) != normalized(b):
                changed.append((name, case, a, b))
            if n % 1000 == 0:
                print(f"  {n} cases, {len(changed)} changed, {time.monotonic() - t0:.0f} s",
                      flush=True)  # fmt: skip
    changed.sort(key=lambda c: (len(c[1].nodes), len(c[1].records)))
    for name, case, a, b in changed:
        print(f"\n== {name}: the answer changed\n{case.pretty()}")
        print(f"-- {old_v}: {json.dumps(normalized(a), sort_keys=True)}")
        print(f"-- {new_v}: {json.dumps(normalized(b), sort_keys=True)}")
    if args.out:
        with args.out.open("w") as f:
            for name, case, a, b in changed:
                row = {"case": name, "spec": json.loads(case.to_json()), old_v: a, new_v: b}
                f.write(json.dumps(row) + "\n")
    print(f"\n{len(work)} cases ({errors} answered with an error by {new_v}), "
          f"{len(changed)} changed between Kafka Streams {old_v} and {new_v}, "
          f"in {time.monotonic() - t0:.0f} s")  # fmt: skip
    if gone:
        print(f"known differences kstream no longer shows on {new_v}: {', '.join(gone)}")
    return 1 if changed or gone else 0


if __name__ == "__main__":
    sys.exit(main())
