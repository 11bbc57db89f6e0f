#!/usr/bin/env bash
# librdkafka's own test suite (tests/0nnn-*.c, *.cpp) against Tidegate.
#
# `make compat-librdkafka` runs this; it is not part of `make test` (it builds a C
# library and takes 10-20 minutes). What it does:
#   1. builds librdkafka and its test-runner, at the version confluent-kafka ships
#      (`confluent_kafka.libversion()`), under $RDKAFKA_DIR unless already built there;
#   2. starts one embedded Tidegate broker (a scratch data dir, a free port) with the
#      broker configs the suite assumes of its default trivup cluster: 4 partitions per
#      auto-created topic, an ACL authorizer that allows what no ACL names;
#   3. runs each chosen test in its own test-runner (quick mode, TEST_KAFKA_VERSION=4.0.0),
#      so one test's crash or leak cannot take the others down;
#   4. runs the tests that create topics with replication factor 3 (0098, 0103) on a
#      3-broker Tidegate cluster (`tidegate cluster up`) if Debian's ZooKeeper is there,
#      and the `noautocreate` scenario's tests (0045's topic-removal variants, 0107,
#      0111) on another with `auto.create.topics.enable=false`;
#   5. prints one line per test and the pass/fail/skip counts; exits 1 if any failed.
#
# Tests that need Kafka's command-line tools (0052, 0077, 0098, 0109 call kafka-topics.sh,
# kafka-acls.sh, a Java producer) get a stand-in $KAFKA_PATH whose bin/ scripts run
# Kafka's tool classes from the jars `make deps-kafka` fetched; without them they skip.
# Not run (docs/compatibility.md says why): the broker-less tests (-l: mock cluster and
# unit tests), sockem (network fault injection), SASL/SSL/OIDC, other scenarios, share
# groups (KIP-932), known-issue tests.
#
# Environment: RDKAFKA_DIR (default /tmp/tidegate-librdkafka), LIBRDKAFKA_REF (a git tag,
# default v<libversion>), RDKAFKA_SRC (an existing librdkafka checkout to use instead of
# cloning), TESTS (a space-separated list overriding the embedded-broker list),
# CLUSTER_TESTS and NOAUTO_TESTS (likewise for the clusters of the default and the
# noautocreate scenario; empty to skip one), TEST_TIMEOUT
# (seconds per test, default 600), TEST_CONSUMER_GROUP_PROTOCOL=consumer (the suite's own
# variable: its consumers use KIP-848's protocol instead of the classic one), PYTHON
# (default .venv/bin/python), KAFKA_JARS (default tests/integration/kafka_oracle/lib).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
RDKAFKA_DIR=${RDKAFKA_DIR:-/tmp/tidegate-librdkafka}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
KAFKA_JARS=${KAFKA_JARS:-$ROOT/tests/integration/kafka_oracle/lib}

# The broker tests chosen: produce, consume, offsets, groups (classic), idempotence,
# transactions (read side), admin, headers, timestamps, compression, stats.
DEFAULT_TESTS="0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0016 0017 0018
0019 0020 0021 0022 0026 0029 0030 0031 0033 0034 0035 0036 0039 0040 0041 0042 0044
0045 0048 0050 0051 0052 0053 0054 0055 0056 0057 0059 0060 0061 0063 0064 0065 0067
0069 0070 0073 0077 0081 0082 0083 0084 0085 0086 0089 0090 0091 0092 0093 0099 0102
0109 0110 0112 0113 0114 0118 0122 0123 0125 0127 0129 0130 0132 0137 0139 0140
0038 0150"
TESTS_LIST=${TESTS:-$DEFAULT_TESTS}
CLUSTER_TESTS=${CLUSTER_TESTS-0098 0103}
NOAUTO_TESTS=${NOAUTO_TESTS-0045 0107 0111}
unset TESTS

log() { echo "compat-librdkafka: $*" >&2; }

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

