"""A deterministic simulation of kstream's runtime (docs/testing.md, "Deterministic simulation").

The real runtime (the stream thread, task manager, commit protocols, restore, record caches,
suspended tasks, idling, purge) runs unmodified against a simulated Kafka
(`kstream.testing.sim.broker`) through a client supplier, on a virtual clock, with one seeded
scheduler deciding every interleaving and every fault. A run's outputs are checked against the
fault-free `TopologyTestDriver`; any failing seed replays to the same outcome::

    python -m kstream.testing.sim --seed 1234 --topology count
    python -m kstream.testing.sim --seeds 2000 --jobs 2
"""

from __future__ import annotations

from kstream.testing.sim.simulation import GUARANTEES, Options, Outcome, pick, simulate
from kstream.testing.sim.topologies import SCENARIOS

__all__ = ["GUARANTEES", "SCENARIOS", "Options", "Outcome", "pick", "simulate"]
