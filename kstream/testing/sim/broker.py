"""The simulated Kafka cluster: topics of transactional partition logs, producer ids and
epochs, transaction timeouts, committed and pending group offsets, and the group coordinator.

What exactly-once depends on is modelled as Apache Kafka does it:

* a transactional record takes its offset when written and stays invisible to read_committed
  readers until its transaction's commit marker; aborted records keep their offsets and are
  filtered (`kstream.testing.sim.log`);
* `init_producer` (InitProducerId) aborts the transactional id's open transaction and bumps
  its epoch, so the previous producer with the id is fenced at its next transactional call;
* a transaction open longer than its producer's `transaction.timeout.ms` of virtual time is
  aborted by the broker, which bumps the epoch too: that producer's next call fails fenced;
* offsets sent in a transaction are pending until it ends, and a read_committed consumer's
  committed-offset read of such a partition cannot be answered meanwhile (KIP-447);
* offsets are accepted only from a member of the group's current generation.

Nothing here blocks or keeps real time: the clock is the run's `VirtualClock`, whose every move
calls `tick`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kstream.errors import ConfigError, ProduceError, ProducerFencedError, TopicError
from kstream.kafka.partitioner import default_partition
from kstream.testing.sim.clock import VirtualClock
from kstream.testing.sim.groups import Coordinator
from kstream.testing.sim.log import Header, PartitionLog, Txn, TxnState

__all__ = ["ProducerState", "SimKafka"]

TP = tuple[str, int]


@dataclass(eq=False)
class ProducerState:
    """The broker's view of one transactional id."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_s: float
    txn: Txn | None = None


