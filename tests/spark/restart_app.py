"""Runs word count on Spark until killed: the process the restart test kills mid-stream."""

from __future__ import annotations

import sys

from examples.word_count import build_topology
from kstream.spark import run, spark_session


def main() -> None:
    bootstrap, src, out, checkpoint, app_id = sys.argv[1:6]
    spark = spark_session(conf={"spark.driver.memory": "768m"})
    run(
        build_topology(src, out),
        app_id,
        bootstrap,
        checkpoint_dir=checkpoint,
        trigger="processingTime=100ms",
        spark=spark,
        max_records_per_batch=40,
    )


if __name__ == "__main__":
    main()
