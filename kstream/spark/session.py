"""A SparkSession with the Kafka source registered, on whatever cluster the job was given.

The master comes from the launcher, as for any PySpark job: `spark-submit --master`,
`spark-defaults.conf`, `PYSPARK_SUBMIT_ARGS`, the `SPARK_MASTER` variable or an explicit
`master=`; only when none is set does the session run in-process (`local[2]`). Likewise
`DEFAULTS` fill in only keys the launcher left unset, so `--conf` on the command line wins.

The Python workers Spark starts must run this interpreter and import the user's modules:
functions in a topology are pickled by reference, so the workers need the same `sys.path`.
Their path also holds `WORKER_SITE`, whose `sitecustomize` has every Python process Spark
starts import pyspark from the installed package rather than from Spark's zip of it (no
compiling pyspark from source at every query's start). These go through the environment, which
only takes effect for a JVM started after it is set (on a cluster, the workers' own environment
or a shipped virtualenv provides them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from typing import Any

STATE_STORE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOCAL_MASTER = "local[2]"
# kstream.spark.worker_site: a directory holding only the workers' sitecustomize
WORKER_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_site")

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass": STATE_STORE_PROVIDER,
    # a commit writes the keys the batch changed, not a snapshot of the store's files
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "false",
    "spark.python.worker.reuse": "true",
    # the stock daemon without a full GC per task and pyspark compiled per worker
    "spark.python.daemon.module": "kstream.spark.daemon",
}


def spark_session(
    master: str | None = None,
    app_name: str = "kstream",
    conf: Mapping[str, Any] | None = None,
) -> Any:
    """Get or create a SparkSession: `DEFAULTS` under the launcher's settings under `conf`.

    An active session is returned as it is (with the source registered), since a running
    SparkContext cannot change its master.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        register(active)
        return active
    with worker_environment():
        return _new_session(master, app_name, conf)


def _new_session(master: str | None, app_name: str, conf: Mapping[str, Any] | None) -> Any:
    from pyspark.sql import SparkSession

    launched = launcher_settings()
    builder = SparkSession.builder.appName(app_name)
    chosen = master or os.environ.get("SPARK_MASTER") or None
    if chosen:
        builder = builder.master(chosen)
    elif "spark.master" not in launched:
        builder = builder.master(LOCAL_MASTER)
    for k, v in DEFAULTS.items():
        if k not in launched:
            builder = builder.config(k, v)
    for k, v in (conf or {}).items():
        builder = builder.config(k, str(v))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def launcher_settings() -> dict[str, str]:
    """The settings the launcher gives the driver, read without starting a JVM.

    Under `spark-submit` the JVM is already there and holds them; otherwise they are what
    `pyspark` will pass on: `spark-defaults.conf` and `PYSPARK_SUBMIT_ARGS`.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        from pyspark import SparkConf

        return dict(SparkConf().getAll())
    out: dict[str, str] = {}
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(
        os.environ.get("SPARK_HOME", ""), "conf"
    )
    defaults = os.path.join(conf_dir, "spark-defaults.conf")
    if os.path.isfile(defaults):
        with open(defaults, encoding="utf-8") as f:
            for line in f:
                parts = line.strip().split(None, 1)
                if len(parts) == 2 and not parts[0].startswith("#"):
                    out[parts[0]] = parts[1].strip()
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    for flag, value in itertools.pairwise(args):
        if flag == "--master":
            out["spark.master"] = value
        elif flag == "--conf" and "=" in value:
            k, _, v = value.partition("=")
            out[k] = v
    return out


def is_local(spark: Any) -> bool:
    """Whether `spark` runs its executors in this process's JVM."""
    return str(spark.sparkContext.master).startswith("local")


_WORKER_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")


@contextlib.contextmanager
def worker_environment() -> Iterator[None]:
    """`prepare_environment` while a session starts, then the process's environment back.

    Spark's JVM and the SparkContext read these variables when they start (the JVM passes its
    own environment to every Python worker it forks), so they need not outlive the start. Left
    in place, the driver's `sys.path` in `PYTHONPATH` reached every subprocess the application
    started afterwards (a `pip` among them, which then took a work tree for an installed
    package).
    """
    saved = {k: os.environ.get(k) for k in _WORKER_ENV}
    prepare_environment()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def prepare_environment() -> None:
    """Point Spark's Python workers at this interpreter and this `sys.path`, with
    `WORKER_SITE` after the entries `PYTHONPATH` already had: its `sitecustomize` is the one
    Python runs unless the user's `PYTHONPATH` brings their own, and it runs the one of the
    environment (site-packages) after it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    cwd = os.getcwd()
    if cwd not in paths:
        paths.insert(0, cwd)
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if WORKER_SITE not in existing:
        existing.append(WORKER_SITE)
    merged = existing + [p for p in paths if p not in existing]
    os.environ["PYTHONPATH"] = os.pathsep.join(merged)


def register(spark: Any) -> None:
    """Make `format("kstream_kafka")` available in `spark`."""
    from kstream.spark.source import KafkaSource

    spark.dataSource.register(KafkaSource)
