"""`MODULE:ATTR` targets of `kstreamd`: resolved by `kstream.runtime.target`, which `App`
shares (it lives in the runtime so that the runtime never imports the service)."""

from kstream.runtime.target import TargetError, load_target

__all__ = ["TargetError", "load_target"]
