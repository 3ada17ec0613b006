"""A dead-letter topic that exists is used as it is, on the native engine (issue 46).

Pre-created with 2 partitions (as teams without topic auto-creation do), the app writes its one
dead letter there, on the partition the failed record's key gives; missing, the app creates it
with one partition. The case and its checks: `support.dead_letter_topic`; the Spark runner's
twin: `tests/spark/test_existing_dlq_topic_on_spark.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from e2e.support import create_topics
from support.committed_reader import read_committed
from support.dead_letter_topic import (
    GOOD,
    bad_input,
    check_dead_letter_topic,
    check_outputs,
    topology,
)
from support.groups import fast_group
from support.waiting import wait_for_app

from kstream.errors import TopicError
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.producer import Producer
from kstream.runtime import App


@pytest.mark.parametrize("dlq_partitions", [2, None], ids=["created-with-2", "missing"])
def test_dlq_topic_is_used_as_it_is(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    dlq_partitions: int | None,
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out, dlq = unique_name("in"), unique_name("out"), unique_name("dlq")
    create_topics(bs, 1, inp, out)
    if dlq_partitions is not None:
        create_topics(bs, dlq_partitions, dlq)
    with Producer(bs) as p:
        for k, v, ts, headers in bad_input():
            p.produce(inp, v, k, timestamp=ts, headers=headers)
        p.flush()
    config = {"state_dir": str(tmp_path), "on_deserialization_error": "dlq", "dlq_topic": dlq}
    app = App(topology(inp, out), unique_name("app"), bs, "exactly_once_v2", fast_group(config))
    app.start()
    try:
        wait_for_app(
            "the outputs and the dead letter",
            lambda: len(read_committed(bs, out)) >= GOOD and len(read_committed(bs, dlq)) >= 1,
            app,
            timeout=180,
            poll=0.5,
        )
    finally:
        app.close()
    assert app.error is None
    check_outputs(bs, out)
    check_dead_letter_topic(bs, dlq, inp, dlq_partitions or 1)


def test_a_dlq_topic_that_cannot_be_made_is_named(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Missing, and refused by the broker (its name collides with an existing topic's: Kafka
    treats '.' and '_' alike): the app does not start, and the error names the topic."""
    bs = kafka_broker.bootstrap_servers
    inp, out, dlq = unique_name("in"), unique_name("out"), unique_name("dlq_x")
    create_topics(bs, 1, inp, out, dlq.replace("_", "."))
    config = {"state_dir": str(tmp_path), "on_deserialization_error": "dlq", "dlq_topic": dlq}
    app = App(topology(inp, out), unique_name("app"), bs, config=fast_group(config))
    with pytest.raises(TopicError, match=f"dlq_topic {dlq!r} cannot be used: .*collides"):
        app.start()
    app.close()
