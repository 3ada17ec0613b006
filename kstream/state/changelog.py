"""The change-logging layer: a store's pending writes as records for its changelog topic.

`ChangeLoggingStore` is Kafka Streams' `ChangeLogging*Store`: a layer of the store chain
(kstream.state's docstring), between the metering layer and the typed store, present only
when the spec says `changelog=True`. Kafka's layer logs each write as it passes; here the typed
store holds the writes of the open transaction in its write cache, and the layer logs them
when the transaction commits: `changelog_records` (inside the transaction, produced with its
outputs), then `flush` once it committed. Local state therefore never holds uncommitted data,
and an aborted batch (`discard`) leaves no record behind.

Topic `<app_id>-<store>-changelog`, partition = the task's partition, key/value = the store's
logical changelog bytes (the typed store's `_to_changelog`: no segment prefix), timestamp = the
time of the record whose write it logs, or the value's own timestamp in the stores that keep one
(`StateStore.changelog_timestamp`), as Kafka's change-logging layers write it (but for a versioned
store's records, stamped with the time of writing: kstream.state.versioned); a time ahead of
the wall clock, or none, is sent as 0, which the producer replaces with its wall clock. With the
broker-compatibility component on (kstream.broker_compat), header `kstream.src` = the
provenance of the write; its index counts the changelog records caused by one input record, so
ids stay unique and deterministic across retries. A write no input record caused (a
punctuation, an expiry) carries `NO_SOURCE` instead: every changelog record kstream writes
there has the header, and restore refuses one without it.

Restore goes around the layer, as in Kafka: it writes changelog records straight into the typed
store (`StateStore.apply_changelog`), which must not log them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from kstream.state.base import Source, StateStore
from kstream.state.layer import StoreLayer
from kstream.state.provenance import HEADER, NO_SOURCE, encode

#: The checkpoint key holding the next changelog offset to read on restore.
CHANGELOG_OFFSET = "changelog_offset"


class ChangelogEntry(NamedTuple):
    """One record for the changelog: logical key bytes, value bytes (None = tombstone), the
    input record that caused it and its timestamp (-1: none known)."""

    key: bytes
    value: bytes | None
    source: Source | None = None
    timestamp: int = -1


class ChangelogRecord(NamedTuple):
    topic: str
    partition: int
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int = 0
    """The record's CreateTime (`changelog_timestamp`); 0 when no time is known, which the
    producer replaces with its wall clock."""


_new_tuple: Any = tuple.__new__
"""Builds a named tuple from a tuple of all its fields in C (`_new_tuple(Class, fields)`):
the class's own constructor is a Python function, which took 0.33 us a record against 0.14,
twice per changelog record at every commit."""


class ChangeLoggingStore(StoreLayer):
    """The change-logging layer around one typed store.

    Its own methods are the changelog's (`pending`, `changelog_records`, `flush` returning what
    it logged); every other attribute is the typed store's, reached as every layer reaches it
    (kstream.state.layer: the store's public methods bound onto the layer, so a `put` or `get`
    through it is the typed store's own call; attributes set on the layer, the task's
    `context`, set on the typed store, whose writes read them).
    """

    inner: StateStore

    def pending(self) -> list[ChangelogEntry]:
        """The changelog entries of the pending writes, without applying them: one per key, in
        write order, the logical key from the typed store's `_to_changelog` (a write it maps
        to None is not logged)."""
        to_changelog = self.inner._to_changelog
        timestamp = self.inner.changelog_timestamp
        out: list[ChangelogEntry] = []
        keep, new = out.append, _new_tuple  # the class built from C: see `_new_tuple`
        for pk, v, source in self.inner.pending_writes():
            logged = to_changelog(pk, v)
            if logged is not None:
                keep(new(ChangelogEntry, (logged[0], logged[1], source, timestamp(pk, v))))
        return out

    def changelog_records(
        self,
        app_id: str,
        entries: list[ChangelogEntry] | None = None,
        *,
        provenance: bool = True,
    ) -> list[ChangelogRecord]:
        """Records for the pending writes (or for `entries`), ready to produce;
        `provenance`: stamp each with the input record that caused it."""
        if entries is None:
            entries = self.pending()
        inner = self.inner
        topic = inner.spec.changelog_topic(app_id)
        part = inner.partition
        counters: dict[Source, int] = {}
        out: list[ChangelogRecord] = []
        keep, new = out.append, _new_tuple
        now = time.time_ns() // 1_000_000
        for key, value, source, ts in entries:
            headers: list[tuple[str, bytes | None]] = []
            if provenance and source is not None:
                idx = counters.get(source, 0)
                counters[source] = idx + 1
                headers.append((HEADER, encode(source[0], source[1], source[2], idx)))
            elif provenance:
                headers.append((HEADER, NO_SOURCE))
            # a time ahead of the wall clock is sent as 0 (the producer's clock): Kafka 4 brokers
            # refuse CreateTime records more than an hour ahead (message.timestamp.after.max.ms),
            # which would fail every commit of the task
            stamp = ts if 0 < ts <= now else 0
            keep(new(ChangelogRecord, (topic, part, key, value, headers, stamp)))
        return out

    def flush(self, checkpoint: dict[str, Any] | None = None) -> list[ChangelogEntry]:
        """Apply the pending writes with `checkpoint` (the transaction committed); returns the
        changelog entries of the applied writes."""
        entries = self.pending()
        self.inner.flush(checkpoint)
        return entries

    def __repr__(self) -> str:
        return f"ChangeLogging({self.inner!r})"


def changelog_records(
    store: Any,
    app_id: str,
    entries: list[ChangelogEntry] | None = None,
    *,
    provenance: bool = True,
) -> list[ChangelogRecord]:
    """The changelog records of `store` (any layer of a chain): none when the store has no
    change-logging layer (`changelog=False`)."""
    records: Callable[..., list[ChangelogRecord]] | None = getattr(store, "changelog_records", None)
    return [] if records is None else records(app_id, entries, provenance=provenance)
