"""A dead-letter topic that exists is used as it is, on Spark (issue 46).

`kstream.spark.run` on local[2] over 50 good records and one that is not JSON, `dlq_topic`
pre-created with 2 partitions (as teams without topic auto-creation do): the 50 outputs, and
the one dead letter on the partition the failed record's key gives. The case and its checks:
`support.dead_letter_topic`; the native engine's twin, with the missing-topic case:
`tests/integration/test_existing_dlq_topic.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, produce_raw
from support.dead_letter_topic import bad_input, check_dead_letter_topic, check_outputs, topology

pytest.importorskip("pyspark")


def test_dlq_topic_created_with_2_partitions_is_used_as_it_is(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    inp, out, dlq = unique_name("in"), unique_name("out"), unique_name("dlq")
    create_topics(bs, {inp: 1, out: 1, dlq: 2})
    produce_raw(bs, inp, bad_input())
    config = {
        "on_deserialization_error": "dlq",
        "dlq_topic": dlq,
        "state_dir": str(tmp_path / "state"),
    }
    run(
        topology(inp, out),
        unique_name("spark"),
        bs,
        str(tmp_path / "checkpoint"),
        spark=spark,
        config=config,
    )
    check_outputs(bs, out)
    check_dead_letter_topic(bs, dlq, inp, 2)
