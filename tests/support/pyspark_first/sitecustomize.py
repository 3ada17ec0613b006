"""For the processes the tests start (on `PYTHONPATH` through `tests/conftest.py`): Spark's
Python workers import pyspark from the installed package, not from the copy Spark puts first
on their path (`<SPARK_HOME>/python/lib/pyspark.zip`, and py4j's zip beside it).

Python keeps no compiled code for modules it imports from a zip file, so every worker process
compiled pyspark from source again: about 0.6 s of CPU per worker, and a test run starts
hundreds of them (each query's source runner and state-processor driver worker, each daemon's
workers). Only zips inside the importable pyspark package move, to the end of the path: they
hold the very same modules. Python runs this module at start-up, after `site` has set the path.
"""

from __future__ import annotations

import os
import sys


def _installed_pyspark() -> str | None:
    for entry in sys.path:
        if entry.endswith((".zip", ".jar")):
            continue
        package = os.path.join(entry or os.getcwd(), "pyspark")
        if os.path.isfile(os.path.join(package, "__init__.py")):
            return package
    return None


def _spark_zips_last() -> None:
    package = _installed_pyspark()
    if package is None:
        return
    lib = os.path.join(package, "python", "lib") + os.sep
    zips = [p for p in sys.path if p.startswith(lib) and p.endswith(".zip")]
    for p in zips:
        sys.path.remove(p)
    sys.path.extend(zips)


_spark_zips_last()
