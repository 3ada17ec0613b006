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
