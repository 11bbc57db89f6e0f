# Tidegate developer commands. `make run` starts a broker; `make test` checks everything.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run install deps-system deps-node deps-kafka deps-java fuzz-c lint typecheck layers unit test soak bench bench-quick demo demo-cluster demo-tidegate-cluster clean compat-franz-go compat-confluent-kafka-python compat-librdkafka

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml setup.py src/tidegate/records/_speedups.c src/tidegate/records/_columnar.c | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# kcat is one of the real clients the interop tests use; Debian packages it. The cluster
# tests start a real ZooKeeper from Debian's `zookeeper` package (its jars in
# /usr/share/java; it needs a Java runtime, which the package pulls in if missing). The
# network-partition tests drop packets with Debian's `iptables` (they skip unless root).
# The TLS tests make certificates with `openssl`. The outbox relay tests run a
# PostgreSQL server of their own from Debian's `postgresql` (initdb/pg_ctl, as user postgres).
deps-system:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (Debian package)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || { \
	  echo "installing zookeeper (Debian package)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq zookeeper >/dev/null; }
	@[ -f /usr/include/librdkafka/rdkafka.h ] || { \
	  echo "installing librdkafka-dev (Debian package; bench/load_producer.c, the C produce load)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq librdkafka-dev >/dev/null; }
	@command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || { \
	  echo "installing iptables (Debian package)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq iptables >/dev/null; }
	@command -v openssl >/dev/null 2>&1 || { \
	  echo "installing openssl (Debian package: the TLS tests make their certificates)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openssl >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  echo "installing postgresql (Debian package: the outbox relay tests start their own server)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; }
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium and chromium-driver (Debian packages: the web console's browser test)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; }

# KafkaJS (tests/integration/test_kafkajs.py) comes from the npm registry; node and npm
# from Debian's packages if the machine has none.
KAFKAJS := tests/integration/kafkajs
deps-node:
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing node and npm (Debian packages)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	@[ -d $(KAFKAJS)/node_modules/kafkajs ] || npm ci --prefix $(KAFKAJS) --no-audit --no-fund --loglevel=error

# Apache Kafka itself, the oracle of tests/integration/test_kafka_oracle.py: its broker's
# jars from Maven Central (tests/integration/kafka_oracle/pom.xml) into that folder's
# gitignored lib/; Maven and a Java runtime from Debian's packages if the machine has none.
KAFKA_ORACLE := tests/integration/kafka_oracle
$(KAFKA_ORACLE)/lib/.copied: $(KAFKA_ORACLE)/pom.xml
	@command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1 || { \
	  echo "installing maven and a Java runtime (Debian packages)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq maven default-jre-headless >/dev/null; }
	rm -rf $(KAFKA_ORACLE)/lib
	mvn -q -B -f $(KAFKA_ORACLE)/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(CURDIR)/$(KAFKA_ORACLE)/lib
	touch $@
deps-kafka: $(KAFKA_ORACLE)/lib/.copied

# Kafka's own Java client (tests/integration/test_java_client.py): a Maven project whose
# one jar holds the driver and kafka-clients from Maven Central; a JDK and Maven from
# Debian's packages if the machine has none. Rebuilt only when the pom or a source changed.
JAVA_DRIVER := tests/integration/java
JAVA_JAR    := $(JAVA_DRIVER)/target/tidegate-java-driver.jar
$(JAVA_JAR): $(JAVA_DRIVER)/pom.xml $(shell find $(JAVA_DRIVER)/src -name '*.java' 2>/dev/null)
	@command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || { \
	  echo "installing maven and a JDK (Debian packages)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq maven default-jdk-headless >/dev/null; }
	cd $(JAVA_DRIVER) && mvn -q -B package
	touch $@
deps-java: $(JAVA_JAR)

# Serving needs only the package (and its C speedups), not the test and lint tools.
RUN_STAMP := $(VENV)/.installed-run
$(RUN_STAMP): pyproject.toml setup.py src/tidegate/records/_speedups.c src/tidegate/records/_columnar.c | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/tidegate serve --override listeners=PLAINTEXT://127.0.0.1:9092 \
	    --override log.dirs=./tidegate-data $(ARGS)

lint: install
	$(BIN)/ruff check src tests bench examples

typecheck: install
	$(BIN)/mypy

layers: install
	$(BIN)/lint-imports

unit: install
	$(BIN)/pytest -q tests/unit

test: install deps-system deps-node deps-kafka deps-java lint typecheck layers
	@$(BIN)/python -c "from tidegate.records import record; print('record speedups (C extension):', 'on' if record.SPEEDUPS else 'OFF, pure Python')"
	# bytecode once, up front: the hundreds of broker, client and Spark worker processes
	# the tests start would each compile the package from source where
	# PYTHONDONTWRITEBYTECODE is set (0.55 s per broker start on this machine)
	$(BIN)/python -m compileall -q -j 0 src tests >/dev/null
	# two lanes (tests/conftest.py): the timing-sensitive integration tests (clusters,
	# kills, Spark, benchmark smokes) one after another in one, the light integration
	# modules and the unit tests in the other
	$(BIN)/pytest -q -ra --timeout=600 --durations=25 -n 2 --dist loadgroup -m "not slow" \
	    tests/integration tests/unit
	# the pure-Python record code is the reference the C extension must match: test it too
	TIDEGATE_PURE_PYTHON=1 $(BIN)/pytest -q --timeout=600 -n 2 -m "not slow" tests/unit/records

soak: install deps-system deps-node deps-kafka deps-java
	$(BIN)/python -m compileall -q -j 0 src tests >/dev/null
	TIDEGATE_SOAK=1 $(BIN)/pytest -q -ra -m slow tests

# The C record speedups and column decoder under AddressSanitizer + UBSan: build sanitized
# copies of both extensions in a scratch tree, then fuzz them against the pure-Python reference.
FUZZ_EXAMPLES ?= 3000
fuzz-c: install
	rm -rf /tmp/tidegate-asan && mkdir -p /tmp/tidegate-asan && cp -r src tests setup.py pyproject.toml /tmp/tidegate-asan/
	cd /tmp/tidegate-asan && CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -g -O1" \
	  LDFLAGS="-fsanitize=address,undefined" $(CURDIR)/$(BIN)/python -c \
	  "from setuptools import Extension; from setuptools.dist import Distribution; \
	   d = Distribution({'ext_modules': [Extension('tidegate.records.' + m, ['src/tidegate/records/' + m + '.c']) for m in ('_speedups', '_columnar')], 'package_dir': {'': 'src'}}); \
	   c = d.get_command_obj('build_ext'); c.inplace = 1; d.run_command('build_ext')"
	cd /tmp/tidegate-asan && LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  PYTHONMALLOC=malloc PYTHONPATH=src TIDEGATE_SPEEDUPS_EXAMPLES=$(FUZZ_EXAMPLES) \
	  $(CURDIR)/$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/records/test_speedups.py \
	    tests/unit/spark/test_columns.py

# franz-go's own pkg/kgo integration tests against a broker of this tree (not in `make
# test`: a few minutes): needs Go; the module comes from the Go module proxy the first
# time (tests/compat/franz_go.py; docs/compatibility.md, "Client test suites").
# ARGS: e.g. ARGS="--run TestTxnEtl --records 50000"; ARGS=--cluster (three brokers on
# ZooKeeper, KGO_TEST_RF=3; needs make deps-system), ARGS=--tls (KGO_SEEDS on an SSL
# listener with client certificates), or both.
compat-franz-go: install
	$(BIN)/python tests/compat/franz_go.py $(ARGS)

# confluent-kafka-python's own integration tests (tests/integration of its repository, tag
# v2.15.0) against a broker of this tree, with the classic and the KIP-848 group protocol
# (not in `make test`: about seven minutes). The suite is cloned into
# build/confluent-kafka-python/suite the first time (or ARGS="--suite DIR"), its test
# dependencies go to a venv of their own there (tests/compat/confluent_kafka_python.py;
# docs/compatibility.md, "Client test suites"). ARGS: e.g. ARGS="--protocol classic -k txn".
compat-confluent-kafka-python: install
	$(BIN)/python tests/compat/confluent_kafka_python.py $(ARGS)

# The broker benches run Apache Kafka beside Tidegate when its jars are there (make
# deps-kafka; bench/peer_kafka.py); without them they say so and measure Tidegate only.
bench: install
	$(BIN)/python bench/produce_consume.py
	$(BIN)/python bench/metrics_cost.py
	$(BIN)/python bench/clients.py
	$(BIN)/python bench/idempotence.py
	$(BIN)/python bench/transactions.py
	$(BIN)/python bench/requests.py
	$(BIN)/python bench/load_sweep.py
	$(BIN)/python bench/produce_requests.py
	$(BIN)/python bench/frame_assembler.py
	$(BIN)/python bench/produce_inproc.py
	$(BIN)/python bench/transactions_client.py
	$(BIN)/python bench/groups.py
	$(BIN)/python bench/security.py
	$(BIN)/python bench/spark.py
	$(BIN)/python bench/cluster.py
	$(BIN)/python bench/cluster_takeup.py

# Every bench at a small size (bench/quick.py), each table printed, one Kafka peer
# (flush=1) shared by all: a change's effect in under two minutes, before it lands.
bench-quick: install
	$(BIN)/python bench/quick.py $(ARGS)

# librdkafka's own test suite (its tests/ directory, at the version confluent-kafka ships)
# against a Tidegate broker: builds the suite once under /tmp/tidegate-librdkafka (a C
# compiler; rapidjson-dev for the stats tests), runs the chosen broker tests, prints the
# pass/fail/skip counts (docs/compatibility.md). Not part of `make test`: 10-20 minutes.
compat-librdkafka: install deps-kafka
	PYTHON=$(abspath $(BIN))/python tests/compat/librdkafka.sh

# examples/spark_pipeline.py (Spark local[*]) against a broker of its own on DEMO_PORT,
# data in a scratch directory; the broker stops when the example ends.
DEMO_PORT ?= 19092
DEMO_DIR  ?= /tmp/tidegate-demo
demo: install
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	@$(BIN)/tidegate serve --override listeners=PLAINTEXT://127.0.0.1:$(DEMO_PORT) \
	    --override log.dirs=$(DEMO_DIR)/data \
	    >$(DEMO_DIR)/broker.log 2>&1 & pid=$$!; trap "kill $$pid" EXIT; \
	  for i in $$(seq 100); do grep -q "listening on" $(DEMO_DIR)/broker.log && break; \
	    kill -0 $$pid 2>/dev/null || { cat $(DEMO_DIR)/broker.log; exit 1; }; sleep 0.1; done; \
	  echo "broker on 127.0.0.1:$(DEMO_PORT) (log: $(DEMO_DIR)/broker.log)"; \
	  $(BIN)/python examples/spark_pipeline.py 127.0.0.1:$(DEMO_PORT)

# The same example on a Spark standalone cluster: a master and two workers (1 core, 1g
# each) started from the pip-installed pyspark's bin/spark-class, all on 127.0.0.1; logs
# and worker directories under DEMO_CLUSTER_DIR. Everything stops when the example ends.
CLUSTER_PORT     ?= 17077
DEMO_CLUSTER_DIR ?= /tmp/tidegate-demo-cluster
demo-cluster: install
	@rm -rf $(DEMO_CLUSTER_DIR) && mkdir -p $(DEMO_CLUSTER_DIR)/spark
	@export SPARK_HOME=$$($(BIN)/python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))") \
	    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(CURDIR)/$(BIN)/python; \
	  ready() { for i in $$(seq 600); do grep -q "$$2" $$1 && return 0; sleep 0.1; done; \
	    cat $$1; return 1; }; \
	  $(BIN)/tidegate serve --override listeners=PLAINTEXT://127.0.0.1:$(DEMO_PORT) \
	    --override log.dirs=$(DEMO_CLUSTER_DIR)/data \
	    >$(DEMO_CLUSTER_DIR)/broker.log 2>&1 & pids=$$!; trap 'kill $$pids' EXIT; \
	  $$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 \
	    --port $(CLUSTER_PORT) --webui-port 0 >$(DEMO_CLUSTER_DIR)/spark/master.log 2>&1 & \
	  pids="$$pids $$!"; ready $(DEMO_CLUSTER_DIR)/spark/master.log "New state: ALIVE" || exit 1; \
	  for w in 1 2; do mkdir -p $(DEMO_CLUSTER_DIR)/spark/worker-$$w; \
	    $$SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker --host 127.0.0.1 \
	      --cores 1 --memory 1g --webui-port 0 --work-dir $(DEMO_CLUSTER_DIR)/spark/worker-$$w \
	      spark://127.0.0.1:$(CLUSTER_PORT) >$(DEMO_CLUSTER_DIR)/spark/worker-$$w.log 2>&1 & \
	    pids="$$pids $$!"; done; \
	  for w in 1 2; do ready $(DEMO_CLUSTER_DIR)/spark/worker-$$w.log "Successfully registered" || exit 1; done; \
	  ready $(DEMO_CLUSTER_DIR)/broker.log "listening on" || exit 1; \
	  echo "broker on 127.0.0.1:$(DEMO_PORT), Spark master spark://127.0.0.1:$(CLUSTER_PORT) (logs: $(DEMO_CLUSTER_DIR))"; \
	  $(BIN)/python examples/spark_pipeline.py 127.0.0.1:$(DEMO_PORT) --master spark://127.0.0.1:$(CLUSTER_PORT)

# The same again against a 3-broker Tidegate cluster (`tidegate cluster up`: a ZooKeeper
# and brokers on TG_CLUSTER_PORT..+2), every topic with replication factor 3 and
# min.insync.replicas 2, internal ones included. Needs Debian's zookeeper (make
# deps-system). The launcher stops the brokers and ZooKeeper when the example ends;
# data, logs and the Spark directories are under DEMO_TG_CLUSTER_DIR.
TG_CLUSTER_PORT     ?= 19192
TG_CLUSTER_ZK_PORT  ?= 12181
DEMO_TG_CLUSTER_DIR ?= /tmp/tidegate-demo-tidegate-cluster
demo-tidegate-cluster: install deps-system
	@rm -rf $(DEMO_TG_CLUSTER_DIR) && mkdir -p $(DEMO_TG_CLUSTER_DIR)/spark
	@export SPARK_HOME=$$($(BIN)/python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))") \
	    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(CURDIR)/$(BIN)/python; \
	  ready() { for i in $$(seq 900); do grep -q "$$2" $$1 2>/dev/null && return 0; sleep 0.1; done; \
	    cat $$1; return 1; }; \
	  $(BIN)/tidegate cluster up --brokers 3 --dir $(DEMO_TG_CLUSTER_DIR)/tidegate \
	    --base-port $(TG_CLUSTER_PORT) --zk-port $(TG_CLUSTER_ZK_PORT) \
	    --override default.replication.factor=3 --override min.insync.replicas=2 \
	    --override offsets.topic.replication.factor=3 \
	    --override transaction.state.log.replication.factor=3 \
	    --override transaction.state.log.min.isr=2 \
	    >$(DEMO_TG_CLUSTER_DIR)/cluster.log 2>&1 & tg=$$!; pids=; \
	  trap 'kill $$pids 2>/dev/null; kill $$tg 2>/dev/null; wait $$tg' EXIT; \
	  $$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 \
	    --port $(CLUSTER_PORT) --webui-port 0 >$(DEMO_TG_CLUSTER_DIR)/spark/master.log 2>&1 & \
	  pids="$$pids $$!"; ready $(DEMO_TG_CLUSTER_DIR)/spark/master.log "New state: ALIVE" || exit 1; \
	  for w in 1 2; do mkdir -p $(DEMO_TG_CLUSTER_DIR)/spark/worker-$$w; \
	    $$SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker --host 127.0.0.1 \
	      --cores 1 --memory 1g --webui-port 0 --work-dir $(DEMO_TG_CLUSTER_DIR)/spark/worker-$$w \
	      spark://127.0.0.1:$(CLUSTER_PORT) >$(DEMO_TG_CLUSTER_DIR)/spark/worker-$$w.log 2>&1 & \
	    pids="$$pids $$!"; done; \
	  for w in 1 2; do ready $(DEMO_TG_CLUSTER_DIR)/spark/worker-$$w.log "Successfully registered" || exit 1; done; \
	  ready $(DEMO_TG_CLUSTER_DIR)/cluster.log "^Bootstrap servers:" || exit 1; \
	  bootstrap=$$(sed -n 's/^Bootstrap servers: //p' $(DEMO_TG_CLUSTER_DIR)/cluster.log); \
	  echo "Tidegate cluster $$bootstrap (3 brokers, RF 3), Spark master spark://127.0.0.1:$(CLUSTER_PORT) (logs: $(DEMO_TG_CLUSTER_DIR))"; \
	  $(BIN)/python examples/spark_pipeline.py $$bootstrap --master spark://127.0.0.1:$(CLUSTER_PORT)

# segmentio/kafka-go's own Go test suite against a Tidegate broker on localhost:9092/9093
# (needs Go and those ports free; fetches the module through the Go module proxy). Not
# part of `make test`: it takes about 7 minutes. docs/compat-kafka-go.md has the counts.
.PHONY: compat-kafka-go
compat-kafka-go: install
	PYTHON=$(abspath $(BIN))/python tests/compat/kafka_go.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist src/*.egg-info
