# The README's quick start: `make demo` and `make test` on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= dev,redis,spark,schema-registry
PYTEST_ARGS ?=
# `make test` runs on pytest-xdist workers sharing one Apache Kafka broker. The suite mostly
# waits (group joins, worker processes, the broker), so more workers than cores pay; each
# worker takes the longest unit left (tests/support/scheduling.py).
TEST_WORKERS ?= 6
# The Spark tests are lanes of their own, which CI runs after `make test`: `make test-spark`
# (tests/spark, Spark local[2] against the native engine and the test driver) and `make
# test-spark-cluster` (a master, two workers, drivers and executors: a dozen JVMs, about six
# minutes of a worker's time). In `make test` each held its wall time past 6 minutes on 2
# cores: the cluster tests alone, and then tests/spark's two Spark sessions (two units of about
# 700 s of a worker's time each, the suite's critical path: 6:50-7:20, against 4:39 without).
SUITE_ARGS ?= --ignore=tests/spark --ignore=tests/spark_cluster --ignore=tests/spark_oracle

.PHONY: demo test test-tansu test-spark test-spark-cluster test-kafka-compat test-kafka-3.9 test-kafka-4.1 pytest warm lint unit integration bench bench-engines bench-full venv kafka clean codestats \
	oracle oracle-harness oracle-versions simulate simulate-mutants chaos

# Apache Kafka, the reference broker of the tests and benchmarks: Maven resolves
# org.apache.kafka:kafka_2.13 (the version is pinned in tools/kafka/pom.xml) and its runtime
# dependencies from Maven Central into tools/kafka/target/libs (kstream.testing.kafka); then a
# broker started once writes the class-data archive that makes every later start 2 s faster
KAFKA_LIBS := tools/kafka/target/libs
KAFKA_STAMP := $(KAFKA_LIBS)/.resolved
$(KAFKA_STAMP): tools/kafka/pom.xml $(STAMP)
	rm -rf $(KAFKA_LIBS) tools/kafka/target/kafka-classes.jsa
	mvn -q -B -f tools/kafka/pom.xml dependency:copy-dependencies
	$(RUN_PY) -m kstream.testing.kafka --class-archive
	touch $(KAFKA_STAMP)

kafka: $(KAFKA_STAMP)

# Another version's jars, for the compatibility lanes below: the same pom with the version and
# the output directory overridden (tools/kafka/target-<version>/libs), and its class-data archive
tools/kafka/target-%/libs/.resolved: tools/kafka/pom.xml $(STAMP)
	rm -rf tools/kafka/target-$*
	mvn -q -B -f tools/kafka/pom.xml -Dkafka.version=$* \
		-Dkafka.libs=$(CURDIR)/tools/kafka/target-$*/libs dependency:copy-dependencies
	KSTREAM_KAFKA_LIBS=$(CURDIR)/tools/kafka/target-$*/libs $(RUN_PY) -m kstream.testing.kafka \
		--class-archive
	touch $@

