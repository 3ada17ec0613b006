"""Four records through a secured listener and back: the one check the TLS and SASL tests
share (kstream's own Producer and Consumer, every partition of a two-partition topic)."""

from __future__ import annotations

import time
from typing import Any

from kstream.kafka import Consumer, Producer


def produce_and_read_back(bootstrap: str, topic: str, kafka: dict[str, Any]) -> list[bytes]:
    """Produce v0..v3 to `topic` (two partitions) with `kafka`'s settings; the values read
    back within 20 s, sorted."""
    p = Producer(bootstrap, kafka=kafka)
    for i in range(4):
        p.produce(topic, f"v{i}".encode(), f"k{i}".encode())
    p.flush()
    c = Consumer(bootstrap, kafka=kafka)
    c.assign([(topic, 0, 0), (topic, 1, 0)])
    got: list[bytes] = []
    end = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < end:
        got.extend(m.value() or b"" for m in c.consume_batch(100, 0.2))
    c.close()
    return sorted(got)
