"""Produce and consume MB/s over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), one run.

One broker serves all three listeners (certificates made with openssl in a temporary
directory, tests/integration/security_util.py); confluent-kafka (librdkafka) is the
load generator. Each round produces `--records` 1 KiB records (acks=all) to a new topic
through each listener in rotating order, then consumes them back through the same
listener; the median of the rounds is printed beside PLAINTEXT's (the reference).
Aim (issue 17): TLS at least 0.7 x PLAINTEXT.

    .venv/bin/python bench/security.py [--records 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.security_util import make_pki, secure_broker

SIZE = 1024


def _conf(name: str, pki: Any) -> dict[str, Any]:
    if name == "PLAINTEXT":
        return {}
    conf = {"security.protocol": name, "ssl.ca.location": pki.path("ca.crt")}
    if name == "SASL_SSL":
        conf |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
                 "sasl.password": "bench-secret"}
    return conf


def produce(bootstrap: str, conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": 1 << 20, **conf})
    value = os.urandom(SIZE)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return n * SIZE / (time.perf_counter() - start) / 1e6


def consume(bootstrap: str, conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    got, start = 0, 0.0
    while got < n:
        for m in c.consume(10000, 10):
            if m.error() is None:
                if got == 0:
                    start = time.perf_counter()
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    return n * SIZE / elapsed / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp) / "pki")
        sb = secure_broker(Path(tmp) / "data", pki)
        sb.broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": sb.bootstrap("PLAINTEXT")})
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                            "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                            b"bench-secret")])["bench"].result(10)
            names = ["PLAINTEXT", "SSL", "SASL_SSL"]
            results: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
            for r in range(args.rounds):
                for name in names[r % 3:] + names[: r % 3]:
                    topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                    conf = _conf(name, pki)
                    results[name][0].append(produce(sb.bootstrap(name), conf, topic,
                                                    args.records))
                    results[name][1].append(consume(sb.bootstrap(name), conf, topic,
                                                    args.records))
        finally:
            sb.broker.stop()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, "
          f"Python {platform.python_version()}")
    print(f"{args.records} x {SIZE} B, acks=all, median of {args.rounds} rounds (MB/s)")
    print("| listener | produce | vs PLAINTEXT | consume | vs PLAINTEXT |")
    print("|---|---|---|---|---|")
    base_p = statistics.median(results["PLAINTEXT"][0])
    base_c = statistics.median(results["PLAINTEXT"][1])
    for name in results:
        p = statistics.median(results[name][0])
        c = statistics.median(results[name][1])
        print(f"| {name} | {p:.1f} | {p / base_p:.2f} | {c:.1f} | {c / base_c:.2f} |")


if __name__ == "__main__":
    main()
