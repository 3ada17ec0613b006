"""`kstream.spark.daemon`: the Python worker daemon the sessions use."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from kstream.spark.daemon import _YoungCollections, installed_pyspark_first


def _spark_home(root: Path, with_package: bool) -> tuple[str, str, str]:
    """A site directory whose pyspark package ships Spark's zips, as a pip install does."""
    site = root / "site"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    if with_package:
        (site / "pyspark" / "__init__.py").write_text("")
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"")
    return str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(site)


def test_spark_zips_move_behind_the_installed_package_they_came_with(tmp_path: Path) -> None:
    pyspark_zip, py4j_zip, site = _spark_home(tmp_path, with_package=True)
    path = ["/app", pyspark_zip, py4j_zip, "/usr/lib/python3.11", site]
    assert installed_pyspark_first(path) == [
        "/app",
        "/usr/lib/python3.11",
        site,
        pyspark_zip,
        py4j_zip,
    ]


def test_zips_of_a_spark_home_without_that_package_stay_first(tmp_path: Path) -> None:
    pyspark_zip, py4j_zip, site = _spark_home(tmp_path, with_package=False)
    path = [pyspark_zip, py4j_zip, site]
    assert installed_pyspark_first(path) == path
    assert installed_pyspark_first(["/a", "/b"]) == ["/a", "/b"]


def test_the_daemon_collects_young_generations_and_is_gc_otherwise() -> None:
    stand_in = _YoungCollections()
    assert isinstance(stand_in.collect(), int)
    assert stand_in.get_threshold() == gc.get_threshold()


def test_spark_workers_run_under_kstreams_daemon(spark: Any) -> None:
    def probe(frames: Any) -> Any:
        import sys

        import pandas as pd

        daemon = sys.modules.get("pyspark.daemon")
        for _ in frames:
            pass
        yield pd.DataFrame(
            {
                "main": [getattr(sys.modules["__main__"].__spec__, "name", "")],
                "gc": [type(getattr(daemon, "gc", None)).__name__],
                "pyspark": [sys.modules["pyspark"].__file__],
            }
        )

    rows = spark.range(2).mapInPandas(probe, "main string, gc string, pyspark string").collect()
    assert {r.main for r in rows} == {"kstream.spark.daemon"}
    assert {r.gc for r in rows} == {"_YoungCollections"}
    assert not any(".zip" in r.pyspark for r in rows)
