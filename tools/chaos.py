"""The chaos lane (`make chaos`, docs/testing.md "Chaos lane"): the crash, failover and
rebalance tests of tests/e2e again and again, under CPU load, on a fresh broker per run.

A flake of an exactly-once test is a defect that shows one run in ten or fifty, mostly when
the machine is busy (a slow worker, a late poll, a transaction that times out). One `make
test` cannot show it, and a failure seen once cannot be replayed: so this lane runs each test
many times beside `BURNERS` busy-loop processes (one per core by default), and every failing
run keeps what it wrote (tests/e2e/artifacts.py: the worker logs, the brokers' logs, a dump
of every topic of the test read_uncommitted and read_committed with each partition's high
watermark and last stable offset) for its post-mortem.

Each run is one pytest process on one test (its own broker, as in `make test`), with
`--runxfail` (an expected failure counts as a failure here) and `KSTREAM_TEST_ARTIFACTS`
naming the run's directory. Rounds go over every test in turn, so a time budget cut short
still leaves each test with about as many runs as the others. A run is not started when the
test's slowest run so far would not end within the budget.

Settings (environment):

- `RUNS`: runs of each test (default 30);
- `TESTS`: a regular expression over the test ids (default: every test of `DEFAULT_FILES`);
- `FILES`: the test files, space-separated globs under tests/e2e (default `DEFAULT_FILES`);
- `BURNERS`: busy-loop processes beside the tests (default: one per core; 0: none);
- `JOBS`: runs at once (default 1); each has its own broker, so parallel runs are load for
  each other, and a sitting of 30 runs of every test fits in an afternoon rather than a night;
- `BUDGET`: the sitting's time budget, `90m`, `2h`, `600s` or seconds (default 60m);
- `CHAOS_DIR`: where sittings go (default `chaos-results/`, git-ignored); each sitting is a
  directory named by its start time, with `summary.txt`, `summary.json` and, per failing run,
  `<test>/run-<n>/` (pytest's output and the artifacts).

Exit status 1 when any run failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = (
    "test_crash*.py",
    "test_standby_failover.py",
    "test_broker_failover.py",
    "test_cooperative_rebalance.py",
    "test_incremental_rebalance.py",
    "test_eager_resume.py",
    "test_pending_offsets.py",
    "test_processes.py",
    "test_supervisor.py",
    "test_consumer_protocol_*.py",
)
RUN_TIMEOUT_S = 900.0  # past every test's own pytest-timeout: a run that hangs pytest itself


@dataclass
class Run:
    test: str
    n: int
    outcome: str  # passed, failed, error, skipped, or timeout (the run's process was killed)
    seconds: float
    where: str | None = None  # the run's directory, kept when it did not pass


@dataclass
class Tally:
    test: str
    runs: int = 0
    failures: int = 0
    skipped: int = 0
    seconds: list[float] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)


def parse_budget(text: str) -> float:
    """`90m`, `2h`, `600s` or a number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if m is None:
        raise SystemExit(f"BUDGET: expected e.g. 90m, 2h, 600s or seconds, got {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def collect(files: list[str], pattern: str | None) -> list[str]:
    """The test ids of `files` (globs under tests/e2e) that `pattern` matches, as pytest
    collects them (slow tests only with KSTREAM_LONG=1, as in `make test`)."""
    paths = sorted({str(p.relative_to(ROOT)) for f in files for p in (ROOT / "tests/e2e").glob(f)})
    if not paths:
        raise SystemExit(f"no test files match {files}")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    ids = [line for line in out.stdout.splitlines() if "::" in line and " " not in line]
    if out.returncode not in (0, 5) or not ids:
        raise SystemExit(f"collecting {paths} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    rx = re.compile(pattern) if pattern else None
    return [t for t in ids if rx is None or rx.search(t)]


def slug(test: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", test.removeprefix("tests/e2e/")).strip("-")[:150]


def start_burners(n: int) -> list[subprocess.Popen[bytes]]:
    """`n` processes spinning on a core each (the CPU load the lane runs under)."""
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def run_once(test: str, n: int, sitting: Path) -> Run:
    """One pytest process on `test`; its directory is kept when it did not pass."""
    where = sitting / slug(test) / f"run-{n}"
    where.mkdir(parents=True, exist_ok=True)
    junit = where / "junit.xml"
    env = {**os.environ, "KSTREAM_TEST_ARTIFACTS": str(where / "artifacts")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("KSTREAM_TEST_BOOTSTRAP", None)  # a fresh broker per run
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--runxfail",
        "-o",
        "console_output_style=classic",
        f"--junitxml={junit}",
        f"--basetemp={where / 'tmp'}",  # parallel runs never share (or clean) a temp root
        test,
    ]
    began = time.monotonic()
    with open(where / "output.txt", "wb") as out:
        # its own process group: a hung run is killed with its workers and broker
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(RUN_TIMEOUT_S)
            outcome = outcome_of(junit, proc.returncode)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            outcome = "timeout"
    seconds = time.monotonic() - began
    if outcome in ("passed", "skipped"):
        shutil.rmtree(where)
        return Run(test, n, outcome, seconds)
    # CHAOS_DIR may lie outside the checkout: its runs are then named by their full path
    kept = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    return Run(test, n, outcome, seconds, str(kept))


def outcome_of(junit: Path, returncode: int) -> str:
    """passed, failed, error or skipped, from pytest's JUnit XML (its exit code when the
    report is missing)."""
    try:
        case = ET.parse(junit).getroot().find(".//testcase")
    except (OSError, ET.ParseError):
        case = None
    if case is None:
        return "passed" if returncode == 0 else "error"
    if case.find("failure") is not None:
        return "failed"
    if case.find("error") is not None:
        return "error"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def tree_state() -> dict[str, Any]:
    """The commit the sitting ran on and the files changed in the working tree beside it: a
    failure is of the code as it was, uncommitted changes included."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else ""

    # porcelain lines are "XY path": the status columns may be blank, so nothing is stripped
    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line]
    return {"commit": git("rev-parse", "HEAD").strip(), "uncommitted": changed}


def table(tallies: list[Tally], elapsed: float, burners: int, budget: float, jobs: int = 1) -> str:
    width = max([len("test"), *(len(t.test) for t in tallies)])
    lines = [
        f"{'test':<{width}}  runs  failed  skipped  mean s   max s",
    ]
    for t in tallies:
        mean = sum(t.seconds) / len(t.seconds) if t.seconds else 0.0
        top = max(t.seconds, default=0.0)
        lines.append(
            f"{t.test:<{width}}  {t.runs:>4}  {t.failures:>6}  {t.skipped:>7}  {mean:>6.1f}  "
            f"{top:>6.1f}"
        )
    runs = sum(t.runs for t in tallies)
    failures = sum(t.failures for t in tallies)
    lines.append(
        f"{runs} runs, {failures} failed, in {elapsed / 60:.1f} min (budget {budget / 60:.0f} "
        f"min), {jobs} at once, beside {burners} CPU burner(s) on {os.cpu_count()} cores"
    )
    for t in tallies:
        for where in t.failed_runs:
            lines.append(f"failed: {t.test}: {where}")
    return "\n".join(lines)


def main() -> int:
    runs = int(os.environ.get("RUNS", "30"))
    burners = int(os.environ.get("BURNERS", str(os.cpu_count() or 1)))
    jobs = max(1, int(os.environ.get("JOBS", "1")))
    budget = parse_budget(os.environ.get("BUDGET", "60m"))
    files = os.environ.get("FILES", "").split() or list(DEFAULT_FILES)
    tests = collect(files, os.environ.get("TESTS") or None)
    if not tests:
        raise SystemExit("TESTS matches no test")
    base = Path(os.environ.get("CHAOS_DIR", str(ROOT / "chaos-results")))
    sitting = base / time.strftime("%Y%m%d-%H%M%S")
    sitting.mkdir(parents=True)
    print(
        f"chaos: {len(tests)} tests x {runs} runs, budget {budget / 60:.0f} min, "
        f"{jobs} at once, {burners} burner(s); results in {sitting}",
        flush=True,
    )
    tallies = {t: Tally(t) for t in tests}
    tree = tree_state()
    (sitting / "tree.json").write_text(json.dumps(tree, indent=1) + "\n")
    began = time.monotonic()
    procs = start_burners(burners)
    record = open(sitting / "runs.jsonl", "w")  # noqa: SIM115 (closed below)
    lock = threading.Lock()

    def due() -> Iterator[tuple[int, str]]:
        """The runs in round order: every test's run n before any test's run n + 1; a run
        is skipped when the test's slowest run so far would not end within the budget."""
        for n in range(1, runs + 1):
            for test in tests:
                tally = tallies[test]
                left = budget - (time.monotonic() - began)
                if left <= 0:
                    return
                if tally.seconds and max(tally.seconds) > left:
                    continue
                yield n, test

    queue = due()

    def worker() -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            n, test = item
            run = run_once(test, n, sitting)
            with lock:
                note(run)

    def note(run: Run) -> None:
        tally = tallies[run.test]
        record.write(json.dumps(asdict(run)) + "\n")
        record.flush()
        if run.outcome == "skipped":
            tally.skipped += 1
            return
        tally.runs += 1
        tally.seconds.append(run.seconds)
        if run.outcome != "passed":
            tally.failures += 1
            tally.failed_runs.append(f"{run.where} ({run.outcome})")
        print(
            f"[{(time.monotonic() - began) / 60:5.1f} min] run {run.n} {run.outcome:>7} "
            f"{run.seconds:6.1f}s {run.test}" + (f" -> {run.where}" if run.where else ""),
            flush=True,
        )

    try:
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop(procs)
        record.close()
    elapsed = time.monotonic() - began
    ordered = [tallies[t] for t in tests]
    text = table(ordered, elapsed, burners, budget, jobs)
    dirty = tree["uncommitted"]
    text += f"\ncode: {tree['commit']}" + (
        f" with {len(dirty)} uncommitted file(s) (tree.json)" if dirty else ""
    )
    (sitting / "summary.txt").write_text(text + "\n")
    summary = {
        "seconds": round(elapsed, 1),
        "budget_seconds": budget,
        "burners": burners,
        "jobs": jobs,
        "cores": os.cpu_count(),
        "runs_asked": runs,
        "tree": tree,
        "tests": [{**asdict(t), "seconds": [round(s, 1) for s in t.seconds]} for t in ordered],
    }
    (sitting / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(text)
    return 1 if any(t.failures for t in ordered) else 0


if __name__ == "__main__":
    sys.exit(main())
