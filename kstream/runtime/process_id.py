"""An instance's process id: kept in its state directory, as Kafka Streams keeps its own."""

from __future__ import annotations

import os
import uuid

__all__ = ["process_id"]


def process_id(state_dir: str, app_id: str) -> str:
    """This instance's id, kept in its state directory (as Kafka Streams keeps its process id):
    a restart reuses it, so the thread's transactional producer fences its predecessor at once
    instead of leaving the predecessor's open transaction to time out."""
    path = os.path.join(state_dir, app_id, "process-id")
    try:
        with open(path, encoding="ascii") as f:
            pid = f.read().strip()
        if pid:
            return pid
    except FileNotFoundError:
        pass
    pid = uuid.uuid4().hex
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{pid}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(pid)
    os.replace(tmp, path)
    return pid
