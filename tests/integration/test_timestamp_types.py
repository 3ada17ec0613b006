"""Record timestamps on the native runtime against the broker: a LogAppendTime topic's records
carry the broker's append time and say so (`Record.timestamp_type`), as Kafka's default
timestamp extractor reads them, and a per-source timestamp extractor replaces the time,
stream time included."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from support.groups import fast_group
from support.waiting import wait_for_app

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.kafka import Admin, Consumer, EmbeddedBroker, Producer
from kstream.records import Record
from kstream.runtime import App, AppState
from kstream.topology import Processor


class TagType(Processor):
    """Forwards each record with its timestamp type's name as the value."""

    def process(self, record: Record) -> None:
        self.ctx.forward(record.with_value(record.timestamp_type.name))


def test_log_append_time_and_an_extractor_on_the_native_runtime(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    appended, created = unique_name("appended"), unique_name("created")
    out_types, out_extracted = unique_name("types"), unique_name("extracted")
    admin = Admin(bs)
    admin.create_topic(appended, 1, {"message.timestamp.type": "LogAppendTime"})
    for t in (created, out_types, out_extracted):
        admin.create_topic(t, 1)
    b = StreamBuilder()
    b.stream(appended, "string", "string").process_values(TagType).to(out_types, "string", "string")
    b.stream(created, "string", "long", timestamp_extractor=lambda r, pt: r.value).to(
        out_extracted, "string", "long"
    )
    app = App(b, unique_name("app"), bs, config=fast_group({"state_dir": str(tmp_path)}))
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        before = int(time.time() * 1000)
        with Producer(bs) as p:
            p.produce(appended, b"v", b"k", None, 1_000)  # a create time the broker replaces
            p.produce(created, (12_345).to_bytes(8, "big"), b"k", None, 1_000)
            p.flush()
        consumer = Consumer(bs, group_id=unique_name("g"), kafka={"auto.offset.reset": "earliest"})
        consumer.subscribe([out_types, out_extracted])
        got: dict[str | None, tuple[bytes | None, int]] = {}

        def read() -> bool:
            for m in consumer.consume_batch(10, 0.2):
                got[m.topic()] = (m.value(), m.timestamp()[1])
            return len(got) == 2

        wait_for_app("both outputs", read, app, timeout=60)
        consumer.close()
    finally:
        app.close(timeout=30)
    value, ts = got[out_types]
    assert value == b"LOG_APPEND_TIME"
    assert ts >= before  # the broker's append time, not the producer's 1000
    assert got[out_extracted] == ((12_345).to_bytes(8, "big"), 12_345)


def test_an_extractor_drives_window_close_on_the_native_runtime(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The extracted time is the one stream time follows, as in Kafka: values 3, 25, 5 (all
    produced with the Kafka timestamp 1000) open the windows [0, 10) and [20, 30), and 5
    comes after stream time reached 25, so with no grace it is late and dropped."""
    bs = kafka_broker.bootstrap_servers
    source, out = unique_name("readings"), unique_name("counts")
    admin = Admin(bs)
    admin.create_topic(source, 1)
    admin.create_topic(out, 1)
    b = StreamBuilder()
    (
        b.stream(source, "string", "long", timestamp_extractor=lambda r, pt: r.value)
        .group_by_key()
        .windowed_by(TimeWindows.of(10))
        .count()
        .to_stream(lambda wk, v: f"{wk.key}@{wk.start}")
        .to(out, "string", "long")
    )
    app = App(b, unique_name("app"), bs, config=fast_group({"state_dir": str(tmp_path)}))
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        with Producer(bs) as p:
            for value in (3, 25, 5):
                p.produce(source, value.to_bytes(8, "big"), b"a", None, 1_000)
            p.flush()
        consumer = Consumer(bs, group_id=unique_name("g"), kafka={"auto.offset.reset": "earliest"})
        consumer.subscribe([out])
        got: list[tuple[bytes | None, int, int]] = []

        def read() -> bool:
            for m in consumer.consume_batch(10, 0.2):
                got.append((m.key(), int.from_bytes(m.value() or b"", "big"), m.timestamp()[1]))
            return len(got) >= 2 and app.processed >= 3

        wait_for_app("the window counts", read, app, timeout=60)
        time.sleep(1)  # the late record has been processed: nothing more comes
        read()
        consumer.close()
    finally:
        app.close(timeout=30)
    assert got == [(b"a@0", 1, 3), (b"a@20", 1, 25)]
