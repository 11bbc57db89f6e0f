"""Produce load generators for the broker benches, and what each costs per record.

A bench measures a broker only while the load generator has CPU to spare; on a 2-core
machine one Python thread in confluent-kafka (~3.5 us of CPU per record at 1 KiB) ran
out first. Three loads make the same records (a decimal key, one random value of `size`
bytes) with the same producer settings (acks, linger 5 ms, 1 MB batches, no compression,
no idempotence):

- ``c``: bench/load_producer.c on librdkafka's C API (~1.1 us of CPU per record here,
  ~2.2 us when it produced record by record), compiled here on first use with the
  system's librdkafka (Debian's librdkafka-dev; `make deps-system` installs it) into
  build/bench/ (gitignored);
- ``go``: bench/load_go/ on franz-go (github.com/twmb/franz-go), which, unlike
  librdkafka, packs every partition's ready batch for a broker into one Produce request
  (of at most 1 MiB, 5 in flight: the Java client's defaults); built here on first use
  with the system's Go (`go build`, fetching its modules from the Go module proxy the
  first time) into build/bench/; same arguments and JSON report as the c load;
- ``java``: Kafka's own `org.apache.kafka.tools.ProducerPerformance`, from the kafka-tools
  jar that `make deps-kafka` copies into Kafka's lib folder; its
  CPU includes the JVM's start and JIT compilation (~18 us per record over 200,000);
- ``python``: confluent-kafka in this process (~3.3 us per record).

`run()` returns the throughput and the load's own CPU seconds (the child's rusage for c and
java, this process's CPU time for python), so a bench can print both sides' CPU per
record. `choose("auto")` is the cheapest available: c, then java, then python.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
C_SOURCE = ROOT / "bench" / "load_producer.c"
C_BINARY = ROOT / "build" / "bench" / "load_producer"
GO_SOURCE = ROOT / "bench" / "load_go"
GO_BINARY = ROOT / "build" / "bench" / "load_go"
KAFKA_LIB = ROOT / "tests" / "integration" / "kafka_oracle" / "lib"
LOADS = ("c", "java", "python")  # cheapest first, as measured (docs/benchmarks.md)
PRODUCER_SETTINGS = {
    "linger.ms": "5",
    "batch.size": "1000000",
    "compression.type": "none",
    "enable.idempotence": "false",
    "queue.buffering.max.kbytes": "1048576",
}


@dataclass
class LoadResult:
    mb_s: float
    load_cpu_s: float  # the load generator's own CPU (all its threads)


def _build_c() -> str | None:
    """Compile the C load when its binary is missing or older than its source; None when
    it is ready, else why not."""
    if C_BINARY.exists() and C_BINARY.stat().st_mtime >= C_SOURCE.stat().st_mtime:
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler"
    if not Path("/usr/include/librdkafka/rdkafka.h").exists() and subprocess.run(
        ["pkg-config", "--exists", "rdkafka"], capture_output=True
    ).returncode != 0:
        return "librdkafka's headers are missing: run `make deps-system` (librdkafka-dev)"
    C_BINARY.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([cc, "-O2", "-Wall", "-o", str(C_BINARY), str(C_SOURCE), "-lrdkafka"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return f"cc failed: {out.stderr.strip()[:300]}"
    return None


def _build_go() -> str | None:
    """Build the go load when its binary is missing or older than its sources; None when
    it is ready, else why not."""
    sources = [GO_SOURCE / name for name in ("main.go", "go.mod", "go.sum")]
    if GO_BINARY.exists() and all(GO_BINARY.stat().st_mtime >= f.stat().st_mtime
                                  for f in sources):
        return None
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists()
                                else None)
    if go is None:
        return "no Go toolchain (go) on PATH"
    GO_BINARY.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([go, "build", "-o", str(GO_BINARY), "."], cwd=GO_SOURCE,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return f"go build failed: {out.stderr.strip()[:300]}"
    return None


def _java_classpath() -> str | None:
    jars = list(KAFKA_LIB.glob("*.jar"))
    if shutil.which("java") is None or not jars:
        return None
    if not any(j.name.startswith("kafka-tools-4") for j in jars):
        return None  # a lib/ copied before the pom listed kafka-tools: `make deps-kafka`
    return ":".join(str(j) for j in jars)


def unavailable(load: str) -> str | None:
    """None when `load` can run here, else why not."""
    if load == "python":
        return None
    if load == "c":
        return _build_c()
    if load == "go":
        return _build_go()
    if load == "java":
        if _java_classpath() is None:
            return "Kafka's kafka-tools jar or java is missing (`make deps-kafka`)"
        return None
    return f"unknown load {load!r}"


def choose(requested: str) -> tuple[str, list[str]]:
    """The load to run for `requested` (auto or a name) and notes on loads passed over."""
    notes = []
    for load in LOADS if requested == "auto" else (requested,):
        why = unavailable(load)
        if why is None:
            return load, notes
        notes.append(f"{load} load unavailable: {why}")
    if requested != "python":
        notes.append("falling back to the python load")
    return "python", notes


def _run_child(argv: list[str]) -> tuple[str, float]:
    """Run a load process; its stdout and CPU seconds (user + system, all its threads)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()  # returns once the process has exited and been reaped
    if proc.returncode != 0:
        raise SystemExit(f"load {argv[0]} failed ({proc.returncode}): {err.strip()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, cpu


def _run_c(bootstrap: str, topic: str, n: int, size: int, acks: str,
           partitions: int, binary: Path = C_BINARY) -> LoadResult:
    out, cpu = _run_child([str(binary), bootstrap, topic, str(n), str(size), acks,
                           str(partitions)])
    report = json.loads(out.strip().splitlines()[-1])
    return LoadResult(report["bytes"] / report["seconds"] / 1e6, cpu)


def _run_java(bootstrap: str, topic: str, n: int, size: int, acks: str,
              _partitions: int, round_robin: bool = False) -> LoadResult:
    """`round_robin`: each record to the next partition (Kafka's RoundRobinPartitioner)
    instead of the sticky partitioner's one partition per batch."""
    classpath = _java_classpath()
    assert classpath is not None
    props = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": "5",
             "batch.size": "1000000", "compression.type": "none",
             "enable.idempotence": "false", "buffer.memory": str(1 << 30),
             "max.request.size": str(1 << 24)}
    if round_robin:  # a batch open per partition: 1 MB each would not fit -Xmx1g at 1,000
        props["partitioner.class"] = "org.apache.kafka.clients.producer.RoundRobinPartitioner"
        props["batch.size"] = "65536"
    argv = ["java", "-Xmx1g", "-cp", classpath, "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(n), "--record-size", str(size),
            "--throughput", "-1", "--producer-props", *(f"{k}={v}" for k, v in props.items())]
    out, cpu = _run_child(argv)
    # its last line: "N records sent, R records/sec (M MB/sec), ..." (MB = 2^20 bytes)
    m = re.search(r"(\d+) records sent, ([\d.]+) records/sec", out.strip().splitlines()[-1])
    if m is None:
        raise SystemExit(f"ProducerPerformance: unexpected output {out[-300:]!r}")
    return LoadResult(float(m.group(2)) * size / 1e6, cpu)


