"""Restore a store from its changelog (docs/architecture.md, "Exactly-once" and "State").

Reads from the backend's checkpoint (`changelog_offset`, the next offset to read) to the end of
the changelog partition, where "the end" is what the consumer's fetches reach (partition EOF,
kstream.kafka.read_to_end), never a ListOffsets answer. The consumer reads `read_committed`, so
on Apache Kafka it sees committed records only and every one is applied; later records for a
key win. With the broker-compatibility component on (`broker_compat="tansu"`,
kstream.broker_compat; the runtime turns it on here by passing `committed`) a record is applied
only when its provenance says its source offset was committed:
`offset < committed[(topic, partition)]`, as that broker shows records of aborted transactions.

Local state is wiped and rebuilt from offset 0 when it is missing its checkpoint but holds
data, is of an incompatible format, or is corrupt (`StoreCorruptedError` from the backend).
A remote store that has lost its data (a Redis restarted empty) has no checkpoint and no data,
so it is restored from offset 0 like a new one; one that loses it during the restore
(`StoreLostError`) is restored again.

Every record is checked before it is applied (kstream.state.restore_check): its key and value
must decode with the store's serdes and, with the broker-compatibility component on, its
provenance must name an input partition of the store's task. A record that fails is named by
changelog topic, partition and offset, and `on_restore_error` decides: stop (default) or leave
it out.

Many stores are restored by one consumer (`restore_all`), whose fetches wait at most 10 ms for
data (`kstream.kafka.consumer.to_end_settings`): the end shows with a fetch's answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict, Unpack

from kstream.errors import StoreCorruptedError, StoreError, StoreLostError
from kstream.state import Store, open_backend
from kstream.state.build import build_store
from kstream.state.changelog import CHANGELOG_OFFSET
from kstream.state.restore_check import is_committed, refusal, refuse
from kstream.state.spec import StoreSpec

if TYPE_CHECKING:
    from kstream.kafka.supplier import ClientSupplier

log = logging.getLogger("kstream.state.restore")

Committed = Mapping[tuple[str, int], int]
_LOST_ATTEMPTS = 3
Progress = Callable[[str, int, int, int | None], None]
"""progress(store, partition, records_restored, end_offset or None)."""


@dataclass
class RestoreResult:
    store: Store
    start_offset: int
    end_offset: int
    applied: int
    skipped: int
    wiped: bool
    refused: int = 0
    """Records left out because they failed the checks (on_restore_error="skip")."""


def open_for_restore(
    spec: StoreSpec,
    *,
    app_id: str,
    partition: int,
    state_dir: str,
    default_backend: str = "memory",
) -> tuple[Store, bool]:
    """Open the store, wiping local state that cannot be trusted. Returns (store, wiped)."""

    def fresh() -> Store:
        # the inner chain alone: restore writes around the outer layers (kstream.state.build)
        inner: Store = build_store(
            spec,
            app_id=app_id,
            partition=partition,
            state_dir=state_dir,
            default_backend=default_backend,
        )
        return inner

    store: Store | None = None
    try:
        store = fresh()
        cp = store.checkpoint()
        if cp and not isinstance(cp.get(CHANGELOG_OFFSET, 0), int):
            raise StoreCorruptedError(f"store {spec.name!r}: bad checkpoint {cp!r}")
        verify = getattr(store.backend, "verify", None)
        if verify is not None:
            verify()
        if not cp and store.backend.approximate_num_entries() > 0:
            log.warning(
                "store %r partition %d has data but no checkpoint: wiping", spec.name, partition
            )
            store.destroy()
            return fresh(), True
        return store, False
    except StoreCorruptedError as e:
        if store is not None:
            store.close()
        log.warning("store %r partition %d: %s; wiping and restoring", spec.name, partition, e)
        wipe(
            spec,
            app_id=app_id,
            partition=partition,
            state_dir=state_dir,
            default_backend=default_backend,
        )
        return fresh(), True


def wipe(
    spec: StoreSpec, *, app_id: str, partition: int, state_dir: str, default_backend: str
) -> None:
    """Remove a store partition's local state even when it cannot be opened."""
    import shutil

    from store_backends.lmdb_backend import store_path

    url = spec.backend if spec.backend is not None else default_backend
    if isinstance(url, str) and url.split("://", 1)[0].lower() == "lmdb":
        lurl = url if "://" in url else url + "://"
        path = store_path(
            lurl, name=spec.name, partition=partition, state_dir=state_dir, namespace=app_id
        )
        shutil.rmtree(path, ignore_errors=True)
        return
    be = open_backend(
        spec,
        app_id=app_id,
        partition=partition,
        state_dir=state_dir,
        default_backend=default_backend,
    )
    be.destroy()


