"""`TopologyTestDriver`: run a topology in-process, without a broker, record by record.

It runs the same `kstream.topology.task.Task` code as the runtime. Every topic has one
partition, so each sub-topology is one task. Each piped record is processed completely,
including its trips through repartition topics (and any other topic the topology both writes
and reads), and then every store is flushed, as Kafka's driver commits after each record.
Stream time follows the records; wall-clock time moves only with `advance_wall_clock`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from collections.abc import Iterable
from typing import Any

from kstream.duration import DurationLike, duration
from kstream.errors import TopologyError
from kstream.records import Headers, Record
from kstream.serde import Serde, SerdeLike, deserialize_records, serde, serialize_records
from kstream.state.build import build_store
from kstream.state.spec import StoreSpec
from kstream.topology.compiled import CompiledTopology
from kstream.topology.task import ErrorHandler, Task, fail_on_error
from kstream.topology.topology import Topology


class _Collector:
    def __init__(self, driver: TopologyTestDriver) -> None:
        self.driver = driver

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        self.driver._produced(topic, key, value, timestamp, headers)

    def partitions_for(self, topic: str) -> int:
        return 1


class TopologyTestDriver:
    """Drive a `Topology` (or anything with `build()`, e.g. a `StreamBuilder`) in-process."""

    def __init__(
        self,
        topology: Any,
        app_id: str = "test",
        initial_wall_clock: DurationLike = 0,
        *,
        state_dir: str | None = None,
        default_backend: str = "memory",
        error_handler: ErrorHandler = fail_on_error,
    ) -> None:
        if not isinstance(topology, Topology) and hasattr(topology, "build"):
            topology = topology.build()
        if not isinstance(topology, Topology):
            raise TopologyError(f"TopologyTestDriver needs a Topology, got {topology!r}")
        self.app_id = app_id
        self.compiled: CompiledTopology = topology.compile(app_id)
        self.compiled.resolve_partitions({t: 1 for t in self.compiled.external_source_topics})
        self.wall_clock = duration(initial_wall_clock, name="initial_wall_clock")
        self._own_dir = state_dir is None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="kstream-test-")
        self._outputs: dict[str, deque[Record]] = {}
        self._offsets: dict[str, int] = {}
        self._queue: deque[Record] = deque()
        self._closed = False
        collector = _Collector(self)
        self.tasks: list[Task] = []
        self.global_task: Task | None = None
        state_dir_, app = self.state_dir, self.compiled.app_id

        def open_task_store(spec: StoreSpec, partition: int) -> Any:
            # the runtime's assembly without its outer layers: the driver flushes after every
            # record, so there is no record cache, and it keeps no metrics
            return build_store(
                spec,
                partition=partition,
                app_id=app,
                state_dir=state_dir_,
                default_backend=default_backend,
            )

        try:
            glob: dict[str, Any] = {}
            if self.compiled.global_stores:
                self.global_task = Task(
                    self.compiled,
                    None,
                    0,
                    collector=collector,
                    open_store=open_task_store,
                    error_handler=error_handler,
                    wall_clock_ms=self.wall_clock,
                )
                glob = {n: s.read_only() for n, s in self.global_task.stores.items()}
            for sub in self.compiled.subtopologies:
                self.tasks.append(
                    Task(
                        self.compiled,
                        sub.id,
                        0,
                        collector=collector,
                        open_store=open_task_store,
                        error_handler=error_handler,
                        global_stores=glob,
                        wall_clock_ms=self.wall_clock,
                    )
                )
        except BaseException:
            self.close()
            raise
        self._task_of: dict[str, Task] = {}
        for t in self.tasks:
            for topic in t.source_topics:
                self._task_of[topic] = t
        if self.global_task is not None:
            for topic in self.global_task.source_topics:
                self._task_of[topic] = self.global_task

    # --- topics -----------------------------------------------------------------------------

    def input_topic(
        self,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        start_timestamp: int | None = None,
        auto_advance: DurationLike | None = None,
    ) -> TestInputTopic:
        if topic not in self._task_of:
            raise TopologyError(
                f"topic {topic!r} is not read by the topology (it reads {sorted(self._task_of)})"
            )
        return TestInputTopic(self, topic, key_serde, value_serde, start_timestamp, auto_advance)

    def output_topic(
        self, topic: str, key_serde: SerdeLike = None, value_serde: SerdeLike = None
    ) -> TestOutputTopic:
        return TestOutputTopic(self, topic, key_serde, value_serde)

    def produced_topics(self) -> list[str]:
        """Every topic some record was written to so far."""
        return list(self._outputs)

    # --- driving ----------------------------------------------------------------------------

    def pipe_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
    ) -> None:
        """Feed one serialized record to `topic` and process it completely."""
        if self._closed:
            raise TopologyError("the TopologyTestDriver is closed")
        if topic not in self._task_of:
            raise TopologyError(f"topic {topic!r} is not read by the topology")
        self._enqueue(topic, key, value, timestamp, headers)
        self._drain()

    def advance_wall_clock(self, amount: DurationLike) -> None:
        """Move the wall clock forward and fire the wall-clock punctuations that became due."""
        self.wall_clock += duration(amount, name="advance_wall_clock")
        for t in self._all_tasks():
            t.punctuate_wall_clock(self.wall_clock)
        self._drain()

    def get_store(self, name: str) -> Any:
        """The store `name` with read and write access (writes are visible at once)."""
        for t in self._all_tasks():
            if name in t.stores:
                return t.stores[name]
        names = sorted(n for t in self._all_tasks() for n in t.stores)
        raise TopologyError(f"no store {name!r} in the topology (stores: {names})")

    def dropped_records(self) -> dict[str, int]:
        """Records the topology dropped on purpose so far, by reason (late, null key, ...).

        The same counts a running app exports as `kstream_records_dropped_total{reason}`.
        """
        out: dict[str, int] = {}
        for t in self._all_tasks():
            for reason, n in t.dropped.items():
                out[reason] = out.get(reason, 0) + n
        return out

    def _all_tasks(self) -> list[Task]:
        return ([self.global_task] if self.global_task is not None else []) + self.tasks

    def _enqueue(
        self, topic: str, key: bytes | None, value: bytes | None, ts: int, headers: Headers
    ) -> None:
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1
        self._queue.append(Record(key, value, ts, tuple(headers), topic, 0, offset))

    def _produced(
        self, topic: str, key: bytes | None, value: bytes | None, ts: int, headers: Headers
    ) -> None:
        if topic in self._task_of:
            self._enqueue(topic, key, value, ts, headers)
            return
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1
        rec = Record(key, value, ts, tuple(headers), topic, 0, offset)
        self._outputs.setdefault(topic, deque()).append(rec)

    def _drain(self) -> None:
        q = self._queue
        while q:
            rec = q.popleft()
            self._task_of[rec.topic].process([rec])  # type: ignore[index]
        for t in self._all_tasks():
            t.flush_stores()

    def _take(self, topic: str) -> deque[Record]:
        return self._outputs.setdefault(topic, deque())

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for t in getattr(self, "tasks", []):
                t.close()
            if getattr(self, "global_task", None) is not None:
                self.global_task.close()  # type: ignore[union-attr]
        finally:
            if self._own_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TestInputTopic:
    """Pipes records into one topic; serializes with the given serdes."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        driver: TopologyTestDriver,
        topic: str,
        key_serde: SerdeLike,
        value_serde: SerdeLike,
        start_timestamp: int | None,
        auto_advance: DurationLike | None,
    ) -> None:
        self.driver = driver
        self.topic = topic
        self.key_serde: Serde = serde(key_serde)
        self.value_serde: Serde = serde(value_serde)
        self._advance = None if auto_advance is None else duration(auto_advance)
        own = start_timestamp is not None or self._advance is not None
        self._time: int | None = None
        if own:
            self._time = driver.wall_clock if start_timestamp is None else start_timestamp

    def _timestamp(self) -> int:
        if self._time is None:
            return self.driver.wall_clock
        ts = self._time
        self._time += self._advance or 0
        return ts

    def advance_time(self, amount: DurationLike) -> None:
        """Move this topic's clock (used when no timestamp is given) forward."""
        if self._time is None:
            self._time = self.driver.wall_clock
        self._time += duration(amount)

    def pipe(
        self,
        key: Any,
        value: Any = None,
        timestamp: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        hdrs = tuple(headers or ())
        (kb,), (vb,), bad = serialize_records(
            [Record(key, value, 0, hdrs)], self.topic, self.key_serde, self.value_serde
        )
        if bad:
            raise bad[0].error
        ts = self._timestamp() if timestamp is None else timestamp
        self.driver.pipe_raw(self.topic, kb, vb, ts, hdrs)

    def pipe_value(self, value: Any, timestamp: int | None = None) -> None:
        self.pipe(None, value, timestamp)

    def pipe_many(self, records: Iterable[Any]) -> None:
        """Pipe `(key, value)`, `(key, value, timestamp)` tuples or `Record`s, in order."""
        for r in records:
            if isinstance(r, Record):
                self.pipe(r.key, r.value, r.timestamp, r.headers)
            elif isinstance(r, tuple) and len(r) in (2, 3):
                self.pipe(*r)
            else:
                raise TypeError(f"pipe_many expects (key, value[, timestamp]) or Record, got {r!r}")

    def pipe_values(self, values: Iterable[Any]) -> None:
        for v in values:
            self.pipe(None, v)


class TestOutputTopic:
    """Reads (and consumes) what the topology wrote to one topic."""

    __test__ = False

    def __init__(
        self, driver: TopologyTestDriver, topic: str, key_serde: SerdeLike, value_serde: SerdeLike
    ) -> None:
        self.driver = driver
        self.topic = topic
        self.key_serde: Serde = serde(key_serde)
        self.value_serde: Serde = serde(value_serde)

    def _decode(self, records: Iterable[Record]) -> list[Record]:
        """Copies of `records` deserialized; a bad one raises its serde's error (the first)."""
        out = [
            Record(r.key, r.value, r.timestamp, r.headers, r.topic, r.partition, r.offset)
            for r in records
        ]
        bad = deserialize_records(out, self.key_serde, self.value_serde, topic=self.topic)
        if bad:
            raise bad[0].error
        return out

    def _pop(self) -> Record:
        q = self.driver._take(self.topic)
        if not q:
            raise LookupError(f"output topic {self.topic!r} is empty")
        return self._decode([q.popleft()])[0]

    def read_record(self) -> Record:
        return self._pop()

    def read_records(self) -> list[Record]:
        q = self.driver._take(self.topic)
        out = self._decode(q)
        q.clear()
        return out

    def read_key_value(self) -> tuple[Any, Any]:
        r = self._pop()
        return r.key, r.value

    def read_key_values(self) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Latest value per key; a tombstone removes the key."""
        out: dict[Any, Any] = {}
        for k, v in self.read_key_values():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def read_value(self) -> Any:
        return self._pop().value

    def read_values(self) -> list[Any]:
        return [r.value for r in self.read_records()]

    def is_empty(self) -> bool:
        return not self.driver._take(self.topic)

    def queue_size(self) -> int:
        return len(self.driver._take(self.topic))
