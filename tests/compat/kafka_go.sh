#!/usr/bin/env bash
# Run segmentio/kafka-go's own Go test suite against a Tidegate broker started here.
#
# kafka-go's package tests dial a broker on localhost:9092 (PLAINTEXT) and localhost:9093
# (SASL_PLAINTEXT with PLAIN and SCRAM users), both hard-coded, and gate features on
# KAFKA_VERSION. This script starts one embedded Tidegate broker on those two ports with
# the settings of kafka-go's docker_compose_versions/docker-compose-400.yml (auto topic
# creation, delete.topic.enable, message.max.bytes=200000000, the StandardAuthorizer name
# with allow.everyone.if.no.acl.found and the SASL super users, PLAIN user adminplain,
# SCRAM users adminscram256/adminscram512) plus group.initial.rebalance.delay.ms=0, which
# Kafka's own config/server.properties (the image's base) sets for development), fetches the module through the Go module
# proxy (`go mod download`), copies it to a scratch directory, runs `go test -json` there
# and prints pass/fail/skip counts (top-level tests and subtests). Not part of `make test`.
#
#   tests/compat/kafka_go.sh                 # everything, KAFKA_VERSION=4.0.0
#   RUN='TestConn|TestClient' tests/compat/kafka_go.sh   # a family (go test -run)
#
# Env: KAFKA_GO_VERSION (v0.4.51), KAFKA_VERSION (4.0.0), RUN, WORK (scratch dir),
# PYTHON (.venv/bin/python), GO (go), TIMEOUT (go test -timeout, 30m), NETTEST.
# Needs ports 9092 and 9093 free; exits 1 if any test failed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KAFKA_GO_VERSION=${KAFKA_GO_VERSION:-v0.4.51}
export KAFKA_VERSION=${KAFKA_VERSION:-4.0.0}
# as kafka-go's CI, skip TestConn/nettest (net/nettest's conformance checks); NETTEST=1 runs it
[ -n "${NETTEST:-}" ] || export KAFKA_SKIP_NETTEST=1
WORK=${WORK:-${TMPDIR:-/tmp}/tidegate-kafka-go}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
GO=${GO:-go}
TIMEOUT=${TIMEOUT:-30m}
RUN=${RUN:-}
# Tests that fail whatever the broker (see docs/compat-kafka-go.md): getOffsets in
# reader_test.go calls a ConsumerGroup's `connect` field, which only Validate() sets, so
# these three panic with a nil function and would end the whole test binary.
SKIP='TestReaderConsumerGroup/(verify_offset_committed|consumer_group_commits_on_close)'

for port in 9092 9093; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use: kafka-go's tests need localhost:9092 and :9093" >&2; exit 2
  fi
done

mkdir -p "$WORK"
SUITE="$WORK/kafka-go-$KAFKA_GO_VERSION"
if [ ! -f "$SUITE/go.mod" ]; then
  mod=$(mktemp -d)
  (cd "$mod" && "$GO" mod init tidegate-compat >/dev/null 2>&1 &&
     "$GO" mod download -json "github.com/segmentio/kafka-go@$KAFKA_GO_VERSION") > "$mod/dl.json"
  src=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["Dir"])' "$mod/dl.json")
  rm -rf "$mod" "$SUITE"
  cp -r "$src" "$SUITE" && chmod -R u+w "$SUITE"
  (cd "$SUITE" && "$GO" mod tidy)   # the module's go.sum lacks a few test dependencies
fi

DATA="$WORK/data"
rm -rf "$DATA"
PROPS="$WORK/broker.properties"
cat > "$PROPS" <<EOF
node.id=1
listeners=PLAINTEXT://localhost:9092,SASL_PLAINTEXT://localhost:9093
log.dirs=$DATA
http.listeners=
auto.create.topics.enable=true
delete.topic.enable=true
message.max.bytes=200000000
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_adminplain="admin-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:adminscram256;User:adminscram512;User:adminplain
allow.everyone.if.no.acl.found=true
group.initial.rebalance.delay.ms=0
EOF

export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -m tidegate.cli.main serve "$PROPS" > "$WORK/broker.log" 2>&1 &
BROKER=$!
trap 'kill "$BROKER" 2>/dev/null; wait "$BROKER" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "listening on" "$WORK/broker.log" && break
  kill -0 "$BROKER" 2>/dev/null || { cat "$WORK/broker.log" >&2; exit 2; }
  sleep 0.2
done
printf admin-secret-256 > "$WORK/pw256"; printf admin-secret-512 > "$WORK/pw512"
"$PYTHON" -m tidegate.cli.main users add adminscram256 --mechanism SCRAM-SHA-256 \
  --password-file "$WORK/pw256" --bootstrap-server localhost:9092 >/dev/null
"$PYTHON" -m tidegate.cli.main users add adminscram512 --mechanism SCRAM-SHA-512 \
  --password-file "$WORK/pw512" --bootstrap-server localhost:9092 >/dev/null

echo "kafka-go $KAFKA_GO_VERSION, KAFKA_VERSION=$KAFKA_VERSION, broker log $WORK/broker.log"
cd "$SUITE"
set +e
"$GO" test -p 1 -count=1 -json -timeout "$TIMEOUT" ${RUN:+-run "$RUN"} -skip "$SKIP" ./... \
  > "$WORK/go-test.json" 2> "$WORK/go-test.stderr"
set -e
"$PYTHON" "$ROOT/tests/compat/go_test_counts.py" "$WORK/go-test.json"
