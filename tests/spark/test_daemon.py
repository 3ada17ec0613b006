"""`kstream.spark.daemon`: the Python worker daemon the sessions use."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kstream.spark.daemon import _YoungCollections, installed_pyspark_first, preload
from kstream.spark.session import WORKER_SITE, prepare_environment


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
                # nothing in this task imports kstream: the daemon did, before it forked
                "preloaded": ["kstream.spark.tasks" in sys.modules],
            }
        )

    schema = "main string, gc string, pyspark string, preloaded boolean"
    rows = spark.range(2).mapInPandas(probe, schema).collect()
    assert {r.main for r in rows} == {"kstream.spark.daemon"}
    assert {r.gc for r in rows} == {"_YoungCollections"}
    assert not any(".zip" in r.pyspark for r in rows)
    assert all(r.preloaded for r in rows)


def test_preload_imports_what_imports_and_leaves_the_rest_to_the_worker() -> None:
    loaded = preload(("json", "kstream_no_such_module", "kstream.spark.sink"))
    assert loaded == ["json", "kstream.spark.sink"]
    assert "kstream.spark.sink" in sys.modules


_FORK_AFTER_PRELOAD = """
import os, sys, threading
from kstream.spark.daemon import PRELOAD, preload

loaded = preload(PRELOAD)
# the daemon forks holding no Python thread (native pools only) and no client
print(sorted(loaded), threading.active_count())
sys.stdout.flush()
pid = os.fork()
if pid == 0:  # the worker: pandas over a pyarrow table, then out without cleanup
    code = 1
    try:
        import pandas as pd
        import pyarrow as pa

        table = pa.table({"k": [str(i % 7) for i in range(50_000)], "v": range(50_000)})
        sums = table.to_pandas().groupby("k")["v"].sum()
        code = 0 if int(sums.sum()) == sum(range(50_000)) and len(sums) == 7 else 2
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_worker_forked_after_the_preload_runs_pandas_and_pyarrow() -> None:
    """The daemon forks with pandas' and pyarrow's native threads started: the child must
    still allocate, compute and exit (a lock held across the fork would hang it, which the
    timeout turns into a failure)."""
    pytest.importorskip("pandas")
    done = subprocess.run(
        [sys.executable, "-c", _FORK_AFTER_PRELOAD],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    loaded, python_threads = done.stdout.rsplit(" ", 1)
    assert int(python_threads) == 1
    assert all(m in loaded for m in ("'pandas'", "'pyarrow'", "'kstream.spark.tasks'"))


def _worker_path(*first: str) -> dict[str, str]:
    """An environment whose `PYTHONPATH` is what Spark gives a worker it starts itself: its
    pyspark and py4j zips first, then the entries given."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    if not zips:
        pytest.skip("this pyspark ships no zips")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, *first])}


def test_processes_spark_starts_import_pyspark_from_the_package_not_the_zip() -> None:
    probe = "import pyspark, sys; print(pyspark.__file__); print(sys.path[0])"
    stock = subprocess.run(
        [sys.executable, "-c", probe],
        env=_worker_path(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ".zip" in stock[0]  # what Spark's own path does
    ours = subprocess.run(
        [sys.executable, "-c", probe],
        env=_worker_path(WORKER_SITE),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ".zip" not in ours[0]
    assert ours[0].endswith(os.path.join("pyspark", "__init__.py"))


def test_the_worker_site_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('THEIRS_RAN'))"],
        env=_worker_path(WORKER_SITE, str(theirs)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "yes"


def test_the_workers_path_holds_the_worker_site_after_the_users_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/the/users")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    prepare_environment()
    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    assert paths[:2] == ["/the/users", WORKER_SITE]
    prepare_environment()  # once only, however often a session starts
    assert os.environ["PYTHONPATH"].split(os.pathsep).count(WORKER_SITE) == 1
