"""Package attributes imported on first use (PEP 562 `__getattr__`).

A package that re-exports names from its submodules makes `import package` pay for all of them;
a process that needs one corner (a Spark Python worker, the CLI parsing its arguments) should
not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str], submodules: frozenset[str] = frozenset()
) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `exports[name]` (a module path) on first use and
    keeps it in `namespace` (the package's `globals()`); names in `submodules` are the modules
    themselves, any other name an attribute of its module."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: Any = importlib.import_module(module)
        if name not in submodules:
            value = getattr(value, name)
        namespace[name] = value
        return value

    return __getattr__
