"""Resolving `MODULE:ATTR` to a Topology or an App, with errors a user can act on.

ATTR may be a `Topology`, a `StreamBuilder`, an `App`, or a function taking no arguments that
returns one of those. The current directory is importable, as with `python -m`, so
`kstreamd run examples.word_count:topology` works from a checkout.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from kstream.errors import ConfigError

__all__ = ["TargetError", "load_target"]


class TargetError(ConfigError):
    """MODULE:ATTR does not name a topology or an app."""


def _is_app(obj: Any) -> bool:
    return hasattr(obj, "app_id") and hasattr(obj, "topology") and hasattr(obj, "start")


def _resolve(obj: Any) -> Any:
    from kstream.topology.topology import Topology

    if isinstance(obj, Topology) or _is_app(obj):
        return obj
    build = getattr(obj, "build", None)
    if callable(build) and hasattr(obj, "stream"):
        return build()
    return None


def load_target(spec: str) -> Any:
    """The Topology or App that `spec` ("module:attr") names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"{spec!r}: expected MODULE:ATTR, e.g. examples.word_count:topology")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise TargetError(f"{spec!r}: no module named {e.name!r}") from None
        raise TargetError(f"{spec!r}: importing {module_name!r} failed: {e}") from None
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        raise TargetError(
            f"{spec!r}: importing {module_name!r} raised {type(e).__name__}: {e} "
            f"({os.path.basename(where.filename)}:{where.lineno})"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(
                f"{spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    found = _resolve(obj)
    if found is None and callable(obj):
        try:
            made = obj()
        except TypeError as e:
            raise TargetError(f"{spec!r}: calling {attr}() failed: {e}") from None
        found = _resolve(made)
        if found is None:
            raise TargetError(
                f"{spec!r}: {attr}() returned {type(made).__name__}, "
                "expected a Topology, a StreamBuilder or an App"
            )
    if found is None:
        raise TargetError(
            f"{spec!r}: {attr} is a {type(obj).__name__}, expected a Topology, a "
            "StreamBuilder, an App, or a function returning one"
        )
    return found
