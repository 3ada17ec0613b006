"""The protocol client of Kafka Streams' rebalance protocol (KIP-1071, "streams" groups).

A streams group is a group whose coordinator assigns tasks (a sub-topology and a partition),
not partitions: each member joins with the topology, heartbeats the tasks it owns, and gets
back the tasks it should own (active, standby, warm-up), statuses about the group (missing
source topics, internal topics being created...) and, per Interactive Queries endpoint, the
partitions each instance serves. docs/architecture.md, "The Streams rebalance protocol", says
what Apache Kafka 4.4.0 does with it.

Contract. `StreamsGroupClient` carries the group's RPCs and nothing else: it keeps no member
state (the member id, the epoch and the owned tasks are the caller's: the runtime's heartbeat
thread), so one call is one exchange with the group's coordinator:

- `heartbeat(request)` sends one StreamsGroupHeartbeat. It finds the group's coordinator and
  keeps it; when the answer is NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
  COORDINATOR_LOAD_IN_PROGRESS, or the connection fails, it finds the coordinator again and
  resends, until `request_timeout_s` has passed. Every other error comes back in the response,
  not raised: what FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID mean (rejoin with epoch 0, tasks
  lost) is the member's decision. Only the loss of the coordinator for the whole timeout, a
  refused authentication and a broker without the RPC raise `StreamsGroupError`.
- `describe(group_id)` (StreamsGroupDescribe) and `offset_commit(...)` (OffsetCommit v9, the
  first version a streams group accepts from a plain commit: at-least-once) retry the same way
  and raise `StreamsGroupError` on any other error.
- `supports_streams_groups()` asks ApiVersions, and the coordinator, whether the cluster
  speaks the protocol; `group_type(group_id)` asks the coordinator which type of group (classic,
  consumer, streams) has an id, and whether it has members (its state).

The calls of one client are serialized (a lock): the heartbeat thread and a stream thread's
at-least-once commit may share it, one waiting for the other's exchange.

`group_metadata(...)` builds the consumer group metadata librdkafka serializes for
`Producer.send_offsets_to_transaction`: with the streams member's id and epoch in it, the
coordinator fences a stale member's exactly-once commit as it fences a stale consumer's.

Why kafka-python. librdkafka cannot send requests it does not know. kafka-python 3.x generates
its protocol classes from Kafka's own message definitions (kstream.kafka.messages ships the four
streams ones), negotiates versions, and speaks TLS and SASL; kstream.kafka.protocol_client
carries the app's librdkafka-style settings over to it and refuses, naming the key, a security
setting it cannot carry over, rather than connecting differently from the data clients.
kafka-python is imported when the first client is made: `import kstream` does not pay for it.

The types are the interface the runtime builds on; they, their conversions to and from the
wire's fields and `group_metadata` live in kstream.kafka.streams_group_messages and are
re-exported here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kstream.errors import ConfigError, KafkaClientError
from kstream.kafka import protocol_client
from kstream.kafka.streams_group_messages import (  # the interface, re-exported
    COORDINATOR_ERRORS,
    NETWORK_EXCEPTION,
    REQUEST_TIMED_OUT,
    STATUS_NAMES,
    CopartitionGroup,
    GroupListing,
    HeartbeatRequest,
    HeartbeatResponse,
    StreamsGroupError,
    StreamsTopology,
    Subtopology,
    TaskIds,
    TopicInfo,
    commit_fields,
    describe_result,
    error_name,
    group_metadata,
    heartbeat_fields,
    heartbeat_response,
)

__all__ = [
    "STATUS_NAMES",
    "CopartitionGroup",
    "GroupListing",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "StreamsGroupClient",
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
# The client


class _Retry(Exception):
    """An exchange that may work when tried again (a transport failure, no coordinator yet)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class StreamsGroupClient:
    """The streams group RPCs over one kafka-python client (module docstring: the contract).

    Connects on the first call. `kafka`: the app's librdkafka-style settings; the security
    ones are carried over (`kstream.kafka.protocol_client.settings`), and one that cannot be
    raises ConfigError here. `request_timeout_s` bounds each call, retries included.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        kafka: Mapping[str, Any] | None = None,
        *,
        request_timeout_s: float = 10.0,
    ) -> None:
        if not request_timeout_s > 0:
            raise ConfigError(
                f"StreamsGroupClient: request_timeout_s must be > 0, got {request_timeout_s!r}"
            )
        self.bootstrap_servers = bootstrap_servers
        self.request_timeout_s = float(request_timeout_s)
        self._settings = protocol_client.settings(bootstrap_servers, kafka)
        self._settings["request_timeout_ms"] = int(self.request_timeout_s * 1000)
        self._lock = threading.Lock()
        self._net: Any = None  # kafka-python's KafkaNetClient, made on the first call
        self._manager: Any = None  # and its connection manager (protocol_client.connect)
        self._coordinators: dict[str, Any] = {}  # group id -> kafka-python's node id for it
        self._deadline = 0.0  # of the call under way (monotonic)
        self._closed = False

    # -- the calls

    def supports_streams_groups(self, group_id: str = "kstream") -> bool:
        """Whether the cluster speaks the streams group protocol: ApiVersions offers
        StreamsGroupHeartbeat, the cluster has finalized the feature streams.version >= 1 (a
        new 4.2+ cluster has it; one upgraded from an older release once an operator
        finalizes it with kafka-features.sh), and the group coordinator has the protocol on.

        The last one ApiVersions does not tell: a broker whose `group.coordinator.rebalance.
        protocols` leaves out `streams` still lists the RPCs (Apache Kafka 4.4.0) and answers
        each with UNSUPPORTED_VERSION. So the coordinator of `group_id` is asked too, with a
        StreamsGroupDescribe, which changes nothing: any answer but UNSUPPORTED_VERSION (the
        group, GROUP_ID_NOT_FOUND) means it has the protocol on."""
        from kafka.protocol.metadata import ApiVersionsRequest

        from kstream.kafka.messages import StreamsGroupHeartbeatRequest

        def ask() -> Any:
            request = ApiVersionsRequest(
                client_software_name="kstream", client_software_version="1"
            )
            return self._send(self._net.least_loaded_node(bootstrap_fallback=True), request)

        response = self._retrying(None, ask, lambda r: r.error_code)
        if response.error_code:
            raise StreamsGroupError("ApiVersions", error_code=response.error_code)
        keys = {k.api_key for k in response.api_keys}
        features = {f.name: f.max_version_level for f in response.finalized_features or []}
        if (
            StreamsGroupHeartbeatRequest.API_KEY not in keys
            or features.get("streams.version", 0) < 1
        ):
            return False
        try:
            self.describe(group_id)
        except StreamsGroupError as e:
            if e.name == "UNSUPPORTED_VERSION":
                return False
            if e.name != "GROUP_ID_NOT_FOUND":
                raise
        return True

    def group_type(self, group_id: str) -> GroupListing | None:
        """The type and state of the group `group_id` as its coordinator lists it (ListGroups,
        which a coordinator answers for the groups it coordinates), whatever its type:
        "classic", "consumer", "streams" or "share"; None when it has no group of that id
        (or the principal may not describe it). A broker before ListGroups v5 (Apache Kafka
        3.8) does not name types: every group there is classic."""
        from kafka.protocol.admin import ListGroupsRequest

        request = ListGroupsRequest(states_filter=[], types_filter=[])
        response = self._retrying(
            group_id, lambda: self._to_coordinator(group_id, request), lambda r: r.error_code
        )
        if response.error_code:
            raise StreamsGroupError(
                f"listing the groups of the coordinator of {group_id!r}",
                error_code=response.error_code,
            )
        for g in response.groups:
            if g.group_id == group_id:
                return GroupListing(
                    getattr(g, "group_type", None) or "classic",
                    getattr(g, "group_state", None) or "",
                )
        return None

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Send one StreamsGroupHeartbeat; errors other than a lost coordinator come back in
        the response. ValueError for a request of the wrong shape (`heartbeat_fields`)."""
        from kstream.kafka.messages import StreamsGroupHeartbeatRequest, build, fields

        values = heartbeat_fields(request)
        response = self._retrying(
            request.group_id,
            lambda: self._to_coordinator(
                request.group_id, build(StreamsGroupHeartbeatRequest, values)
            ),
            lambda r: r.error_code,
        )
        return heartbeat_response(fields(response))

    def describe(self, group_id: str) -> dict[str, Any]:
        """StreamsGroupDescribe of one group (`describe_result`); StreamsGroupError when the
        group cannot be described (GROUP_ID_NOT_FOUND: no such streams group)."""
        from kstream.kafka.messages import StreamsGroupDescribeRequest, build, fields

        values = {"group_ids": [group_id], "include_authorized_operations": False}
        response = self._retrying(
            group_id,
            lambda: self._to_coordinator(group_id, build(StreamsGroupDescribeRequest, values)),
            lambda r: r.groups[0].error_code if r.groups else 0,
        )
        group = fields(response)["groups"][0]
        if group["error_code"]:
            detail = f" ({group['error_message']})" if group.get("error_message") else ""
            raise StreamsGroupError(
                f"describing streams group {group_id!r}{detail}", error_code=group["error_code"]
            )
        return describe_result(group)

    def offset_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: Mapping[tuple[str, int], int],
        instance_id: str | None = None,
    ) -> None:
        """Commit `offsets` (the next offsets to read) as the member: OffsetCommit v9, which
        a streams group requires of a commit outside a transaction (at-least-once).
        StreamsGroupError naming the partitions when any is refused (UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH: the member must rejoin; the offsets stay as they were)."""
        from kafka.protocol.consumer import OffsetCommitRequest

        from kstream.kafka.messages import build

        if not offsets:
            return
        values = commit_fields(group_id, member_id, member_epoch, offsets, instance_id)

        def errors(r: Any) -> list[tuple[str, int, int]]:
            return [
                (t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions
            ]

        def first_coordinator_error(r: Any) -> int:
            return next((c for _, _, c in errors(r) if c in COORDINATOR_ERRORS), 0)

        response = self._retrying(
            group_id,
            # v9: the first version a streams group takes; v10 names topics by id
            lambda: self._to_coordinator(
                group_id, build(OffsetCommitRequest, values, min_version=9, max_version=9)
            ),
            first_coordinator_error,
        )
        refused = [(t, p, c) for t, p, c in errors(response) if c]
        if refused:
            where = ", ".join(f"{t}[{p}] {error_name(c)}" for t, p, c in refused)
            raise StreamsGroupError(
                f"committing offsets for streams group {group_id!r} as member {member_id!r} "
                f"epoch {member_epoch} was refused for {where}",
                error_code=refused[0][2],
            )

    def close(self) -> None:
        """Close the connections; later calls raise KafkaClientError."""
        with self._lock:
            self._closed = True
            net, self._net, self._manager = self._net, None, None
            if net is not None:
                net.close()

    def __enter__(self) -> StreamsGroupClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one loop: coordinator, send, retry

    def _retrying(
        self, group_id: str | None, exchange: Callable[[], Any], error_of: Callable[[Any], int]
    ) -> Any:
        """Run `exchange` until its response has no coordinator error, or the request timeout
        has passed: then the last response is returned (its error is the caller's), or, when
        no exchange got a response, StreamsGroupError (retriable) is raised. A coordinator
        error or a transport failure forgets the group's coordinator, so the next attempt
        finds it again; the attempts back off from 50 ms to 1 s."""
        with self._lock:
            if self._closed:
                raise KafkaClientError("StreamsGroupClient: closed")
            deadline = time.monotonic() + self.request_timeout_s
            self._deadline = deadline
            if self._manager is not None:
                self._manager.refused = None  # a refusal counts for the call that met it
            backoff = 0.05
            while True:
                try:
                    self._connect()
                    response = exchange()
                except _Retry as e:
                    if group_id is not None:
                        self._coordinators.pop(group_id, None)
                    if time.monotonic() + backoff >= deadline:
                        where = f" for group {group_id!r}" if group_id else ""
                        raise StreamsGroupError(
                            f"no answer from Kafka at {self.bootstrap_servers!r}{where} within "
                            f"{self.request_timeout_s:g}s (last: {e})",
                            error_code=e.error_code,
                            retriable=True,
                        ) from None
                else:
                    if error_of(response) not in COORDINATOR_ERRORS:
                        return response
                    if group_id is not None:
                        self._coordinators.pop(group_id, None)
                    if time.monotonic() + backoff >= deadline:
                        return response
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def _remaining_ms(self) -> int:
        return max(1, int((self._deadline - time.monotonic()) * 1000))

    def _connect(self) -> None:
        """Make kafka-python's client on first use, and bootstrap it (the cluster's brokers).

        The bootstrap runs on kafka-python's own schedule; this waits on it in slices, so a
        refused authentication raises at once (kafka-python would retry it to the end of
        the timeout, only logging why)."""
        if self._net is None:
            self._net, self._manager = protocol_client.connect(self._settings)
        manager = self._manager
        if manager.bootstrapped:
            return
        future = manager.bootstrap_async(self._remaining_ms())
        while not future.is_done:
            self._net.poll(timeout_ms=min(100, self._remaining_ms()), future=future)
            if manager.refused is not None:
                raise self._classify(manager.refused, "connecting")
            if time.monotonic() >= self._deadline:
                raise _Retry(REQUEST_TIMED_OUT, f"connecting: {self._why()}")
        if future.failed():
            raise self._classify(future.exception, "connecting")

    def _why(self) -> str:
        last = self._manager.last_failure if self._manager is not None else None
        return "no broker answered" if last is None else f"last failure: {last}"

    def _send(self, node: Any, request: Any) -> Any:
        from kafka import errors as kerrors

        try:
            return self._net.send_and_receive(node, request, timeout_ms=self._remaining_ms())
        except kerrors.KafkaError as e:
            raise self._classify(e, f"{type(request).__name__} to node {node}") from None

    def _classify(self, e: BaseException, doing: str) -> Exception:
        """kafka-python's exception as a `_Retry` (the transport, a timeout) or, for what a
        retry will not fix (an authentication refused, a broker without the RPC: an error
        with a Kafka error code that is not retriable), StreamsGroupError. A transport failure
        whose connection was refused so is that refusal."""
        from kafka import errors as kerrors

        if isinstance(e, kerrors.KafkaConnectionError | kerrors.NodeNotReadyError):
            refused = self._manager.refused if self._manager is not None else None
            e = refused or e
        code = getattr(e, "errno", None)
        if isinstance(code, int) and not isinstance(e, kerrors.RetriableError):
            return StreamsGroupError(
                f"{doing} at {self.bootstrap_servers!r}: {e}", error_code=code, retriable=False
            )
        timed_out = isinstance(e, kerrors.KafkaTimeoutError | kerrors.RequestTimedOutError)
        return _Retry(
            REQUEST_TIMED_OUT if timed_out else NETWORK_EXCEPTION, f"{doing}: {e!r}; {self._why()}"
        )

    def _coordinator(self, group_id: str) -> Any:
        """The group's coordinator as kafka-python's node id (its own connection), found with
        FindCoordinator and kept until an error says it moved."""
        node = self._coordinators.get(group_id)
        if node is not None:
            return node
        from kafka.protocol.metadata import FindCoordinatorRequest

        # key and coordinator_keys both: kafka-python encodes the ones the version has
        request = FindCoordinatorRequest(key=group_id, key_type=0, coordinator_keys=[group_id])
        response = self._send(self._net.least_loaded_node(bootstrap_fallback=True), request)
        found = response.coordinators[0] if response.coordinators else response
        if found.error_code in COORDINATOR_ERRORS:
            raise _Retry(found.error_code, f"FindCoordinator: {error_name(found.error_code)}")
        if found.error_code:
            raise StreamsGroupError(
                f"finding the coordinator of group {group_id!r}", error_code=found.error_code
            )
        node = self._net.cluster.add_coordinator(found, 0, group_id)
        self._coordinators[group_id] = node
        return node

    def _to_coordinator(self, group_id: str, request: Any) -> Any:
        return self._send(self._coordinator(group_id), request)
