"""`client_config(role, settings)`: the part of one `kafka` settings dict a client role takes.

An app passes one `kafka` dict for every client it creates (the stream thread's consumer, the
producers, the admin client, the restore and instance-registry clients). librdkafka warns about
settings that belong to another role, so each client is given only its own and the shared ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["CONSUMER_ONLY", "PRODUCER_ONLY", "Role", "client_config"]

Role = Literal["producer", "consumer", "admin"]

#: Setting-name prefixes only a consumer understands.
CONSUMER_ONLY: tuple[str, ...] = (
    "group.",
    "enable.auto",
    "auto.",
    "isolation.",
    "session.",
    "heartbeat.",
    "max.poll",
    "partition.assignment",
    "fetch.",
    "enable.partition.eof",
)

#: Setting-name prefixes only a producer understands.
PRODUCER_ONLY: tuple[str, ...] = (
    "transactional.",
    "enable.idempotence",
    "acks",
    "linger.",
    "batch.",
    "compression.",
    "partitioner",
    "queue.buffering",
    "message.timeout",
    "delivery.",
    "retries",
)

_LEFT_OUT: dict[str, tuple[str, ...]] = {
    "producer": CONSUMER_ONLY,
    "consumer": PRODUCER_ONLY,
    "admin": CONSUMER_ONLY + PRODUCER_ONLY,
}


def client_config(role: Role, settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The librdkafka `settings` a client of `role` takes: all but the other roles' own."""
    try:
        left_out = _LEFT_OUT[role]
    except KeyError:
        raise ValueError(f"client role must be producer, consumer or admin, got {role!r}") from None
    return {k: v for k, v in (settings or {}).items() if not k.startswith(left_out)}
