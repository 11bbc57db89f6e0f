"""Apache Kafka 4.x beside Tidegate: one KRaft broker in a scratch directory, for the
benchmarks (as their peer) and the differential tests (as their oracle).

`make deps-kafka` copies the broker's jars from Maven Central into
tests/integration/kafka_oracle/lib/ (its pom.xml). `KafkaBroker` writes a
server.properties with free loopback ports (one per client listener, one for the
controller), formats the log directory with a random cluster id (`kafka.tools.StorageTool
format`), starts `kafka.Kafka` and waits until the broker answers Metadata with itself in
it; `start_seconds` is that wait, which no benchmark times. `available()` says whether the
jars and a `java` are there, so a bench can say how to get them and measure Tidegate only.

A bench runs the peer in the two modes of `MODES`, both on Kafka's settings except what one
node needs (internal topics with one replica): Kafka's default, which fsyncs nothing and
relies on replicas, and `log.flush.interval.messages=1`, which flushes each appended batch
before answering, as Tidegate's default does. The JVM runs as `bin/kafka-server-start.sh`
runs it (G1, 20 ms pause goal) with a 1 GiB heap (`BENCH_JAVA_OPTS`; the start script's
default too); the oracle passes a smaller, faster-starting JVM of its own.
`peers()` starts the asked modes together (rounds alternate between them and Tidegate) and
stops them on the way out; `cpu_seconds()` reads the JVM's CPU time like
`bench/_cluster_launch.py`'s `Broker`, so the benches can print CPU per record for both.
`serve()` keeps a pair running for a series of benches (`bench/quick.py`) and `shared()`
lets each bench attach to them instead of starting JVMs of its own.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench._cluster_launch import _die_with_parent, free_port

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "tests" / "integration" / "kafka_oracle" / "lib"
# Kafka's start script's JVM settings (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS)
BENCH_JAVA_OPTS = ["-Xmx1g", "-Xms1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                   "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                   "-Djava.awt.headless=true"]
# target name -> (label for the tables, broker overrides)
MODES: dict[str, tuple[str, dict[str, str]]] = {
    "kafka": ("Kafka default", {}),
    "kafka-fsync": ("Kafka flush=1", {"log.flush.interval.messages": "1"}),
}
SETTINGS = {"kafka": "Kafka's defaults, no fsync (it relies on replicas)",
            "kafka-fsync": "log.flush.interval.messages=1, each appended batch flushed "
                           "before the answer, as Tidegate's default"}
HOW_TO_GET = "Kafka's jars are missing: run `make deps-kafka`"
SHARED_ENV = "TIDEGATE_BENCH_KAFKA"  # a state file of `serve`'s, set by bench/quick.py


def available() -> str | None:
    """None when Kafka can run here, else why not (a skip reason, or a bench's note)."""
    if shutil.which("java") is None:
        return "no java on PATH"
    if not any(LIB.glob("kafka_2.13-*.jar")):
        return HOW_TO_GET
    return None


def kafka_version() -> str:
    jar = next(LIB.glob("kafka_2.13-*.jar"))
    return jar.stem.split("-", 1)[1]


def random_cluster_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 bytes, no padding; not
    # one that starts with "-", which the format tool's command line takes for an option
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class KafkaBroker:
    """One Kafka process (broker and controller) in `work_dir`; `listeners` names the
    client listeners, each its security protocol (PLAINTEXT first: the readiness probe's)."""

    def __init__(self, work_dir: Path, overrides: dict[str, str] | None = None, *,
                 java_opts: Sequence[str] = tuple(BENCH_JAVA_OPTS),
                 listeners: Sequence[str] = ("PLAINTEXT",)) -> None:
        self.work_dir = work_dir
        self.ports = {name: free_port() for name in listeners}
        self.port = self.ports["PLAINTEXT"]
        self.controller_port = free_port()
        self.overrides = dict(overrides or {})
        self.java_opts = list(java_opts)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0  # from `java` launch (format included) to the first Metadata
        self.shared_pid: int | None = None  # a peer another process started (`shared()`)
        self._t0 = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def _properties(self) -> str:
        client = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"{client},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": client,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(
                [f"{n}:{n}" for n in self.ports] + ["CONTROLLER:PLAINTEXT"]),
            "log.dirs": str(self.work_dir / "data"),
            # one node: internal topics with one replica, as Tidegate's single broker
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", *self.java_opts, "-cp", str(LIB / "*"), main, *args]

    def start(self, timeout: float = 90.0) -> None:
        self.launch(timeout)
        self.wait_ready(timeout)

    def launch(self, timeout: float = 90.0) -> None:
        """Format the log directory and start the JVM, without waiting for it."""
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
        self._t0 = time.monotonic()
        # the format step needs no big heap: a small JVM starts faster
        fmt = subprocess.run(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", str(LIB / "*"),
             "kafka.tools.StorageTool", "format", "-t", random_cluster_id(),
             "-c", str(config), "--ignore-formatted"],
            capture_output=True, text=True, timeout=timeout,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        cmd = self._java("kafka.Kafka", str(config))
        cmd.insert(1, f"-Dlog4j2.configurationFile={log4j}")
        with open(self.work_dir / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)

    def wait_ready(self, timeout: float = 90.0) -> None:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while not self._serving():
            if self.proc.poll() is not None:
                raise RuntimeError("Kafka exited:\n" + self.logs())
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("Kafka did not start:\n" + self.logs())
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - self._t0

    def _serving(self) -> bool:
        """The broker answers Metadata and lists itself (it has registered). The port is
        tried first, so librdkafka never logs a refused connection."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
        except OSError:
            return False
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2.0)
        except KafkaException:  # while it registers: not yet
            return False
        return len(md.brokers) > 0

    def cpu_seconds(self) -> float:
        """CPU time of every thread of the JVM so far (Linux schedstat)."""
        pid = self.proc.pid if self.proc is not None else self.shared_pid
        if pid is None:
            return 0.0
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
        return total / 1e9

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

    def logs(self) -> str:
        parts = []
        for name in ("stdout.log", "kafka.log"):
            p = self.work_dir / name
            if p.exists():
                parts.append(p.read_text(errors="replace")[-4000:])
        return "\n".join(parts)


def wanted(arg: str) -> tuple[list[str], str | None]:
    """The peer modes a bench's `--peer` asks for ("auto": both when Kafka can run here,
    "none", "kafka", "kafka-fsync" or both comma-separated) and a note when the asked
    peer cannot run (the bench then measures Tidegate only)."""
    if arg == "none":
        return [], None
    modes = list(MODES) if arg == "auto" else [m for m in arg.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"--peer: unknown {unknown}; choose from auto, none, {', '.join(MODES)}")
    why = available()
    if why is not None:
        return [], f"Apache Kafka not measured ({why}); Tidegate only"
    return modes, None


def describe(modes: Sequence[str]) -> str:
    """One line for a bench's header: which Kafka, which JVM, which settings."""
    if not modes:
        return ""
    return (f"peer: Apache Kafka {kafka_version()} (KRaft, one node, {BENCH_JAVA_OPTS[0]}, G1, "
            "same client and settings); "
            + "; ".join(f"{MODES[m][0]}: {SETTINGS[m]}" for m in modes))


