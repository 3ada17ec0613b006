"""The micro-batch runtime: `App`, the stream thread, commit protocols, restore, global tables.

The names are imported on first use (kstream._lazy), so importing one piece of the runtime
does not pull the whole runtime in. `App` here is the app in one process; `kstream.App` also
runs an app over worker processes (kstream.processes).
"""

from typing import TYPE_CHECKING

from kstream._lazy import lazy_exports

if TYPE_CHECKING:
    from kstream.runtime.app import App
    from kstream.runtime.app_state import AppState
    from kstream.runtime.local_store import LocalStore

__all__ = ["App", "AppState", "LocalStore"]

_EXPORTS = {
    "App": "kstream.runtime.app",
    "AppState": "kstream.runtime.app_state",
    "LocalStore": "kstream.runtime.local_store",
}

__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
