"""`Joined`: the options of a stream-table join (Kafka's `Joined`): its name and grace period.

The grace period (KIP-923) is for joins with a versioned table (`StreamBuilder.table(...,
versioned=...)`): stream records are held back until stream time passes their timestamp plus
the grace, then joined in timestamp order with the table as of their timestamps, so table
updates that arrive a little late are still seen by the stream records they precede.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError

__all__ = ["Joined"]


@dataclass(frozen=True)
class Joined:
    """A stream-table join's name (of its processor and, with a grace period, its buffer store
    `<name>-Buffer`) and grace period in ms (None: no buffering, each record joins at once).

    Example:
        >>> Joined.with_grace_period("2s").grace_period
        2000
        >>> Joined.as_("enrich").with_grace("10ms")
        Joined(name='enrich', grace_period=10)
    """

    name: str | None = None
    grace_period: int | None = None

    def __post_init__(self) -> None:
        if self.grace_period is not None and self.grace_period < 0:
            raise ConfigError(
                f"Joined: the grace period must not be negative, got {self.grace_period}"
            )

    @classmethod
    def with_grace_period(cls, grace: DurationLike) -> Joined:
        """A `Joined` with a grace period (Kafka's `Joined.withGracePeriod`)."""
        return cls(grace_period=duration(grace, name="Joined grace period"))

    @classmethod
    def as_(cls, name: str) -> Joined:
        """A `Joined` naming the join (Kafka's `Joined.as`)."""
        return cls(name=name)

    def with_grace(self, grace: DurationLike) -> Joined:
        """This `Joined` with a grace period."""
        return dataclasses.replace(self, grace_period=duration(grace, name="Joined grace period"))

    def with_name(self, name: str) -> Joined:
        """This `Joined` with a name."""
        return dataclasses.replace(self, name=name)
