"""Records built slot by slot (the copies, the windowed updates, the runtime's input records)
are the records `Record(...)` builds: every slot set, nothing shared but the headers."""

from __future__ import annotations

from pathlib import Path

from support.mock_runtime import SRC, running

from kstream.dsl import StreamBuilder
from kstream.records import Record, TimestampType
from kstream.testing import MockCluster, MockProducer
from kstream.topology.processor import Processor


def _slots(r: Record) -> dict[str, object]:
    return {name: getattr(r, name) for name in Record.__slots__}  # raises if one is unset


ORIGIN = Record(
    b"k", {"v": 1}, 1_000, [("h", b"1")], "clicks", 3, 42, TimestampType.LOG_APPEND_TIME
)


def test_copies_set_every_slot_as_the_constructor_does() -> None:
    base = _slots(ORIGIN)
    assert _slots(ORIGIN.with_key("k2")) == {**base, "key": "k2"}
    assert _slots(ORIGIN.with_value(7)) == {**base, "value": 7}
    assert _slots(ORIGIN.with_key_value("k3", 8)) == {**base, "key": "k3", "value": 8}
    copy = ORIGIN.with_value(7)
    assert type(copy) is Record and copy is not ORIGIN
    assert copy == Record(b"k", 7, 1_000, [("h", b"1")], "clicks", 3, 42)


class _Capture(Processor):
    seen: list[Record] = []

    def process(self, record: Record) -> None:
        _Capture.seen.append(record)


def test_the_runtime_builds_input_records_with_every_slot(tmp_path: Path) -> None:
    cluster = MockCluster()
    cluster.create_topic(SRC, 1)
    p = MockProducer(cluster)
    p.produce(SRC, b"v1", key=b"k1", timestamp=5, headers=[("h", b"x")])
    p.produce(SRC, b"v2", key=b"k2", timestamp=6)
    p.flush()
    b = StreamBuilder()
    b.stream(SRC).process(_Capture)
    _Capture.seen = []
    with running(cluster, tmp_path, "at_least_once", topology=b) as r:
        r.turn(2)
    assert [_slots(x) for x in _Capture.seen] == [
        _slots(Record(b"k1", b"v1", 5, [("h", b"x")], SRC, 0, 0)),
        _slots(Record(b"k2", b"v2", 6, (), SRC, 0, 1)),
    ]
