"""A real, tiny filesystem for tests of a full disk: a tmpfs of a given size, mounted on a
directory of the test's and always unmounted after it.

Mounting needs privileges (root, or CAP_SYS_ADMIN in a container): where `mount` is refused
the test is skipped, as nothing else gives a device that really runs out of space.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tiny_fs(where: Path, size: str = "1m") -> Iterator[Path]:
    """Mount a `size` tmpfs on `where` (created if missing) for the block's duration."""
    where.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
