"""`App`: runs a topology against Kafka (docs/api.md, "Running").

States: CREATED -> REBALANCING -> RUNNING (<-> REBALANCING) -> PENDING_SHUTDOWN -> NOT_RUNNING,
or ERROR when the stream thread stops on an error. Internal topics (repartition, changelogs,
the dedup changelogs and the dead-letter topic) are created by `start` (app_topics.py), so a
misconfigured cluster or a co-partitioning mismatch fails there, not on the first record.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kstream.broker_compat import compat_of, marks_spec
from kstream.config import (
    Config,
    prepare_state_dir,
    validate_app_id,
    validate_bootstrap_servers,
    validate_topic_names,
)
from kstream.errors import ConfigError, KStreamError, TopologyError
from kstream.guarantee import DEFAULT_GUARANTEE, parse_guarantee
from kstream.kafka.supplier import ClientSupplier, KafkaClientSupplier
from kstream.metrics import Metrics
from kstream.runtime.app_shutdown import ApplicationShutdown
from kstream.runtime.app_state import AppState, AppStates
from kstream.runtime.app_topics import create_topics, internal_topic_names
from kstream.runtime.failures import (
    StreamThreadExceptionResponse,
    UncaughtExceptionHandler,
    uncaught_response,
)
from kstream.runtime.instances import InstanceRegistry
from kstream.runtime.local_store import LocalStore
from kstream.runtime.process_id import process_id
from kstream.runtime.signals import graceful_signals
from kstream.runtime.slow_rebalance import RebalanceWatch
from kstream.runtime.state_lock import StateDirLock
from kstream.runtime.store_health import unanswered_store
from kstream.runtime.tasks import RuntimeContext
from kstream.runtime.thread import StreamThread
from kstream.runtime.workers import split_processes
from kstream.topology.topology import Topology

log = logging.getLogger("kstream.runtime")

__all__ = ["App", "AppState"]


class App:
    """A running instance of a topology in this process; instances with one `app_id` share
    the partitions.

    This is the app in one process: one stream thread. `kstream.App` (kstream.processes) is
    this class, except that with `config={"processes": N}` it builds an `AppProcesses`
    instead, which runs the app in N worker processes behind the same surface.
    """

    def __init__(
        self,
        topology: Any,
        app_id: str,
        bootstrap_servers: str,
        processing_guarantee: str = DEFAULT_GUARANTEE,
        config: Mapping[str, Any] | Config | None = None,
        client_supplier: ClientSupplier | None = None,
    ) -> None:
        config, processes = split_processes(config)
        if processes > 1:
            raise ConfigError(
                f"config['processes']: {processes} worker processes run through kstream.App "
                "(kstream.processes.AppProcesses); kstream.runtime.App runs in this process"
            )
        if isinstance(topology, str):
            from kstream.runtime.target import load_target

            topology = load_target(topology)
            if hasattr(topology, "app_id") and hasattr(topology, "start"):
                topology = topology.topology  # the arguments here say how to run it
        if not isinstance(topology, Topology) and hasattr(topology, "build"):
            topology = topology.build()
        if not isinstance(topology, Topology):
            raise TopologyError(f"App needs a Topology, got {topology!r}")
        self.topology = topology
        self.app_id = validate_app_id(app_id)
        self.bootstrap_servers = validate_bootstrap_servers(bootstrap_servers)
        # where the Kafka clients come from; kstream.testing.MockClientSupplier needs no broker
        self.client_supplier: ClientSupplier = (
            client_supplier if client_supplier is not None else KafkaClientSupplier()
        )
        self.processing_guarantee = parse_guarantee(processing_guarantee)
        self.config = config if isinstance(config, Config) else Config.from_mapping(config)
        self.compiled = topology.compile(app_id)
        validate_topic_names(app_id, internal_topic_names(self.compiled, app_id))
        # like Kafka Streams' constructor: an unusable state directory fails here, before any
        # topic is created
        prepare_state_dir(self.config.state_dir, app_id)
        self.metrics = Metrics(
            app_id, guarantee=self.processing_guarantee, stores=list(topology.stores)
        )
        # warns while a rebalance outlasts slow_rebalance_warning
        self._rebalance_watch = RebalanceWatch(
            app_id,
            self.config.slow_rebalance_warning,
            self.metrics,
            lambda: self._ctx.restoring if self._ctx is not None else 0,
            tansu=self.config.broker_compat == "tansu",
        )
        self._states = AppStates(app_id, self._state_changed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: StreamThread | None = None
        self._ctx: RuntimeContext | None = None
        self._dir_lock: StateDirLock | None = None
        self._uncaught: UncaughtExceptionHandler | None = None
        self._response: StreamThreadExceptionResponse | None = None
        self._partition_counts: dict[str, int] = {}
        self._app_shutdown: ApplicationShutdown | None = None
        self._shut_down_by: KStreamError | None = None
        # the instance registry (kstream.runtime.instances): the one `kstreamd run` attaches,
        # or the App's own when it keeps standby replicas; `_own_registry`: the App closes it
        self._registry: InstanceRegistry | None = None
        self._own_registry = False

    # --- state -----------------------------------------------------------------------------

    @property
    def state(self) -> AppState:
        return self._states.state

    def _set_state(self, new: AppState | str) -> None:
        self._states.move(new)

    def _state_changed(self, new: AppState) -> None:
        self.metrics.set_state(new.value)
        self._rebalance_watch.state_changed(new == AppState.REBALANCING)

    def on_state_change(self, listener: Callable[[AppState, AppState], None]) -> None:
        """Call `listener(new, old)` on every state change (from the thread that changed it)."""
        self._states.on_change(listener)

    def set_uncaught_exception_handler(self, handler: UncaughtExceptionHandler) -> None:
        """Ask `handler(error)` what to do when an error stops the stream thread: a
        `StreamThreadExceptionResponse` (kstream.runtime.failures). Without one the instance
        shuts down (SHUTDOWN_CLIENT), as in Kafka Streams; set it before `start()`."""
        if self.state != AppState.CREATED:
            raise KStreamError(
                f"app {self.app_id!r}: set_uncaught_exception_handler() in state "
                f"{self.state.value}; set it before start()"
            )
        self._uncaught = handler

    def wait_for(self, *states: AppState, timeout: float | None = None) -> bool:
        """Block until the state is one of `states` (True) or `timeout` passes (False)."""
        return self._states.wait_for(states, timeout)

    @property
    def ready(self) -> bool:
        """Running, with every assigned task's stores restored and answering."""
        return self.not_ready_reason() is None

    def not_ready_reason(self) -> str | None:
        """Why the app is not ready, or None: its state, stores being restored, or a remote
        store that has not answered for `store_health.STALL_S` seconds (the stream thread
        waits in the backend's retries meanwhile; liveness is not affected)."""
        if self.state != AppState.RUNNING:
            return f"state is {self.state.value}"
        if self._ctx is not None and self._ctx.restoring:
            return f"{self._ctx.restoring} task(s) restoring their stores"
        stream = self._stream
        waiting = stream.outage.reason() if stream is not None else None
        return waiting or self.not_live_reason() or unanswered_store(stream)

    @property
    def live(self) -> bool:
        """Not failed, and the stream thread's loop turning (kstream.runtime.watchdog)."""
        return self.not_live_reason() is None

    def not_live_reason(self) -> str | None:
        """Why the app is not live, or None: state ERROR, or a stream thread whose loop has
        not turned for `watchdog.STALL_S` (stuck in a call; the state cannot tell)."""
        if self.state == AppState.ERROR:
            return "state is ERROR"
        stream = self._stream
        if stream is None or self.state not in (AppState.RUNNING, AppState.REBALANCING):
            return None
        return stream.watchdog.problem()

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the stream thread, if any."""
        if self._stream is not None and self._stream.error is not None:
            return self._stream.error
        return self._shut_down_by

    def assigned_partitions(self) -> list[tuple[str, int]]:
        """The input (topic, partition) pairs this instance holds right now."""
        stream = self._stream
        if stream is None:
            return []
        return sorted(tp for rt in list(stream.tasks.values()) for tp in rt.tps)

    @property
    def processed(self) -> int:
        """Input records processed (including records of batches that were retried)."""
        return self._stream.processed if self._stream is not None else 0

    def attach_registry(self, registry: InstanceRegistry) -> bool:
        """Use `registry` (started by the caller, `kstreamd run`) as this instance's entry in
        the instance registry: the stream thread publishes its active and standby tasks to it
        and places standby replicas by it (True; `AppProcesses` answers False, its workers
        being instances of their own). Call it before `start()`."""
        self._registry = registry
        return True

    def group_endpoint(self, topic: str, partition: int) -> str | None:
        """Under `rebalance_protocol="streams"`: the HTTP endpoint ("host:port") of the
        instance whose active task reads `topic[partition]`, as the group's coordinator last
        told this instance (its members send their `http` address); None otherwise."""
        stream = self._stream
        member = getattr(stream.consumer, "member", None) if stream is not None else None
        return None if member is None else member.endpoint_of(topic, partition)

    def standby_partitions(self) -> list[tuple[str, int]]:
        """The input (topic, partition) pairs of the tasks this instance keeps standby
        replicas of right now."""
        stream = self._stream
        return [] if stream is None else stream.standbys.standby_partitions()

    def _start_registry(self) -> None:
        """With standby replicas and no registry attached: the App's own entry in the
        registry, under its process id (kept in the state directory, so a restart is the same
        instance) and its `http` address if it has one."""
        if self.config.num_standby_replicas <= 0 or self._registry is not None:
            return
        from kstream.runtime.instances import InstanceRegistry

        registry = InstanceRegistry(
            self.app_id,
            self.bootstrap_servers,
            instance_id=process_id(self.config.state_dir, self.app_id),
            endpoint=self.config.http or "",
            kafka=self.config.kafka,
            connect_timeout=self.config.connect_timeout,
            client_supplier=self.client_supplier,
        )
        registry.start()
        self._registry, self._own_registry = registry, True

    def _close_registry(self) -> None:
        if self._own_registry and self._registry is not None:
            self._registry.close()

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Create internal topics, then start the stream thread (returns at once)."""
        if self.state != AppState.CREATED:
            raise KStreamError(f"app {self.app_id!r}: start() in state {self.state.value}")
        self.lock_state_dir()
        try:
            counts = self.prepare_cluster()
            self._follow_shutdown_requests()
            self._start_registry()
        except BaseException:
            self._set_state(AppState.ERROR)
            self._release_state_dir()
            raise
        self._partition_counts = counts
        stream = self._new_stream_thread(counts)
        self._ctx, self._stream = stream.ctx, stream
        self._set_state(AppState.REBALANCING)
        self._thread = threading.Thread(
            target=self._run_thread, name=f"kstream-{self.app_id}", daemon=True
        )
        self._thread.start()

    def _choose_rebalance_protocol(self) -> None:
        """`rebalance_protocol` as the broker and the app's group allow: "auto" resolved, and
        a protocol the group's existing type refuses raised here, at start-up
        (kstream.runtime.streams_protocol)."""
        from kstream.runtime.streams_protocol import resolve, with_protocol

        cfg = self.config
        chosen = resolve(
            cfg.rebalance_protocol,
            self.app_id,
            self.bootstrap_servers,
            cfg.kafka,
            cfg.connect_timeout / 1000,
            own_clients=type(self.client_supplier) is not KafkaClientSupplier,
            tansu=cfg.broker_compat == "tansu",
        )
        self.config = with_protocol(cfg, chosen, self.app_id)

    def _follow_shutdown_requests(self) -> None:
        """Follow the app's shutdown requests (kstream.runtime.app_shutdown; `_create_topics`
        made their topic): another instance's SHUTDOWN_APPLICATION stops this one too."""
        self._app_shutdown = ApplicationShutdown(
            self.app_id,
            self.bootstrap_servers,
            self.config,
            self.client_supplier,
            self._shutdown_requested,
        )
        self._app_shutdown.start()

    def _shutdown_requested(self, reason: str) -> None:
        if self._shut_down_by is None:
            self._shut_down_by = KStreamError(
                f"app {self.app_id!r}: an instance's uncaught exception handler shut the "
                f"application down: {reason}"
            )
        self._stop.set()

    def lock_state_dir(self) -> None:
        """Lock `<state_dir>/<app_id>` for this instance until it closes (kstream.runtime.
        state_lock); `start()` does it, `kstreamd run` earlier, before it serves anything.

        Raises StateDirLockedError (a ConfigError) naming the directory and the holder's PID
        when another instance, in this process or another, holds it. Idempotent.
        """
        if self._dir_lock is None or not self._dir_lock.held:
            self._dir_lock = StateDirLock.acquire(self.config.state_dir, self.app_id)

    @property
    def state_dir_lock(self) -> StateDirLock | None:
        """This instance's lock on `<state_dir>/<app_id>` while it holds it."""
        return self._dir_lock

    def _release_state_dir(self) -> None:
        if self._dir_lock is not None:
            self._dir_lock.release()

    def prepare_cluster(self) -> dict[str, int]:
        """Create the internal topics and choose the rebalance protocol, as `start()` does
        first (so a worker process started later fails no differently); every topic's
        partition count."""
        counts = self._create_topics()
        self._choose_rebalance_protocol()
        return counts

    def _new_stream_thread(self, partition_counts: dict[str, int]) -> StreamThread:
        """The stream thread of this app, not started (`partition_counts`: every topic's)."""
        changelogs = set(self.compiled.changelog_topics)
        if compat_of(self.config).drop_repeats:
            changelogs |= {
                marks_spec(s.id).changelog_topic(self.app_id) for s in self.compiled.subtopologies
            }
        ctx = RuntimeContext(
            compiled=self.compiled,
            config=self.config,
            app_id=self.app_id,
            bootstrap_servers=self.bootstrap_servers,
            exactly_once=self.processing_guarantee in ("exactly_once", "exactly_once_v2"),
            partition_counts=partition_counts,
            changelog_topics=changelogs,
            global_views={},
            shared_transactions=self.processing_guarantee == "exactly_once_v2",
            client_supplier=self.client_supplier,
            store_metrics=self.metrics,
        )
        txn_id = f"{self.app_id}-{process_id(self.config.state_dir, self.app_id)}-1"
        stream = StreamThread(
            ctx, self._stop, self._thread_state, self.metrics, txn_id, membership=self._registry
        )
        return stream

    def _thread_state(self, new: AppState | str) -> None:
        """The stream thread's state changes; its ERROR first asks the uncaught exception
        handler, so a thread about to be replaced leaves the app's state alone."""
        if AppState(new) == AppState.ERROR and self._stream is not None:
            error = self._stream.error
            assert error is not None
            self._response = uncaught_response(self._uncaught, error)
            if self._replacing():
                log.warning("app %r: replacing the stream thread after: %s", self.app_id, error)
                return
            if self._response is StreamThreadExceptionResponse.SHUTDOWN_APPLICATION:
                # before this thread rolls back and leaves the group: the others stop before
                # its partitions reach them
                self._request_application_shutdown(error)
        self._set_state(new)

    def _replacing(self) -> bool:
        return (
            self._response is StreamThreadExceptionResponse.REPLACE_THREAD
            and not self._stop.is_set()
        )

    def _run_thread(self) -> None:
        assert self._stream is not None
        self._stream.run()
        while self._stream.error is not None and self._replacing():
            self._response = None
            stream = self._new_stream_thread(self._partition_counts)
            self._ctx, self._stream = stream.ctx, stream
            self._set_state(AppState.REBALANCING)
            stream.run()
        if self._stream.error is not None or self._shut_down_by is not None:
            self._set_state(AppState.ERROR)
        else:
            self._set_state(AppState.PENDING_SHUTDOWN)
            self._set_state(AppState.NOT_RUNNING)

    def _request_application_shutdown(self, error: BaseException) -> None:
        assert self._app_shutdown is not None
        try:
            self._app_shutdown.request(f"{type(error).__name__}: {error}")
        except Exception as e:
            log.error("app %r: could not ask the other instances to shut down: %s", self.app_id, e)

    def _create_topics(self) -> dict[str, int]:
        """Create the app's internal topics (`app_topics.create_topics`); every topic's
        partition count."""
        return create_topics(
            self.compiled, self.app_id, self.config, self.client_supplier, self.bootstrap_servers
        )

    def run(self) -> None:
        """Start (if needed) and block until SIGTERM/SIGINT or an error; then close.

        Raises the error that stopped the app, if any.
        """
        if self.state == AppState.CREATED:
            self.start()
        with graceful_signals(self._stop.set, f"app {self.app_id!r}"):
            assert self._thread is not None
            while self._thread.is_alive():
                self._thread.join(0.2)
            self.close()
        if self.error is not None:
            raise self.error

    def close(self, timeout: float | None = None) -> bool:
        """Stop gracefully (finish the batch, commit, close); True if it stopped in time."""
        if self.state == AppState.CREATED:
            self._set_state(AppState.PENDING_SHUTDOWN)
            self._set_state(AppState.NOT_RUNNING)
            self._release_state_dir()
            return True
        if self.state not in (AppState.ERROR, AppState.NOT_RUNNING):
            self._set_state(AppState.PENDING_SHUTDOWN)
        self._stop.set()
        if self._app_shutdown is not None:
            self._app_shutdown.close()
        stopped = True
        if self._thread is not None:
            self._thread.join(self.config.shutdown_timeout / 1000 if timeout is None else timeout)
            stopped = not self._thread.is_alive()
        if stopped:  # a thread still closing keeps the directory (and its process id) locked
            self._close_registry()
            self._release_state_dir()
        return stopped

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- queries ---------------------------------------------------------------------------

    def store(self, name: str, enable_stale_stores: bool = False) -> LocalStore:
        """A read-only view of store `name` over the partitions this instance holds.

        `enable_stale_stores` (Kafka's `StoreQueryParameters.enableStaleStores()`): the
        standby copies this instance keeps count too, after the active partitions; they may
        be behind their active task (`kstream_standby_lag_records`)."""
        return LocalStore(
            name, lambda: self._stores(name, enable_stale_stores), enable_stale_stores
        )

    def query(
        self,
        store: str,
        key: Any,
        enable_stale_stores: bool = False,
        as_of: int | None = None,
    ) -> Any:
        """The value of `key` in `store` from the local partitions (None if absent);
        `enable_stale_stores`: from the standby copies too (`store`). For a versioned store
        the answer is a `VersionedRecord`, with `as_of` the version valid at that time
        (Kafka's `VersionedKeyQuery.asOf`); `store(name).versions(...)` lists versions."""
        if as_of is None:
            return self.store(store, enable_stale_stores).get(key)
        return self.store(store, enable_stale_stores).get(key, as_of)

    def _stores(self, name: str, stale: bool = False) -> list[Any]:
        out = []
        if self._ctx is not None and name in self._ctx.global_views:
            return [self._ctx.global_views[name]]
        stream = self._stream
        if stream is not None:
            for rt in list(stream.tasks.values()):
                s = rt.task.stores.get(name)
                if s is not None:
                    out.append(s.read_only())
            if stale:
                out += stream.standbys.views(name)
        return out
