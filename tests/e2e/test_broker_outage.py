"""An app under exactly_once_v2 rides out its only broker going away, and a user function that
outlasts the transaction timeout, with exact outputs.

- The broker is SIGKILLed mid-stream and restarted on its log directories a few seconds later:
  the app must not hang (a stuck `send_offsets_to_transaction`, librdkafka issue #5511, is
  abandoned with its producer) nor exit, and every output must come out exactly once.
- The same with the broker away for three minutes (`KSTREAM_LONG=1`): the app waits it out
  and resumes.
- The user function sleeps 12 s once, past the 10 s `transaction.timeout.ms`: the broker aborts
  the transaction and fences the producer; the app renews its producer, rejoins and goes on
  (no fence loop).

Outputs are read by a plain confluent-kafka read_committed reader (e2e.independent_reader).
How long the output took to resume is printed (pytest -s) and asserted nowhere: the bound is
the hang guard of each wait.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.pipelines import expected, make_input
from e2e.support import Results, Worker, check_exact, create_topics, produce
from kstream.testing.kafka import KafkaCluster

OUTAGE_WORKER = str(Path(__file__).with_name("outage_worker.py"))
PARTITIONS = 4
KEYS = 200
RECORDS = 8_000
# about 500 records/s: 8,000 records last 16 s, so each fault (after BEFORE outputs) lands
# mid-stream with 5,000 records still to come; more made each test take about 150 s of the
# suite under load
DELAY = "0.002"
BEFORE = 3_000  # outputs before the fault
AFTER = 400  # outputs that show the app is going again (a transaction holds at most 200)
HANG_GUARD_S = 300.0  # a hang is a failure, not a wait


class Run:
    """The stateful pipeline in one worker process under exactly_once_v2, its input produced
    up front, its outputs followed by the independent reader."""

    def __init__(
        self, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, *extra: str
    ) -> None:
        self.bs = bootstrap
        self.inp, self.cnt, self.sm = unique_name("in"), unique_name("counts"), unique_name("sums")
        create_topics(bootstrap, PARTITIONS, self.inp, self.cnt, self.sm)
        self.data = make_input(RECORDS, KEYS)
        produce(bootstrap, self.inp, self.data)
        self.res = Results(bootstrap, self.cnt, self.sm)
        args = [
            "--bootstrap",
            bootstrap,
            "--app-id",
            unique_name("outage"),
            "--input",
            self.inp,
            "--counts",
            self.cnt,
            "--sums",
            self.sm,
            "--state-dir",
            str(tmp_path / "state"),
            "--guarantee",
            "exactly_once_v2",
            "--batch",
            "200",
            "--delay",
            DELAY,
            *extra,
        ]
        self.w = Worker(args, tmp_path / "w.log", script=OUTAGE_WORKER)

    def wait(self, done: Callable[[], bool], what: str, deadline_s: float = HANG_GUARD_S) -> float:
        """Read on until `done()`; the seconds it took. Fails with the worker's log (and its
        threads' stacks) if the worker exits or `deadline_s` passes."""
        t0 = time.monotonic()
        end = t0 + deadline_s
        while not done():
            self.res.poll()
            if not self.w.alive():
                raise AssertionError(f"the worker exited waiting for {what}:\n{self.w.tail()}")
            if time.monotonic() > end:
                self.w.signal(signal.SIGUSR1)  # faulthandler: where each thread is
                time.sleep(1)
                raise AssertionError(
                    f"gave up waiting for {what}\n{self.res.hidden()}\n{self.w.tail(20_000)}"
                )
        return time.monotonic() - t0

    def progress(self, n: int, what: str) -> float:
        target = self.res.total + n
        return self.wait(lambda: self.res.total >= target, what)

    def start(self) -> None:
        self.w.start()
        self.wait(self.w.running, "the app to run", 120)
        self.progress(BEFORE, f"{BEFORE} outputs before the fault")

    def finish(self) -> None:
        """Every output, a clean stop (exit 0), then the exact check."""
        counts, _ = expected(self.data)
        self.wait(lambda: self.res.complete(counts), "every output")
        self.wait(self.w.running, "the app to run", 60)
        code = self.w.stop(120)
        assert code == 0, self.w.tail()
        verdicts = check_exact(self.res, self.data, self.inp)
        print(f"outputs: {verdicts}")

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.w.logs if p.exists())

    def close(self) -> None:
        if self.w.alive():
            self.w.kill()
        self.res.close()


def _broker_away_and_back(unique_name: Callable[[str], str], tmp_path: Path, away_s: float) -> None:
    """SIGKILL the only broker mid-stream, keep it away `away_s`, restart it on its log
    directories; the app resumes and every output is exact."""
    with KafkaCluster(nodes=1) as kafka:
        node = kafka.nodes[0]
        run = Run(kafka.bootstrap_servers, unique_name, tmp_path)
        try:
            run.start()
            at_kill = run.res.total
            node.kill()
            killed = time.monotonic()
            time.sleep(away_s)
            assert run.w.alive(), run.w.tail()
            node.restart()
            back = time.monotonic()
            # outputs committed before the kill and not read yet come first: AFTER is more
            # than those (at most a transaction's) plus a transaction committed since
            target = at_kill + AFTER
            took = run.wait(lambda: run.res.total >= target, "output after the broker's return")
            print(
                f"broker away {back - killed:.1f}s (SIGKILL, restart on its log dirs); "
                f"{AFTER} outputs past the kill {took:.1f}s after it answered again"
            )
            run.finish()
            log = run.log()
            print(
                f"abandoned producers: {log.count('abandoning')}, rejoins: "
                f"{log.count('rejoining the group')}, outage lines: "
                f"{log.count('has not answered for')}"
            )
        finally:
            run.close()


@pytest.mark.timeout(600)
def test_the_only_broker_sigkilled_and_restarted_mid_stream(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    _broker_away_and_back(unique_name, tmp_path, 3.0)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_only_broker_away_for_three_minutes(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    _broker_away_and_back(unique_name, tmp_path, 180.0)


# The broker aborts transactions open past their timeout at a cleanup run every 10 s by
# default, so a 12 s transaction is aborted only if a run falls in its last two seconds (about
# one run of three): the test's broker looks every second, so the 12 s function is always
# outlived by its transaction's abort, and the producer is always fenced.
TXN_CLEANUP = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.mark.timeout(600)
def test_a_user_function_slower_than_the_transaction_timeout(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    with KafkaCluster(nodes=1, overrides=TXN_CLEANUP) as kafka:
        run = Run(
            kafka.bootstrap_servers,
            unique_name,
            tmp_path,
            "--sleep-once-s",
            "12",
            "--sleep-at",
            str(BEFORE),
        )
        try:
            run.w.start()
            run.wait(run.w.running, "the app to run", 120)
            run.wait(lambda: "woke up" in run.log(), "the user function to sleep and wake up")
            at_wake = run.res.total
            took = run.wait(lambda: run.res.total >= at_wake + AFTER, "output after the sleep")
            print(f"{AFTER} outputs {took:.1f}s after the 12 s user function returned")
            run.finish()
            log = run.log()
            # what the test is about happened: the broker aborted the transaction and the
            # thread went on with a new producer
            assert "replacing the fenced producer" in log, run.w.tail()
            print(
                f"fenced producers replaced: {log.count('replacing the fenced producer')}, "
                f"rejoins: {log.count('leaving and rejoining the group')}"
            )
        finally:
            run.close()
