"""A stream thread's membership of a Streams group (KIP-1071, `rebalance_protocol="streams"`).

The broker's group coordinator assigns tasks to members; a member says, in a heartbeat every
`HeartbeatIntervalMs`, which tasks it owns now, and hears which it should own (its target).
librdkafka cannot speak this protocol, so a thread of this module does, through the protocol
client of `kstream.kafka.streams_group`, while the data flows through confluent-kafka as ever
(an assign-mode consumer and the transactional producers).

The two sides meet through a few values under one lock, and calls run one way: the heartbeat
thread writes the target it heard (`take_target`) and whether the member was fenced
(`take_lost`); the stream thread, between batches, applies them (closing and creating tasks,
kstream.runtime.streams_consumer) and tells what it owns now (`applied`), which the next
heartbeat (sent at once) reports. Until it is reported the coordinator gives none of the
released tasks to another member: a task moves only after its owner committed and closed it.

Offsets are committed under the member's id and the epoch of the last target the stream thread
applied (`metadata`): the coordinator refuses a member that left or was fenced
(UNKNOWN_MEMBER_ID) and an epoch whose tasks moved on (ILLEGAL_GENERATION), so a zombie's
transaction aborts rather than commits; the stream thread then replays the batch, as after any
refused commit.

How an answer is handled is a table (`OUTCOMES`), as `kstream.runtime.failures` keeps policy:
fenced (rejoin with epoch 0, the tasks lost), retry (the coordinator moved or is loading),
fatal (the app stops with the broker's message: a topology the group refuses, a group of another
type, no authorization).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kstream.errors import KStreamError
from kstream.kafka.streams_group import (
    STATUS_NAMES,
    HeartbeatRequest,
    HeartbeatResponse,
    StreamsGroupClient,
    StreamsTopology,
    group_metadata,
)
from kstream.runtime.streams_topology import TaskId, task_ids, tasks_of

log = logging.getLogger("kstream.runtime")

__all__ = ["OUTCOMES", "Outcome", "StreamsGroupFatalError", "StreamsMember", "Target"]

#: A dynamic member leaving; a static member leaving for a restart keeps its tasks (-2).
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
#: How long to wait before the next heartbeat after a request failed (the broker away).
RETRY_S = 0.5


class StreamsGroupFatalError(KStreamError):
    """The group refused this member for good (its topology, its type, authorization)."""


class Outcome(Enum):
    OK = "ok"
    FENCED = "fenced"  # the member's epoch is gone: its tasks are lost; rejoin with epoch 0
    RETRY = "retry"  # try again after RETRY_S
    FATAL = "fatal"


#: What each error code of a StreamsGroupHeartbeat answer means to the member.
OUTCOMES: dict[str, Outcome] = {
    "NONE": Outcome.OK,
    "FENCED_MEMBER_EPOCH": Outcome.FENCED,
    "UNKNOWN_MEMBER_ID": Outcome.FENCED,
    # Apache Kafka 4.4.0 answers a member with an Interactive Queries endpoint this way while a
    # source topic is missing (docs/architecture.md): it passes once the topic exists
    "UNKNOWN_SERVER_ERROR": Outcome.RETRY,
    "NOT_COORDINATOR": Outcome.RETRY,
    "COORDINATOR_NOT_AVAILABLE": Outcome.RETRY,
    "COORDINATOR_LOAD_IN_PROGRESS": Outcome.RETRY,
    # a static member restarting while its previous incarnation is still in the group
    "UNRELEASED_INSTANCE_ID": Outcome.RETRY,
    "INVALID_REQUEST": Outcome.FATAL,  # 4.4.0: "Topology updates are not supported yet."
    "GROUP_ID_NOT_FOUND": Outcome.FATAL,  # "... is not a streams group"
    "GROUP_AUTHORIZATION_FAILED": Outcome.FATAL,
    "TOPIC_AUTHORIZATION_FAILED": Outcome.FATAL,
    "CLUSTER_AUTHORIZATION_FAILED": Outcome.FATAL,
    "GROUP_MAX_SIZE_REACHED": Outcome.FATAL,
    "STREAMS_INVALID_TOPOLOGY": Outcome.FATAL,
    "STREAMS_INVALID_TOPOLOGY_EPOCH": Outcome.FATAL,
    "STREAMS_TOPOLOGY_FENCED": Outcome.FATAL,
    "UNSUPPORTED_VERSION": Outcome.FATAL,
}

#: Statuses that stop the app: the group cannot run this topology as it stands.
FATAL_STATUSES = {"STALE_TOPOLOGY", "INCORRECTLY_PARTITIONED_TOPICS", "SHUTDOWN_APPLICATION"}

#: What a fatal answer means to an operator, beside the broker's own message.
ADVICE: dict[str, str] = {
    "INVALID_REQUEST": (
        "if the broker says topology updates are not supported, the group was created by an "
        "app with another topology: stop every instance, delete the group (its committed "
        "offsets go with it: write them back) and start again (docs/operations.md)"
    ),
    "GROUP_ID_NOT_FOUND": (
        "a group of another type has this id: a KIP-848 consumer group (rebalance_protocol="
        "'consumer') cannot become a Streams group, and a classic group converts only when "
        "no member is left (stop every instance first)"
    ),
    "STALE_TOPOLOGY": "another instance runs a newer topology: upgrade this one",
}


@dataclass(frozen=True)
class Target:
    """The tasks the coordinator wants this member to own, as of member epoch `epoch`."""

    epoch: int
    active: frozenset[TaskId]
    standby: frozenset[TaskId] = frozenset()
    warmup: frozenset[TaskId] = frozenset()


@dataclass
class _Owned:
    active: set[TaskId] = field(default_factory=set)
    standby: set[TaskId] = field(default_factory=set)
    reported: bool = False  # sent to the coordinator since it last changed


class StreamsMember:
    """One member of a Streams group: its heartbeat thread, its target and what it owns.

    `topology` is sent when joining; `process_id` is the instance's (its threads share it:
    the coordinator puts a task's standbys on other processes); `instance_id` makes the member
    static (a restart within the session keeps its tasks)."""

    def __init__(
        self,
        client: StreamsGroupClient,
        group_id: str,
        topology: StreamsTopology,
        *,
        process_id: str,
        instance_id: str | None = None,
        endpoint: tuple[str, int] | None = None,
        rebalance_timeout_ms: int = 300_000,
        name: str = "",
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.topology = topology
        self.process_id = process_id
        self.instance_id = instance_id
        self.endpoint = endpoint
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = uuid.uuid4().hex  # the client's own, kept across rejoins
        self.name = name or f"kstream-streams-group-{group_id}"
        self._lock = threading.Lock()  # the state below
        self._io = threading.Lock()  # the protocol client: one request at a time
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._epoch = 0  # the coordinator's epoch for this member; 0: (re)joining
        self._applied_epoch = 0  # the epoch of the last target the stream thread applied
        self._interval_s = 0.25
        self._target: Target | None = None
        self._lost = False
        self._owned = _Owned()
        self._statuses: tuple[tuple[int, str], ...] = ()
        # each member's Interactive Queries endpoint ("host:port") by the input partitions of
        # its active tasks, as the coordinator last told (its epoch: sent back, so the map
        # comes again only when it changed)
        self._owners: dict[tuple[str, int], str] = {}
        self._endpoint_epoch = 0
        self.error: BaseException | None = None
        #: heartbeats answered, joins (first and after a fence) and fences, for tests and logs
        self.heartbeats = 0
        self.joins = 0
        self.fences = 0

    # --- the stream thread's side ---------------------------------------------------------

    def start(self) -> None:
        """Join the group (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def take_target(self) -> Target | None:
        """The newest target not yet taken (None: none since the last)."""
        with self._lock:
            target, self._target = self._target, None
            return target

    def take_lost(self) -> bool:
        """Whether the member was fenced since the last call: every task it owned is lost."""
        with self._lock:
            lost, self._lost = self._lost, False
            return lost

    def applied(self, target: Target, active: set[TaskId], standby: set[TaskId]) -> None:
        """The stream thread applied `target` and owns `active` and `standby` now; the
        next heartbeat, sent at once, reports them."""
        with self._lock:
            self._applied_epoch = target.epoch
            self._owned = _Owned(set(active), set(standby))
        self._wake.set()

    def metadata(self) -> bytes:
        """The group metadata a transaction commits offsets with: this member at the epoch
        of the target last applied."""
        with self._lock:
            epoch = self._applied_epoch
        return group_metadata(self.group_id, self.member_id, epoch, self.instance_id)

    def commit_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Commit `offsets` outside a transaction (at_least_once), as this member."""
        with self._lock:
            epoch = self._applied_epoch
        with self._io:
            self.client.offset_commit(
                self.group_id, self.member_id, epoch, offsets, instance_id=self.instance_id
            )

    def endpoint_of(self, topic: str, partition: int) -> str | None:
        """The endpoint ("host:port") of the member whose active task reads `topic[partition]`,
        as the group's coordinator last told (None: unknown, or no member has an endpoint)."""
        with self._lock:
            return self._owners.get((topic, partition))

    def rejoin(self) -> None:
        """Leave and join again with epoch 0 (the stream thread gave up every task)."""
        with self._lock:
            self._leave_locked()
            self._epoch = 0
            self._target = None
            self._owned = _Owned()
        self._wake.set()

    def close(self) -> None:
        """Stop heartbeating and leave the group (a static member keeps its tasks for the
        session timeout, as Kafka Streams' static members do)."""
        self._closing.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(30)
        with self._lock:
            self._leave_locked()
        self.client.close()

    # --- the heartbeat thread -------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            wait = self._interval_s
            try:
                with self._lock:
                    request, sent = self._request()
                # the state lock is not held over the call: the stream thread's commits read
                # the metadata meanwhile (an answer to a request overtaken by a rejoin is
                # dropped in _answer)
                with self._io:
                    response = self.client.heartbeat(request)
                with self._lock:
                    wait = self._answer(request, sent, response)
            except StreamsGroupFatalError as e:
                self.error = e
                log.error("%s", e)
                return
            except Exception as e:  # no answer in time (StreamsGroupError REQUEST_TIMED_OUT,
                # NETWORK_EXCEPTION): the coordinator away; the session may end meanwhile
                log.warning("streams group %r: heartbeat failed: %s (retrying)", self.group_id, e)
                wait = RETRY_S
            self._wake.wait(wait)
            self._wake.clear()

    def _request(self) -> tuple[HeartbeatRequest, _Owned]:
        """The next heartbeat, and the ownership it reports (marked reported if answered)."""
        owned = self._owned
        if self._epoch == 0:
            return HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=0,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                topology=self.topology,
                instance_id=self.instance_id,
                process_id=self.process_id,
                user_endpoint=self.endpoint,
                endpoint_information_epoch=self._endpoint_epoch,
                active_tasks={},
                standby_tasks={},
                warmup_tasks={},
            ), owned
        changed = not owned.reported
        return HeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self._epoch,
            instance_id=self.instance_id,
            endpoint_information_epoch=self._endpoint_epoch,
            active_tasks=task_ids(owned.active) if changed else None,
            standby_tasks=task_ids(owned.standby) if changed else None,
            warmup_tasks={} if changed else None,
        ), owned

    def _answer(
        self, request: HeartbeatRequest, sent: _Owned, response: HeartbeatResponse
    ) -> float:
        """Apply one answer; returns the wait before the next heartbeat."""
        if request.member_epoch != self._epoch:
            return 0.0  # a rejoin overtook the request: its answer is stale
        outcome = OUTCOMES.get(response.error_name, Outcome.FATAL)
        if outcome is Outcome.FATAL:
            raise self._fatal(response.error_name, response.error_message)
        if outcome is Outcome.RETRY:
            log.info(
                "streams group %r: %s (%s); retrying",
                self.group_id,
                response.error_name,
                response.error_message or "",
            )
            return RETRY_S
        if outcome is Outcome.FENCED:
            self.fences += 1
            log.warning(
                "streams group %r: member %s fenced (%s: %s): its tasks are lost; rejoining",
                self.group_id,
                self.member_id,
                response.error_name,
                response.error_message or "",
            )
            self._epoch = 0
            self._target = None
            self._lost = True
            self._owned = _Owned()
            return 0.0
        self.heartbeats += 1
        if request.member_epoch == 0:
            self.joins += 1
        if request.active_tasks is not None and sent is self._owned:
            self._owned.reported = True
        self._epoch = response.member_epoch
        self._interval_s = max(0.05, response.heartbeat_interval_ms / 1000)
        self._note_statuses(response.statuses)
        if response.partitions_by_user_endpoint is not None:
            self._endpoint_epoch = response.endpoint_information_epoch
            self._owners = {
                (topic, p): f"{host}:{port}"
                for (host, port), (active, _standby) in response.partitions_by_user_endpoint.items()
                for topic, parts in active.items()
                for p in parts
            }
        if (
            response.active_tasks is not None
            or response.standby_tasks is not None
            or response.warmup_tasks is not None
        ):
            prev = self._target
            self._target = Target(
                response.member_epoch,
                frozenset(
                    tasks_of(response.active_tasks)
                    if response.active_tasks is not None
                    else (prev.active if prev else self._owned.active)
                ),
                frozenset(tasks_of(response.standby_tasks)),
                frozenset(tasks_of(response.warmup_tasks)),
            )
        return self._interval_s

    def _note_statuses(self, statuses: list[tuple[int, str]]) -> None:
        current = tuple(statuses)
        if current == self._statuses:
            return
        self._statuses = current
        for code, detail in current:
            name = STATUS_NAMES.get(code, str(code))
            if name in FATAL_STATUSES:
                raise self._fatal(name, detail)
            log.info("streams group %r: %s: %s", self.group_id, name, detail)

    def _fatal(self, name: str, message: str | None) -> StreamsGroupFatalError:
        advice = ADVICE.get(name)
        return StreamsGroupFatalError(
            f"streams group {self.group_id!r} refused member {self.member_id}: {name}"
            + (f": {message}" if message else "")
            + (f" ({advice})" if advice else "")
        )

    def _leave_locked(self) -> None:
        if self._epoch <= 0:
            return
        epoch = STATIC_LEAVE_EPOCH if self.instance_id else LEAVE_EPOCH
        try:
            with self._io:
                self.client.heartbeat(
                    HeartbeatRequest(
                        group_id=self.group_id,
                        member_id=self.member_id,
                        member_epoch=epoch,
                        instance_id=self.instance_id,
                    )
                )
        except Exception as e:  # the session ends by itself
            log.info("streams group %r: leaving: %s", self.group_id, e)
        self._epoch = 0

    def describe_state(self) -> dict[str, Any]:
        """What the member knows, for logs and tests."""
        with self._lock:
            return {
                "member_id": self.member_id,
                "epoch": self._epoch,
                "applied_epoch": self._applied_epoch,
                "active": sorted(self._owned.active),
                "heartbeats": self.heartbeats,
                "joins": self.joins,
                "fences": self.fences,
                "at": time.monotonic(),
            }
