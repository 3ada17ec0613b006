"""A store that fails (its server gone past `retry_for`) stops the task under every policy.

`on_processing_error="skip"` and `"dlq"` are for records the topology cannot handle. A store
that does not answer is not the record's fault: skipping would drop every record of the outage
from the results (and dead-lettering would blame each of them), so the error goes past the
policy and the app stops, as Kafka Streams stops on a state store failure.
"""

from __future__ import annotations

import pytest

from kstream.dsl import StreamBuilder
from kstream.errors import RecordError, StoreError
from kstream.kafka.broker import free_port
from kstream.records import Record
from kstream.testing import TopologyTestDriver


@pytest.mark.parametrize("policy", ["skip", "dlq"])
def test_a_store_that_does_not_answer_is_not_skipped_as_a_bad_record(policy: str) -> None:
    closed = free_port()  # nothing listens: every Redis call fails until retry_for runs out
    b = StreamBuilder()
    (
        b.stream("in", key_serde="string", value_serde="string")
        .group_by_key()
        .count()
        .to_stream()
        .to("out")
    )
    handled: list[RecordError] = []

    def handler(err: RecordError, record: Record) -> None:
        handled.append(err)  # what a skip or dlq policy would do with the record

    with TopologyTestDriver(
        b.build(),
        default_backend=f"redis://127.0.0.1:{closed}/0?retry_for=0.3",
        error_handler=handler,
    ) as driver:
        source = driver.input_topic("in", key_serde="string", value_serde="string")
        with pytest.raises(StoreError, match=f"127.0.0.1:{closed}"):
            source.pipe("k", "v", timestamp=0)
    assert handled == [], f"{policy}: the store failure reached the record policy: {handled}"