build_suite() {
    local src=$RDKAFKA_DIR/src
    if [ -x "$src/tests/test-runner" ]; then return 0; fi
    if [ -n "${RDKAFKA_SRC:-}" ]; then
        src=$RDKAFKA_SRC
    elif [ ! -d "$src" ]; then
        local ver ref
        ver=$("$PYTHON" -c 'import confluent_kafka; print(confluent_kafka.libversion()[0])') || return 1
        ref=${LIBRDKAFKA_REF:-v$ver}
        log "cloning librdkafka $ref into $src"
        mkdir -p "$RDKAFKA_DIR"
        git clone -q --depth 1 --branch "$ref" https://github.com/confluentinc/librdkafka "$src" || return 1
    fi
    if [ -x "$src/tests/test-runner" ]; then return 0; fi
    log "building librdkafka and its test-runner in $src (a few minutes; -O0 to build faster)"
    (cd "$src" && ./configure --disable-gssapi --disable-curl >"$RDKAFKA_DIR/configure.log" 2>&1 \
        && make -j2 libs CFLAGS=-O0 CXXFLAGS="-O0 -Wno-non-virtual-dtor" >"$RDKAFKA_DIR/build.log" 2>&1 \
        && make -C tests -j2 test-runner CFLAGS="-O0 -I../src" \
           CXXFLAGS="-O0 -I../src -I../src-cpp -Wno-non-virtual-dtor" >>"$RDKAFKA_DIR/build.log" 2>&1) \
        || { log "build failed: see $RDKAFKA_DIR/configure.log and build.log"; return 1; }
}

# A stand-in for a Kafka installation: bin/kafka-*.sh running Kafka's tool classes.
make_kafka_path() {
    local k=$RDKAFKA_DIR/kafka-path
    ls "$KAFKA_JARS"/kafka-tools-*.jar >/dev/null 2>&1 \
        || { log "no Kafka jars in $KAFKA_JARS (make deps-kafka): tests needing Kafka's tools will fail"; return 0; }
    mkdir -p "$k/bin" && ln -sfn "$KAFKA_JARS" "$k/libs"
    cat >"$k/bin/kafka-run-class.sh" <<'EOF'
#!/bin/sh
here=$(cd "$(dirname "$0")/.." && pwd)
exec java -Xmx256m -cp "${CLASSPATH:+$CLASSPATH:}$here/libs/*" "$@"
EOF
    printf '#!/bin/sh\nexec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.TopicCommand "$@"\n' \
        >"$k/bin/kafka-topics.sh"
    printf '#!/bin/sh\nexec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.AclCommand "$@"\n' \
        >"$k/bin/kafka-acls.sh"
    chmod +x "$k/bin/"*.sh
    export KAFKA_PATH=$k
}

# run_tests CONF BOOTSTRAP TEST...: one test-runner per test; appends to $RESULTS
run_tests() {
    local conf=$1 bootstrap=$2; shift 2
    local t out rc res
    for t in "$@"; do
        out=$WORK/logs/$t-${SCENARIO:-default}.log
        (cd "$SUITE/tests" && RDKAFKA_TEST_CONF=$conf TEST_KAFKA_VERSION=4.0.0 TESTS=$t \
            BROKERS=$bootstrap LD_LIBRARY_PATH=../src:../src-cpp \
            timeout "$TEST_TIMEOUT" ./test-runner -Q -E -K -L -p1 -s "${SCENARIO:-default}" >"$out" 2>&1)
        rc=$?
        # the outcome of every test the number selected (0045 has several), from the
        # runner's own "=== Test NAME PASSED|FAILED|SKIPPED ===" lines
        res=$(grep -a -o -E '=== Test [0-9a-z_]+ (PASSED|FAILED|SKIPPED)' "$out" | sed 's/=== Test //')
        if [ -z "$res" ]; then
            if grep -a -q 'Skipping test\|SKIPPED' "$out"; then res="$t SKIPPED"; else res="$t FAILED"; fi
        fi
        if [ $rc -ne 0 ] && ! grep -q FAILED <<<"$res"; then
            # the runner aborted after the test (threads left, a timeout): a failure
            res="$res"$'\n'"$t(runner) FAILED"
        fi
        while read -r name status; do
            local why=""
            case $status in
                FAILED) why=$(grep -a -A1 '^.*### Test' "$out" | grep -a -v '###' | head -1 | cut -c1-160) ;;
                SKIPPED) why=$(grep -a -o 'SKIPPING TEST: .*' "$out" | head -1 | cut -c16-120) ;;
            esac
            printf '%-50s %-7s %s\n' "$name" "$status" "$why" | tee -a "$RESULTS"
        done <<<"$res"
    done
}

