"""A versioned store restored from its changelog on the real broker keeps its history.

The changelog is written as the runtime writes it (the records of a committed transaction, then
the store's flush); local state is then lost, and a restore from the broker must rebuild every
version, out-of-order puts and tombstones included, not only the latest values. The topic is
created with the store's own configs (compacted, with Kafka's compaction lag for versioned
stores), which the broker must accept.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kstream import stores
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.records import Record
from kstream.state.changelog import CHANGELOG_OFFSET, changelog_records
from kstream.state.restore import open_and_restore, open_for_restore
from kstream.state.versioned import VersionedRecord

PUTS: list[tuple[str, str | None, int]] = [
    ("k", "v20", 20),
    ("k", "v10", 10),  # out of order: history [10, 20)
    ("j", "j5", 5),
    ("k", None, 15),  # a tombstone splits [10, 20)
    ("k", "v30", 30),
    ("j", None, 40),
    ("old", "x", 1),  # older than history retention (40 - 30): dropped, not logged as a version
]


def _history(store: Any) -> dict[tuple[str, int | None], VersionedRecord | None]:
    reads: list[tuple[str, int | None]] = [("k", None), ("j", None), ("old", None)]
    reads += [("k", t) for t in (9, 10, 14, 15, 19, 20, 29, 30)]
    reads += [("j", t) for t in (5, 39, 40)]
    return {(k, t): store.get(k, t) for k, t in reads}


def test_versioned_store_restores_its_history(kafka_broker: Any, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    app_id = f"versioned-{uuid.uuid4().hex[:8]}"
    spec = stores.versioned_key_value("prices", "30ms", backend="lmdb")
    with Admin(bootstrap) as admin:
        admin.create_topic(spec.changelog_topic(app_id), 1, spec.changelog_config())
    opened, _ = open_for_restore(spec, app_id=app_id, partition=0, state_dir=str(tmp_path))
    store: Any = opened
    producer = Producer(bootstrap, transactional_id=f"{app_id}-tx")
    try:
        for offset, (k, v, t) in enumerate(PUTS):
            store.context = SimpleNamespace(current=Record(None, None, 0, (), "in", 0, offset))
            store.put(k, v, t)
        producer.begin()
        records = changelog_records(store, app_id)
        for r in records:
            producer.produce(r.topic, r.value, r.key, partition=r.partition, headers=r.headers)
        producer.commit()
        store.flush()
    finally:
        producer.close()
    assert len(records) == len(PUTS) - 1  # the dropped put is not logged
    expected = _history(store)
    assert expected[("k", 14)] == VersionedRecord("v10", 10, 15)
    assert expected[("k", 19)] is None and expected[("k", None)] == VersionedRecord("v30", 30)
    store.destroy()

    result = open_and_restore(
        spec,
        app_id=app_id,
        partition=0,
        state_dir=str(tmp_path),
        bootstrap_servers=bootstrap,
        committed={("in", 0): len(PUTS)},
    )
    restored = result.store
    try:
        assert result.applied == len(records)
        assert _history(restored) == expected
        assert restored.checkpoint()[CHANGELOG_OFFSET] == result.end_offset
    finally:
        restored.close()
