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
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any


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


def main() -> None:
    sys.path[:] = installed_pyspark_first(sys.path)
    import pyspark.daemon as daemon

    daemon.gc = _YoungCollections()  # type: ignore[assignment]
    daemon.manager()


if __name__ == "__main__":
    main()
