"""In-memory stand-ins for `kstream.kafka.Producer` and `Consumer`, for users' unit tests.

They share a `MockCluster` (topics, partitions, committed group offsets) and follow the real
clients' method names and return shapes, so code written against the real clients runs
unchanged: messages have `topic()`, `partition()`, `offset()`, `key()`, `value()`,
`headers()`, `timestamp()` and `error()`. Keyed records land where the real producer puts them
(murmur2). Transactions are atomic: records and offsets appear only on `commit()`.
Nothing blocks: `consume_batch` returns what is there and never waits for its timeout.

The cluster also injects the faults a real one has (`fail_next_commit`, `fence`,
`drop_connection`, `time_out_transactions`), so failure handling is testable in milliseconds;
`kstream.testing.MockClientSupplier` runs a whole `App` on these clients.

The cluster lives in `mock_cluster`, the clients in `mock_producer` and `mock_consumer`.
"""

from kstream.testing.mock_cluster import MockCluster, MockGroupMetadata, MockMessage
from kstream.testing.mock_consumer import MockConsumer
from kstream.testing.mock_producer import MockProducer

__all__ = ["MockCluster", "MockConsumer", "MockGroupMetadata", "MockMessage", "MockProducer"]
