"""Apache Kafka's own command-line tools against a Tidegate broker.

The main classes behind a Kafka distribution's scripts (kafka-topics.sh is
`org.apache.kafka.tools.TopicCommand`, and so on), run from Kafka 4.1's jars (`make
deps-kafka`) against one Tidegate broker with the ACL authorizer on (the anonymous
PLAINTEXT principal a super user), as a Kafka user's first look at a new broker. Each
test batches a few commands and checks what they print and their exit status: the
everyday ones, and those that found a difference from Kafka 4.1 (docs/compatibility.md,
"Kafka's command-line tools"). The commands run one after another in one JVM
(kafka_tools/ToolRunner.java, compiled once into build/: a JVM per command cost ~1.8 s
each), which gives each its own stdin, stdout and stderr, and turns Kafka's `Exit.exit`
into the command's exit status after running the shutdown hooks it added, as a process's
end would. Skipped when there is no `java`/`javac` or the jars are missing.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.integration.conftest import ROOT, BrokerProcess
from tests.integration.kafka_oracle import kafka_process

pytestmark = pytest.mark.skipif(
    kafka_process.available() is not None or shutil.which("javac") is None,
    reason=str(kafka_process.available() or "no javac"))

TOOLS = "org.apache.kafka.tools."
TOPICS, ACLS, FEATURES = TOOLS + "TopicCommand", TOOLS + "AclCommand", TOOLS + "FeatureCommand"
PRODUCER, CONSUMER = TOOLS + "ConsoleProducer", TOOLS + "consumer.ConsoleConsumer"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
OFFSETS, DELETE_RECORDS = TOOLS + "GetOffsetShell", TOOLS + "DeleteRecordsCommand"
TRANSACTIONS, QUORUM = TOOLS + "TransactionsCommand", TOOLS + "MetadataQuorumCommand"
CONFIGS = "kafka.admin.ConfigCommand"

RUNNER = Path(__file__).parent / "kafka_tools" / "ToolRunner.java"
MAGIC = 0x4B544F4F


@dataclass
class Ran:
    rc: int
    out: str  # stdout and stderr together


def compiled_runner() -> Path:
    """ToolRunner's class folder, compiled once per version of its source."""
    digest = hashlib.sha256(RUNNER.read_bytes()).hexdigest()[:12]
    classes = ROOT / "build" / f"kafka-tools-{digest}"
    if not (classes / "ToolRunner.class").exists():
        tmp = classes.with_name(classes.name + f".tmp{os.getpid()}")
        r = subprocess.run(["javac", "-d", str(tmp), "-cp", str(kafka_process.LIB / "*"),
                            str(RUNNER)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"javac {RUNNER.name} failed:\n{r.stdout}{r.stderr}"
        shutil.rmtree(classes, ignore_errors=True)
        tmp.rename(classes)
    return classes


class Tools:
    """Runs Kafka's tools in one JVM (ToolRunner), one command at a time."""

    def __init__(self, broker: BrokerProcess, work: Path) -> None:
        self.broker = broker
        self.work = work
        log4j = work / "log4j2.properties"  # the tools' own errors, to stderr
        log4j.write_text(
            "rootLogger.level=ERROR\nrootLogger.appenderRef.s.ref=S\n"
            "appender.s.type=Console\nappender.s.name=S\nappender.s.target=SYSTEM_ERR\n"
            "appender.s.follow=true\n"
            "appender.s.layout.type=PatternLayout\nappender.s.layout.pattern=%p %m%n\n")
        cp = os.pathsep.join([str(compiled_runner()), str(kafka_process.LIB / "*")])
        self.jvm_log = work / "jvm.log"  # the JVM's own output (the commands' is answered)
        with self.jvm_log.open("wb") as log:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                 "-Xshare:auto", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp,
                 "ToolRunner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)

    def run(self, main: str, *args: str, stdin: str = "", timeout: float = 60) -> Ran:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        argv = [main, "--bootstrap-server", self.broker.bootstrap, *args]
        request = [struct.pack(">ii", MAGIC, len(argv))]
        for item in [*argv, stdin]:
            data = item.encode()
            request += [struct.pack(">i", len(data)), data]
        self.proc.stdin.write(b"".join(request))
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        magic, rc, size = struct.unpack(">iii", self._read(12, deadline))
        assert magic == MAGIC, "ToolRunner's answer is out of step: see " + str(self.jvm_log)
        return Ran(rc, self._read(size, deadline).decode())

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        got = b""
        while len(got) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise TimeoutError(f"no answer from ToolRunner (log: {self.jvm_log})")
            chunk = os.read(fd, n - len(got))
            if not chunk:
                raise EOFError(f"ToolRunner ended: {self.jvm_log.read_text()[-3000:]}")
            got += chunk
        return got

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # ToolRunner ends at the end of its requests
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def kt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    root = tmp_path_factory.mktemp("kafka-cli")
    b = BrokerProcess(root / "data", overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        "num.partitions": "1",
        # kafka-console-consumer's group starts at once (not after Kafka's 3 s wait for
        # more members): no check depends on it
        "group.initial.rebalance.delay.ms": "0",
    })
    b.start()
    try:
        tools = Tools(b, root)
        try:
            yield tools
        finally:
            tools.close()
    finally:
        b.stop()


def rows(out: str, first: str) -> list[list[str]]:
    """The table rows of a kafka-consumer-groups answer whose first column is `first`."""
    return [line.split() for line in out.splitlines() if line.split()[:1] == [first]]


def test_topics_produce_consume_and_groups(kt: Tools) -> None:
    r = kt.run(TOPICS, "--create", "--topic", "cli-t", "--partitions", "1")
    assert r.rc == 0 and "Created topic cli-t." in r.out, r.out
    r = kt.run(TOPICS, "--create", "--topic", "cli-t", "--partitions", "1")
    assert r.rc == 1 and "Topic 'cli-t' already exists." in r.out, r.out  # Kafka's words
    r = kt.run(TOPICS, "--alter", "--topic", "cli-t", "--partitions", "2")
    assert r.rc == 0, r.out
    r = kt.run(TOPICS, "--describe", "--topic", "cli-t")
    assert r.rc == 0 and "PartitionCount: 2\tReplicationFactor: 1" in r.out, r.out
    assert r.out.count("Leader: 1\tReplicas: 1\tIsr: 1") == 2, r.out

    # kafka-console-producer: headers, key and value on each line, tab-separated
    r = kt.run(PRODUCER, "--topic", "cli-t", "--property", "parse.key=true",
               "--property", "parse.headers=true", "--property", "key.separator=\t",
               "--property", "headers.delimiter=\t",
               stdin="h1:x,h2:y\tk1\tv1\nh1:z\tk2\tv2\nh1:w\tk1\tv3\n")
    assert r.rc == 0, r.out
    r = kt.run(CONSUMER, "--topic", "cli-t", "--from-beginning", "--max-messages", "3",
               "--group", "cli-g", "--timeout-ms", "20000", "--property", "print.key=true",
               "--property", "print.headers=true")
    assert r.rc == 0 and "Processed a total of 3 messages" in r.out, r.out
    got = sorted(line for line in r.out.splitlines() if line.startswith("h1:"))
    assert got == ["h1:w\tk1\tv3", "h1:x,h2:y\tk1\tv1", "h1:z\tk2\tv2"], r.out

    r = kt.run(GROUPS, "--describe", "--group", "cli-g")
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    table = rows(r.out, "cli-g")
    assert r.rc == 0 and "Consumer group 'cli-g' has no active members." in r.out, r.out
    assert sum(int(row[3]) for row in table) == 3 and {row[5] for row in table} == {"0"}
    r = kt.run(GROUPS, "--group", "cli-g", "--reset-offsets", "--to-earliest", "--topic",
               "cli-t", "--execute")
    assert r.rc == 0 and {row[3] for row in rows(r.out, "cli-g")} == {"0"}, r.out
    r = kt.run(GROUPS, "--describe", "--group", "cli-g", "--state")
    assert r.rc == 0 and "Empty" in r.out and "127.0.0.1:" in r.out, r.out


def test_configs_offsets_and_delete_records(kt: Tools) -> None:
    r = kt.run(TOPICS, "--create", "--topic", "cli-c", "--partitions", "1",
               "--config", "cleanup.policy=compact")
    assert r.rc == 0, r.out
    kt.run(PRODUCER, "--topic", "cli-c", "--property", "parse.key=true",
           stdin="a\t1\nb\t2\n")
    # a compact-only topic refuses DeleteRecords (POLICY_VIOLATION), as Kafka's does
    offsets = kt.work / "delete.json"
    offsets.write_text('{"partitions":[{"topic":"cli-c","partition":0,"offset":1}],'
                       '"version":1}')
    r = kt.run(DELETE_RECORDS, "--offset-json-file", str(offsets))
    assert "PolicyViolationException" in r.out, r.out
    r = kt.run(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", "cli-c",
               "--add-config", "cleanup.policy=[compact,delete]")
    assert r.rc == 0 and "Completed updating config for topic cli-c." in r.out, r.out
    r = kt.run(DELETE_RECORDS, "--offset-json-file", str(offsets))
    assert r.rc == 0 and "partition: cli-c-0\tlow_watermark: 1" in r.out, r.out
    # earliest, latest; latest tiered (-5) finds nothing with no tiered storage, so
    # kafka-get-offsets prints no line for it, as against Kafka
    assert kt.run(OFFSETS, "--topic", "cli-c", "--time", "earliest").out.split() == [
        "cli-c:0:1"]
    assert kt.run(OFFSETS, "--topic", "cli-c").out.split() == ["cli-c:0:2"]
    r = kt.run(OFFSETS, "--topic", "cli-c", "--time", "-5")
    assert r.rc == 0 and r.out.split() == [], r.out

    # a group's configs, set before the group exists, are described (Kafka lists such a
    # group among the config resources)
    r = kt.run(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", "cli-cg",
               "--add-config", "consumer.session.timeout.ms=50000")
    assert r.rc == 0, r.out
    r = kt.run(CONFIGS, "--describe", "--entity-type", "groups", "--entity-name", "cli-cg")
    assert r.rc == 0 and "consumer.session.timeout.ms=50000" in r.out, r.out


def test_acls_loggers_features_and_quorum(kt: Tools) -> None:
    r = kt.run(ACLS, "--add", "--allow-principal", "User:alice", "--operation", "Read",
               "--topic", "cli-a")
    assert r.rc == 0, r.out
    r = kt.run(ACLS, "--list", "--topic", "cli-a")
    assert r.rc == 0 and "(principal=User:alice, host=*, operation=READ, " \
        "permissionType=ALLOW)" in r.out, r.out
    # broker loggers: the broker's log levels, changed at run time (was INVALID_REQUEST)
    r = kt.run(CONFIGS, "--alter", "--entity-type", "broker-loggers", "--entity-name", "1",
               "--add-config", "tidegate.server.broker=DEBUG")
    assert r.rc == 0 and "Completed updating config for broker-logger 1." in r.out, r.out
    r = kt.run(CONFIGS, "--describe", "--entity-type", "broker-loggers", "--entity-name", "1")
    assert r.rc == 0 and "  root=" in r.out, r.out
    assert "  tidegate.server.broker=DEBUG sensitive=false synonyms={}" in r.out, r.out
    r = kt.run(FEATURES, "describe")
    assert r.rc == 0 and "Feature: metadata.version" in r.out, r.out
    # no KRaft quorum to describe: a clean refusal, as a ZooKeeper-era broker's
    r = kt.run(QUORUM, "describe", "--status")
    assert r.rc == 1 and "does not support DESCRIBE_QUORUM" in r.out, r.out
