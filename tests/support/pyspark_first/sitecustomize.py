"""For the processes the tests start (on `PYTHONPATH` through `tests/conftest.py`): Spark's
Python workers import pyspark from the installed package, not from the copy Spark puts first
on their path (`<SPARK_HOME>/python/lib/pyspark.zip`, and py4j's zip beside it).

Python keeps no compiled code for modules it imports from a zip file, so every worker process
compiled pyspark from source again: about 0.6 s of CPU per worker. `kstream.spark.daemon` fixes
this for the workers its daemon forks, in every job; this covers the processes Spark starts by
itself as well (each query's source runner and state-processor driver worker). The daemon's
`installed_pyspark_first` is loaded from its file, so that every process does not import the
kstream package first. Python runs this module at start-up, after `site` has set the path.
"""

from __future__ import annotations

import importlib.util
import os
import sys

_DAEMON = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "kstream", "spark", "daemon.py"
)


def _spark_zips_last() -> None:
    spec = importlib.util.spec_from_file_location("_kstream_spark_daemon", _DAEMON)
    if spec is None or spec.loader is None:
        return
    daemon = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(daemon)
    sys.path[:] = daemon.installed_pyspark_first(sys.path)


_spark_zips_last()