class Restoring:
    """One store's place in a restore: where it started and how far it has read (a standby
    replica keeps one per store while it follows the changelog, kstream.runtime.standby)."""

    __slots__ = ("applied", "next", "refused", "skipped", "sources", "start", "store", "wiped")

    def __init__(
        self, store: Store, wiped: bool, sources: Collection[tuple[str, int]] | None
    ) -> None:
        self.store = store
        self.wiped = wiped
        self.sources = sources
        self.start = self.next = int(store.checkpoint().get(CHANGELOG_OFFSET, 0))
        self.applied = self.skipped = self.refused = 0

    def result(self) -> RestoreResult:
        return RestoreResult(
            self.store, self.start, self.next, self.applied, self.skipped, self.wiped, self.refused
        )


class StoreLostWhileRestoring(StoreLostError):
    """A remote store lost its data while it was being restored (`store`: which one)."""

    def __init__(self, store: Store, cause: StoreLostError) -> None:
        super().__init__(str(cause))
        self.store = store


class ChangelogRestore:
    """`restore_all` one consumer batch at a time (`step`), so a caller can restore beside
    other work: the stream thread restores new tasks in bounded slices between its batches
    (kstream.runtime.restorer), as Kafka Streams' state updater restores beside processing.
    The keywords are `restore_all`'s. Until `done`, `close` leaves every store where its last
    batch put it (records and checkpoint are applied together), to go on from there later."""

    def __init__(
        self,
        stores: Sequence[Store],
        *,
        bootstrap_servers: str,
        app_id: str,
        committed: Committed | None,
        kafka: Mapping[str, Any] | None = None,
        batch: int = 5000,
        idle_timeout: float = 60.0,
        progress: Progress | None = None,
        wiped: Sequence[bool] | None = None,
        client_supplier: ClientSupplier | None = None,
        on_error: str = "fail",
        sources: Sequence[Collection[tuple[str, int]] | None] | None = None,
    ) -> None:
        from kstream.kafka.consumer import to_end_settings
        from kstream.kafka.read_to_end import read_to_end
        from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier

        supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
        flags = list(wiped) if wiped is not None else [False] * len(stores)
        reads = list(sources) if sources is not None else [None] * len(stores)
        self._every = [
            Restoring(store, w, r) for store, w, r in zip(stores, flags, reads, strict=True)
        ]
        self._committed = committed
        self._on_error = on_error
        self._progress = progress
        self._idle_timeout = idle_timeout
        # a store without a changelog (`changelog=False`, Kafka's logging disabled) has
        # nothing to read: it keeps what its backend holds
        self._states = {
            (st.store.spec.changelog_topic(app_id), st.store.partition): st
            for st in self._every
            if st.store.spec.changelog
        }
        self._consumer: Any = None
        self._reads: Any = None
        self.done = not self._states
        if not self.done:
            self._consumer = supplier.restore_consumer(
                ClientConfig(bootstrap_servers, to_end_settings(kafka))
            )
            starts = {tp: st.start for tp, st in self._states.items()}
            self._reads = read_to_end(
                self._consumer, starts, max_records=batch, idle_timeout=idle_timeout
            )

    def step(self) -> int:
        """Read and apply one batch (waiting for it as `read_to_end` does); the records
        applied. Sets `done` once every store reached the end of its changelog partition."""
        from kstream.kafka.read_to_end import ReadToEndTimeout

        if self.done:
            return 0
        try:
            got = next(self._reads, None)
        except ReadToEndTimeout as e:
            t, p = min(e.positions)
            st = self._states[(t, p)]
            raise StoreError(
                f"restore of store {st.store.name!r} from {t}[{p}] made no progress for "
                f"{self._idle_timeout:g}s at offset {st.next}"
            ) from None
        if got is None:
            self.done = True
            self.close()
            return 0
        return apply_batch(
            self._states, got.messages, got.ended, self._committed, self._on_error, self._progress
        )

    def results(self) -> list[RestoreResult]:
        """Each store's result, in the order given."""
        return [st.result() for st in self._every]

    def close(self) -> None:
        """Close the restore consumer (the stores stay open: they are the caller's)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def restore_all(
    stores: Sequence[Store],
    *,
    bootstrap_servers: str,
    app_id: str,
    committed: Committed | None,
    kafka: Mapping[str, Any] | None = None,
    batch: int = 5000,
    idle_timeout: float = 60.0,
    progress: Progress | None = None,
    wiped: Sequence[bool] | None = None,
    client_supplier: ClientSupplier | None = None,
    on_error: str = "fail",
    sources: Sequence[Collection[tuple[str, int]] | None] | None = None,
) -> list[RestoreResult]:
    """Bring `stores` up to the ends of their changelog partitions, in their order.

    One consumer reads every store's partition at once, as Kafka Streams' restore consumer
    does for a thread's tasks: a task's stores cost one client and one wait for the end, not
    one each. `committed`: the task's committed input offsets; None applies every record (for
    stores fed by no transactional task, e.g. global tables). `wiped[i]`: store i was wiped
    before (reported in its result). Each record is checked before it is applied
    (kstream.state.restore_check); `on_error` is the policy for one that fails ("fail" or
    "skip"), `sources[i]` the input partitions of store i's task when provenance is checked.
    """
    restoring = ChangelogRestore(
        stores,
        bootstrap_servers=bootstrap_servers,
        app_id=app_id,
        committed=committed,
        kafka=kafka,
        batch=batch,
        idle_timeout=idle_timeout,
        progress=progress,
        wiped=wiped,
        client_supplier=client_supplier,
        on_error=on_error,
        sources=sources,
    )
    try:
        while not restoring.done:
            restoring.step()
    finally:
        restoring.close()
    return restoring.results()


def apply_batch(
    states: Mapping[tuple[str, int], Restoring],
    messages: Sequence[Any],
    ended: Mapping[tuple[str, int], int],
    committed: Committed | None,
    on_error: str,
    progress: Progress | None = None,
) -> int:
    """Apply one consumer batch of changelog records to the stores of `states` (by changelog
    partition), each store's records and its new checkpoint in one backend write: the one
    step of a restore, and of a standby replica following a changelog. `ended`: partitions
    whose end the batch reached, with the end offset (control records may lie before it).
    Returns the records applied."""
    records = _checked(messages, states, committed, on_error)
    applied = 0
    for tp in sorted(records.keys() | ended.keys()):
        st = states[tp]
        if tp in ended:
            st.next = max(st.next, ended[tp])  # control records (commit/abort markers)
        try:
            n = st.store.apply_changelog(records.get(tp, []), {CHANGELOG_OFFSET: st.next})
        except StoreLostError as e:
            raise StoreLostWhileRestoring(st.store, e) from e
        st.applied += n
        applied += n
        if progress is not None:
            progress(st.store.name, tp[1], st.applied, ended.get(tp))
    return applied


def _checked(
    msgs: Sequence[Any],
    states: Mapping[tuple[str, int], Restoring],
    committed: Committed | None,
    on_error: str,
) -> dict[tuple[str, int], list[tuple[bytes, bytes | None]]]:
    """The records of `msgs` to apply, per changelog partition (a partition whose records were
    all refused or skipped is there, empty: its checkpoint still moves on).

    Each is checked before the restore filter: a forged header naming a partition the task
    does not read must be refused, not skipped as uncommitted.
    """
    out: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
    for m in msgs:
        tp = (m.topic() or "", m.partition() or 0)
        st = states[tp]
        off = m.offset()
        st.next = off + 1
        records = out.setdefault(tp, [])
        key, value, headers = m.key(), m.value(), m.headers()
        why = refusal(st.store, key, value, headers, st.sources)
        if why is not None:
            refuse(st.store, tp[0], tp[1], off, why, on_error)
            st.refused += 1
        elif not is_committed(headers, committed):
            st.skipped += 1
        else:
            assert key is not None  # refused otherwise
            records.append((key, value))
    return out


class ReadOptions(TypedDict, total=False):
    """`restore_all`'s keywords, which its one-store form `restore` passes on as given."""

    bootstrap_servers: Required[str]
    app_id: Required[str]
    committed: Required[Committed | None]
    kafka: Mapping[str, Any] | None
    batch: int
    idle_timeout: float
    progress: Progress | None
    client_supplier: ClientSupplier | None
    on_error: str


