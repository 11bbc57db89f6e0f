"""Random, malformed and null-laden request frames against a live broker.

A few thousand frames — every API key kio knows plus unknown ones, random versions,
zero-valued bodies with bytes overwritten (lengths of -1, i.e. null arrays and
strings), random bodies, truncated bodies and lying size prefixes — go to a broker
while a confluent-kafka producer and consumer use it. The control clients must see no
error and lose nothing; the broker must stay up and log no traceback (malformed
requests close their connection with one log line, as Kafka does).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.index import api_key_map, schema_name_map
from tests.integration.conftest import BrokerProcess

from tidegate.protocol.headers import encode_request_header
from tidegate.protocol.messages import build, encode, is_flexible, request_class

FRAMES = 5000
CONTROL_RECORDS = 2000
# A new seed each run (printed on failure); TIDEGATE_FUZZ_SEED replays one.
SEED = int(os.environ.get("TIDEGATE_FUZZ_SEED") or random.randrange(1 << 30))

# Requests that would change the control topic or the broker for everyone are left
# out of the structured part (random bytes may still hit them, harmlessly unlikely).
_SKIP = {20, 21, 33, 44}  # DeleteTopics, DeleteRecords, AlterConfigs, Incremental...


def _header(api_key: int, version: int, corr: int) -> bytes:
    try:
        flexible = is_flexible(api_key, version)
    except Exception:
        flexible = False
    return encode_request_header(api_key, version, corr, "fuzz", flexible)


def _bodies(rng: random.Random, api_key: int, version: int) -> bytes:
    """A body for (api_key, version): zero-valued and mutated, random, or truncated."""
    kind = rng.random()
    try:
        base = encode(build(request_class(api_key, version), {}))
    except Exception:
        base = b""
    if kind < 0.45 and base:
        body = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(body))
            patch = rng.choice([b"\xff\xff\xff\xff", b"\xff\xff", b"\x00", b"\x7f\xff\xff\xff"])
            body[at : at + len(patch)] = patch
        return bytes(body)
    if kind < 0.6:
        return b"\xff\xff\xff\xff" * rng.randint(1, 4) + bytes(rng.randint(0, 8))
    if kind < 0.8:
        return base[: rng.randrange(len(base) + 1)] if base else b""
    return rng.randbytes(rng.randint(0, 64))


def _frame(rng: random.Random, corr: int) -> bytes:
    keys = sorted(api_key_map)
    api_key = rng.choice(keys) if rng.random() < 0.95 else rng.randint(-5, 32767)
    if api_key in _SKIP:
        api_key = 3
    name = api_key_map.get(api_key)
    if name is not None and rng.random() < 0.85:
        version = rng.choice(sorted(schema_name_map[name]))
    else:
        version = rng.randint(-1, 20)
    payload = _header(api_key, version, corr) + _bodies(rng, api_key, version)
    size = len(payload)
    lie = rng.random()
    if lie < 0.03:
        size = -rng.randint(1, 1000)  # negative size
    elif lie < 0.05:
        size = (1 << 31) - 1  # far over socket.request.max.bytes
    elif lie < 0.08:
        size = size + rng.randint(1, 50)  # promises more than is sent
    elif lie < 0.10:
        payload = payload[: max(0, len(payload) - rng.randint(1, 10))]  # short read
    return struct.pack(">i", size) + payload


def _fuzz(bootstrap: str, frames: int, stop: threading.Event) -> int:
    rng = random.Random(SEED)
    host, port = bootstrap.rsplit(":", 1)
    sent = 0
    while sent < frames and not stop.is_set():
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.setblocking(False)
            for _ in range(rng.randint(1, 8)):
                try:
                    sock.sendall(_frame(rng, sent))
                    sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    break  # the broker closed this connection: take another
                finally:
                    sent += 1
    return sent


@pytest.fixture
def fuzz_broker(tmp_path: Path) -> BrokerProcess:
    b = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    return b


def test_fuzzed_frames_break_nothing(fuzz_broker: BrokerProcess) -> None:
    b = fuzz_broker
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("control", 3, 1)])["control"].result(30)
        errors: list[str] = []
        delivered: list[bytes] = []

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append(msg.value())  # type: ignore[attr-defined]

        producer = Producer(
            {"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2,
             "error_cb": lambda e: errors.append(f"producer: {e}")}
        )  # fmt: skip
        stop = threading.Event()
        fuzzed: list[int] = []
        fuzzer = threading.Thread(target=lambda: fuzzed.append(_fuzz(b.bootstrap, FRAMES, stop)))
        t0 = time.monotonic()
        fuzzer.start()
        for i in range(CONTROL_RECORDS):
            producer.produce("control", str(i).encode(), on_delivery=on_delivery)
            producer.poll(0)
            if i % 100 == 0:
                time.sleep(0.02)
        assert producer.flush(60) == 0
        fuzzer.join(90)
        stop.set()
        assert fuzzed and fuzzed[0] >= FRAMES, "the fuzzer did not finish"
        assert time.monotonic() - t0 < 90

        consumer = Consumer(
            {"bootstrap.servers": b.bootstrap, "group.id": "control", "auto.offset.reset":
             "earliest", "error_cb": lambda e: errors.append(f"consumer: {e}")}
        )  # fmt: skip
        consumer.subscribe(["control"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < CONTROL_RECORDS and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                assert m.error() is None, m.error()
                seen.add(m.value())
        consumer.close()

        assert errors == [], f"TIDEGATE_FUZZ_SEED={SEED}"
        assert sorted(delivered, key=int) == [str(i).encode() for i in range(CONTROL_RECORDS)]
        assert seen == set(delivered)
        assert b.proc is not None and b.proc.poll() is None, "the broker died"
    finally:
        rc = b.stop()
    logs = b.logs()
    where = logs.find("Traceback")
    assert where < 0, f"TIDEGATE_FUZZ_SEED={SEED}\n" + logs[max(0, where - 2000) :][:6000]
    assert rc == 0
