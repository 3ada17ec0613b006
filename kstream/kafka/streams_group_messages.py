"""The messages of Kafka Streams' rebalance protocol (KIP-1071) as kstream's types, and the
conversions between them and the wire's fields: the interface the runtime builds on
(kstream.kafka.streams_group carries them to the broker). Plain data and plain functions on
dicts, tested without a broker; `group_metadata` builds the consumer group metadata librdkafka
serializes for `Producer.send_offsets_to_transaction`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kstream.errors import KafkaClientError

__all__ = [
    "COORDINATOR_ERRORS",
    "STATUS_NAMES",
    "CopartitionGroup",
    "GroupListing",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "StreamsGroupError",
    "StreamsTopology",
    "Subtopology",
    "TaskIds",
    "TopicInfo",
    "commit_fields",
    "describe_result",
    "error_name",
    "group_metadata",
    "heartbeat_fields",
    "heartbeat_response",
]

# ---------------------------------------------------------------------------------------------
# The topology a member joins with, and the heartbeat


@dataclass(frozen=True)
class GroupListing:
    """A group as its coordinator lists it (ListGroups): its `type` ("classic", "consumer",
    "streams", "share") and `state` ("Empty": no member; "Stable", "PreparingRebalance",
    "Assigning", ...: members; "Dead": going away)."""

    type: str
    state: str

    @property
    def has_members(self) -> bool:
        return self.state not in ("Empty", "Dead")


@dataclass(frozen=True)
class TopicInfo:
    """An internal topic the coordinator creates when it is missing: a changelog or a
    repartition topic. `partitions` 0: the broker derives it from the source topics (a
    changelog's must be 0); `replication_factor` 0: the broker's default."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CopartitionGroup:
    """Topics of one sub-topology that must have the same partition count (a join's sides):
    indexes into its `source_topics` and its `repartition_source_topics`."""

    source_topics: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True)
class Subtopology:
    """One sub-topology: its id (the tasks' first half), the topics it reads (source topics
    and the repartition topics it reads, which the broker creates), writes (repartition sinks)
    and the changelogs of its stores."""

    id: str
    source_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True)
class StreamsTopology:
    """What a member joins with. The group keeps the first topology it was given: Kafka 4.4.0
    refuses any other while the group exists (INVALID_REQUEST)."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]


#: subtopology id -> its partitions (sorted): the tasks of one kind
TaskIds = dict[str, list[int]]

#: the heartbeat's status codes (StreamsGroupHeartbeatResponse's Status)
STATUS_NAMES: dict[int, str] = {
    0: "STALE_TOPOLOGY",
    1: "MISSING_SOURCE_TOPICS",
    2: "INCORRECTLY_PARTITIONED_TOPICS",
    3: "MISSING_INTERNAL_TOPICS",
    4: "SHUTDOWN_APPLICATION",
    5: "ASSIGNMENT_DELAYED",
    6: "MISSING_CLIENT_TAGS",
}


@dataclass
class HeartbeatRequest:
    """One StreamsGroupHeartbeat.

    `member_epoch`: 0 to join (then `topology` and `rebalance_timeout_ms` > 0 are required),
    -1 to leave, -2 for a static member leaving for a while, else the last epoch received.
    The task lists are what the member owns now; None means unchanged since the last
    heartbeat, and the three are given together or not at all. `task_offsets` and
    `task_end_offsets` are (subtopology, partition, changelog offset sum) per task, sent every
    `HeartbeatResponse.task_offset_interval_ms`.
    """

    group_id: str
    member_id: str
    member_epoch: int
    rebalance_timeout_ms: int = -1
    topology: StreamsTopology | None = None
    instance_id: str | None = None
    rack_id: str | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: Mapping[str, str] | None = None
    active_tasks: TaskIds | None = None
    standby_tasks: TaskIds | None = None
    warmup_tasks: TaskIds | None = None
    task_offsets: list[tuple[str, int, int]] | None = None
    task_end_offsets: list[tuple[str, int, int]] | None = None
    endpoint_information_epoch: int = 0
    shutdown_application: bool = False


@dataclass
class HeartbeatResponse:
    """The coordinator's answer. `error_code` 0 is success; the target task lists are None
    when unchanged since the previous answer. `partitions_by_user_endpoint` maps each
    Interactive Queries endpoint to (active partitions by topic, standby and warm-up
    partitions by topic), the entries of one endpoint's members merged; None when unchanged.
    `statuses`: (code, detail), the code's name in `STATUS_NAMES`."""

    error_code: int
    error_message: str | None
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    acceptable_recovery_lag: int
    task_offset_interval_ms: int
    statuses: list[tuple[int, str]]
    active_tasks: TaskIds | None
    standby_tasks: TaskIds | None
    warmup_tasks: TaskIds | None
    endpoint_information_epoch: int
    partitions_by_user_endpoint: (
        dict[tuple[str, int], tuple[dict[str, list[int]], dict[str, list[int]]]] | None
    )
    throttle_time_ms: int = 0
    #: v1: the broker wants a topology description (KIP-1331's optional plugin); kstream
    #: sends none
    topology_description_required: bool = False

    @property
    def error_name(self) -> str:
        """Kafka's name of `error_code` ("NONE", "FENCED_MEMBER_EPOCH", ...)."""
        return error_name(self.error_code)

    @property
    def status_names(self) -> list[str]:
        return [STATUS_NAMES.get(code, f"STATUS_{code}") for code, _ in self.statuses]


