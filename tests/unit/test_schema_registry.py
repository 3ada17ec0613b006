"""Schema Registry serdes against confluent-kafka's in-memory registry (`mock://`).

No Schema Registry server can be run on the test machines, so these tests use the registry
client's mock and check the bytes themselves: Confluent's framing (magic byte 0, 4-byte
big-endian schema id) around a payload computed independently of the serializer (fastavro for
Avro, protobuf's own encoder, plain JSON), which is what Java's serdes read and write.
"""

from __future__ import annotations

import json
import struct
import uuid
from io import BytesIO
from typing import Any

import fastavro
import pytest

import kstream
from kstream.errors import SerdeError
from kstream.schema_registry import registry_client
from kstream.serde import SerdeContext
from kstream.testing import TopologyTestDriver

USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "clicks", "type": "long"}],
}


def _url() -> str:
    return f"mock://{uuid.uuid4().hex}"


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def test_avro_bytes_are_confluent_framing_around_plain_avro() -> None:
    url = _url()
    s = kstream.serde("avro", registry=url, schema=json.dumps(USER))
    raw = s.serialize({"name": "ann", "clicks": 3}, SerdeContext("users"))
    schema_id = registry_client(url).get_latest_version("users-value").schema_id
    body = BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(USER), {"name": "ann", "clicks": 3})
    assert raw == _framed(schema_id, body.getvalue())
    assert s.deserialize(raw, SerdeContext("users")) == {"name": "ann", "clicks": 3}


def test_avro_reads_bytes_written_by_another_producer_with_the_registry_id() -> None:
    """A Java producer's record: registered schema id + Avro body, read without a schema."""
    url = _url()
    from confluent_kafka.schema_registry import Schema

    schema_id = registry_client(url).register_schema("clicks-value", Schema(json.dumps(USER)))
    body = BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(USER), {"name": "bo", "clicks": -7})
    reader = kstream.serde("avro", registry=url)  # no schema: reads the writer's
    assert reader.deserialize(_framed(schema_id, body.getvalue()), SerdeContext("clicks")) == {
        "name": "bo",
        "clicks": -7,
    }
    with pytest.raises(SerdeError, match="can only read"):
        reader.serialize({"name": "x", "clicks": 1}, SerdeContext("clicks"))


def test_keys_use_the_key_subject() -> None:
    url = _url()
    s = kstream.serde("avro", registry=url, schema='"string"')
    raw = s.serialize("k1", SerdeContext("orders", is_key=True))
    assert (
        registry_client(url).get_latest_version("orders-key").schema_id
        == struct.unpack(">I", raw[1:5])[0]
    )
    assert s.deserialize(raw, SerdeContext("orders", is_key=True)) == "k1"


def test_json_schema_bytes_are_framing_around_json() -> None:
    url = _url()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    s = kstream.serde("json_schema", registry=url, schema=json.dumps(schema))
    raw = s.serialize({"n": 5}, SerdeContext("nums"))
    schema_id = registry_client(url).get_latest_version("nums-value").schema_id
    assert raw[:5] == _framed(schema_id, b"")
    assert json.loads(raw[5:]) == {"n": 5}
    assert s.deserialize(raw, SerdeContext("nums")) == {"n": 5}
    with pytest.raises(SerdeError, match="nums"):  # fails validation, names the topic
        s.serialize({"n": "five"}, SerdeContext("nums"))


def _protobuf_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name=f"{uuid.uuid4().hex}.proto", package="t")
    m = f.message_type.add(name="Click")
    m.field.add(name="user", number=1, type=9, label=1)  # string
    m.field.add(name="count", number=2, type=3, label=1)  # int64
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Click"))


def test_protobuf_bytes_are_framing_indexes_and_the_message() -> None:
    url = _url()
    click = _protobuf_class()
    s = kstream.serde("protobuf", registry=url, message_type=click)
    msg = click(user="ann", count=2)
    raw = s.serialize(msg, SerdeContext("clicks"))
    schema_id = registry_client(url).get_latest_version("clicks-value").schema_id
    # the first message of the file: message index list [0], written as the single byte 0
    assert raw == _framed(schema_id, b"\x00" + msg.SerializeToString())
    assert s.deserialize(raw, SerdeContext("clicks")) == msg


def test_registry_serdes_run_in_a_topology() -> None:
    url = _url()
    users = kstream.serde("avro", registry=url, schema=json.dumps(USER))
    b = kstream.StreamBuilder()
    (
        b.stream("users", key_serde="string", value_serde=users)
        .map_values(lambda u: {"name": u["name"].upper(), "clicks": u["clicks"] + 1})
        .to("users-out", key_serde="string", value_serde=users)
    )
    with TopologyTestDriver(b.build(), app_id="sr") as d:
        d.input_topic("users", key_serde="string", value_serde=users).pipe(
            "k", {"name": "ann", "clicks": 1}, timestamp=5
        )
        out = d.output_topic("users-out", key_serde="string", value_serde=users)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("k", {"name": "ANN", "clicks": 2}, 5)
        ]


def test_bad_bytes_name_the_topic_and_the_expected_framing() -> None:
    s = kstream.serde("avro", registry=_url(), schema=json.dumps(USER))
    with pytest.raises(SerdeError, match=r"topic 'users'.*magic byte 0"):
        s.deserialize(b"not avro", SerdeContext("users"))


def test_a_registry_format_without_a_registry_is_a_clear_error() -> None:
    with pytest.raises(SerdeError, match="registry="):
        kstream.serde("avro")
    with pytest.raises(SerdeError, match="takes no options"):
        kstream.serde("string", registry="mock://x")
