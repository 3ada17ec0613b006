"""A SparkSession sized for a small machine, with the Kafka source registered.

The Python workers Spark starts must run this interpreter and import the user's modules:
functions in a topology are pickled by reference, so the workers need the same `sys.path`.
Both go through the environment, which only takes effect for a JVM started after it is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

STATE_STORE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass": STATE_STORE_PROVIDER,
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "false",
    "spark.python.worker.reuse": "true",
}


def spark_session(
    master: str = "local[2]",
    app_name: str = "kstream",
    conf: Mapping[str, Any] | None = None,
) -> Any:
    """Get or create a SparkSession with `DEFAULTS` overridden by `conf`."""
    from pyspark.sql import SparkSession

    prepare_environment()
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in {**DEFAULTS, **{k: str(v) for k, v in (conf or {}).items()}}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def prepare_environment() -> None:
    """Point Spark's Python workers at this interpreter and this `sys.path`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    cwd = os.getcwd()
    if cwd not in paths:
        paths.insert(0, cwd)
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    merged = existing + [p for p in paths if p not in existing]
    os.environ["PYTHONPATH"] = os.pathsep.join(merged)


def register(spark: Any) -> None:
    """Make `format("kstream_kafka")` available in `spark`."""
    from kstream.spark.source import KafkaSource

    spark.dataSource.register(KafkaSource)
