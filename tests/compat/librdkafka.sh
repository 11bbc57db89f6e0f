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
# With SECURITY=1 it also runs the SSL and SASL tests (0097, 0135, 0142) on a 3-broker
# cluster with SSL (client certificates required), SASL_PLAINTEXT (PLAIN, SCRAM,
# unsecured OAUTHBEARER) and SASL_SSL listeners, `connections.max.reauth.ms=10000`, a CA
# and certificates made with openssl and the user trivup makes (security_phase below);
# and 0101 on a 3-broker cluster with a rack per broker (RACK_TESTS), as trivup does.
# Not run (docs/compatibility.md says why): the broker-less tests (-l: mock cluster and
# unit tests), sockem (network fault injection), OIDC (0126), other scenarios, share
# groups (KIP-932), known-issue tests.
#
# Environment: RDKAFKA_DIR (default /tmp/tidegate-librdkafka), LIBRDKAFKA_REF (a git tag,
# default v<libversion>), RDKAFKA_SRC (an existing librdkafka checkout to use instead of
# cloning), TESTS (a space-separated list overriding the embedded-broker list; empty
# to skip that phase), CLUSTER_TESTS, NOAUTO_TESTS and RACK_TESTS (likewise for the
# clusters of the default and the noautocreate scenario and the racked one), SECURITY=1
# with SECURITY_TESTS and SECURITY_RUNS (the security phase, its tests and client
# setups: ssl plain scram256 sasl_ssl oauthbearer), TEST_TIMEOUT
# (seconds per test, default 600), TEST_CONSUMER_GROUP_PROTOCOL=consumer (the suite's own
# variable: its consumers use KIP-848's protocol instead of the classic one), PYTHON
# (default .venv/bin/python), KAFKA_JARS (default tests/integration/kafka_oracle/lib, or
# the main checkout's when this is a git worktree without them), QUICK= (empty: run the
# subtests quick mode leaves out too; TEST_TIMEOUT may need raising: 0113 takes ~20 min).
# TESTS, CLUSTER_TESTS and NOAUTO_TESTS may be the word `groups`: GROUP_TESTS below.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
RDKAFKA_DIR=${RDKAFKA_DIR:-/tmp/tidegate-librdkafka}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
if [ -z "${KAFKA_JARS:-}" ]; then
    KAFKA_JARS=$ROOT/tests/integration/kafka_oracle/lib
    # a worktree has no fetched jars of its own: use the main checkout's
    if ! ls "$KAFKA_JARS"/kafka-tools-*.jar >/dev/null 2>&1; then
        common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)
        if [ -n "$common" ] && ls "${common%/.git}"/tests/integration/kafka_oracle/lib/kafka-tools-*.jar >/dev/null 2>&1; then
            KAFKA_JARS=${common%/.git}/tests/integration/kafka_oracle/lib
        fi
    fi
fi

