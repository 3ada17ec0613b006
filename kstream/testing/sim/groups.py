"""The simulated group coordinator: members, generations, the join barrier and assignments.

The classic group protocol as the stream thread meets it through librdkafka. A change of
membership (a join, a leave, a member whose session ran out) starts a round: every member must
rejoin, eager members revoking everything first, before the coordinator moves the group to a
new generation with a new assignment; each member takes its assignment (the rebalance
callbacks) at its next poll. Cooperative members keep their partitions across the round; a
partition that moves is withheld until its owner has revoked it, which starts another round, as
cooperative-sticky does. Offsets are accepted only from a known member of the current
generation (KIP-447 checks the same for transactional offsets).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kstream.errors import KafkaClientError

__all__ = ["Coordinator", "Group", "Member"]

TP = tuple[str, int]
EAGER = "eager"
COOPERATIVE = "cooperative"


@dataclass(eq=False)
class Member:
    member_id: str
    group_id: str
    topics: list[str]
    protocol: str
    session_s: float
    #: whether the member's client still heartbeats (a paused or dead process does not)
    beating: Callable[[], bool]
    last_heartbeat: float
    #: the partitions the member holds (the consumer updates it as its callbacks run)
    owned: set[TP] = field(default_factory=set)
    #: the generation its JoinGroup answered with (-1 before), and its assignment there
    generation: int = -1
    assignment: set[TP] = field(default_factory=set)
    #: the generation whose assignment the member has taken (its callbacks ran)
    synced: int = -1
    rejoined: bool = True
    removed: bool = False


@dataclass(eq=False)
class Group:
    group_id: str
    members: dict[str, Member] = field(default_factory=dict)
    generation: int = 0
    preparing: bool = False


class Coordinator:
    """Every group of the simulated cluster. `partitions(topic)` gives partition counts;
    `event(text)` records what happened in the run's trace."""

    def __init__(self, partitions: Callable[[str], int], event: Callable[[str], None]) -> None:
        self._partitions = partitions
        self._event = event
        self.groups: dict[str, Group] = {}
        self._ids = 0

    def group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        return g

    # --- membership ----------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        topics: list[str],
        protocol: str,
        session_s: float,
        beating: Callable[[], bool],
        now: float,
    ) -> Member:
        g = self.group(group_id)
        self._ids += 1
        m = Member(f"m{self._ids:04d}", group_id, list(topics), protocol, session_s, beating, now)
        self._prepare(g, f"{m.member_id} joins")
        g.members[m.member_id] = m
        m.rejoined = True
        self.complete_if_ready(g)
        return m

    def leave(self, m: Member, why: str) -> None:
        g = self.group(m.group_id)
        if g.members.pop(m.member_id, None) is None:
            return
        m.removed = True
        if g.members:
            self._prepare(g, f"{m.member_id} {why}")
            self.complete_if_ready(g)
        else:
            g.preparing = False
            self._event(f"group {g.group_id}: {m.member_id} {why}; empty")

    def rejoin(self, m: Member) -> None:
        """`m` sent its JoinGroup for the round in preparation."""
        m.rejoined = True
        self.complete_if_ready(self.group(m.group_id))

    def request_rejoin(self, m: Member, why: str) -> None:
        """`m` starts a new round (a cooperative member after revoking what moves)."""
        g = self.group(m.group_id)
        self._prepare(g, f"{m.member_id} {why}")
        m.rejoined = True
        self.complete_if_ready(g)

    def _prepare(self, g: Group, why: str) -> None:
        if not g.preparing:
            self._event(f"group {g.group_id}: rebalance ({why})")
        g.preparing = True
        for m in g.members.values():
            m.rejoined = False

    def complete_if_ready(self, g: Group) -> None:
        """End the round once every member rejoined: a new generation and its assignment."""
        if not g.preparing or not all(m.rejoined for m in g.members.values()):
            return
        g.preparing = False
        g.generation += 1
        members = [g.members[k] for k in sorted(g.members)]
        if not members:
            return
        if members[0].protocol == COOPERATIVE:
            plan = self._cooperative(members)
        else:
            plan = self._range(members)
        for m in members:
            m.generation = g.generation
            m.assignment = plan[m.member_id]
        self._event(
            f"group {g.group_id}: generation {g.generation}: "
            + "; ".join(f"{m.member_id}={sorted(plan[m.member_id])}" for m in members)
        )

    # --- assignors -------------------------------------------------------------------------

    def _all(self, members: list[Member]) -> list[TP]:
        topics = sorted({t for m in members for t in m.topics})
        return [(t, p) for t in topics for p in range(self._partitions(t))]

    def _range(self, members: list[Member]) -> dict[str, set[TP]]:
        """The range assignor: per topic, contiguous ranges over the members by id, so
        partition n of every co-partitioned topic goes to one member."""
        plan: dict[str, set[TP]] = {m.member_id: set() for m in members}
        for topic in sorted({t for m in members for t in m.topics}):
            takers = [m for m in members if topic in m.topics]
            n = self._partitions(topic)
            each, extra = divmod(n, len(takers))
            p = 0
            for i, m in enumerate(takers):
                count = each + (1 if i < extra else 0)
                plan[m.member_id] |= {(topic, q) for q in range(p, p + count)}
                p += count
        return plan

    def _cooperative(self, members: list[Member]) -> dict[str, set[TP]]:
        """Cooperative-sticky: balanced counts, each member keeping what it owns up to its
        share; a partition moving away from its owner is withheld this round."""
        parts = self._all(members)
        each, extra = divmod(len(parts), len(members))
        quota = {m.member_id: each + (1 if i < extra else 0) for i, m in enumerate(members)}
        target: dict[str, set[TP]] = {m.member_id: set() for m in members}
        taken: set[TP] = set()
        for m in members:
            for tp in sorted(m.owned):
                if (
                    tp in parts
                    and tp not in taken
                    and len(target[m.member_id]) < quota[m.member_id]
                ):
                    target[m.member_id].add(tp)
                    taken.add(tp)
        free = [tp for tp in parts if tp not in taken]
        for m in members:
            while len(target[m.member_id]) < quota[m.member_id] and free:
                tp = free.pop(0)
                target[m.member_id].add(tp)
        owner = {tp: m.member_id for m in members for tp in m.owned}
        return {mid: {tp for tp in tps if owner.get(tp, mid) == mid} for mid, tps in target.items()}

    # --- time ------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Heartbeats of the members whose clients beat; members silent longer than their
        session timeout are removed (a crashed or paused process)."""
        for g in list(self.groups.values()):
            for m in list(g.members.values()):
                if m.beating():
                    m.last_heartbeat = now
                elif now - m.last_heartbeat > m.session_s:
                    self.leave(m, f"session timed out after {now - m.last_heartbeat:.1f}s")

    # --- offsets ----------------------------------------------------------------------------

    def check_member(self, group_id: str, member_id: str, generation: int) -> None:
        """Refuse offsets from an unknown member or an old generation, as the broker does."""
        g = self.group(group_id)
        m = g.members.get(member_id)
        if m is None:
            raise KafkaClientError(
                f"committing offsets of group {group_id!r}: UNKNOWN_MEMBER_ID "
                f"(member {member_id} is not in the group)",
                code="UNKNOWN_MEMBER_ID",
                retriable=True,
            )
        if generation != g.generation:
            raise KafkaClientError(
                f"committing offsets of group {group_id!r}: ILLEGAL_GENERATION "
                f"({generation}, the group is at {g.generation})",
                code="ILLEGAL_GENERATION",
                retriable=True,
            )
