package io.kstream.oracle;

import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.state.DslKeyValueParams;
import org.apache.kafka.streams.state.DslSessionParams;
import org.apache.kafka.streams.state.DslStoreSuppliers;
import org.apache.kafka.streams.state.DslWindowParams;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.SessionBytesStoreSupplier;
import org.apache.kafka.streams.state.WindowBytesStoreSupplier;

/**
 * The stores the oracle's topologies get: Kafka's in-memory stores (opening a RocksDB store
 * per case would cost a hundred milliseconds), except for emit-final windowed aggregations,
 * which get the time-ordered RocksDB stores Kafka builds for them by default. Kafka's
 * in-memory window store measures retention from the largest window start it holds, so it
 * expires a window exactly as the window closes, before its final result is read: with it,
 * emit-final would emit nothing, which is no user's Kafka Streams.
 */
public final class OracleStoreSuppliers implements DslStoreSuppliers {
    private final DslStoreSuppliers memory = new BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers();
    private final DslStoreSuppliers rocksdb = new BuiltInDslStoreSuppliers.RocksDBDslStoreSuppliers();

    private static boolean onClose(EmitStrategy strategy) {
        return strategy.type() == EmitStrategy.StrategyType.ON_WINDOW_CLOSE;
    }

    @Override
    public KeyValueBytesStoreSupplier keyValueStore(DslKeyValueParams params) {
        return memory.keyValueStore(params);
    }

    @Override
    public WindowBytesStoreSupplier windowStore(DslWindowParams params) {
        return onClose(params.emitStrategy()) ? rocksdb.windowStore(params) : memory.windowStore(params);
    }

    @Override
    public SessionBytesStoreSupplier sessionStore(DslSessionParams params) {
        return onClose(params.emitStrategy()) ? rocksdb.sessionStore(params) : memory.sessionStore(params);
    }
}
