"""Spark's Python worker daemon (`pyspark.daemon`) with two costs of long streaming jobs removed.

`kstream.spark.spark_session` makes it the daemon (`spark.python.daemon.module`) unless the
job sets its own. Every micro-batch runs several tasks in each executor's Python workers, and
for each of them the stock daemon pays:

- **a full garbage collection** after the task (`gc.collect()` in its worker loop). A worker
  holding pandas, pyarrow, pyspark and kstream scans all of their objects each time: in a
  windowed count on local[2], 4 of 58 CPU-seconds of the Python workers. Here it collects the
  young generations only; Python's own collector still runs full collections as it goes.
- **compiling pyspark from source.** Spark puts `<SPARK_HOME>/python/lib/pyspark.zip` first on
  the workers' path; Python keeps no bytecode for zip imports, so every forked worker compiles
  each pyspark module it imports. When the same pyspark is installed as a package (a pip
  install: SPARK_HOME is the package's own directory), its zips move behind it, so the
  package's cached bytecode is used. The modules are the same files.

And it imports, once and before it forks any worker, what every worker imports at its first
task (`PRELOAD`: pyspark's worker, pandas, pyarrow and kstream's task modules), so that each
forked worker inherits them instead of importing them again (in a windowed count on local[2],
about 0.8 CPU-seconds less per worker, for 0.4 more in the daemon, once). pyspark's own
daemon imports the worker module after the fork, because pandas and pyarrow start threads when
imported. Those threads are native pools
that survive a fork as the library intends: OpenBLAS (numpy) stops its pool in a fork handler
and restarts it in the child when needed; jemalloc (pyarrow's allocator) takes its locks
around the fork and leaves the child without its background purging thread, purging on
allocation instead. No Python thread, socket or Kafka client exists in the daemon when it
forks: importing kstream's modules creates none. The preloaded objects are then frozen out of
the garbage collector's reach (`gc.freeze`), so no worker's collection walks them again.

Spark starts some Python processes itself rather than through this daemon (each query's
streaming-source runner and state-processor driver worker, the data source planners' stock
`pyspark.daemon`); `kstream.spark.worker_site` moves the zips behind the package for those.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Any

# What a worker imports at its first task, preloaded by the daemon before it forks: pyspark's
# worker loop and Arrow serializers, the state-processor client, pandas and pyarrow, and the
# kstream modules the source, task and sink functions live in.
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.streaming.stateful_processor_api_client",
    "pandas",
    "pyarrow",
    "kstream.spark.source",
    "kstream.spark.tasks",
    "kstream.spark.task_processor",
    "kstream.spark.sink",
)


def installed_pyspark_first(path: list[str]) -> list[str]:
    """`path` with the zips inside an importable pyspark package (Spark's `python/lib`
    copies of pyspark and py4j: the very same modules) moved to its end."""
    package = next(
        (
            os.path.join(entry or os.getcwd(), "pyspark")
            for entry in path
            if not entry.endswith((".zip", ".jar"))
            and os.path.isfile(os.path.join(entry or os.getcwd(), "pyspark", "__init__.py"))
        ),
        None,
    )
    if package is None:
        return path
    lib = os.path.join(package, "python", "lib") + os.sep
    zips = [p for p in path if p.startswith(lib) and p.endswith(".zip")]
    return [p for p in path if p not in zips] + zips


class _YoungCollections:
    """Stands in for the `gc` module inside `pyspark.daemon`: `collect()` collects the young
    generations only (everything else is the real module)."""

    def collect(self, generation: int = 1) -> int:
        return gc.collect(min(generation, 1))

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import `modules` for the workers to inherit; returns those that imported.

    One that fails is left for the worker, which imports it at its task and reports the error
    where it belongs (a job without pandas, say, may never need it)."""
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # the worker's own import reports it
            continue
        loaded.append(name)
    return loaded


def main() -> None:
    sys.path[:] = installed_pyspark_first(sys.path)
    import pyspark.daemon as daemon

    # the worker module Spark names (pyspark.worker, or a planner's) as the fork would import it
    named = tuple(a for a in sys.argv[1:2] if a.startswith("pyspark"))
    preload(named + PRELOAD)
    gc.freeze()
    daemon.gc = _YoungCollections()  # type: ignore[assignment]
    daemon.manager()


if __name__ == "__main__":
    main()
