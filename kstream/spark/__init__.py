"""Run a kstream topology, unchanged, as Spark Structured Streaming queries.

`run(topology, app_id, bootstrap_servers, ...)` is the entry point (also behind
`kstreamd run --engine spark`). Needs the `spark` extra (pyspark 4, pyarrow, pandas, protobuf);
importing this package does not import pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kstream._lazy import lazy_exports

if TYPE_CHECKING:
    from kstream.spark.plan import TaskPlan, build_task_plan
    from kstream.spark.queries import TaskQueries
    from kstream.spark.runner import run, start
    from kstream.spark.session import spark_session

__all__ = [
    "TaskPlan",
    "TaskQueries",
    "build_task_plan",
    "run",
    "spark_session",
    "start",
]

_EXPORTS = {
    "TaskQueries": "kstream.spark.queries",
    "TaskPlan": "kstream.spark.plan",
    "build_task_plan": "kstream.spark.plan",
    "run": "kstream.spark.runner",
    "start": "kstream.spark.runner",
    "spark_session": "kstream.spark.session",
}


__getattr__ = lazy_exports(globals(), _EXPORTS)
