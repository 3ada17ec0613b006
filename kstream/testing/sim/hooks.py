"""The points where a simulated client call can meet an injected fault.

Each client of an instance asks its instance's `CallHooks` before every call that would reach
the broker; the scheduler arms them (an error for the next such call, or an action that runs
just before it, e.g. another instance joining mid-commit). A client of a crashed instance is
dead: any call raises, as nothing of a killed process runs again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallHooks", "DeadClientError"]


class DeadClientError(RuntimeError):
    """A client of a crashed instance was called (the simulation dropped that instance)."""


@dataclass
class CallHooks:
    """Per instance: armed faults by call name ("producer.commit", "consumer.poll", ...)."""

    name: str
    #: call name -> what runs just before that call, given the client (may raise the
    #: injected error)
    armed: dict[str, list[Callable[[Any], None]]] = field(default_factory=dict)
    dead: bool = False
    #: whether the instance's clients heartbeat (False while the process is paused or dead)
    beating: bool = True
    #: every call made, by name (a statistic of the run)
    calls: dict[str, int] = field(default_factory=dict)

    def arm(self, call: str, action: Callable[[Any], None]) -> None:
        self.armed.setdefault(call, []).append(action)

    def before(self, call: str, client: Any = None) -> None:
        if self.dead:
            raise DeadClientError(f"{self.name}: {call} on a client of a crashed instance")
        self.calls[call] = self.calls.get(call, 0) + 1
        actions = self.armed.get(call)
        if actions:
            actions.pop(0)(client)
