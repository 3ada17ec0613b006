"""The instance registry as the service uses it to route queries (`<app_id>-instances`).

The registry belongs to the runtime (kstream.runtime.instances): an App that keeps standby
replicas places them from it, with or without `kstreamd run`. The service names it here, where
`kstreamd run` and the query routing look it up.
"""

from __future__ import annotations

from kstream.runtime.instances import (
    InstanceInfo,
    InstanceRegistry,
    group_partitions,
    instances_topic,
)

__all__ = ["InstanceInfo", "InstanceRegistry", "group_partitions", "instances_topic"]
