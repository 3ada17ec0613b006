"""Purging repartition topics: deleting the records below the committed offsets.

A repartition topic is created with `retention.ms=-1` (kstream.internal_topics): its records are
the only copy of what one sub-topology hands the next, so the broker must not expire them while
a task lags. Kafka Streams deletes them once they are consumed instead: after a commit, at most
every `repartition.purge.interval.ms`, it sends DeleteRecords up to the committed offsets of the
repartition partitions its tasks read, and does not wait for the answer. `RepartitionPurge` does
the same for a stream thread (`repartition_purge_interval`, 30 s by default), so a repartition
topic holds about one interval of records rather than everything ever written through it.

A purge is housekeeping: one request is in flight at a time (a slow broker is not sent a queue
of them), a failure is logged and the next purge asks again with newer offsets, and nothing here
fails the app. With `broker_compat="tansu"` nothing is purged: Tansu's DeleteRecords panics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from kstream.broker_compat import compat_of
from kstream.kafka.supplier import ClientConfig

if TYPE_CHECKING:
    from kstream.kafka.admin import Admin
    from kstream.runtime.tasks import RuntimeContext

log = logging.getLogger("kstream.runtime")

__all__ = ["Committing", "RepartitionPurge"]

TP = tuple[str, int]


class Committing(Protocol):
    """A task as the purge sees it: its committed input offsets (the next offset to read)."""

    @property
    def committed(self) -> Mapping[TP, int]: ...


class RepartitionPurge:
    """Deletes the consumed records of the repartition partitions a stream thread's tasks read.

    The stream thread calls `after_commit` after every successful commit; the purge decides
    whether one is due. The admin client is made on the first purge, from the app's client
    supplier, right after a commit the broker answered.
    """

    def __init__(self, ctx: RuntimeContext, clock: Callable[[], float] = time.monotonic) -> None:
        cfg = ctx.config
        self._ctx = ctx
        self._topics = frozenset(ctx.compiled.repartition_topics)
        #: False with no repartition topic to purge, or on a broker without DeleteRecords
        self.enabled = bool(self._topics) and compat_of(cfg).delete_records
        self._interval_s = cfg.repartition_purge_interval / 1000
        self._clock = clock
        self._last = clock()
        self._admin: Admin | None = None
        # the request in flight: partition -> (offset asked for, its future)
        self._pending: dict[TP, tuple[int, Future[Any]]] = {}
        # each partition's start offset as the broker last confirmed it
        self.purged: dict[TP, int] = {}
        #: DeleteRecords requests sent
        self.requests = 0
        self._failing = False

    def after_commit(self, tasks: Iterable[Committing]) -> None:
        """Purge up to `tasks`' committed offsets if an interval has passed since the last
        request, that request was answered and a committed offset moved past what was purged;
        returns without waiting for the broker."""
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last < self._interval_s or not self._settled():
            return
        offsets = {
            tp: offset
            for rt in tasks
            for tp, offset in rt.committed.items()
            if tp[0] in self._topics and offset > self.purged.get(tp, 0)
        }
        if not offsets:
            return  # the interval runs from the last request: the next commit may have some
        self._last = now
        try:
            if self._admin is None:
                ctx = self._ctx
                cfg = ctx.config
                self._admin = ctx.client_supplier.admin(
                    ClientConfig(ctx.bootstrap_servers, cfg.kafka, cfg.connect_timeout)
                )
            futures = self._admin.delete_records(offsets)
        except Exception as e:
            self._failed(f"{sorted(offsets)}: {e}")
            return
        self.requests += 1
        self._pending = {tp: (offsets[tp], f) for tp, f in futures.items()}
        log.debug("purging repartition records below %s", offsets)

    def _settled(self) -> bool:
        """True when no request is in flight; takes in the answers of the last one."""
        if any(not f.done() for _, f in self._pending.values()):
            return False
        answered = bool(self._pending)
        errors = []
        for tp, (offset, f) in self._pending.items():
            error = f.exception()
            if error is not None:
                errors.append(f"{tp[0]}[{tp[1]}] below {offset}: {error}")
                continue
            low = getattr(f.result(), "low_watermark", offset)
            self.purged[tp] = max(self.purged.get(tp, 0), low)
        self._pending = {}
        if errors:
            self._failed("; ".join(errors))
        elif answered:
            self._failing = False
        return True

    def _failed(self, what: str) -> None:
        """Log a failed purge: a warning when purging starts failing, debug while it goes on
        failing (the next purge asks again; a purge failing every interval is not news)."""
        if self._failing:
            log.debug("purging repartition records failed again: %s", what)
            return
        self._failing = True
        log.warning(
            "purging repartition records failed: %s; the next purge will ask again (further "
            "failures in a row are logged at debug level)",
            what,
        )

    def close(self) -> None:
        """Drop the admin client; a request in flight is left to finish on its own."""
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception as e:
                log.debug("closing the purge's admin client: %s", e)
            self._admin = None