# The broker tests chosen: produce, consume, offsets, groups (classic), idempotence,
# transactions (read side), admin, headers, timestamps, compression, stats.
DEFAULT_TESTS="0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0016 0017 0018
0019 0020 0021 0022 0026 0029 0030 0031 0033 0034 0035 0036 0039 0040 0041 0042 0044
0045 0048 0050 0051 0052 0053 0054 0055 0056 0057 0059 0060 0061 0063 0064 0065 0067
0069 0070 0073 0077 0081 0082 0083 0084 0085 0086 0089 0090 0091 0092 0093 0099 0102
0109 0110 0112 0113 0114 0118 0122 0123 0125 0127 0129 0130 0132 0137 0139 0140
0038 0150 0115 0119"
# The group and consumer tests (`groups`): the list run under
# TEST_CONSUMER_GROUP_PROTOCOL=consumer (KIP-848) on one broker and on the cluster;
# 0084 and 0132 skip themselves under KIP-848, 0109 needs Kafka's tools
GROUP_TESTS="0018 0026 0029 0030 0033 0034 0040 0045 0050 0051 0056 0060 0061 0067 0069
0081 0083 0084 0089 0091 0093 0099 0102 0109 0112 0113 0118 0122 0127 0129 0130 0132
0137 0139 0140"
expand_list() { if [ "$1" = groups ]; then echo "$GROUP_TESTS"; else echo "$1"; fi; }
TESTS_LIST=$(expand_list "${TESTS-$DEFAULT_TESTS}")
CLUSTER_TESTS=$(expand_list "${CLUSTER_TESTS-0098 0103}")
NOAUTO_TESTS=$(expand_list "${NOAUTO_TESTS-0045 0107 0111}")
RACK_TESTS=${RACK_TESTS-0101}
SECURITY_TESTS=${SECURITY_TESTS-0097 0135 0142}
SECURITY_RUNS=${SECURITY_RUNS-ssl plain scram256 sasl_ssl oauthbearer}
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
    # the statistics checks of 0053 and 0110 need RapidJSON (found by ./configure)
    if [ ! -f /usr/include/rapidjson/schema.h ] && command -v apt-get >/dev/null 2>&1; then
        log "installing rapidjson-dev (Debian package: the suite's statistics checks)"
        if [ "$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi
        { $sudo apt-get install -y -qq rapidjson-dev >/dev/null 2>&1 \
            || { $sudo apt-get update -qq && $sudo apt-get install -y -qq rapidjson-dev >/dev/null; }; } \
            || log "could not install rapidjson-dev: 0053's and 0110's statistics checks will skip"
    fi
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
    # LABEL (a run's name: in the log's name and after each test's), QUICK (default -Q;
    # empty for the tests whose subtests are all left out of quick mode) and SUBTESTS
    # (the suite's own: one substring of the subtests to run) come from the caller
    for t in "$@"; do
        out=$WORK/logs/$t-${SCENARIO:-default}${LABEL:+-$LABEL}.log
        (cd "$SUITE/tests" && RDKAFKA_TEST_CONF=$conf TEST_KAFKA_VERSION=4.0.0 TESTS=$t \
            BROKERS=$bootstrap LD_LIBRARY_PATH=../src:../src-cpp \
            timeout "$TEST_TIMEOUT" ./test-runner ${QUICK--Q} -E -K -L -p1 -s "${SCENARIO:-default}" >"$out" 2>&1)
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
            printf '%-50s %-7s %s\n' "$name${LABEL:+[$LABEL]}" "$status" "$why" | tee -a "$RESULTS"
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
    rm -rf "$WORK/data" "$WORK"/cluster-default "$WORK"/cluster-noautocreate "$WORK"/brokers-*/broker-*/ "$WORK"/brokers-*/zookeeper
}
trap cleanup EXIT

# the broker configs the suite's default scenario (tests/scenarios/default.json) assumes
BROKER_CONF=(--override num.partitions=4
    --override authorizer.class.name=kafka.security.authorizer.AclAuthorizer
    --override allow.everyone.if.no.acl.found=true --override http.listeners=)

