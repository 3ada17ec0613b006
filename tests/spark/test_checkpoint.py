"""Clearing what an interrupted first batch leaves in a checkpoint (`kstream.spark.checkpoint`),
through the JVM's Hadoop file system as Spark sees it; no query runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kstream.spark.checkpoint import clear_unfinished_start, is_unfinished_write

pytest.importorskip("pyspark")

TMP = ".0.3f3b8873-2fdc-443e-84ee-60b512d65bd3.tmp"


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def checkpoint(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"v1")
    return root


def test_temporary_files_go_when_no_batch_was_logged(spark: Any, tmp_path: Path) -> None:
    root = checkpoint(
        tmp_path / "cp",
        ["metadata", f"offsets/{TMP}", f"offsets/.{TMP}.crc", f"commits/{TMP}", "offsets/notes"],
    )
    removed = clear_unfinished_start(spark, str(root))
    # Hadoop's local file system lists no checksum file, and deletes one with its file
    assert sorted(r.rsplit("/", 2)[-2] for r in removed) == ["commits", "offsets"]
    assert files(root) == {"metadata", "offsets/notes"}


def test_a_checkpoint_with_a_logged_batch_is_left_alone(spark: Any, tmp_path: Path) -> None:
    names = ["metadata", "offsets/0", f"offsets/.1{TMP[2:]}", "commits/0"]
    root = checkpoint(tmp_path / "cp", names)
    assert clear_unfinished_start(spark, str(root)) == []
    assert files(root) == set(names)


def test_a_new_location_is_fine(spark: Any, tmp_path: Path) -> None:
    assert clear_unfinished_start(spark, str(tmp_path / "none")) == []
    assert clear_unfinished_start(spark, f"file://{tmp_path}/none") == []


def test_only_hidden_temporary_files_count() -> None:
    assert is_unfinished_write(TMP) and is_unfinished_write(f".{TMP}.crc")
    assert not is_unfinished_write("0") and not is_unfinished_write("0.tmp")
    assert not is_unfinished_write(".metadata.crc")


def test_a_local_checkpoint_gets_the_file_system_manager_unless_one_is_set(
    spark: Any, tmp_path: Path
) -> None:
    """Spark's `FileSystem`-based checkpoint file manager for a checkpoint on the local disk
    (its default renames through `FileContext`, which starts a `readlink` process twice a
    rename); a class the session names, and other file systems, are left alone."""
    from kstream.spark.checkpoint import FILE_MANAGER_KEY, use_file_system_manager

    assert spark.conf.get(FILE_MANAGER_KEY, None) is None
    try:
        assert use_file_system_manager(spark, "hdfs://namenode:8020/cp") is None
        assert spark.conf.get(FILE_MANAGER_KEY, None) is None
        name = use_file_system_manager(spark, str(tmp_path / "cp"))
        assert name is not None and name.endswith(".FileSystemBasedCheckpointFileManager")
        spark.sparkContext._jvm.java.lang.Class.forName(name)  # a class this Spark has
        assert spark.conf.get(FILE_MANAGER_KEY) == name
        spark.conf.set(FILE_MANAGER_KEY, "com.example.Mine")
        assert use_file_system_manager(spark, f"file://{tmp_path}/cp") is None
        assert spark.conf.get(FILE_MANAGER_KEY) == "com.example.Mine"
    finally:
        spark.conf.unset(FILE_MANAGER_KEY)


def test_a_query_checkpoints_through_the_file_system_manager(
    spark: Any, bootstrap_servers: str, unique_name: Any, tmp_path: Path
) -> None:
    """A stateful query run twice over a checkpoint written through the `FileSystem`-based
    manager: the second run resumes from it (reads only the new records)."""
    from spark_helpers import create_topics, produce
    from support.committed_reader import read_committed

    from kstream.dsl import StreamBuilder
    from kstream.spark import run
    from kstream.spark.checkpoint import FILE_MANAGER_KEY, use_file_system_manager

    inp, out = unique_name("in"), unique_name("out")
    create_topics(bootstrap_servers, {inp: 1, out: 1})
    b = StreamBuilder()
    b.stream(inp, key_serde="string", value_serde="string").group_by_key().count().to_stream().to(
        out, key_serde="string", value_serde="long"
    )
    app, cp = unique_name("fsman"), tmp_path / "cp"
    try:
        assert use_file_system_manager(spark, str(cp)) is not None
        for n in (3, 2):
            produce(
                bootstrap_servers,
                inp,
                [("k", "v", 1_000 + i) for i in range(n)],
                "string",
                "string",
            )
            run(
                b.build(),
                app,
                bootstrap_servers,
                str(cp),
                spark=spark,
                config={"state_dir": str(tmp_path / "state")},
            )
    finally:
        spark.conf.unset(FILE_MANAGER_KEY)
    counts = [int.from_bytes(r.value or b"", "big") for r in read_committed(bootstrap_servers, out)]
    assert counts == [1, 2, 3, 4, 5]
    (sid,) = [d.name for d in cp.iterdir() if d.name.startswith("subtopology-")]
    assert sorted(p.name for p in (cp / sid / "commits").iterdir() if p.name.isdigit()) == [
        "0",
        "1",
    ]
