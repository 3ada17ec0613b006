"""Run at the start of every Python process Spark starts for a session kstream started (its
directory is on the `PYTHONPATH` `kstream.spark.session` gives Spark; Python imports a
`sitecustomize` module once `site` has set the path): pyspark is imported from the installed
package, not from the copy Spark puts first on the path (`<SPARK_HOME>/python/lib/pyspark.zip`,
and py4j's zip beside it).

Python keeps no compiled code for modules imported from a zip file, so every such process
compiled pyspark from source: about 0.5 s of CPU each. `kstream.spark.daemon` fixes this for
the workers its daemon forks; this covers the processes Spark starts by itself, at every
query's start (the streaming source's runner, the state processor's driver worker) and once
per session (the stock `pyspark.daemon` of the data source planners). The daemon's
`installed_pyspark_first` is loaded from its file, so that these processes do not import the
kstream package first. A `sitecustomize` further on the path (the environment's own) is then
run as Python would have run it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_DAEMON = os.path.join(os.path.dirname(_HERE), "daemon.py")


def _spark_zips_last() -> None:
    spec = importlib.util.spec_from_file_location("_kstream_spark_daemon", _DAEMON)
    if spec is None or spec.loader is None:
        return
    daemon = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(daemon)
    sys.path[:] = daemon.installed_pyspark_first(sys.path)


def _next_sitecustomize() -> None:
    """Run the `sitecustomize` this one shadows, if any, as `site` would have."""
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_spark_zips_last()
_next_sitecustomize()