build_suite || exit 2
SUITE=${RDKAFKA_SRC:-$RDKAFKA_DIR/src}
WORK=$(mktemp -d /tmp/tidegate-rdkafka-run.XXXXXX)
mkdir -p "$WORK/logs"
RESULTS=$WORK/results.txt
: >"$RESULTS"
make_kafka_path
PIDS=()
# stop what is left; the brokers' data go, the logs stay
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK/data" "$WORK"/cluster-default "$WORK"/cluster-noautocreate
}
trap cleanup EXIT

# the broker configs the suite's default scenario (tests/scenarios/default.json) assumes
BROKER_CONF=(--override num.partitions=4
    --override authorizer.class.name=kafka.security.authorizer.AclAuthorizer
    --override allow.everyone.if.no.acl.found=true --override http.listeners=)

PORT=$(free_port)
PYTHONPATH=$ROOT/src "$PYTHON" -m tidegate.cli.main serve \
    --override "listeners=PLAINTEXT://127.0.0.1:$PORT" --override "log.dirs=$WORK/data" \
    "${BROKER_CONF[@]}" >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do grep -qs "listening on" "$WORK/broker.log" && break; sleep 0.1; done
grep -q "listening on" "$WORK/broker.log" || { cat "$WORK/broker.log"; exit 2; }
printf 'bootstrap.servers=127.0.0.1:%s\ntest.timeout.multiplier=2\n' "$PORT" >"$WORK/test.conf"
log "broker on 127.0.0.1:$PORT; logs in $WORK"
# shellcheck disable=SC2086
run_tests "$WORK/test.conf" "127.0.0.1:$PORT" $TESTS_LIST
kill "${PIDS[0]}" 2>/dev/null

# cluster_phase SCENARIO "TESTS" OVERRIDE...: a 3-broker cluster of its own, then the tests
cluster_phase() {
    local scenario=$1 tests=$2; shift 2
    [ -n "$tests" ] || return 0
    if [ ! -f /usr/share/java/zookeeper.jar ]; then
        for t in $tests; do
            printf '%-50s %-7s %s\n' "$t" SKIPPED "needs 3 brokers: Debian's zookeeper package" | tee -a "$RESULTS"
        done
        return 0
    fi
    local base zk dir=$WORK/cluster-$scenario boot
    base=$(free_port); zk=$(free_port)
    PYTHONPATH=$ROOT/src "$PYTHON" -m tidegate.cli.main cluster up --brokers 3 \
        --dir "$dir" --base-port "$base" --zk-port "$zk" "${BROKER_CONF[@]}" "$@" \
        >"$dir.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 900); do grep -qs "is up" "$dir.log" && break; sleep 0.1; done
    if grep -qs "is up" "$dir.log"; then
        boot="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
        printf 'bootstrap.servers=%s\ntest.timeout.multiplier=2\n' "$boot" >"$dir.conf"
        log "3-broker cluster on $boot (scenario $scenario)"
        # shellcheck disable=SC2086
        SCENARIO=$scenario run_tests "$dir.conf" "127.0.0.1:$base" $tests
    else
        log "the cluster did not start (see $dir.log)"
        for t in $tests; do printf '%-50s %-7s %s\n' "$t" FAILED "cluster did not start" | tee -a "$RESULTS"; done
    fi
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

cluster_phase default "$CLUSTER_TESTS"
# the tests of librdkafka's `noautocreate` scenario (topic auto-creation off); 0107 and
# 0111 create their topics with replication factor 3
cluster_phase noautocreate "$NOAUTO_TESTS" --override auto.create.topics.enable=false

passed=$(grep -c ' PASSED ' "$RESULTS"); failed=$(grep -c ' FAILED ' "$RESULTS")
skipped=$(grep -c ' SKIPPED ' "$RESULTS")
echo "librdkafka suite against Tidegate: $passed passed, $failed failed, $skipped skipped (logs: $WORK)"
[ "$failed" -eq 0 ]