embedded_phase() {
    [ -n "$TESTS_LIST" ] || return 0
    local port pid
    port=$(free_port)
    PYTHONPATH=$ROOT/src "$PYTHON" -m tidegate.cli.main serve \
        --override "listeners=PLAINTEXT://127.0.0.1:$port" --override "log.dirs=$WORK/data" \
        "${BROKER_CONF[@]}" >"$WORK/broker.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 300); do grep -qs "listening on" "$WORK/broker.log" && break; sleep 0.1; done
    grep -q "listening on" "$WORK/broker.log" || { cat "$WORK/broker.log"; exit 2; }
    printf 'bootstrap.servers=127.0.0.1:%s\ntest.timeout.multiplier=2\n' "$port" >"$WORK/test.conf"
    log "broker on 127.0.0.1:$port; logs in $WORK"
    # shellcheck disable=SC2086
    run_tests "$WORK/test.conf" "127.0.0.1:$port" $TESTS_LIST
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
embedded_phase

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

# start_brokers NAME N ARG...: tests/compat/rdkafka_cluster.py (N brokers on the
# listeners its ARGs name) in the background; sets BROKERS_PID and, for each listener,
# L_<listener> to its bootstrap list
start_brokers() {
    local name=$1 n=$2; shift 2
    local dir=$WORK/brokers-$name k v
    PYTHONPATH=$ROOT/src "$PYTHON" "$ROOT/tests/compat/rdkafka_cluster.py" --dir "$dir" \
        --brokers "$n" "${BROKER_CONF[@]}" "$@" >"$dir.log" 2>&1 &
    BROKERS_PID=$!
    PIDS+=("$BROKERS_PID")
    for _ in $(seq 1800); do
        [ -f "$dir/listeners.env" ] && break
        kill -0 "$BROKERS_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -f "$dir/listeners.env" ] || { log "the brokers of $name did not start (see $dir.log)"; return 1; }
    while IFS='=' read -r k v; do printf -v "L_$k" %s "$v"; done <"$dir/listeners.env"
    log "$n broker(s) for $name: $(tr '\n' ' ' <"$dir/listeners.env")"
}
stop_brokers() { kill "$BROKERS_PID" 2>/dev/null; wait "$BROKERS_PID" 2>/dev/null; }
# mark STATUS WHY TEST...: a result line for tests that could not run
mark() {
    local status=$1 why=$2 t; shift 2
    for t in "$@"; do printf '%-50s %-7s %s\n' "$t" "$status" "$why" | tee -a "$RESULTS"; done
}

# 0101 (fetch from follower) on 3 brokers, each in a rack of its own as trivup sets them
rack_phase() {
    [ -n "$RACK_TESTS" ] || return 0
    # shellcheck disable=SC2086
    [ -f /usr/share/java/zookeeper.jar ] || { mark SKIPPED "needs 3 brokers: Debian's zookeeper package" $RACK_TESTS; return 0; }
    # shellcheck disable=SC2086
    start_brokers racks 3 --racks || { mark FAILED "brokers did not start" $RACK_TESTS; return 0; }
    printf 'bootstrap.servers=%s\ntest.timeout.multiplier=2\n' "$L_PLAINTEXT" >"$WORK/racks.conf"
    # shellcheck disable=SC2086
    LABEL=racks run_tests "$WORK/racks.conf" "${L_PLAINTEXT%%,*}" $RACK_TESTS
    stop_brokers
}

# A CA, an unused second CA, a broker certificate (localhost, 127.0.0.1) and a client
# certificate whose key is in every form 0097 loads (trivup's SSL_* files)
make_pki() {
    local d=$1 pw=$2
    mkdir -p "$d" && (cd "$d" && {
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj "/CN=Tidegate test CA"
        openssl x509 -in ca.pem -outform DER -out ca.der
        openssl req -x509 -newkey rsa:2048 -nodes -keyout unused-ca.key -out unused-ca.pem -days 30 -subj "/CN=Unused CA"
        cat ca.pem unused-ca.pem >all-cas.pem
        openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=localhost"
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >broker.ext
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.crt -days 30 -extfile broker.ext
        cat broker.key broker.crt >broker.pem
        openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=librdkafka"
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 30
        openssl x509 -in client.pem -outform DER -out client.der
        openssl pkey -in client.key -aes256 -passout "pass:$pw" -out client-priv.pem
        openssl pkey -in client.key -outform DER -out client-priv.der
        openssl pkcs12 -export -in client.pem -inkey client.key -certfile ca.pem -passout "pass:$pw" -out client.p12
    } >"$d/openssl.log" 2>&1)
}

# run_secure LABEL CONF BOOTSTRAP TEST...: the security tests under one client config;
# 0142 once per subtest of the non-share consumers (its subtests all leave quick mode;
# its share-consumer ones need KIP-932)
run_secure() {
    local label=$1 conf=$2 boot=$3 t sub subs; shift 3
    grep -qw "$label" <<<"$SECURITY_RUNS" || return 0
    for t in "$@"; do
        grep -qw "$t" <<<"$SECURITY_TESTS" || continue
        if [ "$t" = 0142 ]; then
            subs="do_test_consumer do_test_producer do_test_txn_producer do_test_reauth_failure"
            [[ $label == oauthbearer* ]] && subs="do_test_consumer do_test_producer do_test_txn_producer do_test_oauthbearer"
            for sub in $subs; do
                LABEL=$label:$sub QUICK='' SUBTESTS="$sub:" run_tests "$conf" "$boot" 0142
            done
        else
            LABEL=$label run_tests "$conf" "$boot" "$t"
        fi
    done
}

# The SSL and SASL tests: a 3-broker cluster with the listeners and users trivup sets up
security_phase() {
    [ "${SECURITY:-0}" = 1 ] && [ -n "$SECURITY_TESTS" ] || return 0
    # shellcheck disable=SC2086
    [ -f /usr/share/java/zookeeper.jar ] || { mark SKIPPED "needs 3 brokers: Debian's zookeeper package" $SECURITY_TESTS; return 0; }
    local pki=$WORK/pki pw=clientpass plain unsecured c
    # shellcheck disable=SC2086
    make_pki "$pki" "$pw" || { mark FAILED "openssl failed: see $pki/openssl.log" $SECURITY_TESTS; return 0; }
    plain='org.apache.kafka.common.security.plain.PlainLoginModule required user_testuser="testpass";'
    unsecured=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
    # shellcheck disable=SC2086
    start_brokers secure 3 --listeners PLAINTEXT,SSL,SASL_PLAINTEXT,SASL_SSL \
        --override ssl.keystore.type=PEM --override "ssl.keystore.location=$pki/broker.pem" \
        --override ssl.truststore.type=PEM --override "ssl.truststore.location=$pki/ca.pem" \
        --override listener.name.ssl.ssl.client.auth=required \
        --override connections.max.reauth.ms=10000 \
        --override listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER \
        --override "listener.name.sasl_plaintext.plain.sasl.jaas.config=$plain" \
        --override "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=$unsecured" \
        --override listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 \
        --override "listener.name.sasl_ssl.plain.sasl.jaas.config=$plain" \
        || { mark FAILED "brokers did not start" $SECURITY_TESTS; return 0; }
    # the SCRAM user (both mechanisms), through the PLAINTEXT listener
    printf 'testpass\n' >"$pki/testuser.pw"
    PYTHONPATH=$ROOT/src "$PYTHON" -m tidegate.cli.main users add testuser \
        --password-file "$pki/testuser.pw" --bootstrap-server "${L_PLAINTEXT%%,*}" \
        >>"$WORK/brokers-secure.log" 2>&1 || log "could not add the SCRAM user"
    # what trivup hands the tests besides test.conf: the files of the client's certificate
    export SSL_pkcs=$pki/client.p12 SSL_pub_der=$pki/client.der SSL_pub_pem=$pki/client.pem \
        SSL_priv_der=$pki/client-priv.der SSL_priv_pem=$pki/client-priv.pem \
        SSL_ca_der=$pki/ca.der SSL_ca_pem=$pki/ca.pem SSL_all_cas_pem=$pki/all-cas.pem \
        SSL_password=$pw SSL_client_auth=required
    local ssl="ssl.ca.location=$pki/ca.pem
ssl.certificate.location=$pki/client.pem
ssl.key.location=$pki/client-priv.pem
ssl.key.password=$pw"
    local user='sasl.username=testuser
sasl.password=testpass'
    c=$WORK/secure
    printf 'bootstrap.servers=%s\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n%s\ntest.timeout.multiplier=2\n' \
        "$L_SASL_PLAINTEXT" "$user" >"$c-plain.conf"
    printf 'bootstrap.servers=%s\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n%s\ntest.timeout.multiplier=2\n' \
        "$L_SASL_PLAINTEXT" "$user" >"$c-scram256.conf"
    printf 'bootstrap.servers=%s\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n%s\n%s\ntest.timeout.multiplier=2\n' \
        "$L_SASL_SSL" "$user" "$ssl" >"$c-sasl_ssl.conf"
    printf 'bootstrap.servers=%s\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\nenable.sasl.oauthbearer.unsecure.jwt=true\nsasl.oauthbearer.config=scope=requiredScope principal=admin\ntest.timeout.multiplier=2\n' \
        "$L_SASL_PLAINTEXT" >"$c-oauthbearer.conf"
    printf 'bootstrap.servers=%s\nsecurity.protocol=SSL\n%s\ntest.timeout.multiplier=2\n' \
        "$L_SSL" "$ssl" >"$c-ssl.conf"
    run_secure ssl "$c-ssl.conf" "${L_SSL%%,*}" 0097
    run_secure plain "$c-plain.conf" "${L_SASL_PLAINTEXT%%,*}" 0135 0142
    run_secure scram256 "$c-scram256.conf" "${L_SASL_PLAINTEXT%%,*}" 0135 0142
    run_secure sasl_ssl "$c-sasl_ssl.conf" "${L_SASL_SSL%%,*}" 0097 0135 0142
    run_secure oauthbearer "$c-oauthbearer.conf" "${L_SASL_PLAINTEXT%%,*}" 0142
    stop_brokers
}

rack_phase
security_phase

passed=$(grep -c ' PASSED ' "$RESULTS"); failed=$(grep -c ' FAILED ' "$RESULTS")
skipped=$(grep -c ' SKIPPED ' "$RESULTS")
echo "librdkafka suite against Tidegate: $passed passed, $failed failed, $skipped skipped (logs: $WORK)"
[ "$failed" -eq 0 ]