# ---------------------------------------------------------------------------------------------
# Errors

#: Kafka's names of the error codes these RPCs document, and a few around them
_ERROR_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR",
    0: "NONE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    7: "REQUEST_TIMED_OUT",
    13: "NETWORK_EXCEPTION",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    22: "ILLEGAL_GENERATION",
    24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS",
    28: "INVALID_COMMIT_OFFSET_SIZE",
    29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    35: "UNSUPPORTED_VERSION",
    42: "INVALID_REQUEST",
    58: "SASL_AUTHENTICATION_FAILED",
    69: "GROUP_ID_NOT_FOUND",
    81: "GROUP_MAX_SIZE_REACHED",
    82: "FENCED_INSTANCE_ID",
    110: "FENCED_MEMBER_EPOCH",
    111: "UNRELEASED_INSTANCE_ID",
    113: "STALE_MEMBER_EPOCH",
    130: "STREAMS_INVALID_TOPOLOGY",
    131: "STREAMS_INVALID_TOPOLOGY_EPOCH",
    132: "STREAMS_TOPOLOGY_FENCED",
}
REQUEST_TIMED_OUT, NETWORK_EXCEPTION = 7, 13
#: the coordinator moved or is starting: find it again and resend
COORDINATOR_ERRORS = frozenset({14, 15, 16})
#: errors a later call may not meet again (the transport, the coordinator's state)
_RETRIABLE = COORDINATOR_ERRORS | {REQUEST_TIMED_OUT, NETWORK_EXCEPTION, 27}


def error_name(code: int) -> str:
    """Kafka's name of an error code; for a code outside the table, kafka-python's."""
    name = _ERROR_NAMES.get(code)
    if name is not None:
        return name
    try:
        from kafka.errors import for_code
    except ImportError:  # pragma: no cover - kafka-python is a dependency
        return f"ERROR_{code}"
    found = getattr(for_code(code), "message", None)
    return str(found) if isinstance(found, str) and found != "UNKNOWN" else f"ERROR_{code}"


class StreamsGroupError(KafkaClientError):
    """A streams-group RPC failed. `error_code` is Kafka's code, `name` its name; `code` holds
    the name too, as for every `KafkaClientError`. `retriable`: the same call may succeed
    later (the coordinator was unreachable for the whole request timeout, ...)."""

    def __init__(self, message: str, *, error_code: int, retriable: bool | None = None) -> None:
        self.error_code = error_code
        self.name = error_name(error_code)
        if retriable is None:
            retriable = error_code in _RETRIABLE
        text = message if self.name in message else f"{message}: {self.name}"
        super().__init__(text, code=self.name, retriable=retriable)


