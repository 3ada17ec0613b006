"""A versioned store's history survives the broker's compaction of its changelog, whatever the
event time of its versions.

The changelog of a versioned store is compacted (one record per key kept): only its
`min.compaction.lag.ms` (history retention plus a day) keeps the older versions a restore
needs, and the broker measures that lag against the records' timestamps. Stamped with the
put's own time, as Kafka's versioned store stamps them, versions of a November 2023 event time
are years past the lag: the first segment rolls at the first newer record (the transaction's
commit marker) and the cleaner drops every version but the last within seconds. A task restored
after that read None as of any time before the surviving version: the grace-join crash test
(tests/e2e/test_crash_grace_join.py) lost answers so, about one run in ten.

The test writes the changelog as the runtime writes it (`changelog_records`, in committed
transactions) on the real broker, beside a control topic of the same configs holding the same
records stamped with the puts' own times. Once the broker has compacted the control (so its
cleaner did run over such a segment), the store restored from its changelog must have every
version.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from kstream import stores
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.state.changelog import changelog_records
from kstream.state.keys import unts8
from kstream.state.restore import open_and_restore, open_for_restore
from kstream.state.versioned import VersionedRecord

BASE = 1_700_000_000_000  # November 2023: far older than any compaction lag
# the prices of one product, one transaction per list, as the grace-join test's task wrote them
TRANSACTIONS: list[list[tuple[str, int]]] = [
    [("p7$0", BASE - 1_000), ("p7$1", BASE + 259), ("p7$2", BASE + 559)],
    [("p7$3", BASE + 859), ("p7$4", BASE + 1_159)],
]
COMPACTED_WITHIN_S = 90.0  # the test broker's cleaner wakes every second; another's, every 15


def _first_offset(bootstrap: str, topic: str) -> int | None:
    """The offset of the first record a read_committed reader finds in partition 0."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"first-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        end = time.monotonic() + 10
        while time.monotonic() < end:
            m = c.poll(0.5)
            if m is None:
                continue
            err = m.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                return None
            if err is None:
                return m.offset()
        return None
    finally:
        c.close()


def test_versions_of_old_event_time_survive_compaction(kafka_broker: Any, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    app_id = f"versioned-compaction-{uuid.uuid4().hex[:8]}"
    spec = stores.versioned_key_value("prices", "1h")
    changelog, control = spec.changelog_topic(app_id), f"{app_id}-control"
    with Admin(bootstrap) as admin:
        for topic in (changelog, control):
            admin.create_topic(topic, 1, spec.changelog_config())
    store: Any
    store, _ = open_for_restore(spec, app_id=app_id, partition=0, state_dir=str(tmp_path))
    producer = Producer(bootstrap, transactional_id=f"{app_id}-tx")
    written = 0
    try:
        for puts in TRANSACTIONS:
            for value, ts in puts:
                store.put("p7", value, ts)
            producer.begin()
            for r in changelog_records(store, app_id):
                producer.produce(r.topic, r.value, r.key, r.partition, r.timestamp, r.headers)
                assert r.value is not None
                # the control: each record at its put's own time, as Kafka's versioned store
                # stamps it
                producer.produce(control, r.value, r.key, 0, unts8(r.value), r.headers)
                written += 1
            producer.commit()
            store.flush()
    finally:
        producer.close()
    assert written == sum(len(puts) for puts in TRANSACTIONS)

    deadline = time.monotonic() + COMPACTED_WITHIN_S
    while (_first_offset(bootstrap, control) or 0) == 0:
        assert time.monotonic() < deadline, (
            f"the broker did not compact the control topic {control} within "
            f"{COMPACTED_WITHIN_S:g}s: the test shows nothing without it"
        )
        time.sleep(0.5)

    store.destroy()
    result = open_and_restore(
        spec,
        app_id=app_id,
        partition=0,
        state_dir=str(tmp_path),
        bootstrap_servers=bootstrap,
        committed=None,
    )
    restored: Any = result.store
    try:
        assert result.applied == written, (result.start_offset, result.end_offset)
        # as of the grace-join test's lost order (o72, at BASE + 720): the version of BASE + 559
        assert restored.get("p7", BASE + 720) == VersionedRecord("p7$2", BASE + 559, BASE + 859)
        assert restored.get("p7", BASE - 500) == VersionedRecord("p7$0", BASE - 1_000, BASE + 259)
        assert restored.get("p7") == VersionedRecord("p7$4", BASE + 1_159)
    finally:
        restored.close()
