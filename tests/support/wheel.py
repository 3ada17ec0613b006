"""The wheel pip builds from this work tree, for the tests that check what a user installs.

The wheel is built from a copy of the sources (so the work tree gets no build/ or egg-info);
links in the tree (kstream/examples, kstream/assets/grafana) are copied as links, so the wheel
holds what setuptools makes of them, as it would for a release. A build takes seconds (pip
sets up an isolated build environment), so a wheel is kept under pytest's cache directory,
named by a digest of every source file: the next run with the same sources reuses it, and
the dashboard-bundle and packaging tests share one build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).parents[2]
SOURCES = ("kstream", "store_backends", "examples", "grafana", "pyproject.toml", "README.md")


def outside_env() -> dict[str, str]:
    """This process's environment minus what points at the work tree: Spark sessions started
    earlier in the same test process put their `sys.path` (the repository root included) into
    `PYTHONPATH`, and through it pip saw the work tree's kstream as installed and skipped the
    wheel, and `import kstream` found the work tree."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def sources_digest() -> str:
    """A digest of the relative path and bytes of every file the wheel is built from."""
    h = hashlib.sha256()
    for name in SOURCES:
        for p in _files(ROOT / name):
            h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_wheel(cache_dir: Path) -> Path:
    """The wheel of the current sources, built into `cache_dir/<digest>/` unless already
    there. Test processes asking at once (pytest-xdist workers) build it once: the others
    wait on a lock on the cache directory and take the wheel the first one built."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / sources_digest()
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not any(target.glob("kstream-*.whl")):
            _build(target)
            for old in cache_dir.iterdir():  # wheels of earlier sources
                if old.is_dir() and old != target:
                    shutil.rmtree(old, ignore_errors=True)
    (whl,) = target.glob("kstream-*.whl")
    return whl


def _build(target: Path) -> None:
    """pip wheel from a copy of the sources, the wheel ending in `target`."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "dist"
        src.mkdir()
        for name in SOURCES:
            path = ROOT / name
            if path.is_dir():
                shutil.copytree(
                    path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy2(path, src / name)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
            env=outside_env(),
        )
        if proc.returncode != 0:
            raise RuntimeError("pip wheel failed:\n" + proc.stdout + proc.stderr)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(out, target)


def wheel_cache(config: object, fallback: Path) -> Path:
    """Where wheels are kept: pytest's cache directory, or `fallback` when the cache plugin
    is off (`-p no:cacheprovider`)."""
    cache = getattr(config, "cache", None)
    return Path(cache.mkdir("kstream-wheel")) if cache is not None else fallback