# ---------------------------------------------------------------------------------------------
# Exactly-once commits: the group metadata of a transaction

_CGMD = b"CGMDv2:"


def group_metadata(
    group_id: str, member_id: str, member_epoch: int, instance_id: str | None = None
) -> bytes:
    """librdkafka's serialized consumer group metadata for `Producer.send_offsets_to_transaction`,
    carrying a streams member's id and epoch.

    The format is rd_kafka_consumer_group_metadata_write's, which is what confluent-kafka's
    `Consumer.consumer_group_metadata()` returns and what `send_offsets_to_transaction` reads
    back: "CGMDv2:", the generation as a native int32, the group id, NUL, the member id, NUL,
    a byte that is 1 when there is no instance id, else 0 and the instance id and NUL. The
    transaction's TxnOffsetCommit then carries the member id and epoch, so the coordinator
    refuses a member that left (UNKNOWN_MEMBER_ID) or whose epoch moved on for a task it no
    longer owns (ILLEGAL_GENERATION): abortable errors, the batch replays. librdkafka's reader
    takes printable characters only, so other characters are refused here.
    """
    parts = {"group_id": group_id, "member_id": member_id}
    if instance_id is not None:
        parts["instance_id"] = instance_id
    for what, text in parts.items():
        if not all(" " <= c <= "~" for c in text):
            raise ValueError(
                f"group_metadata: {what} {text!r} has characters librdkafka's metadata reader "
                "refuses (printable ASCII only)"
            )
    blob = _CGMD + struct.pack("=i", member_epoch)
    blob += group_id.encode() + b"\0" + member_id.encode() + b"\0"
    if instance_id is None:
        return blob + b"\x01"
    return blob + b"\x00" + instance_id.encode() + b"\0"


# ---------------------------------------------------------------------------------------------
# kstream's types <-> the messages' fields (snake_case, as kafka-python names them)


def _task_list(tasks: TaskIds | None) -> list[dict[str, Any]] | None:
    if tasks is None:
        return None
    return [
        {"subtopology_id": sub, "partitions": sorted(parts)} for sub, parts in sorted(tasks.items())
    ]


def _offsets(offsets: list[tuple[str, int, int]] | None) -> list[dict[str, Any]] | None:
    if offsets is None:
        return None
    return [{"subtopology_id": s, "partition": p, "offset": o} for s, p, o in offsets]


def _topic_info(info: TopicInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "partitions": info.partitions,
        "replication_factor": info.replication_factor,
        "topic_configs": [{"key": k, "value": v} for k, v in sorted(info.configs.items())],
    }


def _topology(topology: StreamsTopology) -> dict[str, Any]:
    return {
        "epoch": topology.epoch,
        "subtopologies": [
            {
                "subtopology_id": sub.id,
                "source_topics": list(sub.source_topics),
                "source_topic_regex": [],
                "state_changelog_topics": [_topic_info(t) for t in sub.state_changelog_topics],
                "repartition_sink_topics": list(sub.repartition_sink_topics),
                "repartition_source_topics": [
                    _topic_info(t) for t in sub.repartition_source_topics
                ],
                "copartition_groups": [
                    {
                        "source_topics": list(g.source_topics),
                        "source_topic_regex": [],
                        "repartition_source_topics": list(g.repartition_source_topics),
                    }
                    for g in sub.copartition_groups
                ],
            }
            for sub in topology.subtopologies
        ],
    }


