"""bench/spark.py's `pipeline_batch_p50`: the time a batch's records take through every query
of a Spark run, from each query's (trigger seconds, records) per micro-batch, its first batch
left out."""

from __future__ import annotations

import os
import statistics
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from spark import pipeline_batch_p50  # noqa: E402


def test_two_queries_add_their_own_medians() -> None:
    rekey = [(5.0, 100), (0.6, 100), (0.7, 100), (0.5, 100)]  # first batch starts the workers
    count = [(6.0, 100), (1.0, 100), (1.4, 100), (1.2, 100), (9.0, 40)]
    assert pipeline_batch_p50([rekey, count]) == 1.9  # 0.6 + 1.3
    # the old figure, one median over both kinds of batch, is neither query's nor their sum
    mixed = statistics.median(t for q in (rekey, count) for t, _ in q[1:])
    assert mixed not in (0.6, 1.3, 1.9)


def test_one_query_is_its_own_median() -> None:
    assert pipeline_batch_p50([[(4.0, 10), (0.25, 10), (0.75, 10)]]) == 0.5


def test_a_query_of_one_batch_counts_that_batch_and_no_batch_gives_none() -> None:
    assert pipeline_batch_p50([[(2.0, 10)], [(4.0, 10), (1.0, 10)]]) == 3.0
    assert pipeline_batch_p50([[], [(4.0, 10), (1.0, 10)]]) == 1.0
    assert pipeline_batch_p50([]) is None
    assert pipeline_batch_p50([[]]) is None
