"""A collector for a task's sinks in unit tests: what they sent, headers included."""

from __future__ import annotations

from typing import Any


class Sent:
    """Every record the task's sinks sent, as (topic, key bytes, value bytes, timestamp,
    headers list), on one partition per topic."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Any,
        partition: int | None,
    ) -> None:
        self.records.append((topic, key, value, timestamp, list(headers or ())))

    def partitions_for(self, topic: str) -> int:
        return 1
