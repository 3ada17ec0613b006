"""Restore on the real broker: write through the changelog, lose local state, restore, compare.

The aborted-transaction cases run on either lane: on Apache Kafka a read_committed restore
never sees an aborted record; on Tansu (KSTREAM_TEST_BROKER=tansu), which hands records of
aborted transactions to read_committed readers, the provenance filter of the
broker-compatibility component skips them. Either way nothing aborted is applied.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kstream import stores
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier
from kstream.records import Record, Windowed
from kstream.state import StateStore
from kstream.state.changelog import CHANGELOG_OFFSET, changelog_records
from kstream.state.provenance import from_headers
from kstream.state.restore import (
    open_and_restore,
    open_and_restore_all,
    open_for_restore,
    restore,
)


def shows_aborted(broker: Any) -> bool:
    """Tansu shows records of aborted transactions to read_committed readers; Kafka never."""
    return isinstance(broker, EmbeddedBroker)


class Harness:
    """One app id, its changelog topic and a transactional producer."""

    def __init__(
        self, bootstrap: str, state_dir: Path, spec: Any, app_id: str | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.app_id = app_id or f"restore-{uuid.uuid4().hex[:8]}"
        self.spec = spec
        self.state_dir = str(state_dir)
        with Admin(bootstrap) as admin:
            admin.create_topic(spec.changelog_topic(self.app_id), 1, spec.changelog_config())
        self.producer = Producer(bootstrap, transactional_id=f"{self.app_id}-{spec.name}-tx")
        self.offset = 0  # the next source offset

    def open(self) -> StateStore:
        store, _ = open_for_restore(
            self.spec, app_id=self.app_id, partition=0, state_dir=self.state_dir
        )
        return store

    def batch(
        self, store: StateStore, writes: Callable[[StateStore], None], n: int, commit: bool
    ) -> None:
        """Process `n` source records (one `writes` call each), produce, commit or abort."""
        ctx = SimpleNamespace(current=None, record_time=lambda: -1)
        store.context = ctx  # type: ignore[assignment]
        for _ in range(n):
            ctx.current = Record(None, None, 0, (), "in", 0, self.offset)
            writes(store)
            self.offset += 1
        self.producer.begin()
        for r in changelog_records(store, self.app_id):
            self.producer.produce(r.topic, r.value, r.key, partition=r.partition, headers=r.headers)
        if commit:
            self.producer.commit()
            store.flush()
        else:
            self.producer.flush()  # the records reach the broker, then the transaction aborts
            self.producer.abort()
            store.discard()
            self.offset -= n  # the retry will reprocess the same source records

    def visible_uncommitted(self, committed: int) -> int:
        c = Consumer(self.bootstrap)
        topic = self.spec.changelog_topic(self.app_id)
        c.assign([(topic, 0, 0)])
        n = 0
        while True:
            msgs = c.consume_batch(1000, 0.2)
            for m in msgs:
                src = from_headers(m.headers())
                if src is not None and src.offset >= committed:
                    n += 1
            if not msgs and c.eof_offset(topic, 0) is not None:
                break
        c.close()
        return n


def test_key_value_restore_skips_aborted_records(kafka_broker: Any, tmp_path: Path) -> None:
    h = Harness(
        kafka_broker.bootstrap_servers, tmp_path, stores.key_value("counts", backend="lmdb")
    )
    store = h.open()

    def count(s: StateStore) -> None:
        k = f"k{h.offset % 4}"
        s.put(k, (s.get(k) or 0) + h.offset)  # type: ignore[attr-defined]

    h.batch(store, count, 10, commit=True)
    expected = dict(store.all())  # type: ignore[attr-defined]
    assert expected == {"k0": 0 + 4 + 8, "k1": 1 + 5 + 9, "k2": 2 + 6, "k3": 3 + 7}
    h.batch(store, lambda s: s.put(f"k{h.offset % 5}", -1), 5, commit=False)  # aborted
    assert dict(store.all()) == expected  # type: ignore[attr-defined]
    store.destroy()

    result = open_and_restore(
        h.spec,
        app_id=h.app_id,
        partition=0,
        state_dir=h.state_dir,
        bootstrap_servers=h.bootstrap,
        committed={("in", 0): 10},
    )
    restored = result.store
    assert dict(restored.all()) == expected  # type: ignore[attr-defined]
    assert result.start_offset == 0
    visible = h.visible_uncommitted(10)
    # Tansu shows the aborted records, and restore skipped every one of them; Kafka shows none.
    assert visible == (5 if shows_aborted(kafka_broker) else 0)
    assert result.skipped == visible
    assert result.applied == 4
    assert restored.checkpoint()[CHANGELOG_OFFSET] == result.end_offset

    # The retry commits; a second restore reads only what follows the checkpoint.
    h.batch(restored, lambda s: s.put(f"k{h.offset % 5}", h.offset), 3, commit=True)
    after_retry = dict(restored.all())  # type: ignore[attr-defined]
    again = restore(
        restored, bootstrap_servers=h.bootstrap, app_id=h.app_id, committed={("in", 0): 13}
    )
    assert again.start_offset == result.end_offset
    assert again.applied == 3 and again.skipped == 0
    assert dict(restored.all()) == after_retry  # type: ignore[attr-defined]
    restored.destroy()

    # Lost again: a full restore now applies the aborted records' keys too (their sources
    # 10..12 are committed by the retry), but the retry's later records win.
    full = open_and_restore(
        h.spec,
        app_id=h.app_id,
        partition=0,
        state_dir=h.state_dir,
        bootstrap_servers=h.bootstrap,
        committed={("in", 0): 13},
    )
    assert dict(full.store.all()) == after_retry  # type: ignore[attr-defined]
    # on Tansu: sources 13 and 14 of the aborted batch were never committed
    assert full.skipped == (2 if shows_aborted(kafka_broker) else 0)
    full.store.close()
    h.producer.close()


class RecordingSupplier(KafkaClientSupplier):
    """Real clients; notes the librdkafka settings every consumer was made with."""

    def __init__(self) -> None:
        self.consumer_settings: list[dict[str, Any]] = []

    def consumer(self, config: ClientConfig) -> Consumer:
        self.consumer_settings.append(dict(config.kafka))
        return super().consumer(config)


def test_restore_reads_to_the_end_with_a_short_fetch_wait(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """The end of a changelog shows with the answer to a fetch, and a fetch that finds nothing
    is answered when its wait is over: with the app's 500 ms every store of every task took
    half a second longer to restore (three empty changelogs held a task's start 1.7 s). The
    restore consumer waits 10 ms, whatever the app's `kafka` says, and keeps its other
    settings; empty or not, the changelog is read to its end."""
    h = Harness(
        kafka_broker.bootstrap_servers, tmp_path, stores.key_value("totals", backend="lmdb")
    )
    supplier = RecordingSupplier()
    app_kafka = {"fetch.wait.max.ms": 500, "socket.keepalive.enable": True}

    def restore_now(committed: int) -> Any:
        return open_and_restore(
            h.spec,
            app_id=h.app_id,
            partition=0,
            state_dir=h.state_dir,
            bootstrap_servers=h.bootstrap,
            committed={("in", 0): committed},
            kafka=app_kafka,
            client_supplier=supplier,
        )

    empty = restore_now(0)
    assert (empty.start_offset, empty.end_offset, empty.applied) == (0, 0, 0)
    assert dict(empty.store.all()) == {}  # type: ignore[attr-defined]

    h.batch(empty.store, lambda s: s.put(f"k{h.offset % 3}", h.offset), 7, commit=True)
    expected = dict(empty.store.all())  # type: ignore[attr-defined]
    assert expected == {"k0": 6, "k1": 4, "k2": 5}
    empty.store.destroy()
    full = restore_now(7)
    assert dict(full.store.all()) == expected  # type: ignore[attr-defined]
    assert full.applied == 3  # the changelog holds each key's last value of the batch
    assert full.store.checkpoint()[CHANGELOG_OFFSET] == full.end_offset > 0
    full.store.close()
    h.producer.close()
    reader = {"fetch.wait.max.ms": 10, "enable.partition.eof": True}
    assert supplier.consumer_settings == [{**app_kafka, **reader}] * 2


def test_window_and_session_restore(kafka_broker: Any, tmp_path: Path) -> None:
    for spec in (stores.window("w", 10_000, 1000), stores.session("s", 10_000)):
        h = Harness(kafka_broker.bootstrap_servers, tmp_path / spec.name, spec)
        store = h.open()

        def write(s: Any, spec: Any = spec, h: Harness = h) -> None:
            t = h.offset * 300
            if spec.kind == "window":
                s.put(f"k{h.offset % 3}", h.offset, t - t % 1000)
            else:
                s.put(Windowed(f"k{h.offset % 3}", t, t + 100), h.offset)

        h.batch(store, write, 12, commit=True)
        expected = list(store.all())  # type: ignore[attr-defined]
        assert len(expected) > 3
        store.destroy()
        result = open_and_restore(
            spec,
            app_id=h.app_id,
            partition=0,
            state_dir=h.state_dir,
            bootstrap_servers=h.bootstrap,
            committed={("in", 0): 12},
        )
        assert list(result.store.all()) == expected  # type: ignore[attr-defined]
        result.store.close()
        h.producer.close()


def test_a_task_s_stores_are_restored_together_by_one_consumer(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """A key-value store with an aborted batch in its changelog, a window store and a store
    whose changelog is empty, restored at once: each gets exactly its own committed state."""
    bs = kafka_broker.bootstrap_servers
    kv = Harness(bs, tmp_path, stores.key_value("kv", backend="lmdb"))
    win = Harness(bs, tmp_path, stores.window("win", 10_000, 1000), app_id=kv.app_id)
    empty = Harness(bs, tmp_path, stores.key_value("empty"), app_id=kv.app_id)
    kv_store, win_store = kv.open(), win.open()
    kv.batch(kv_store, lambda s: s.put(f"k{kv.offset % 3}", kv.offset), 6, commit=True)
    kv.batch(kv_store, lambda s: s.put("k0", -1), 2, commit=False)  # aborted
    win.batch(win_store, lambda s: s.put(f"w{win.offset % 2}", win.offset, 1000), 4, commit=True)
    expected_kv = dict(kv_store.all())  # type: ignore[attr-defined]
    expected_win = list(win_store.all())  # type: ignore[attr-defined]
    assert expected_kv == {"k0": 3, "k1": 4, "k2": 5}
    kv_store.destroy()
    win_store.destroy()

    supplier = RecordingSupplier()
    kv_res, win_res, empty_res = open_and_restore_all(
        [(kv.spec, 0), (win.spec, 0), (empty.spec, 0)],
        app_id=kv.app_id,
        state_dir=str(tmp_path),
        bootstrap_servers=bs,
        committed={("in", 0): 6},
        client_supplier=supplier,
    )
    assert len(supplier.consumer_settings) == 1
    assert dict(kv_res.store.all()) == expected_kv  # type: ignore[attr-defined]
    # on Tansu, skipped: the aborted batch's one record (its write cache kept k0's last value)
    assert (kv_res.applied, kv_res.skipped) == (3, 1 if shows_aborted(kafka_broker) else 0)
    assert list(win_res.store.all()) == expected_win  # type: ignore[attr-defined]
    assert win_res.applied == 2
    assert (empty_res.applied, empty_res.end_offset) == (0, 0)
    for res in (kv_res, win_res, empty_res):
        assert res.store.checkpoint()[CHANGELOG_OFFSET] == res.end_offset
        res.store.close()
    for h in (kv, win, empty):
        h.producer.close()


def test_a_store_that_loses_its_data_mid_restore_is_restored_again_the_others_go_on(
    kafka_broker: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """As a Redis store restarted empty would: the first restore of `lost` fails with
    StoreLostError after it has begun; it is wiped and restored from offset 0, and `kept`,
    restored by the same consumer, is not read again."""
    import kstream.state.restore as restore_module
    from kstream.errors import StoreLostError

    bs = kafka_broker.bootstrap_servers
    lost = Harness(bs, tmp_path, stores.key_value("lost"))
    kept = Harness(bs, tmp_path, stores.key_value("kept"), app_id=lost.app_id)
    for h in (lost, kept):
        s = h.open()
        h.batch(s, lambda st, h=h: st.put(f"{h.spec.name}{h.offset % 2}", h.offset), 4, True)
        s.destroy()
    real_open = restore_module.open_for_restore
    opened: list[str] = []

    def open_once_losing(spec: Any, **kwargs: Any) -> tuple[StateStore, bool]:
        store, wiped = real_open(spec, **kwargs)
        opened.append(spec.name)
        if opened.count("lost") == 1 and spec.name == "lost":
            apply = store.apply_changelog

            def apply_then_lose(records: Any, checkpoint: Any) -> int:
                apply(records, checkpoint)
                raise StoreLostError("store 'lost': the server restarted empty")

            store.apply_changelog = apply_then_lose  # type: ignore[method-assign]
        return store, wiped

    monkeypatch.setattr(restore_module, "open_for_restore", open_once_losing)
    supplier = RecordingSupplier()
    lost_res, kept_res = open_and_restore_all(
        [(lost.spec, 0), (kept.spec, 0)],
        app_id=lost.app_id,
        state_dir=str(tmp_path),
        bootstrap_servers=bs,
        committed={("in", 0): 4},
        client_supplier=supplier,
    )
    assert opened == ["lost", "kept", "lost"]
    assert dict(lost_res.store.all()) == {"lost0": 2, "lost1": 3}  # type: ignore[attr-defined]
    assert dict(kept_res.store.all()) == {"kept0": 2, "kept1": 3}  # type: ignore[attr-defined]
    assert (lost_res.start_offset, lost_res.applied) == (0, 2)
    # `kept` goes on from where the first read got it (its two records at offsets 0 and 1, and
    # the commit marker at 2, read or not when `lost` failed): nothing is applied twice
    assert kept_res.end_offset == 3
    assert kept_res.applied == {0: 2, 2: 0, 3: 0}[kept_res.start_offset]
    assert len(supplier.consumer_settings) == 2
    for res in (lost_res, kept_res):
        res.store.close()
    for h in (lost, kept):
        h.producer.close()