def heartbeat_fields(request: HeartbeatRequest) -> dict[str, Any]:
    """The StreamsGroupHeartbeatRequest fields of `request`.

    Raises ValueError where the broker would answer INVALID_REQUEST for the request's shape:
    a join without topology or rebalance timeout, a topology on any other heartbeat, the task
    lists given in part, a changelog with a partition count.
    """
    r = request
    tasks = (r.active_tasks, r.standby_tasks, r.warmup_tasks)
    if any(t is None for t in tasks) and any(t is not None for t in tasks):
        raise ValueError(
            "HeartbeatRequest: active_tasks, standby_tasks and warmup_tasks are sent together "
            "(all None when unchanged)"
        )
    if r.member_epoch == 0:
        if r.topology is None or r.rebalance_timeout_ms <= 0:
            raise ValueError(
                "HeartbeatRequest: joining (member_epoch 0) needs the topology and "
                "rebalance_timeout_ms > 0"
            )
        if any(t for t in tasks):
            raise ValueError("HeartbeatRequest: a member joins (member_epoch 0) owning no tasks")
        # the broker wants the three lists present and empty on a join (null is refused)
        tasks = ({}, {}, {})
    elif r.topology is not None:
        raise ValueError("HeartbeatRequest: the topology is sent only when joining (epoch 0)")
    if r.topology is not None:
        for sub in r.topology.subtopologies:
            for t in sub.state_changelog_topics:
                if t.partitions != 0:
                    raise ValueError(
                        f"HeartbeatRequest: changelog {t.name!r} of sub-topology {sub.id!r} "
                        f"has partitions={t.partitions}; the broker derives a changelog's "
                        "count (0)"
                    )
    return {
        "group_id": r.group_id,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "endpoint_information_epoch": r.endpoint_information_epoch,
        "instance_id": r.instance_id,
        "rack_id": r.rack_id,
        "rebalance_timeout_ms": r.rebalance_timeout_ms,
        "topology": None if r.topology is None else _topology(r.topology),
        "active_tasks": _task_list(tasks[0]),
        "standby_tasks": _task_list(tasks[1]),
        "warmup_tasks": _task_list(tasks[2]),
        "process_id": r.process_id,
        "user_endpoint": (
            None
            if r.user_endpoint is None
            else {"host": r.user_endpoint[0], "port": r.user_endpoint[1]}
        ),
        "client_tags": (
            None
            if r.client_tags is None
            else [{"key": k, "value": v} for k, v in sorted(r.client_tags.items())]
        ),
        "task_offsets": _offsets(r.task_offsets),
        "task_end_offsets": _offsets(r.task_end_offsets),
        "shutdown_application": r.shutdown_application,
    }


def _tasks(entries: Iterable[Mapping[str, Any]] | None) -> TaskIds | None:
    if entries is None:
        return None
    out: TaskIds = {}
    for e in entries:
        out.setdefault(e["subtopology_id"], []).extend(e["partitions"])
    return {sub: sorted(set(parts)) for sub, parts in out.items()}


def _by_topic(entries: Iterable[Mapping[str, Any]], into: dict[str, list[int]]) -> None:
    for e in entries:
        into[e["topic"]] = sorted(set(into.get(e["topic"], [])) | set(e["partitions"]))


def heartbeat_response(f: Mapping[str, Any]) -> HeartbeatResponse:
    """A `HeartbeatResponse` from the StreamsGroupHeartbeatResponse fields (v0 or v1)."""
    endpoints: dict[tuple[str, int], tuple[dict[str, list[int]], dict[str, list[int]]]] | None = (
        None
    )
    if f.get("partitions_by_user_endpoint") is not None:
        endpoints = {}
        # one entry per member: the threads of one instance share its endpoint
        for e in f["partitions_by_user_endpoint"]:
            key = (e["user_endpoint"]["host"], int(e["user_endpoint"]["port"]))
            active, standby = endpoints.setdefault(key, ({}, {}))
            _by_topic(e["active_partitions"], active)
            _by_topic(e["standby_partitions"], standby)
    lag = f.get("acceptable_recovery_lag", f.get("acceptable_recovery_lag_legacy", -1))
    return HeartbeatResponse(
        error_code=f["error_code"],
        error_message=f.get("error_message"),
        member_id=f["member_id"],
        member_epoch=f["member_epoch"],
        heartbeat_interval_ms=f["heartbeat_interval_ms"],
        acceptable_recovery_lag=-1 if lag is None else int(lag),
        task_offset_interval_ms=f["task_offset_interval_ms"],
        statuses=[(s["status_code"], s["status_detail"]) for s in f.get("status") or []],
        active_tasks=_tasks(f.get("active_tasks")),
        standby_tasks=_tasks(f.get("standby_tasks")),
        warmup_tasks=_tasks(f.get("warmup_tasks")),
        endpoint_information_epoch=f["endpoint_information_epoch"],
        partitions_by_user_endpoint=endpoints,
        throttle_time_ms=f.get("throttle_time_ms", 0),
        topology_description_required=bool(f.get("topology_description_required", False)),
    )


