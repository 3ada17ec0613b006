"""The changelog layer: turn a store's pending writes into records for its changelog topic.

Topic `<app_id>-<store>-changelog`, partition = the task's partition, key/value = the store's
logical changelog bytes. With the broker-compatibility component on (kstream.broker_compat),
header `kstream.src` = the provenance of the write; its index counts the changelog records
caused by one input record, so ids stay unique and deterministic across retries. A write no
input record caused (a punctuation, an expiry) carries `NO_SOURCE` instead: every changelog
record kstream writes there has the header, and restore refuses one without it.
"""

from __future__ import annotations

from typing import NamedTuple

from kstream.state.base import ChangelogEntry, StateStore
from kstream.state.provenance import HEADER, NO_SOURCE, encode

#: The checkpoint key holding the next changelog offset to read on restore.
CHANGELOG_OFFSET = "changelog_offset"


class ChangelogRecord(NamedTuple):
    topic: str
    partition: int
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def changelog_records(
    store: StateStore,
    app_id: str,
    entries: list[ChangelogEntry] | None = None,
    *,
    provenance: bool = True,
) -> list[ChangelogRecord]:
    """Records for the store's pending writes (or for `entries`), ready to produce;
    `provenance`: stamp each with the input record that caused it."""
    if entries is None:
        entries = store.pending()
    topic = store.spec.changelog_topic(app_id)
    part = store.partition
    counters: dict[tuple[str, int, int], int] = {}
    out: list[ChangelogRecord] = []
    for e in entries:
        headers: list[tuple[str, bytes | None]] = []
        if provenance and e.source is not None:
            idx = counters.get(e.source, 0)
            counters[e.source] = idx + 1
            headers.append((HEADER, encode(e.source[0], e.source[1], e.source[2], idx)))
        elif provenance:
            headers.append((HEADER, NO_SOURCE))
        out.append(ChangelogRecord(topic, part, e.key, e.value, headers))
    return out
