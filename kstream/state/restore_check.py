"""What a restore checks in each changelog record before it applies it, and what it does with
a record that fails (config `on_restore_error`).

A changelog is an ordinary topic: any producer with write access can put a record into it.
Restored as it is, a record the store cannot read (garbage, another app's bytes, a pickle)
sits in the store until an input record of its key reads it, and that innocent record is then
blamed, again after every restart. So a restore checks every record it is about to apply:

* **Serdes** (always): its key and value decode as the store's own writes do
  (`StateStore.check_changelog`: the store's key and value serdes, and the layout of window,
  session and dedup keys). A record without a key is refused too.
* **Provenance** (with `broker_compat="tansu"`, whose writers stamp every changelog record,
  `provenance_problem`): its `kstream.src` header names an input partition of the store's
  task, or says no input record caused it.

And the restore filter of the same component (`is_committed`): a record that passes is applied
only when its source offset was committed. Both read the provenance header only; the runtime
turns them on (kstream.broker_compat's switches) by what it passes to the restore.

What no check catches: a well-formed value of the store's type (an 8-byte long in a count
store), and under `broker_compat="tansu"` one that also carries a header copied from a real
record. Such a forgery reads exactly like kstream's own writes; only write access to the
changelog topics (Kafka ACLs) keeps it out.

Policy (`kstream.config_checks.RESTORE_POLICIES`): `"fail"` (default) stops the restore with
`ChangelogRecordError`, naming the changelog topic, partition and offset and why; the app
stops before processing any input. `"skip"` leaves the record out with a warning naming it
(its key keeps the value of the records before it, later records of the key apply as usual)
and counts it in `RestoreResult.refused`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from kstream.errors import ChangelogRecordError
from kstream.state import Store
from kstream.state.provenance import HEADER, NO_SOURCE, decode, from_headers, header_value

log = logging.getLogger("kstream.state.restore")

TP = tuple[str, int]


def refusal(
    store: Store,
    key: bytes | None,
    value: bytes | None,
    headers: Any,
    sources: Collection[TP] | None,
) -> str | None:
    """Why `store` must not apply this changelog record, or None when it may (`sources`: the
    partitions the store's task reads, when provenance is checked; None otherwise)."""
    if key is None:
        return "it has no key"
    try:
        store.check_changelog(key, value)
    except Exception as e:
        return f"it does not decode as store {store.name!r} writes ({type(e).__name__}: {e})"
    if sources is not None:
        return provenance_problem(headers, sources)
    return None


def provenance_problem(headers: Any, sources: Collection[TP]) -> str | None:
    """Why a changelog record's provenance is not that of a write of its task (None when it
    is): `sources` are the (topic, partition) pairs the task reads."""
    value = header_value(headers)
    if value is None:
        return (
            f"it has no {HEADER} header, which every changelog record kstream writes under "
            "broker_compat='tansu' carries: another producer wrote it"
        )
    if value == NO_SOURCE:
        return None
    src = decode(value)
    if src is None:
        return f"its {HEADER} header {value[:40]!r} does not decode"
    if (src.topic, src.partition) not in sources:
        reads = ", ".join(f"{t}[{p}]" for t, p in sorted(sources))
        return (
            f"its {HEADER} header names {src.topic}[{src.partition}] offset {src.offset}, "
            f"which its task does not read (it reads {reads})"
        )
    return None


def is_committed(headers: Any, committed: Mapping[TP, int] | None) -> bool:
    """True when a changelog record may be applied under the committed source offsets
    (`committed`: (topic, partition) -> next offset; None applies every record). Records of
    aborted transactions that a broker still shows name an offset that was never committed."""
    if committed is None:
        return True
    src = from_headers(headers)
    if src is None:
        return True
    done = committed.get((src.topic, src.partition))
    return done is not None and src.offset < done


def refuse(store: Store, topic: str, partition: int, offset: int, why: str, policy: str) -> None:
    """Apply `policy` to a refused record: raise ChangelogRecordError ("fail"), or log it
    ("skip", the caller leaves it out)."""
    where = f"changelog topic={topic!r} partition={partition} offset={offset}"
    if policy == "skip":
        log.warning(
            "%s: record left out of the restore of store %r (on_restore_error='skip'): %s",
            where,
            store.name,
            why,
        )
        return
    raise ChangelogRecordError(
        f"{where}: refused while restoring store {store.name!r}: {why}. kstream did not "
        "write this record (check who may write to the changelog topic); set "
        "on_restore_error='skip' to restore without it (its key keeps its previous value), or "
        "reset the app (kstreamd reset) to rebuild its state from the input topics",
        topic=topic,
        partition=partition,
        offset=offset,
    )
