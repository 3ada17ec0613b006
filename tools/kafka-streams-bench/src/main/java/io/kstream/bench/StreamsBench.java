package io.kstream.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.processor.FailOnInvalidTimestamp;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * One benchmark run of bench/run_all.py in Kafka Streams: P1 (filter + map + to), P2 (running
 * count per key) or P3 (tumbling 10 s windowed sum per key), as bench/kstream_pipe.py builds them
 * for kstream. With --warmup-records=N it first runs N input records through a discarded app of
 * its own (the JIT warm-up). Writes the ready file once the measured app is RUNNING, processes
 * until SIGTERM, closes the app and prints one JSON line: {"first": monotonic seconds (the clock
 * of Python's time.monotonic()) at the first record consumed, "cpu_s": the JVM's user + sys CPU
 * seconds from the measured app's creation on (every thread: stream thread, clients, JIT, GC),
 * "startup_cpu_s": the part spent before its first record, "jvm_warmup_cpu_s": the JVM's CPU
 * before it (start and warm-up), "peak_rss_bytes", "jvm_thread_cpu_s": by thread kind, ...}.
 *
 * <pre>
 * java -cp 'target/classes:target/libs/*' io.kstream.bench.StreamsBench --pipeline=P1
 *     --bootstrap=HOST:PORT --topic=IN --out=OUT --group=G --state-dir=DIR --ready-file=F
 *     [--guarantee=exactly_once_v2] [--commit-interval=100] [--cache-bytes=0]
 *     [--store=rocksdb|memory] [--warmup-records=0] [--warmup-quiet=0.05 --warmup-passes=8]
 *     [--producer.batch.size=1000000 --consumer.fetch.max.wait.ms=100 ...]
 * </pre>
 *
 * <p>{@code --store=memory} keeps P2's counts and P3's sums in Kafka Streams' in-memory stores
 * instead of RocksDB. Every {@code --producer.*}, {@code --consumer.*} and {@code
 * --main.consumer.*} argument is handed to Kafka Streams as that prefixed client setting (so a
 * benchmark can give the JVM's clients the settings kstream's librdkafka clients run with).
 * With {@code --warmup-quiet=F} the warm-up runs again (a new discarded app each pass, at most
 * {@code --warmup-passes}) until the JIT compiler threads took under F of the JVM's CPU in a
 * pass; each pass's share is in the output's {@code warmup_passes}.
 */
public final class StreamsBench {
  static {
    // Kafka Streams' warnings and errors only (slf4j-simple logs INFO by default), on stderr
    if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
      System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    }
  }

  private static final ObjectMapper JSON = new ObjectMapper();

  /** The input's event time, as Kafka's default extractor takes it; notes the first record. */
  static class FirstRecordClock extends FailOnInvalidTimestamp {
    volatile long firstNanos;
    volatile double startupCpuS = -1;

    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      if (firstNanos == 0) {
        synchronized (this) {
          if (firstNanos == 0) {
            startupCpuS = cpuS();
            firstNanos = System.nanoTime();
          }
        }
      }
      return super.extract(record, partitionTime);
    }
  }

  /** The values' JSON, parsed and written by Jackson's tree model. */
  static Serde<JsonNode> jsonSerde() {
    return Serdes.serdeFrom(
        (topic, node) -> {
          try {
            return node == null ? null : JSON.writeValueAsBytes(node);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        },
        (topic, bytes) -> {
          try {
            return bytes == null ? null : JSON.readTree(bytes);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        });
  }

  static Topology build(
      String pipeline, String src, String dst, FirstRecordClock clock, boolean inMemory) {
    StreamsBuilder b = new StreamsBuilder();
    KStream<String, JsonNode> s =
        b.stream(src, Consumed.with(Serdes.String(), jsonSerde()).withTimestampExtractor(clock));
    switch (pipeline) {
      case "P1" ->
          s.filter((k, v) -> !"refund".equals(v.get("kind").asText()))
              .mapValues(
                  v -> {
                    ObjectNode o = JSON.createObjectNode();
                    o.set("user", v.get("user"));
                    o.put("cents", Math.round(v.get("amount").asDouble() * 100));
                    return (JsonNode) o;
                  })
              .to(dst, Produced.with(Serdes.String(), jsonSerde()));
      case "P2" ->
          s.groupByKey(Grouped.with(Serdes.String(), jsonSerde()))
              .count(
                  inMemory
                      ? Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                      : Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
              .toStream()
              .to(dst, Produced.with(Serdes.String(), Serdes.Long()));
      case "P3" ->
          s.mapValues(v -> v.get("amount").asDouble())
              .groupByKey(Grouped.with(Serdes.String(), Serdes.Double()))
              .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofSeconds(10)))
              .reduce(
                  Double::sum,
                  (inMemory
                          ? Materialized.<String, Double>as(
                              Stores.inMemoryWindowStore(
                                  "sums", Duration.ofDays(1), Duration.ofSeconds(10), false))
                          : Materialized.<String, Double, WindowStore<Bytes, byte[]>>as("sums"))
                      .withKeySerde(Serdes.String())
                      .withValueSerde(Serdes.Double()))
              .toStream()
              .to(
                  dst,
                  Produced.with(
                      WindowedSerdes.timeWindowedSerdeFrom(String.class, 10_000L),
                      Serdes.Double()));
      default -> throw new IllegalArgumentException("--pipeline: P1, P2 or P3, not " + pipeline);
    }
    return b.build();
  }

  /** The JVM's CPU seconds so far, user + sys, every thread. */
  static double cpuS() {
    var os = ManagementFactory.getOperatingSystemMXBean();
    return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime() / 1e9;
  }

  /** The peak resident set (VmHWM) in bytes; 0 without /proc. */
  static long peakRssBytes() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
        if (line.startsWith("VmHWM:")) {
          return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        }
      }
    } catch (IOException e) {
      return 0;
    }
    return 0;
  }

  /**
   * The CPU seconds of the JVM's live threads by kind, from /proc (Linux; else empty): the stream
   * thread, the Kafka clients' network threads, the JIT compiler, the garbage collector, other.
   */
  static Map<String, Double> threadCpuS() {
    Map<String, Double> out = new TreeMap<>();
    try (DirectoryStream<Path> tasks = Files.newDirectoryStream(Path.of("/proc/self/task"))) {
      for (Path task : tasks) {
        String comm;
        String stat;
        try {
          comm = Files.readString(task.resolve("comm")).strip();
          stat = Files.readString(task.resolve("stat"));
        } catch (IOException e) {
          continue; // the thread ended
        }
        String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        double secs = (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) / 100.0;
        String kind =
            comm.contains("StreamThread")
                ? "stream"
                : comm.startsWith("kafka-") || comm.startsWith("ks-") ? "client"
                : comm.contains("Compiler") ? "jit"
                : comm.startsWith("GC ") || comm.startsWith("G1 ") || comm.equals("VM Thread")
                    ? "gc"
                    : "other";
        out.merge(kind, secs, Double::sum);
      }
    } catch (IOException e) {
      e.printStackTrace();
      return Map.of();
    }
    return out;
  }

  static Map<String, String> parse(String[] args) {
    Map<String, String> a = new HashMap<>();
    a.put("guarantee", StreamsConfig.EXACTLY_ONCE_V2);
    a.put("commit-interval", "100");
    a.put("cache-bytes", "0");
    for (String arg : args) {
      int eq = arg.indexOf('=');
      if (!arg.startsWith("--") || eq < 0) {
        throw new IllegalArgumentException("arguments are --name=value, not " + arg);
      }
      a.put(arg.substring(2, eq), arg.substring(eq + 1));
    }
    return a;
  }

  static Properties config(Map<String, String> a, String appId) {
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    // thread names (and so /proc's comm) start "ks-StreamThread-1": see threadCpuS
    p.put(StreamsConfig.CLIENT_ID_CONFIG, "ks");
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.get("guarantee"));
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.get("commit-interval"));
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, a.get("cache-bytes"));
    p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
    a.forEach(
        (key, value) -> {
          if (key.startsWith("producer.")
              || key.startsWith("consumer.")
              || key.startsWith("main.consumer.")) {
            p.put(key, value);
          }
        });
    return p;
  }

  /**
   * The JIT warm-up, discarded: the same pipeline as another app (its own group, stores and
   * output topic `<out>-warmup`) over the first `records` input records, then closed. The
   * measured app that follows runs on compiled code, as a long-running app would.
   */
  static void warmUp(Map<String, String> a, long records, String suffix)
      throws InterruptedException {
    AtomicLong seen = new AtomicLong();
    FirstRecordClock counting =
        new FirstRecordClock() {
          @Override
          public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            seen.incrementAndGet();
            return super.extract(record, partitionTime);
          }
        };
    String pipeline = a.get("pipeline");
    Topology t =
        build(pipeline, a.get("topic"), a.get("out") + "-warmup", counting, inMemory(a));
    try (KafkaStreams warm = new KafkaStreams(t, config(a, a.get("group") + suffix))) {
      warm.start();
      long deadline = System.nanoTime() + 120_000_000_000L;
      while (seen.get() < records && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      warm.close(Duration.ofSeconds(30));
    }
  }

  static boolean inMemory(Map<String, String> a) {
    String store = a.getOrDefault("store", "rocksdb");
    if (!store.equals("rocksdb") && !store.equals("memory")) {
      throw new IllegalArgumentException("--store: rocksdb or memory, not " + store);
    }
    return store.equals("memory");
  }

  /**
   * Warm-up passes until the JIT compiler is quiet: each pass a new discarded app over {@code
   * records} input records; stops after the first pass whose compiler threads took under {@code
   * quiet} of the JVM's CPU (or after {@code passes}). Returns each pass's JIT share.
   */
  static double[] warmUpUntilQuiet(Map<String, String> a, long records, double quiet, int passes)
      throws InterruptedException {
    double[] shares = new double[passes];
    for (int i = 0; i < passes; i++) {
      double cpu = cpuS();
      double jit = threadCpuS().getOrDefault("jit", 0.0);
      warmUp(a, records, "-warmup-" + i);
      double spent = cpuS() - cpu;
      shares[i] = spent <= 0 ? 0 : (threadCpuS().getOrDefault("jit", 0.0) - jit) / spent;
      if (shares[i] < quiet) {
        return java.util.Arrays.copyOf(shares, i + 1);
      }
    }
    return shares;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> a = parse(args);
    long warmupRecords = Long.parseLong(a.getOrDefault("warmup-records", "0"));
    double quiet = Double.parseDouble(a.getOrDefault("warmup-quiet", "1"));
    int passes = Integer.parseInt(a.getOrDefault("warmup-passes", "1"));
    double[] warmupShares =
        warmupRecords > 0 ? warmUpUntilQuiet(a, warmupRecords, quiet, passes) : new double[0];
    // the measured app's CPU counts from here: the JVM's start and the warm-up are reported
    // apart (jvm_warmup_cpu_s)
    double base = cpuS();
    Map<String, Double> baseThreads = threadCpuS();
    FirstRecordClock clock = new FirstRecordClock();
    KafkaStreams app =
        new KafkaStreams(
            build(a.get("pipeline"), a.get("topic"), a.get("out"), clock, inMemory(a)),
            config(a, a.get("group")));
    long[] runningNanos = {0};
    app.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING && runningNanos[0] == 0) {
            runningNanos[0] = System.nanoTime();
            try {
              Files.writeString(Path.of(a.get("ready-file")), "ready");
            } catch (IOException e) {
              throw new UncheckedIOException(e);
            }
          } else if (now == KafkaStreams.State.ERROR) {
            System.err.println("the Kafka Streams app failed (state ERROR)");
          }
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  Map<String, Double> threads = threadCpuS();
                  app.close(Duration.ofSeconds(30));
                  double gcS = 0;
                  for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
                    gcS += Math.max(0, gc.getCollectionTime()) / 1e3;
                  }
                  ObjectNode o = JSON.createObjectNode();
                  o.put("first", clock.firstNanos == 0 ? null : clock.firstNanos / 1e9);
                  o.put("running", runningNanos[0] == 0 ? null : runningNanos[0] / 1e9);
                  o.put("cpu_s", cpuS() - base);
                  o.put("startup_cpu_s", clock.startupCpuS < 0 ? null : clock.startupCpuS - base);
                  o.put("jvm_warmup_cpu_s", base);
                  o.put("warmup_records", warmupRecords);
                  var shares = o.putArray("warmup_passes");
                  for (double share : warmupShares) {
                    shares.add(share);
                  }
                  o.put("peak_rss_bytes", peakRssBytes());
                  // over the JVM's life: JIT compilation's elapsed seconds summed over the
                  // compiler threads, and GC pauses
                  var jit = ManagementFactory.getCompilationMXBean();
                  o.put("jit_s", jit.getTotalCompilationTime() / 1e3);
                  o.put("gc_s", gcS);
                  ObjectNode t = o.putObject("jvm_thread_cpu_s");
                  // over the measured app only (live threads; a compiler thread that ended is
                  // missing)
                  threads.forEach(
                      (kind, secs) ->
                          t.put(kind, Math.max(0, secs - baseThreads.getOrDefault(kind, 0.0))));
                  System.out.println(o);
                  System.out.flush();
                }));
    app.start();
  }
}
