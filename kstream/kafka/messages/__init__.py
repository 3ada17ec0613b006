"""kafka-python protocol classes for the Streams group RPCs (KIP-1071), and the dict bridge.

kafka-python 3.x generates a message class at import from Kafka's own JSON definition of it
(`ApiMessage` with `load_json`). It ships no StreamsGroup* messages, so the four classes here
are generated from the definitions beside this file (Apache Kafka 4.4.0's, README.md). Defining
a response class registers it with kafka-python by its api key, which is how a connection
knows how to decode the answer: this module is imported once per process, by
`kstream.kafka.streams_group.StreamsGroupClient` only, so `import kstream` never loads
kafka-python.

kstream's side speaks plain dicts keyed by the messages' field names in snake_case (kafka-python's
names: `MemberEpoch` is `member_epoch`); `build` turns such a dict into a message (nested
structs and arrays of structs included) and `fields` turns a decoded message back into one.
Keeping the conversion of kstream's types in `streams_group` on plain dicts lets its unit tests
run without a connection, and `build` refuses a field name the definition does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage

__all__ = [
    "StreamsGroupDescribeRequest",
    "StreamsGroupDescribeResponse",
    "StreamsGroupHeartbeatRequest",
    "StreamsGroupHeartbeatResponse",
    "build",
    "fields",
]


class StreamsGroupHeartbeatRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg,misc,unused-ignore]
    pass


class StreamsGroupHeartbeatResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg,misc,unused-ignore]
    pass


class StreamsGroupDescribeRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg,misc,unused-ignore]
    pass


class StreamsGroupDescribeResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg,misc,unused-ignore]
    pass


def build(cls: Any, values: Mapping[str, Any], **kwargs: Any) -> Any:
    """`cls` (a message or one of its struct types) holding `values`, nested dicts and lists of
    dicts becoming the struct types the definition names. `kwargs` go to the outermost
    constructor only (kafka-python's `min_version`/`max_version` of a request)."""
    known = cls._struct.fields
    args: dict[str, Any] = {}
    for name, value in values.items():
        field = known.get(name)
        if field is None:
            raise ValueError(f"{cls.__name__} has no field {name!r} (fields: {sorted(known)})")
        if value is not None and field.is_struct():
            value = build(field.data_class, value)
        elif value is not None and field.is_struct_array():
            value = [build(field.data_class, v) for v in value]
        args[name] = value
    return cls(**args, **kwargs)


def fields(message: Any) -> dict[str, Any]:
    """A decoded message as a dict of the fields its version has (structs as dicts), raw
    values (bytes stay bytes)."""
    return dict(message.to_dict(json=False))
