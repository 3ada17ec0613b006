"""Short consumer-group sessions for test apps and consumers.

The runtime's default session (`session.timeout.ms` 6000) suits production. The embedded
broker completes a group join after about half a session timeout (and one second at least),
so tests pass a short session through the config they build: joins take about a second
instead of three, and a killed member's partitions move on after two seconds instead of six.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAST_GROUP: dict[str, Any] = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 250}


def fast_group(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`config` (an App config dict) with `FAST_GROUP` under `kafka`; its own settings win."""
    out = dict(config or {})
    out["kafka"] = {**FAST_GROUP, **(out.get("kafka") or {})}
    return out


def fast_group_env() -> dict[str, str]:
    """The same settings as `KSTREAM_KAFKA__*` variables, for `kstreamd run` processes."""
    return {
        "KSTREAM_KAFKA__" + key.upper().replace(".", "_"): str(value)
        for key, value in FAST_GROUP.items()
    }