# Kafka Streams as the oracle of tests/oracle: a small Java harness (tools/kafka-streams-oracle,
# Kafka Streams pinned to the broker's version) that Maven compiles, with its dependencies'
# jars copied into target/libs; the tests start it once per session
ORACLE_DIR := tools/kafka-streams-oracle
ORACLE_STAMP := $(ORACLE_DIR)/target/.built
$(ORACLE_STAMP): $(ORACLE_DIR)/pom.xml $(wildcard $(ORACLE_DIR)/src/main/java/io/kstream/oracle/*.java)
	rm -rf $(ORACLE_DIR)/target
	mvn -q -B -f $(ORACLE_DIR)/pom.xml package dependency:copy-dependencies
	touch $(ORACLE_STAMP)

oracle-harness: $(ORACLE_STAMP)

# What changed in Kafka Streams between ORACLE_OLD and the pinned version (an upgrade of the
# reference, docs/differences.md): the harness built again at ORACLE_OLD (into
# target-<version>), and ORACLE_CASES generated cases, the processor-API cases, the regressions
# and the conformance cases through both; tests/oracle/versions.py prints each case whose
# answer (outputs, stores, describe() text, or the error) differs, and exits 1 if any does
ORACLE_OLD ?= 4.1.1
oracle-versions: $(STAMP) $(ORACLE_STAMP)
	test -f $(ORACLE_DIR)/target-$(ORACLE_OLD)/.built || { \
		mvn -q -B -f $(ORACLE_DIR)/pom.xml -Dkafka.version=$(ORACLE_OLD) \
			-Doracle.build=$(CURDIR)/$(ORACLE_DIR)/target-$(ORACLE_OLD) \
			package dependency:copy-dependencies && \
		touch $(ORACLE_DIR)/target-$(ORACLE_OLD)/.built; }
	$(RUN_PY) tests/oracle/versions.py --old $(ORACLE_DIR)/target-$(ORACLE_OLD) \
		--new $(ORACLE_DIR)/target --cases $(ORACLE_CASES) $(VERSIONS_ARGS)

# `make test` runs 300 generated cases from a fixed seed; this runs ORACLE_CASES from a random
# one, and prints a failing case shrunk to a minimal spec (and the seed that reproduces it)
ORACLE_CASES ?= 10000
oracle: $(STAMP) $(ORACLE_STAMP)
	KSTREAM_ORACLE_CASES=$(ORACLE_CASES) KSTREAM_ORACLE_RANDOM=1 $(RUN_PY) -m pytest -q \
		--timeout=0 tests/oracle/test_oracle.py $(PYTEST_ARGS)

# The install skips byte-compiling (Python compiles a module when it is first imported, and
# most of pyspark and pandas never are): half the install's time. So the processes make starts
# must be allowed to write the bytecode they compile (`PYTHONDONTWRITEBYTECODE` unset):
# otherwise every Spark worker and subprocess would compile pandas, pyarrow and pyspark from
# source again, seconds of CPU each.
RUN := env -u PYTHONDONTWRITEBYTECODE
RUN_PY := $(RUN) $(PY)
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[$(EXTRAS)]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(RUN) $(VENV)/bin/kstreamd demo --duration 20

lint: $(STAMP)
	$(VENV)/bin/ruff check kstream store_backends tests examples bench cmd
	$(VENV)/bin/ruff format --check kstream store_backends tests examples bench cmd
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict --cache-dir .mypy_cache/strict kstream/dsl

# lint runs beside the tests (it needs a few seconds of one core; the suite's last minute has
# cores to spare); either failing fails `make test`
test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 lint pytest

# the slowest tests are listed at the end: where a slow run spent its time, from its log alone
pytest: warm $(KAFKA_STAMP) $(ORACLE_STAMP)
	$(RUN_PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=20 $(SUITE_ARGS) \
		$(PYTEST_ARGS)

# the Spark local[2] lane: one pytest-xdist worker per Spark session (tests/support/scheduling.py
# groups the tests that share one); CI runs it after `make test`
test-spark: warm $(KAFKA_STAMP)
	$(RUN_PY) -m pytest -q -n 2 --dist loadgroup --durations=10 tests/spark $(PYTEST_ARGS)

# the Spark standalone-cluster lane (one cluster for its tests, one process); CI runs it
test-spark-cluster: warm $(KAFKA_STAMP)
	$(RUN_PY) -m pytest -q --durations=5 tests/spark_cluster $(PYTEST_ARGS)

# the oracle on Spark (issue 46): the oracle's generated specs through the Spark engine on
# local[2] from the broker's topics, compared with Kafka Streams' answers
# (tests/spark_oracle/lane.py); a lane of its own, as it takes minutes. CI runs it after
# test-spark-cluster; KSTREAM_SPARK_ORACLE_CASES (400) and _BATCH (20) size it; -rP prints
# its report (compared, equal, counted apart and why, by operator family, and the time)
.PHONY: test-spark-oracle
test-spark-oracle: warm $(KAFKA_STAMP) $(ORACLE_STAMP)
	$(RUN_PY) -m pytest -q -rP tests/spark_oracle $(PYTEST_ARGS)

# one process compiles what every test process imports (tests/support/warm_bytecode.py), so a
# fresh clone's workers do not all compile the same modules at once; beside lint under `make test`
warm: $(STAMP)
	$(RUN_PY) tests/support/warm_bytecode.py > /dev/null

# The compatibility lane: the runtime, restore, exactly-once and example tests again on the
# embedded Tansu broker (one per worker), with its compensations on (kstream.broker_compat).
# `make test` runs the Tansu-only tests (the embedded broker, the demo, the compensations) on
# Apache Kafka's run; CI runs this lane after it.
TANSU_LANE ?= tests/integration/test_runtime.py tests/integration/test_restore_changelog.py \
	tests/integration/test_sink_collector.py tests/integration/test_client_contract.py \
	tests/e2e/test_examples.py tests/e2e/test_dedup_global.py tests/e2e/test_bad_input.py
test-tansu: $(STAMP)
	KSTREAM_TEST_BROKER=tansu $(RUN_PY) -m pytest -q -n 3 $(TANSU_LANE) $(PYTEST_ARGS)

# The broker compatibility lanes (docs/testing.md): tests/integration and the exactly-once
# crash tests against an older Apache Kafka, KAFKA_COMPAT, whose jars Maven resolves into
# tools/kafka/target-<version>/libs (KSTREAM_KAFKA_LIBS tells kstream.testing.kafka). A test of
# a feature that version lacks skips, naming it (tests/support/kafka_features.py); CI runs
# `make test-kafka-3.9` and `make test-kafka-4.1` after `make test`.
KAFKA_3.9 := 3.9.2
KAFKA_4.1 := 4.1.2
KAFKA_COMPAT ?= $(KAFKA_4.1)
COMPAT_LANE ?= tests/integration tests/e2e/test_crash.py tests/e2e/test_crash_cache.py \
	tests/e2e/test_crash_cogroup_suppress.py tests/e2e/test_crash_fk_join.py \
	tests/e2e/test_crash_grace_join.py
COMPAT_WORKERS ?= 4
test-kafka-compat: warm tools/kafka/target-$(KAFKA_COMPAT)/libs/.resolved
	KSTREAM_KAFKA_LIBS=$(CURDIR)/tools/kafka/target-$(KAFKA_COMPAT)/libs $(RUN_PY) -m pytest -q \
		-n $(COMPAT_WORKERS) --dist loadgroup --durations=10 $(COMPAT_LANE) $(PYTEST_ARGS)

test-kafka-3.9:
	@$(MAKE) --no-print-directory test-kafka-compat KAFKA_COMPAT=$(KAFKA_3.9)

test-kafka-4.1:
	@$(MAKE) --no-print-directory test-kafka-compat KAFKA_COMPAT=$(KAFKA_4.1)

# The chaos lane (tools/chaos.py, docs/testing.md "Chaos lane"): the crash, failover and
# rebalance tests of tests/e2e again and again beside a CPU burner per core, a fresh broker per
# run; a failing run keeps its worker logs and a dump of its topics under chaos-results/.
# RUNS=N runs of each test, TESTS=<regex> over the test ids, BURNERS=N, BUDGET=90m
chaos: $(STAMP) $(KAFKA_STAMP)
	$(RUN_PY) tools/chaos.py

# The deterministic simulator (kstream.testing.sim, docs/testing.md): SEEDS seeds from SEED_FIRST
# on every core (niced), at most SIM_BUDGET seconds; prints seeds/s and each failing seed with
# its replay command. SIM_ARGS adds options (--topology, --guarantee, --exclude, --no-faults).
SEEDS ?= 2000
SEED_FIRST ?= 0
SIM_BUDGET ?= 600
SIM_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SIM_ARGS ?=
simulate: $(STAMP)
	PYTHONHASHSEED=0 nice $(RUN_PY) -m kstream.testing.sim --seeds $(SEEDS) --first $(SEED_FIRST) \
		--jobs $(SIM_JOBS) --budget $(SIM_BUDGET) $(SIM_ARGS)

# the planted defects: each mutation of the runtime and the seeds it took to catch it
simulate-mutants: $(STAMP)
	PYTHONHASHSEED=0 nice $(RUN_PY) -m kstream.testing.sim --mutants --jobs $(SIM_JOBS) \
		--budget $(SIM_BUDGET)

unit: $(STAMP)
	$(RUN_PY) -m pytest -q tests/unit tests/property $(PYTEST_ARGS)

integration: $(STAMP) $(KAFKA_STAMP)
	$(RUN_PY) -m pytest -q tests/integration tests/e2e $(PYTEST_ARGS)

# Kafka Streams, the peer of kstream in `make bench`: P1-P3 with Kafka Streams' DSL in a small
# Java program (tools/kafka-streams-bench, Kafka Streams pinned to the broker's version) that
# Maven compiles, with its dependencies' jars copied into target/libs; bench/run_all.py starts
# one JVM per run
STREAMS_BENCH_DIR := tools/kafka-streams-bench
STREAMS_BENCH_STAMP := $(STREAMS_BENCH_DIR)/target/.built
$(STREAMS_BENCH_STAMP): $(STREAMS_BENCH_DIR)/pom.xml \
		$(wildcard $(STREAMS_BENCH_DIR)/src/main/java/io/kstream/bench/*.java)
	rm -rf $(STREAMS_BENCH_DIR)/target
	mvn -q -B -f $(STREAMS_BENCH_DIR)/pom.xml compile dependency:copy-dependencies
	touch $(STREAMS_BENCH_STAMP)

# `make bench`: the fair protocol (bench/fair.py, docs/performance.md "The fair protocol"):
# kstream, Kafka Streams, the raw loop and Quix Streams timed from the outside over one
# steady-state window, 3 shuffled repeats (about 40 minutes; BENCH_ARGS="--records 200000
# --repeats 1" for a smoke run). `make bench-engines`: the earlier harness (bench/run_all.py:
# every guarantee, latency, the Tansu compensations, worker processes); `make bench-full` its
# full run
BENCH_ARGS ?=
ENGINES_ARGS ?=
bench: $(STAMP) $(KAFKA_STAMP) $(STREAMS_BENCH_STAMP)
	$(PY) -m pip install -q -e '.[$(EXTRAS),bench]'
	$(RUN_PY) bench/fair.py $(BENCH_ARGS)

bench-engines: $(STAMP) $(KAFKA_STAMP) $(STREAMS_BENCH_STAMP)
	$(PY) -m pip install -q -e '.[$(EXTRAS),bench]'
	$(RUN_PY) bench/run_all.py $(ENGINES_ARGS)

bench-full: ENGINES_ARGS += --full
bench-full: bench-engines

# the largest functions and classes of the product and its repeated blocks of code
# (tools/codestats.py): the figures behind "one implementation per concept"
codestats:
	python3 tools/codestats.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache tools/kafka/target \
		tools/kafka/target-* tools/kafka-streams-oracle/target tools/kafka-streams-oracle/target-* \
		tools/kafka-streams-bench/target
