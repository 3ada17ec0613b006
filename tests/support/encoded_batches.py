"""Batches of input records made in plain values, encoded as the source would hand them over."""

from __future__ import annotations

from typing import Any

from kstream.records import Record


def encoded(batches: list[list[Record]], key_serde: Any, value_serde: Any) -> list[list[Record]]:
    """`batches` with every key and value turned into bytes by the serdes; the rest kept."""
    return [
        [
            Record(
                key_serde.to_bytes(r.key),
                value_serde.to_bytes(r.value),
                r.timestamp,
                r.headers,
                r.topic,
                r.partition,
                r.offset,
            )
            for r in batch
        ]
        for batch in batches
    ]
