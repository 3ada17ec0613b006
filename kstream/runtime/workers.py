"""How many worker processes an app runs, and the reference by which they import its topology.

One process runs one stream thread, which Python's interpreter lock holds to one core, so an
app over N cores runs as N worker processes (`kstream.processes.AppProcesses`, `kstreamd run
--processes N`). These are the settings' rules, kept below the service and the runtime that
both read them: `processes` is a positive integer or "auto"; the workers import the topology
themselves (a topology holds user functions that need not pickle), by a `MODULE:ATTR`
reference given as the topology argument (`App("myapp.pipeline:topology", ...)`) or found by
looking the topology object up among the attributes of imported modules. A topology built
inside a function, or in the script run as `__main__`, has no such reference: that is a
ConfigError naming the key, raised before anything starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from kstream.config import Config
from kstream.errors import ConfigError

__all__ = [
    "PROCESSES_KEY",
    "find_reference",
    "parse_processes",
    "split_processes",
]

PROCESSES_KEY = "processes"


def split_processes(
    config: Mapping[str, Any] | Config | None,
) -> tuple[Mapping[str, Any] | Config | None, int]:
    """An App's config without `processes`, and the number of processes (1 when unset).

    `processes` is a positive integer or "auto" (the cores this process may use); anything
    else is a ConfigError that names the key.
    """
    if config is None or isinstance(config, Config) or PROCESSES_KEY not in config:
        return config, 1
    rest = dict(config)
    return rest, parse_processes(rest.pop(PROCESSES_KEY), key=f"config[{PROCESSES_KEY!r}]")


def parse_processes(value: int | str, key: str = "processes") -> int:
    """The number of worker processes: a positive integer, or "auto" for the usable cores."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on Linux
            return max(1, os.cpu_count() or 1)
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a positive integer or 'auto', got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a positive integer or 'auto', got {value!r}") from None
    if n < 1 or (isinstance(value, float) and value != n):
        raise ConfigError(f"{key}: expected a positive integer or 'auto', got {value!r}")
    return n


def find_reference(obj: Any) -> str | None:
    """A `MODULE:ATTR` that names `obj` in an imported module (not `__main__`), or None.

    Modules are searched in import order, so the module that defined the object usually wins
    over one that imported it by name.
    """
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        try:
            attrs = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in attrs:
            if value is obj and not attr.startswith("_"):
                return f"{name}:{attr}"
    return None


def topology_reference(given: Any, processes: int) -> str:
    """The reference the workers import, for a topology argument of App; ConfigError if none."""
    if isinstance(given, str):
        return given
    ref = find_reference(given)
    if ref is None:
        raise ConfigError(
            f"config[{PROCESSES_KEY!r}]: {processes} worker processes import the topology by "
            "reference, and this one is not an attribute of an importable module (a topology "
            "built inside a function or in the script run as __main__ has none): define it at "
            "the top level of a module, or pass App('module:attr', ...)"
        )
    return ref
