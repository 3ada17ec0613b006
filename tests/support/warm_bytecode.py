"""Compile, once, the modules every process of a test run imports (`make test` runs this first).

The install skips byte-compiling (most of pyspark and pandas is never imported), so Python
compiles a module on its first import and keeps the bytecode. In a fresh clone that first
import happens in a dozen processes at once: six pytest-xdist workers collect every test module
(pytest rewrites and compiles each), and each Spark session forks Python workers that import
pandas, pyarrow and pyspark. Each of them compiled the same modules: about 3 s of CPU for
Spark's Python side and 4 s for the collection, per process. Here one process does it.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

# what Spark's Python workers (daemons and their forks, each query's source runner and
# state-processor driver worker) and kstream's Spark code import
SPARK_SIDE = (
    "pandas",
    "pyarrow",
    "pyspark.daemon",
    "pyspark.worker",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "kstream.spark.runner",
    "kstream.spark.task_processor",
)


def main() -> int:
    sys.path.insert(0, os.getcwd())  # as under `python -m pytest`: the examples, the tests
    for name in SPARK_SIDE:
        try:
            importlib.import_module(name)
        except ImportError:  # no spark extra: the Spark tests will say so
            pass
    return int(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"]) or 0)


if __name__ == "__main__":
    sys.exit(main())