def restore(
    store: Store,
    *,
    wiped: bool = False,
    sources: Collection[tuple[str, int]] | None = None,
    **options: Unpack[ReadOptions],
) -> RestoreResult:
    """Bring `store` up to the end of its changelog partition (`restore_all` of one store)."""
    return restore_all([store], wiped=[wiped], sources=[sources], **options)[0]


def open_and_restore_all(
    parts: Sequence[tuple[StoreSpec, int]],
    *,
    app_id: str,
    state_dir: str,
    bootstrap_servers: str,
    committed: Committed | None,
    default_backend: str = "memory",
    kafka: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    client_supplier: ClientSupplier | None = None,
    on_error: str = "fail",
    sources: Sequence[Collection[tuple[str, int]] | None] | None = None,
    given: Sequence[Store | None] | None = None,
) -> list[RestoreResult]:
    """Open store partitions (`(spec, partition)`, wiping untrustworthy state) and restore them
    from their changelogs together (`restore_all`, which takes `on_error` and `sources`, one
    per part), in the order of `parts`.

    `given[i]`, when not None, is part i already open: a standby replica's store handed to
    its new active task (kstream.runtime.standby), whose checkpoint says where the restore
    goes on from, so only the tail of the changelog is read.

    A remote store that loses its data while being restored (StoreLostError) is wiped and
    restored again from offset 0, a few times before giving up; the others go on from where
    they got to. On any failure every store opened here is closed.
    """

    def open_one(spec: StoreSpec, partition: int) -> tuple[Store, bool]:
        return open_for_restore(
            spec,
            app_id=app_id,
            partition=partition,
            state_dir=state_dir,
            default_backend=default_backend,
        )

    opened: list[tuple[Store, bool]] = []
    try:
        handed = list(given) if given is not None else [None] * len(parts)
        for (spec, partition), store in zip(parts, handed, strict=True):
            opened.append((store, False) if store is not None else open_one(spec, partition))
        losses = 0
        while True:
            try:
                return restore_all(
                    [store for store, _ in opened],
                    bootstrap_servers=bootstrap_servers,
                    app_id=app_id,
                    committed=committed,
                    kafka=kafka,
                    progress=progress,
                    wiped=[w for _, w in opened],
                    client_supplier=client_supplier,
                    on_error=on_error,
                    sources=sources,
                )
            except StoreLostWhileRestoring as e:
                losses += 1
                if losses == _LOST_ATTEMPTS:
                    raise
                i = next(n for n, (store, _) in enumerate(opened) if store is e.store)
                spec, partition = parts[i]
                log.warning(
                    "store %r partition %d lost data while restoring (%s); restoring from scratch",
                    spec.name,
                    partition,
                    e,
                )
                opened[i][0].close()
                opened.pop(i)
                wipe(
                    spec,
                    app_id=app_id,
                    partition=partition,
                    state_dir=state_dir,
                    default_backend=default_backend,
                )
                opened.insert(i, open_one(spec, partition))
    except BaseException:
        for store, _ in opened:
            store.close()
        for store in given or ():  # handed over but not reached
            if store is not None and all(store is not o for o, _ in opened):
                store.close()
        raise


class OpenOptions(TypedDict, total=False):
    """`open_and_restore_all`'s keywords, which its one-store form `open_and_restore` passes
    on as given."""

    app_id: Required[str]
    state_dir: Required[str]
    bootstrap_servers: Required[str]
    committed: Required[Committed | None]
    default_backend: str
    kafka: Mapping[str, Any] | None
    progress: Progress | None
    client_supplier: ClientSupplier | None
    on_error: str


def open_and_restore(
    spec: StoreSpec,
    *,
    partition: int,
    sources: Collection[tuple[str, int]] | None = None,
    **options: Unpack[OpenOptions],
) -> RestoreResult:
    """Open one store partition and restore it from its changelog (`open_and_restore_all` of
    one part)."""
    return open_and_restore_all([(spec, partition)], sources=[sources], **options)[0]
