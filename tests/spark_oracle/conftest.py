"""The Spark oracle lane's fixtures: one SparkSession (local[2]) and the Kafka Streams harness."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from oracle.harness import STAMP, Oracle, built


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/spark_oracle/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from kstream.spark import spark_session

    # the tests' JVM options (tests/conftest.py), with room for the code the lane's hundreds
    # of queries have compiled: at the default 48 MB the JIT stopped midway through a run
    options = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": f"{options} -XX:ReservedCodeCacheSize=256m",
    }
    session = spark_session(master="local[2]", conf=conf)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    """The running harness; built by `make oracle-harness`."""
    if not built():
        pytest.skip(f"the Kafka Streams oracle is not built ({STAMP}): run `make oracle-harness`")
    with Oracle.start() as harness:
        yield harness
