"""Produce and consume MB/s over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), one run.

One broker serves all three listeners (certificates made with openssl in a temporary
directory, tests/integration/security_util.py); confluent-kafka (librdkafka) is the
load generator. Each round produces `--records` 1 KiB records (acks=all) to a new topic
through each listener in rotating order, then consumes them back through the same
listener; the median of the rounds is printed beside PLAINTEXT's (the reference).
Aim (issue 17): TLS at least 0.7 x PLAINTEXT.

Apache Kafka serves the same three listeners beside it when its jars are there (`make
deps-kafka`, `--peer`; `bench/peer_kafka.py`): the same server certificate as a PEM
keystore (`ssl.keystore.type=PEM`), SCRAM-SHA-512 on SASL_SSL, in each round after
Tidegate, with its default (no fsync) and with `log.flush.interval.messages=1`.

    .venv/bin/python bench/security.py [--records 100000] [--rounds 3]
        [--peer auto|none|kafka,kafka-fsync]
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

from bench import peer_kafka
from bench.produce_consume import process_cpu_seconds
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
        for m in c.consume(min(10000, n - got), 10):  # never wait for more than n
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
    peer_kafka.add_peer_option(ap)
    args = ap.parse_args()
    peers, why_not = peer_kafka.wanted(args.peer)
    # (mode, listener): produce MB/s, consume MB/s, broker CPU us/record (produce)
    kafka_results: dict[tuple[str, str], tuple[list[float], list[float], list[float]]] = {
        (m, n): ([], [], []) for m in peers for n in ("PLAINTEXT", "SSL", "SASL_SSL")}
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp) / "pki")
        kafka_tls = {  # the same certificate as Tidegate's, PEM (Kafka >= 2.7)
            "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server.pem"),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            # consume() times from the first record, so the join's delay is not measured;
            # without it each of Kafka's consumers waits 3 s to join
            "group.initial.rebalance.delay.ms": "0"}
        kafkas = peer_kafka.start(Path(tmp), peers, overrides=kafka_tls,  # not timed
                                  listeners=("PLAINTEXT", "SSL", "SASL_SSL"))
        # as Kafka's above: each consume() joins a new group, and Tidegate's default 3 s
        # join delay (untimed: consume() times from the first record) was most of a run
        sb = secure_broker(Path(tmp) / "data", pki, {"group.initial.rebalance.delay.ms": "0"})
        sb.broker.start()
        try:
            for bootstrap in [sb.bootstrap("PLAINTEXT")] + [k.bootstrap for k in kafkas.values()]:
                admin = AdminClient({"bootstrap.servers": bootstrap})
                admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                                "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                b"bench-secret")])["bench"].result(10)
            for kafka in kafkas.values():  # untimed: the JVM compiles its hot paths
                for name in ("PLAINTEXT", "SSL"):
                    topic = f"warmup-{name.lower()}"
                    produce(kafka.bootstrap_of(name), _conf(name, pki), topic, args.records)
                    consume(kafka.bootstrap_of(name), _conf(name, pki), topic, args.records)
            names = ["PLAINTEXT", "SSL", "SASL_SSL"]
            results: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
            cpu: dict[str, list[float]] = {n: [] for n in names}  # broker us/record, produce
            for r in range(args.rounds):
                for name in names[r % 3:] + names[: r % 3]:
                    topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                    conf = _conf(name, pki)
                    pid = sb.broker.proc.pid if sb.broker.proc is not None else 0
                    before_cpu = process_cpu_seconds(pid)
                    results[name][0].append(produce(sb.bootstrap(name), conf, topic,
                                                    args.records))
                    cpu[name].append((process_cpu_seconds(pid) - before_cpu)
                                     / args.records * 1e6)
                    results[name][1].append(consume(sb.bootstrap(name), conf, topic,
                                                    args.records))
                    for mode, kafka in kafkas.items():  # then Kafka, same listener
                        out = kafka_results[mode, name]
                        before_cpu = kafka.cpu_seconds()
                        out[0].append(produce(kafka.bootstrap_of(name), conf, topic,
                                              args.records))
                        out[2].append((kafka.cpu_seconds() - before_cpu) / args.records * 1e6)
                        out[1].append(consume(kafka.bootstrap_of(name), conf, topic,
                                              args.records))
        finally:
            sb.broker.stop()
            peer_kafka.stop_all(kafkas)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, "
          f"Python {platform.python_version()}")
    print(f"{args.records} x {SIZE} B, acks=all, median of {args.rounds} rounds (MB/s)")
    print("| listener | produce | vs PLAINTEXT | consume | vs PLAINTEXT | broker CPU us/record "
          "(produce) |")
    print("|---|---|---|---|---|---|")
    base_p = statistics.median(results["PLAINTEXT"][0])
    base_c = statistics.median(results["PLAINTEXT"][1])
    for name in results:
        p = statistics.median(results[name][0])
        c = statistics.median(results[name][1])
        print(f"| {name} | {p:.1f} | {p / base_p:.2f} | {c:.1f} | {c / base_c:.2f} | "
              f"{statistics.median(cpu[name]):.2f} |")
    for (mode, name), (ps, cs, us) in kafka_results.items():  # beside Kafka's PLAINTEXT
        p, c = statistics.median(ps), statistics.median(cs)
        kp, kc = (statistics.median(v) for v in kafka_results[mode, "PLAINTEXT"][:2])
        print(f"| {peer_kafka.MODES[mode][0]}, {name} | {p:.1f} | {p / kp:.2f} | "
              f"{c:.1f} | {c / kc:.2f} | {statistics.median(us):.2f} |")
    print(peer_kafka.describe(peers) if why_not is None else f"note: {why_not}")


if __name__ == "__main__":
    main()