def _run_python(bootstrap: str, topic: str, n: int, size: int, acks: str,
                _partitions: int) -> LoadResult:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, **PRODUCER_SETTINGS})
    payload = os.urandom(size)
    failures: list[object] = []

    def cb(err: object, _m: object) -> None:
        if err is not None:
            failures.append(err)

    cpu0, start = time.process_time(), time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, str(i).encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(300)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, e.g. {failures[0]}")
    return LoadResult(n * size / elapsed / 1e6, cpu)


def run_java_round_robin(bootstrap: str, topic: str, n: int, size: int, acks: str,
                         partitions: int) -> LoadResult:
    """The java load with one record per partition in turn: unlike librdkafka, which
    sends one partition per Produce request, the Java client puts every partition's
    batch for a broker into one request (bench/load_sweep.py's `--load java`)."""
    return _run_java(bootstrap, topic, n, size, acks, partitions, round_robin=True)


def run(load: str, bootstrap: str, topic: str, n: int, size: int, acks: str,
        partitions: int = 1) -> LoadResult:
    """Produce `n` records of `size` bytes to `topic` (of `partitions` partitions) with
    `load`; wait for every one. The c load sends chunks of 1,000 records to one partition
    after the other (librdkafka's batch call: one queue lock per chunk), go the same;
    java and python spread records by their keys' hash."""
    if load == "go":
        return _run_c(bootstrap, topic, n, size, acks, partitions, GO_BINARY)
    runner = {"c": _run_c, "java": _run_java, "python": _run_python}[load]
    return runner(bootstrap, topic, n, size, acks, partitions)
