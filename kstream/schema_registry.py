"""Schema Registry serdes: Avro, Protobuf and JSON Schema, wire-compatible with Confluent's.

Topics shared with Java services carry Confluent's framing: a 0 magic byte, the 4-byte
big-endian schema id, then the payload (Protobuf adds its message indexes). kstream does not
re-implement that format: it wraps `confluent_kafka.schema_registry`'s serializers, which Java's
`KafkaAvroSerializer` & co. read and write, and adapts them to kstream's `Serde` (the topic and
key/value side come from the record's context, so the default subject is `<topic>-key` /
`<topic>-value`, as in Java).

One registry client is shared per URL and settings, so a serde's serializer and deserializer (and
every serde of an app) see the same schema ids and cache. A `mock://<scope>` URL gives
confluent-kafka's in-memory registry, for tests and the test driver.

Install with `pip install 'kstream[schema-registry]'`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from kstream.errors import ConfigError, SerdeError
from kstream.serde_base import ContextSerde, SerdeContext

Format = Literal["avro", "protobuf", "json_schema"]
FORMATS: tuple[str, ...] = ("avro", "protobuf", "json_schema")

_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_clients_lock = threading.Lock()


def _import() -> Any:
    try:
        from confluent_kafka import schema_registry
    except ImportError as e:  # the extra's dependencies are missing
        raise ConfigError(
            f"Schema Registry serdes need the schema-registry extra: "
            f"pip install 'kstream[schema-registry]' ({e})"
        ) from None
    return schema_registry


def registry_client(registry: str | Mapping[str, Any] | Any) -> Any:
    """The shared client for a URL (or a settings dict with `url`), or the client given."""
    if not isinstance(registry, str | Mapping):
        return registry  # a SchemaRegistryClient (or compatible) built by the user
    conf = {"url": registry} if isinstance(registry, str) else dict(registry)
    if not conf.get("url"):
        raise ConfigError("schema registry: give a URL (e.g. 'http://registry:8081')")
    key = (str(conf["url"]), tuple(sorted((k, str(v)) for k, v in conf.items())))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _import().SchemaRegistryClient.new_client(conf)
            _clients[key] = client
        return client


class RegistrySerde(ContextSerde):
    """A Serde over a Confluent serializer/deserializer pair for one format."""

    def __init__(
        self,
        format: str,
        serializer: Callable[[Any, Any], bytes | None],
        deserializer: Callable[[bytes, Any], Any],
    ) -> None:
        super().__init__(format)
        self._ser = serializer
        self._de = deserializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        self._ctx = SerializationContext
        self._key, self._value = MessageField.KEY, MessageField.VALUE

    def _context(self, ctx: SerdeContext | None) -> Any:
        if ctx is None or ctx.topic is None:
            raise SerdeError(
                f"{self.name} serde: the record has no topic, and the registry subject is named "
                "after it (<topic>-key / <topic>-value)"
            )
        return self._ctx(ctx.topic, self._key if ctx.is_key else self._value, list(ctx.headers))

    def serialize(self, value: Any, ctx: SerdeContext | None = None) -> bytes | None:
        if value is None:
            return None
        topic = None if ctx is None else ctx.topic
        try:
            return self._ser(value, self._context(ctx))
        except SerdeError:
            raise
        except Exception as e:
            raise SerdeError(
                f"{self.name} serde: cannot serialize for topic {topic!r}: {type(e).__name__}: {e}"
            ) from e

    def deserialize(self, data: bytes | None, ctx: SerdeContext | None = None) -> Any:
        if data is None:
            return None
        topic = None if ctx is None else ctx.topic
        try:
            return self._de(data, self._context(ctx))
        except SerdeError:
            raise
        except Exception as e:
            raise SerdeError(
                f"{self.name} serde: cannot deserialize from topic {topic!r} "
                f"(expected Confluent framing: magic byte 0 + schema id): {type(e).__name__}: {e}"
            ) from e


def registry_serde(
    format: Format | str,
    *,
    registry: str | Mapping[str, Any] | Any,
    schema: str | None = None,
    message_type: type | None = None,
    to_dict: Callable[[Any, Any], dict[str, Any]] | None = None,
    from_dict: Callable[[dict[str, Any], Any], Any] | None = None,
    conf: Mapping[str, Any] | None = None,
) -> RegistrySerde:
    """A Schema Registry serde: `"avro"` or `"json_schema"` with `schema` (the schema text;
    Avro may omit it to only read), or `"protobuf"` with `message_type` (a generated class).

    `conf` goes to the Confluent serializer (e.g. `{"auto.register.schemas": False,
    "use.latest.version": True}`); `to_dict`/`from_dict` convert your objects (Avro, JSON).

    >>> s = registry_serde("avro", registry="mock://docs",
    ...     schema='{"type": "record", "name": "U", "fields": [{"name": "n", "type": "string"}]}')
    >>> raw = s.serialize({"n": "a"}, SerdeContext("users"))
    >>> raw[:1], s.deserialize(raw, SerdeContext("users"))
    (b'\\x00', {'n': 'a'})
    """
    if format not in FORMATS:
        raise ConfigError(f"schema registry serde: format must be one of {FORMATS}, got {format!r}")
    _import()
    client = registry_client(registry)
    sconf = dict(conf or {})
    if format == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

        ser = AvroSerializer(client, schema, to_dict=to_dict, conf=sconf) if schema else None
        de = AvroDeserializer(client, schema, from_dict=from_dict)
    elif format == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

        if not schema:
            raise ConfigError("json_schema serde: give the JSON schema text as schema=...")
        ser = JSONSerializer(schema, client, to_dict=to_dict, conf=sconf)
        de = JSONDeserializer(schema, from_dict=from_dict, schema_registry_client=client)
    else:
        from confluent_kafka.schema_registry.protobuf import (
            ProtobufDeserializer,
            ProtobufSerializer,
        )

        if message_type is None:
            raise ConfigError("protobuf serde: give the generated message class as message_type=")
        sconf.setdefault("use.deprecated.format", False)
        ser = ProtobufSerializer(message_type, client, conf=sconf)
        de = ProtobufDeserializer(message_type, {"use.deprecated.format": False})

    def write(value: Any, ctx: Any) -> bytes | None:
        if ser is None:
            raise SerdeError("avro serde: no schema given, so it can only read")
        out: bytes | None = ser(value, ctx)
        return out

    return RegistrySerde(format, write, de)
