"""One SparkSession (local[2]) for every Spark test: starting the JVM costs seconds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/spark/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from kstream.spark import spark_session

    session = spark_session(conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