def _described_topic(t: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": t["name"],
        "partitions": t["partitions"],
        "replication_factor": t["replication_factor"],
        "configs": {kv["key"]: kv["value"] for kv in t["topic_configs"]},
    }


def _assignment(a: Mapping[str, Any]) -> dict[str, TaskIds]:
    return {
        "active": _tasks(a["active_tasks"]) or {},
        "standby": _tasks(a["standby_tasks"]) or {},
        "warmup": _tasks(a["warmup_tasks"]) or {},
    }


def describe_result(g: Mapping[str, Any]) -> dict[str, Any]:
    """One described group (StreamsGroupDescribeResponse's DescribedGroup) as plain data:
    state, epochs, the topology as the group has it configured (changelogs with their real
    partition counts) and the members with their current and target assignments."""
    topology = g.get("topology")
    return {
        "group_id": g["group_id"],
        "state": g["group_state"],
        "group_epoch": g["group_epoch"],
        "assignment_epoch": g["assignment_epoch"],
        "assignor": g.get("assignor_name"),
        "topology": None
        if topology is None
        else {
            "epoch": topology["epoch"],
            "subtopologies": [
                {
                    "id": s["subtopology_id"],
                    "source_topics": list(s["source_topics"]),
                    "repartition_sink_topics": list(s["repartition_sink_topics"]),
                    "state_changelog_topics": [
                        _described_topic(t) for t in s["state_changelog_topics"]
                    ],
                    "repartition_source_topics": [
                        _described_topic(t) for t in s["repartition_source_topics"]
                    ],
                }
                for s in topology.get("subtopologies") or []
            ],
        },
        "members": [
            {
                "member_id": m["member_id"],
                "member_epoch": m["member_epoch"],
                "instance_id": m["instance_id"],
                "rack_id": m["rack_id"],
                "client_id": m["client_id"],
                "client_host": m["client_host"],
                "topology_epoch": m["topology_epoch"],
                "process_id": m["process_id"],
                "user_endpoint": None
                if m["user_endpoint"] is None
                else (m["user_endpoint"]["host"], int(m["user_endpoint"]["port"])),
                "client_tags": {kv["key"]: kv["value"] for kv in m["client_tags"]},
                "task_offsets": [
                    (o["subtopology_id"], o["partition"], o["offset"]) for o in m["task_offsets"]
                ],
                "task_end_offsets": [
                    (o["subtopology_id"], o["partition"], o["offset"])
                    for o in m["task_end_offsets"]
                ],
                "assignment": _assignment(m["assignment"]),
                "target_assignment": _assignment(m["target_assignment"]),
                "is_classic": m["is_classic"],
            }
            for m in g["members"]
        ],
    }


def commit_fields(
    group_id: str,
    member_id: str,
    member_epoch: int,
    offsets: Mapping[tuple[str, int], int],
    instance_id: str | None = None,
) -> dict[str, Any]:
    """The OffsetCommitRequest (v9) fields committing `offsets` (the next offsets to read) as
    the streams member `member_id` at `member_epoch`."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    return {
        "group_id": group_id,
        "generation_id_or_member_epoch": member_epoch,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }
