"""Drive other people's Kafka clients (the protocol oracles) in one uniform way.

`produce(lib, ...)` and `consume(lib, ...)` for confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat. Records are `Rec(key, value, headers)`; consumed
records come back as `Got(partition, offset, key, value, headers, timestamp)`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LIBS = ("confluent", "kafka-python", "aiokafka", "kcat")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Rec:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def make_records(n: int, prefix: str = "k", header_sets: int = 3) -> list[Rec]:
    """Keyed records; the value starts with the record's index. Headers cycle over a
    few fixed sets (kcat attaches one header set per invocation, so use 1 for kcat)."""
    header_sets_ = [(("src", b"test"), ("set", str(s).encode())) for s in range(header_sets)]
    return [
        Rec(
            f"{prefix}{i % 997}".encode(),
            f"{i}:value-{'x' * (i % 50)}".encode(),
            header_sets_[i % header_sets],
        )
        for i in range(n)
    ]


def index_of(value: bytes | None) -> int:
    assert value is not None
    return int(value.split(b":", 1)[0])


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    fut.result(30)


def produce(lib: str, bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
    if lib == "confluent":
        _produce_confluent(bootstrap, topic, recs, codec)
    elif lib == "kafka-python":
        _produce_kafka_python(bootstrap, topic, recs, codec)
    elif lib == "aiokafka":
        asyncio.run(_produce_aiokafka(bootstrap, topic, recs, codec))
    elif lib == "kcat":
        _produce_kcat(bootstrap, topic, recs, codec)
    else:
        raise ValueError(lib)


def _produce_confluent(bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "acks": "all",
            "linger.ms": 20,
            "enable.idempotence": False,
        }
    )

    def cb(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for r in recs:
        while True:
            try:
                p.produce(topic, r.value, r.key, headers=list(r.headers), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:5]


def _produce_kafka_python(bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=20,
        compression_type=None if codec == "none" else codec,
        enable_idempotence=False,
        batch_size=65536,
    )
    futs = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers)) for r in recs]
    p.flush(120)
    for f in futs:
        f.get(timeout=60)
    p.close()


async def _produce_aiokafka(bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=20,
        compression_type=None if codec == "none" else codec,
        enable_idempotence=False,
        max_batch_size=65536,
    )
    await p.start()
    try:
        futs = [await p.send(topic, r.value, key=r.key, headers=list(r.headers)) for r in recs]
        await p.flush()
        for f in futs:
            await f
    finally:
        await p.stop()


def _produce_kcat(bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
    """kcat applies -H headers to every message, so records are grouped by headers."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make test installs it with apt-get)"
    groups: dict[tuple[tuple[str, bytes], ...], list[Rec]] = {}
    for r in recs:
        groups.setdefault(r.headers, []).append(r)
    for headers, group in groups.items():
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            for r in group:
                assert b"\x1f" not in r.key and b"\n" not in r.value
                f.write(r.key + b"\x1f" + r.value + b"\n")
            name = f.name
        args = [
            kcat,
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-K",
            "\x1f",
            "-z",
            codec,
            "-X",
            "acks=all",
            "-X",
            "linger.ms=20",
            "-l",
            name,
        ]
        for k, v in headers:
            args += ["-H", f"{k}={v.decode()}"]
        subprocess.run(args, check=True, timeout=300, capture_output=True)
        Path(name).unlink()


def consume(lib: str, bootstrap: str, topic: str, n: int, timeout: float = 120) -> list[Got]:
    if lib == "confluent":
        return _consume_confluent(bootstrap, topic, n, timeout)
    if lib == "kafka-python":
        return _consume_kafka_python(bootstrap, topic, n, timeout)
    if lib == "aiokafka":
        return asyncio.run(_consume_aiokafka(bootstrap, topic, n, timeout))
    if lib == "kcat":
        return _consume_kcat(bootstrap, topic, n, timeout)
    raise ValueError(lib)


def _partitions(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return sorted(md.topics[topic].partitions)


def _consume_confluent(bootstrap: str, topic: str, n: int, timeout: float) -> list[Got]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in _partitions(bootstrap, topic)])
    out: list[Got] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error():
                raise RuntimeError(m.error())
            out.append(
                Got(
                    m.partition(),
                    m.offset(),
                    m.key(),
                    m.value(),
                    tuple(m.headers() or ()),
                    m.timestamp()[1],
                )
            )
    c.close()
    return out


def _consume_kafka_python(bootstrap: str, topic: str, n: int, timeout: float) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    c.assign([TopicPartition(topic, p) for p in _partitions(bootstrap, topic)])
    out: list[Got] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for tp, msgs in c.poll(1000, max_records=5000).items():
            for m in msgs:
                out.append(
                    Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                )
    c.close()
    return out


async def _consume_aiokafka(bootstrap: str, topic: str, n: int, timeout: float) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await c.start()
    out: list[Got] = []
    try:
        parts = c.partitions_for_topic(topic) or set(_partitions(bootstrap, topic))
        c.assign([TopicPartition(topic, p) for p in sorted(parts)])
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=1000, max_records=5000)
            for tp, msgs in batch.items():
                for m in msgs:
                    out.append(
                        Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                    )
    finally:
        await c.stop()
    return out


def _consume_kcat(bootstrap: str, topic: str, n: int, timeout: float) -> list[Got]:
    kcat = shutil.which("kcat")
    assert kcat
    proc = subprocess.run(
        [kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", "-c", str(n)],
        capture_output=True,
        timeout=timeout,
        check=True,
    )
    out = []
    for line in proc.stdout.splitlines():
        d = json.loads(line)
        hdrs = d.get("headers") or []
        headers = tuple((hdrs[i], hdrs[i + 1].encode()) for i in range(0, len(hdrs), 2))
        out.append(
            Got(
                d["partition"],
                d["offset"],
                None if d["key"] is None else d["key"].encode(),
                None if d["payload"] is None else d["payload"].encode(),
                headers,
                d["ts"],
            )
        )
    return out
