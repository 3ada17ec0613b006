"""Waiting out a Kafka that does not answer, instead of giving up on it.

A service is expected to ride out a broker outage and resume, as Kafka Streams does. Before,
every step that failed while the only broker was away counted against the stream thread's
retry budget, and a recovery that needed a new producer built it at once, whose start-up
check then failed after `connect_timeout`: the app turned ERROR about 51 s into the outage.

So before a recovery, and before a failure is counted, the thread asks whether Kafka answers
at all (a metadata request through its consumer, `PROBE_S` at most; one round trip while it
does, paid on the failure path only). If it does not, the thread waits until it does: a probe
every `RETRY_S`, a heartbeat for liveness (waiting is not being stuck), one WARNING per
`LOG_INTERVAL_S` naming how long Kafka has been away, and nothing counted against the retry
budget; then the recovery goes on with a broker that answers (a new producer starts, the
transaction's outcome is settled by its `init_transactions`). A broker that answers and still
fails a call (a coordinator moving, a leader election) counts as before.

Start-up is not covered: a wrong address fails after `connect_timeout`, as a bad setting should.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kstream.errors import KafkaClientError

__all__ = ["LOG_INTERVAL_S", "BrokerOutage"]

log = logging.getLogger("kstream.runtime")

PROBE_S = 2.0
"""How long one probe waits for a metadata answer."""
RETRY_S = 1.0
"""Pause between two probes while Kafka is away."""
LOG_INTERVAL_S = 10.0
"""One WARNING per this many seconds while Kafka is away."""


class BrokerOutage:
    """Tells an outage from other client failures, and waits it out.

    `probe(timeout_s)` says whether Kafka answers; `beat()` is the stream thread's heartbeat
    (kstream.runtime.watchdog); `stop` ends a wait early (the app is closing)."""

    def __init__(
        self,
        bootstrap_servers: str,
        probe: Callable[[float], bool],
        stop: threading.Event,
        beat: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._probe = probe
        self._stop = stop
        self._beat = beat
        self._clock = clock
        #: when the current outage was found (monotonic), None while Kafka answers
        self.since: float | None = None
        #: outages waited out, and their seconds in all, since the start
        self.outages = 0
        self.waited_s = 0.0

    def away_for(self) -> float:
        """Seconds the current outage has lasted (0 when there is none)."""
        since = self.since
        return 0.0 if since is None else max(0.0, self._clock() - since)

    def reason(self) -> str | None:
        """Why the app is not ready while it waits out an outage, or None."""
        if self.since is None:
            return None
        return (
            f"Kafka at {self.bootstrap_servers!r} has not answered for {self.away_for():.0f}s; "
            "waiting for it"
        )

    def wait_out(self, error: BaseException) -> bool:
        """After `error` (a failed step): if it is a client error and Kafka does not answer,
        wait until it does (or the app stops) and return True; else return False at once."""
        if not isinstance(error, KafkaClientError) or self._stop.is_set():
            return False
        if self._probe(PROBE_S):
            return False
        start = self.since = self._clock()
        self.outages += 1
        log.warning(
            "Kafka at %r does not answer (%s); waiting for it: processing resumes when it does",
            self.bootstrap_servers,
            error,
        )
        logged = start
        try:
            while not self._stop.wait(RETRY_S):
                self._beat()
                if self._probe(PROBE_S):
                    log.warning(
                        "Kafka at %r answers again after %.0fs away; resuming",
                        self.bootstrap_servers,
                        self._clock() - start,
                    )
                    break
                now = self._clock()
                if now - logged >= LOG_INTERVAL_S:
                    logged = now
                    log.warning(
                        "Kafka at %r has not answered for %.0fs; still waiting for it",
                        self.bootstrap_servers,
                        now - start,
                    )
        finally:
            self.waited_s += self._clock() - start
            self.since = None
            self._beat()
        return True
