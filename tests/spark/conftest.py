"""One SparkSession (local[2]) for every Spark test: starting the JVM costs seconds."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# `examples` lives at the repository root: importable however pytest was started
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


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
