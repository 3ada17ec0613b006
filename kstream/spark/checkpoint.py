"""A query's checkpoint: what a query stopped during its very first batch leaves, cleared; and
the file manager of a checkpoint on the local disk.

Spark writes a checkpoint's log entries atomically: a hidden temporary file (`.0.<uuid>.tmp`,
with its `..0.<uuid>.tmp.crc`), renamed when complete. A query stopped or failed while writing
batch 0's entry leaves the temporary file behind, and Spark then refuses to start the query
again: with no batch logged it checks the checkpoint is new, finds the file, and fails with
STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY. That happens to the other queries of an app when one
query fails and the app restarts (`runner.run`), or to any query under SIGTERM at that moment.

Such a checkpoint never logged a batch, so nothing was read or written under it: its temporary
files are removed before the query starts. A checkpoint with a logged batch is left as it is
(Spark resumes from it and ignores temporary files).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

LOGS = ("offsets", "commits")


def is_unfinished_write(name: str) -> bool:
    """Whether `name` is a temporary file of Spark's atomic checkpoint writes."""
    return name.startswith(".") and (name.endswith(".tmp") or name.endswith(".tmp.crc"))


def _listings(spark: Any, location: str) -> tuple[Any, dict[str, list[Any]]]:
    """The file system of `location` and the paths in its logs (any file system Spark's Hadoop
    configuration reaches)."""
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(location)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    listings = {}
    for name in LOGS:
        d = jvm.org.apache.hadoop.fs.Path(root, name)
        listings[name] = [s.getPath() for s in fs.listStatus(d)] if fs.exists(d) else []
    return fs, listings


def has_logged_batch(spark: Any, location: str) -> bool:
    """Whether a query with its checkpoint at `location` ever logged a batch."""
    return any(p.getName().isdigit() for p in _listings(spark, location)[1]["offsets"])


def clear_unfinished_start(spark: Any, location: str) -> list[str]:
    """Remove the temporary files in `location`'s logs when no batch was ever logged there;
    the paths removed."""
    fs, listings = _listings(spark, location)
    if any(p.getName().isdigit() for p in listings["offsets"]):
        return []
    removed = []
    for paths in listings.values():
        for p in paths:
            if is_unfinished_write(p.getName()) and fs.delete(p, False):
                removed.append(p.toString())
    if removed:
        log.warning(
            "checkpoint %s: no batch was logged; removed what an interrupted first batch left: %s",
            location,
            ", ".join(removed),
        )
    return removed


FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)
"""Spark's checkpoint file manager over Hadoop's `FileSystem` API (its package moved in 4.x)."""


def use_file_system_manager(spark: Any, location: str) -> str | None:
    """For a checkpoint on the local disk, Spark's `FileSystem`-based checkpoint file manager
    in place of its default (`FileContext`-based), unless the session names one; the class
    set, or None.

    Without Hadoop's native library, the default's every atomic write (the offset and commit
    logs, each state store's files: dozens a batch) renames through `FileContext`, which asks
    for the link status of both paths by running `readlink` in a new process, twice a rename
    (a JFR recording of a windowed count on local[2]: 656 `readlink` processes started by the
    JVM in 20 batches). `FileSystem.rename` on the local disk is the `rename(2)` the other one
    ends in, atomic as well; the offset and commit logs' writes went from 31-35 to 9-11 ms a
    batch (bench/spark.py, 25,000-record batches). Other file systems keep Spark's default."""
    if urlparse(location).scheme not in ("", "file"):
        return None
    if spark.conf.get(FILE_MANAGER_KEY, None):
        return None
    jvm = spark.sparkContext._jvm
    for name in FILE_SYSTEM_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:
            continue
        spark.conf.set(FILE_MANAGER_KEY, name)
        return name
    return None
