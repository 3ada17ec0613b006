"""Standby copies on Apache Kafka, seen from queries and metrics: two in-process instances of a
word count with `num_standby_replicas=1`, each running one of the two tasks and keeping the
other's standby.

A key's count is answered by the instance running its task, and by the other one only when
the query allows stale reads (Kafka's `enableStaleStores`); `kstream_standby_lag_records` has a
series for the standby's store partition, which reaches 0 once the standby has applied every
committed changelog record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from support.groups import fast_group
from support.waiting import wait_for_app

from e2e.support import create_topics, produce, require_kafka
from kstream.dsl import StreamBuilder
from kstream.runtime import App

PARTITIONS = 2
WORDS = [f"w{i:02d}" for i in range(20)]


def word_count(src: str, out: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="long").group_by_key().count(
        store="counts"
    ).to_stream().to(out, key_serde="string", value_serde="long")
    return b


def standby_lag(app: App) -> dict[tuple[str, str], float]:
    """`kstream_standby_lag_records` as the app's /metrics exposes it."""
    text = app.metrics.render().decode()
    return {
        (s.labels["store"], s.labels["partition"]): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "kstream_standby_lag_records"
        for s in fam.samples
    }


def test_stale_reads_and_the_lag_metric_on_two_instances(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    src, out, app_id = unique_name("in"), unique_name("out"), unique_name("stale")
    create_topics(bs, PARTITIONS, src, out)

    def app(name: str) -> App:
        return App(
            word_count(src, out),
            app_id,
            bs,
            config=fast_group({"state_dir": str(tmp_path / name), "num_standby_replicas": 1}),
        )

    a, b = app("a"), app("b")
    try:
        a.start()
        wait_for_app("a to run", lambda: len(a.assigned_partitions()) == PARTITIONS, a, 60)
        b.start()
        both = (a, b)
        wait_for_app(
            "each instance to run one task and keep the other's standby",
            lambda: all(
                len(x.assigned_partitions()) == 1 and len(x.standby_partitions()) == 1 for x in both
            ),
            b,
            90,
        )
        records = [(w, 1, 1_700_000_000_000 + i) for i, w in enumerate(WORDS * 5)]
        produce(bs, src, records)
        want = Counter(w for w, _, _ in records)

        def answers(x: App, stale: bool) -> dict[str, Any]:
            return {w: x.query("counts", w, enable_stale_stores=stale) for w in WORDS}

        wait_for_app(
            "every count on both instances with stale reads",
            lambda: all(answers(x, True) == want for x in both),
            b,
            60,
        )
        active_a, active_b = answers(a, False), answers(b, False)
        for w in WORDS:
            # one instance runs the key's task; the other has it only in its standby
            assert (active_a[w] is None) != (active_b[w] is None), w
            assert (active_a[w] or active_b[w]) == want[w]
        for x in both:
            [(store, partition)] = standby_lag(x)
            assert store == "counts"
            assert x.standby_partitions() != x.assigned_partitions()  # never with its active
            wait_for_app(
                "the standby's lag to reach 0",
                lambda x=x, p=partition: standby_lag(x) == {("counts", p): 0.0},
                x,
                30,
            )
            assert x.metrics.standby_records > 0
    finally:
        b.close()
        a.close()
