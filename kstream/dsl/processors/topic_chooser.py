"""`KStream.to(chooser)`: a sink whose topic is chosen per record (Kafka's
`TopicNameExtractor`).

`chooser(key, value, record_context) -> topic` is called for every record; the record context
is the record itself (its `topic`, `partition`, `offset`, `timestamp` and `headers` are those
of the input record it came from). The chosen topics are written as a plain sink writes its
topic: per topic, through a `kstream.topology.nodes.SinkNode` of its own, so serialization,
partitioners, error handling and the collector are the same. As in Kafka, the topics must
exist: the app does not create them. A chosen topic the app did not count at start-up is
looked up once in the producer's metadata (`kstream.runtime.collector.Collector
.partitions_for`); one the cluster does not have fails the task with an error naming the
topic.

`describe()` prints the node as Kafka prints a sink with a `TopicNameExtractor`:
`Sink: KSTREAM-SINK-n (extractor class: <the chooser's str()>)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor
from kstream.errors import TopicError
from kstream.records import Record
from kstream.serde import Serde
from kstream.topology.nodes import SinkNode
from kstream.topology.processor import ProcessorContext
from kstream.topology.topology import Partitioner

TopicNameExtractor = Callable[[Any, Any, Record], str]
"""`(key, value, record_context) -> topic name`."""


class TopicChooserSinkProcessor(BuiltinProcessor):
    """Sends each record to the topic `chooser` names for it; terminal."""

    @staticmethod
    def topic_name_extractor(chooser: TopicNameExtractor, *_: Any) -> TopicNameExtractor:
        """The chooser, from this processor's factory arguments: `describe()` prints the node
        as Kafka prints a sink with a `TopicNameExtractor` (kstream.topology.describe)."""
        return chooser

    def __init__(
        self,
        chooser: TopicNameExtractor,
        key_serde: Serde,
        value_serde: Serde,
        partitioner: Partitioner | None,
        node: str,
    ) -> None:
        self.chooser = chooser
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.partitioner = partitioner
        self.node = node
        self.sinks: dict[str, SinkNode] = {}

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.sinks = {}

    def _sink(self, topic: str) -> SinkNode:
        sink = self.sinks.get(topic)
        if sink is None:
            task = self.task
            try:
                n = task.collector.partitions_for(topic)
            except KeyError:
                n = 0
            if not n:
                raise TopicError(
                    f"sink {self.node!r}: the topic chooser named topic {topic!r}, which does "
                    "not exist (to() with a chooser writes existing topics only: create it "
                    "before the app writes to it)",
                    code="UNKNOWN_TOPIC_OR_PART",
                )
            sink = SinkNode(
                self.node, task, topic, self.key_serde, self.value_serde, self.partitioner
            )
            self.sinks[topic] = sink
        return sink

    def process_batch(self, records: Sequence[Record]) -> None:
        choose, on_error = self.chooser, self.ctx.on_error
        # runs of records for one topic, in order (each topic's records keep their order)
        run: list[Record] = []
        run_topic: str | None = None
        for r in records:
            try:
                topic = choose(r.key, r.value, r)
                if not isinstance(topic, str) or not topic:
                    raise TypeError(
                        f"sink {self.node!r}: the topic chooser returned {topic!r}, not a topic "
                        "name"
                    )
            except Exception as e:
                on_error(e, r)
                continue
            if topic != run_topic and run:
                self._sink(run_topic).process_batch(run)  # type: ignore[arg-type]
                run = []
            run_topic = topic
            run.append(r)
        if run:
            self._sink(run_topic).process_batch(run)  # type: ignore[arg-type]
