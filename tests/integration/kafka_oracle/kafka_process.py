"""One Apache Kafka 4.x KRaft broker (combined broker + controller) for differential tests.

`make deps-kafka` copies the broker's jars from Maven Central into lib/ beside this file
(pom.xml); `KafkaProcess` writes a server.properties in a scratch directory with two free
loopback ports (client listener, controller), formats the log directory with a random
cluster id (`kafka.tools.StorageTool format`), starts `kafka.Kafka` with a 512 MB heap and
waits until the broker answers Metadata with itself in it. `available()` says whether the
jars and a `java` are there, so tests can skip cleanly on a machine without them.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from tests.integration.conftest import free_port

LIB = Path(__file__).resolve().parent / "lib"
JAVA_OPTS = ["-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Xshare:auto", "-Djava.awt.headless=true"]


def available() -> str | None:
    """None when Kafka can run here, else why not (a skip reason)."""
    if shutil.which("java") is None:
        return "no java on PATH"
    if not any(LIB.glob("kafka_2.13-*.jar")):
        return "Kafka's jars are missing: run `make deps-kafka`"
    return None


def kafka_version() -> str:
    jar = next(LIB.glob("kafka_2.13-*.jar"))
    return jar.stem.split("-", 1)[1]


def random_cluster_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 bytes, no padding
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaProcess:
    def __init__(self, work_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.controller_port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0  # from `java` launch to the first served Metadata

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            # one node: internal topics with one replica, as Tidegate's single broker
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
        }
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", *JAVA_OPTS, "-cp", str(LIB / "*"), main, *args]

    def start(self, timeout: float = 60.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "server.properties"
        config.write_text(self._properties())
        log4j = self.work_dir / "log4j2.properties"
        # warnings only, to a file: enough to see why a start failed
        log4j.write_text(
            "rootLogger.level=WARN\nrootLogger.appenderRef.f.ref=F\n"
            "appender.f.type=File\nappender.f.name=F\n"
            f"appender.f.fileName={self.work_dir / 'kafka.log'}\n"
            "appender.f.layout.type=PatternLayout\nappender.f.layout.pattern=%d %p %c %m%n\n"
        )
        t0 = time.monotonic()
        fmt = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", random_cluster_id(),
                       "-c", str(config), "--ignore-formatted"),
            capture_output=True, text=True, timeout=timeout,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        env = dict(os.environ)
        cmd = self._java("kafka.Kafka", str(config))
        cmd.insert(1, f"-Dlog4j2.configurationFile={log4j}")
        self.out = open(self.work_dir / "stdout.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while not self._serving():
            if self.proc.poll() is not None:
                raise RuntimeError("Kafka exited:\n" + self.logs())
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("Kafka did not start:\n" + self.logs())
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - t0

    def _serving(self) -> bool:
        """The broker answers Metadata and lists itself (it has registered)."""
        from tests.integration.rawclient import RawClient

        try:
            c = RawClient(self.bootstrap, timeout=2.0)
        except OSError:
            return False
        try:
            r = c.call(3, 12, {"topics": [], "allow_auto_topic_creation": False})
            return len(r.brokers) > 0
        except (TimeoutError, OSError, AssertionError):
            return False
        finally:
            c.close()

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None
            self.out.close()

    def logs(self) -> str:
        parts = []
        for name in ("stdout.log", "kafka.log"):
            p = self.work_dir / name
            if p.exists():
                parts.append(p.read_text(errors="replace")[-4000:])
        return "\n".join(parts)
