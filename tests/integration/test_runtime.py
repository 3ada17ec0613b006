"""App start-up and lifecycle against the embedded broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.groups import fast_group

from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError, CoPartitioningError, TopologyError
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App, AppState


def _word_count(src: str, dst: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").flat_map_values(str.split).group_by(
        lambda _k, w: w, key_serde="string"
    ).count(store="counts").to_stream().to(dst, key_serde="string", value_serde="long")
    return b


def test_unknown_config_key_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match="batch_max_recs"):
        App(_word_count("a", "b"), "x", "127.0.0.1:1", config={"batch_max_recs": 1})
    with pytest.raises(ConfigError, match="processing_guarantee"):
        App(_word_count("a", "b"), "x", "127.0.0.1:1", "exactly_twice")


def test_missing_source_topic_fails_at_start(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src = unique_name("missing")
    app = App(
        _word_count(src, "out"),
        unique_name("app"),
        kafka_broker.bootstrap_servers,
        config=fast_group({"state_dir": str(tmp_path)}),
    )
    with pytest.raises(TopologyError, match=src):
        app.start()
    assert app.state == AppState.ERROR


def test_copartitioning_mismatch_fails_at_start(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    left, right = unique_name("left"), unique_name("right")
    admin = Admin(bs)
    admin.create_topic(left, 2)
    admin.create_topic(right, 3)
    b = StreamBuilder()
    table = b.table(right, key_serde="string", value_serde="string", store="t")
    b.stream(left, key_serde="string", value_serde="string").join(table, lambda v, t: v).to("o")
    app = App(b, unique_name("app"), bs, config=fast_group({"state_dir": str(tmp_path)}))
    with pytest.raises(CoPartitioningError, match=f"{left}=2"):
        app.start()


def test_lifecycle_states_and_internal_topics(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    src, dst, app_id = unique_name("lines"), unique_name("counts"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 3)
    admin.create_topic(dst, 3)
    app = App(_word_count(src, dst), app_id, bs, config=fast_group({"state_dir": str(tmp_path)}))
    seen: list[tuple[AppState, AppState]] = []
    app.on_state_change(lambda new, old: seen.append((old, new)))
    assert app.state == AppState.CREATED
    app.start()
    assert app.wait_for(AppState.RUNNING, timeout=60)
    assert app.ready
    assert app.close(timeout=30)
    assert app.state == AppState.NOT_RUNNING
    states = [seen[0][0]] + [new for _, new in seen]
    assert states[:3] == [AppState.CREATED, AppState.REBALANCING, AppState.RUNNING]
    assert states[-2:] == [AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING]
    counts = admin.partition_counts([f"{app_id}-counts-changelog", f"{app_id}-counts-repartition"])
    assert counts == {f"{app_id}-counts-changelog": 3, f"{app_id}-counts-repartition": 3}
    desc = admin.describe_topic(f"{app_id}-counts-changelog")
    assert desc.config.get("cleanup.policy") == "compact"


def test_the_runtime_feeds_its_metrics(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.kafka.producer import Producer

    bs = kafka_broker.bootstrap_servers
    src, dst = unique_name("lines"), unique_name("counts")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    p = Producer(bs)
    for i in range(40):
        p.produce(src, b"a b", key=b"k%d" % (i % 4))
    p.flush()
    app = App(
        _word_count(src, dst),
        unique_name("app"),
        bs,
        # store operations are metrics of the debug recording level
        config=fast_group({"state_dir": str(tmp_path), "metrics_recording_level": "debug"}),
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        m = app.metrics

        def counted() -> int:
            return sum(n for (store, _), n in m.store_ops.items() if store == "counts")

        # the 40 lines, then their 80 words through the repartition topic (a loaded machine
        # may still be on the lines when the first commit is counted)
        for _ in range(300):
            if m.processed_total >= 120 and m.txn_committed > 0 and m.lag and counted() > 0:
                break
            app.wait_for(AppState.ERROR, timeout=0.1)
        assert m.processed_total >= 120  # the input, plus the repartitioned words
        assert sum(n for (t, _), n in m.consumed.items() if t == src) == 40
        assert m.txn_committed > 0
        assert m.rebalances_total >= 1
        assert m.state == "RUNNING"
        assert {tp for tp in m.assigned if tp[0] == src} == {(src, 0), (src, 1)}
        assert counted() > 0
        assert all(lag >= 0 for lag in m.lag.values())
    finally:
        app.close()
    assert app.metrics.state == "NOT_RUNNING"


@pytest.mark.parametrize("gc_pause", [True, False])
def test_batches_run_with_the_cyclic_gc_paused_unless_opted_out(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    gc_pause: bool,
) -> None:
    import gc

    from kstream.kafka.producer import Producer

    bs = kafka_broker.bootstrap_servers
    src, dst = unique_name("in"), unique_name("out")
    Admin(bs).create_topic(src, 2)
    Admin(bs).create_topic(dst, 2)
    p = Producer(bs)
    for i in range(30):
        p.produce(src, b"v", key=b"k%d" % i)
    p.flush()
    seen: list[bool] = []
    b = StreamBuilder()
    b.stream(src).peek(lambda _k, _v: seen.append(gc.isenabled())).to(dst)
    app = App(
        b,
        unique_name("app"),
        bs,
        config=fast_group({"state_dir": str(tmp_path), "gc_pause": gc_pause}),
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        for _ in range(300):
            if len(seen) >= 30:
                break
            app.wait_for(AppState.ERROR, timeout=0.1)
    finally:
        app.close()
    # during every batch the collector was off (or on, when opted out), and it is on again
    assert seen == [not gc_pause] * 30
    assert gc.isenabled()
