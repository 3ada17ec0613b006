"""An eager rebalance on Apache Kafka resumes the tasks an instance keeps from the stores they
had (Kafka Streams' suspended tasks), instead of rebuilding them from their changelogs.

A topology that reads several topics (a stream-table join, then a count behind a repartition
topic) rebalances eagerly under the classic protocol (kstream.runtime.rebalance): every task is
revoked when a second instance joins, and most come back to the first. They resume with the
very store objects they had, having read nothing more from their changelogs, and a plain
read_committed reader finds every join result and every running count once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.incremental_worker import app
from e2e.support import produce, require_kafka
from e2e.test_cooperative_rebalance import _manager, _started, _tasks, _wait
from e2e.test_incremental_rebalance import PARTITIONS, _created, _order, _verdicts
from kstream.runtime import App, AppState

FIRST, SECOND = 3_000, 2_000
"""Orders before the second instance joins, and after."""


def _orders(bs: str, topic: str, start: int, n: int) -> None:
    produce(bs, topic, [_order(i) for i in range(start, start + n)])


def _count_stores(a: App) -> dict[tuple[int, int], Any]:
    """The count store of each of `a`'s count tasks (sub-topology 1), as restored."""
    return {
        key: next(s for s in rt.restored_stores if s.name == "per-region")
        for key, rt in _tasks(a).items()
        if key[0] == 1
    }


@pytest.mark.timeout(300)
def test_an_eager_rebalance_resumes_the_kept_tasks_from_their_stores(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = _created(bs, unique_name)
    _orders(bs, topics[0], 0, FIRST)
    app_id = unique_name("eager-resume")
    # cooperative (the classic default): a multi-topic topology rebalances eagerly
    a = app(bs, app_id, topics, str(tmp_path / "a"), rebalance_protocol="cooperative")
    b = app(bs, app_id, topics, str(tmp_path / "b"), rebalance_protocol="cooperative")
    with _started(a):
        _wait(lambda: a.processed >= 2 * FIRST, "a to join and count the first orders")
        assert _manager(a).cooperative is False  # eager, as the log says
        before = _count_stores(a)
        assert len(before) == PARTITIONS
        created = _manager(a).tasks_created
        with _started(b):
            _wait(
                lambda: (
                    a.state == AppState.RUNNING
                    and b.state == AppState.RUNNING
                    and len(_tasks(a)) + len(_tasks(b)) == 2 * PARTITIONS
                    and bool(_tasks(b))
                ),
                "the two instances to share the tasks",
            )
            after = _count_stores(a)
            kept = sorted(set(before) & set(after))
            assert kept, (sorted(before), sorted(after))
            # every task was revoked and created again; those a kept resumed from their stores
            assert _manager(a).tasks_created - created == len(_tasks(a))
            assert _manager(a).tasks_resumed >= len(kept)
            assert all(after[k] is before[k] for k in kept)
            _orders(bs, topics[0], FIRST, SECOND)
            verdicts = _verdicts(bs, topics, FIRST + SECOND)
    print(f"a kept {kept}; " + "; ".join(str(v) for v in verdicts))
    assert all(v.exact for v in verdicts), verdicts
