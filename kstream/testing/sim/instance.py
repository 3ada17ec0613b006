"""One simulated app instance: a real `App`'s stream thread over simulated clients, driven one
loop turn at a time.

The instance is the runtime unmodified (`App._new_stream_thread`, `StreamThread.open`,
`run_once`, `close`); the harness only wires it to the simulation: its clients come from a
`SimClientSupplier`, its back-off sleeps on the virtual clock, and its repartition purge
reads that clock. A crash drops the instance as SIGKILL would: nothing of it runs again (its
clients raise if touched), its memory is gone, its state directory stays as it is on disk (LMDB
environments are closed without a write, which is what the kernel does to a killed
process's files), and its group membership and open transaction live on at the broker until
its session and transaction time out or a successor fences it.
"""

from __future__ import annotations

import os
from typing import Any

from kstream.runtime import App
from kstream.runtime.purge import RepartitionPurge
from kstream.runtime.thread import StreamThread
from kstream.testing.sim.broker import SimKafka
from kstream.testing.sim.clock import VirtualClock
from kstream.testing.sim.hooks import CallHooks
from kstream.testing.sim.registry import SimRegistry, SimRegistryTopic
from kstream.testing.sim.supplier import SimClientSupplier
from kstream.topology import Topology

__all__ = ["Instance"]

APP_ID = "sim"


class Instance:
    """Incarnation `incarnation` of the instance in slot `slot` (its own state directory)."""

    def __init__(
        self,
        slot: int,
        incarnation: int,
        topology: Topology,
        guarantee: str,
        config: dict[str, Any],
        cluster: SimKafka,
        clock: VirtualClock,
        registry: SimRegistryTopic | None = None,
    ) -> None:
        """`registry`: the run's instance registry, given when the app keeps standby
        replicas (kstream.testing.sim.registry)."""
        self.slot = slot
        self.name = f"i{slot}.{incarnation}"
        self.state_dir = str(config["state_dir"])
        self.hooks = CallHooks(self.name)
        self.supplier = SimClientSupplier(cluster, hooks=self.hooks)
        # the process id a restart reads back from the state directory (App.process_id), so
        # that the exactly_once_v2 transactional id is the slot's in every run of a seed
        pid_file = os.path.join(self.state_dir, APP_ID, "process-id")
        if not os.path.exists(pid_file):
            os.makedirs(os.path.dirname(pid_file), exist_ok=True)
            with open(pid_file, "w", encoding="ascii") as f:
                f.write(f"slot{slot}")
        self.app = App(
            topology,
            APP_ID,
            "sim:9092",
            guarantee,
            config=config,
            client_supplier=self.supplier,
        )
        #: the instance's registry (standby replicas), the App's own as `_start_registry`
        #: would make it, under the process id
        self.registry = None if registry is None else SimRegistry(registry, f"slot{slot}")
        self.app._registry = self.registry  # type: ignore[assignment]
        self.thread: StreamThread = self.app._new_stream_thread(self.app._create_topics())
        self.thread.backoff = clock.sleep
        self.thread.purge = RepartitionPurge(self.thread.ctx, clock=clock.monotonic)
        #: virtual time until which the process is paused (its turns skipped, no heartbeats)
        self.paused_until = 0.0
        self.error: BaseException | None = None
        self.opened = False

    @property
    def alive(self) -> bool:
        return not self.hooks.dead and self.error is None

    def open(self) -> None:
        self.thread.open()
        self.opened = True

    def turn(self) -> None:
        """One loop turn (the first opens the thread: bootstrap, producer, group join)."""
        if not self.opened:
            self.open()
            return
        if self.registry is not None:
            self.registry.heartbeat()
        self.thread.run_once()

    def close(self) -> None:
        """A graceful stop: commit, release the tasks, leave the group."""
        self.thread.close()
        if self.registry is not None:
            self.registry.close()
        self.hooks.dead = True

    def crash(self) -> None:
        """SIGKILL: see the module docstring."""
        self.hooks.dead = True
        self.hooks.beating = False