def add_peer_option(ap: argparse.ArgumentParser) -> None:
    """`--peer` on a bench's command line, read by `wanted()`."""
    ap.add_argument(
        "--peer", default="auto",
        help="Apache Kafka beside Tidegate: auto (both modes when `make deps-kafka` has "
             "run), none, or kafka / kafka-fsync (comma-separated)")


def shared(modes: Sequence[str], overrides: dict[str, str],
           listeners: Sequence[str]) -> dict[str, KafkaBroker] | None:
    """The peers `serve` started for a series of benches (`bench/quick.py` names its state
    file in SHARED_ENV), when they have the asked modes, listeners and settings: a bench
    then spends no JVM start of its own. Their stop is the server's, not the bench's."""
    path = os.environ.get(SHARED_ENV)
    if not path or tuple(listeners) != ("PLAINTEXT",):
        return None
    state = json.loads(Path(path).read_text())
    if not all(m in state and overrides.items() <= state[m]["overrides"].items()
               for m in modes):
        return None
    out = {}
    for m in modes:
        broker = KafkaBroker(Path(state[m]["dir"]), state[m]["overrides"])
        broker.port = broker.ports["PLAINTEXT"] = state[m]["port"]
        broker.shared_pid = state[m]["pid"]
        _delete_topics(broker.bootstrap)
        out[m] = broker
    return out


def _delete_topics(bootstrap: str, timeout: float = 60.0) -> None:
    """Every topic but the internal ones deleted: a bench on shared peers starts as on
    fresh ones (the benches reuse topic names, and read topics from offset 0)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")]
    if names:
        for fut in admin.delete_topics(names, operation_timeout=timeout).values():
            fut.result(timeout)
    deadline = time.monotonic() + timeout
    while set(names) & set(admin.list_topics(timeout=10).topics):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka did not delete {names}")
        time.sleep(0.1)


def serve(state_file: Path, modes: Sequence[str], overrides: dict[str, str]) -> None:
    """Start the modes, write where they are to `state_file` and keep them until SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-kafka-") as tmp:
        signal.signal(signal.SIGTERM, lambda *_a: sys.exit(0))
        with peers(Path(tmp), modes, overrides=overrides) as started:
            state = {m: {"port": b.port, "pid": b.proc.pid if b.proc else 0,
                         "dir": str(b.work_dir), "overrides": b.overrides}
                     for m, b in started.items()}
            tmp_state = state_file.with_suffix(".tmp")
            tmp_state.write_text(json.dumps(state))
            tmp_state.rename(state_file)  # whole or absent: the reader polls for it
            while True:
                time.sleep(3600)


def start(base: Path, modes: Sequence[str], *, overrides: dict[str, str] | None = None,
          listeners: Sequence[str] = ("PLAINTEXT",)) -> dict[str, KafkaBroker]:
    """The asked modes started under `base`, each in its own scratch directory (the JVMs
    start side by side, quicker than one after the other even on 2 cores), or the shared
    ones `serve` runs (`shared()`); a bench stops them with `stop_all()` (or uses
    `peers()`)."""
    attached = shared(modes, {**(overrides or {})}, listeners) if modes else None
    if attached is not None:
        return attached
    started: dict[str, KafkaBroker] = {}
    try:
        for mode in modes:
            broker = KafkaBroker(base / mode, {**MODES[mode][1], **(overrides or {})},
                                 listeners=listeners)
            print(f"  ... starting {MODES[mode][0]}", file=sys.stderr, flush=True)
            started[mode] = broker
            broker.launch()
        for broker in started.values():
            broker.wait_ready()
    except BaseException:
        stop_all(started)
        raise
    return started


def stop_all(started: dict[str, KafkaBroker]) -> None:
    for broker in started.values():
        broker.stop()


@contextmanager
def peers(base: Path, modes: Sequence[str], *, overrides: dict[str, str] | None = None,
          listeners: Sequence[str] = ("PLAINTEXT",)) -> Iterator[dict[str, KafkaBroker]]:
    """`start()` and `stop_all()` around a block, stopped even when the bench fails."""
    started = start(base, modes, overrides=overrides, listeners=listeners)
    try:
        yield started
    finally:
        stop_all(started)