class SimKafka:
    """Topics, transactions and groups of one simulated cluster on `clock`."""

    def __init__(self, clock: VirtualClock, event: Callable[[str], None] | None = None) -> None:
        self.clock = clock
        self.event: Callable[[str], None] = event or (lambda _text: None)
        self.topics: dict[str, list[PartitionLog]] = {}
        self.committed_offsets: dict[tuple[str, str, int], int] = {}
        self.producers: dict[str, ProducerState] = {}
        self._next_pid = 1000
        self.groups = Coordinator(self.partitions, self.event)
        self.round_robin: dict[str, int] = {}
        #: transactions the broker aborted on timeout (a statistic of the run)
        self.timed_out = 0
        clock.listeners.append(self.tick)

    # --- topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> bool:
        have = self.topics.get(name)
        if have is not None:
            if len(have) != partitions:
                raise TopicError(
                    f"topic {name!r} already exists with {len(have)} partitions, "
                    f"but {partitions} were requested"
                )
            return False
        if partitions < 1:
            raise ConfigError(f"topic {name!r}: partitions must be >= 1, got {partitions}")
        self.topics[name] = [PartitionLog() for _ in range(partitions)]
        return True

    def partitions(self, topic: str) -> int:
        return len(self.topics.get(topic, ()))

    def log(self, topic: str, partition: int) -> PartitionLog:
        parts = self.topics.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            raise TopicError(
                f"topic {topic!r} partition {partition}: no such partition",
                code="UNKNOWN_TOPIC_OR_PART",
            )
        return parts[partition]

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The partition a record goes to: the given one, murmur2 of the key (Java's default
        partitioner), or round robin for a record without a key."""
        n = self.partitions(topic)
        if n == 0:
            raise ProduceError(
                f"producing to topic {topic!r}: no such topic", code="_UNKNOWN_TOPIC"
            )
        if partition is None or partition < 0:
            if key is not None:
                return default_partition(key, n)
            partition = self.round_robin.get(topic, 0) % n
            self.round_robin[topic] = partition + 1
            return partition
        if partition >= n:
            raise ProduceError(
                f"producing to topic {topic!r} partition {partition}: the topic has {n} "
                "partition(s)",
                code="_UNKNOWN_PARTITION",
            )
        return partition

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: list[Header] | None,
        txn: Txn | None = None,
    ) -> int:
        offset = self.log(topic, partition).append(key, value, timestamp, headers, txn)
        if txn is not None:
            txn.partitions.setdefault((topic, partition), offset)
        return offset

    # --- transactional producers -------------------------------------------------------------

    def new_producer_id(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def init_producer(self, transactional_id: str, timeout_s: float) -> ProducerState:
        """InitProducerId: abort the id's open transaction and bump its epoch."""
        st = self.producers.get(transactional_id)
        if st is None:
            st = ProducerState(transactional_id, self.new_producer_id(), 0, timeout_s)
            self.producers[transactional_id] = st
            return st
        if st.txn is not None:
            self._end(st, commit=False, why="fenced by a new producer with its id")
        st.epoch += 1
        st.timeout_s = timeout_s
        self.event(f"txn {transactional_id}: epoch {st.epoch}")
        return st

    def check_epoch(self, transactional_id: str, epoch: int) -> ProducerState:
        st = self.producers.get(transactional_id)
        if st is None or st.epoch != epoch:
            raise ProducerFencedError(
                f"transactional.id={transactional_id!r}: _FENCED: producer epoch {epoch} is "
                f"not the current one ({None if st is None else st.epoch}): another producer "
                "with the id took over, or the broker aborted its transaction",
                code="_FENCED",
            )
        return st

    def ongoing(self, transactional_id: str, epoch: int) -> Txn:
        """The id's ongoing transaction, started now if this is its first write
        (AddPartitionsToTxn / AddOffsetsToTxn: the transaction timeout counts from here)."""
        st = self.check_epoch(transactional_id, epoch)
        if st.txn is None:
            st.txn = Txn(transactional_id, st.producer_id, epoch, self.clock.now)
        return st.txn

    def end_transaction(self, transactional_id: str, epoch: int, commit: bool) -> None:
        """EndTxn: the commit or abort of the id's transaction (none written: nothing to do)."""
        st = self.check_epoch(transactional_id, epoch)
        if st.txn is not None:
            self._end(st, commit, "committed" if commit else "aborted")

    def _end(self, st: ProducerState, commit: bool, why: str) -> None:
        txn = st.txn
        assert txn is not None
        st.txn = None
        txn.state = TxnState.COMMITTED if commit else TxnState.ABORTED
        for topic, partition in sorted(txn.partitions):
            self.log(topic, partition).end_transaction(txn)
        if commit:
            for group, offsets in sorted(txn.offsets.items()):
                for (topic, partition), offset in sorted(offsets.items()):
                    self.committed_offsets[(group, topic, partition)] = offset
        self.event(
            f"txn {st.transactional_id}#{txn.epoch}: {why} "
            f"({sum(1 for _ in txn.partitions)} partitions, "
            f"{sum(len(o) for o in txn.offsets.values())} offsets)"
        )

    def pending(self, group: str, tps: list[TP]) -> list[TP]:
        """Partitions among `tps` whose offsets an open transaction holds for `group`."""
        held: set[TP] = set()
        for st in self.producers.values():
            if st.txn is not None:
                held |= set(st.txn.offsets.get(group, {}))
        return [tp for tp in tps if tp in held]

    def open_transactions(self) -> list[str]:
        return sorted(tid for tid, st in self.producers.items() if st.txn is not None)

    # --- group offsets ---------------------------------------------------------------------

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.committed_offsets.get((group, topic, partition))

    def commit(self, group: str, offsets: list[tuple[str, int, int]]) -> None:
        for topic, partition, offset in offsets:
            self.committed_offsets[(group, topic, partition)] = offset

    # --- time ------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """What the broker does as time passes: abort transactions open longer than their
        timeout (bumping the epoch, as Apache Kafka's coordinator does), and remove group
        members whose heartbeats stopped for their session timeout."""
        for st in list(self.producers.values()):
            txn = st.txn
            if txn is not None and now - txn.started > st.timeout_s:
                self.timed_out += 1
                self._end(st, commit=False, why=f"timed out after {now - txn.started:.1f}s")
                st.epoch += 1
        self.groups.tick(now)
