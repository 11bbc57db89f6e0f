"""The HTTP listener against one real broker: /metrics, /readyz, KIP-714, bad HTTP input.

Each scrape is parsed with prometheus-client's own parser (so the exposition format is
checked too) before and after a known workload, and counters must move by exactly that
workload: a raw Produce of a batch of known size, then librdkafka producers and a
consumer group. Transactions: HW - LSO (`kafka_cluster_partition_laststableoffsetlag`)
is up while a transaction is open and back to 0 after its commit. A librdkafka producer
with `enable.metrics.push=true` shows up on /metrics with its client labels. /readyz is
polled from the moment the HTTP listener is bound: 503 while the logs and coordinators
load, then 200. Malformed, huge, slow and unknown HTTP requests get HTTP errors while
Kafka clients carry on.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

from tidegate.records.builder import build_batch

pytestmark = pytest.mark.interop

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(broker: BrokerProcess) -> Samples:
    status, body = _get(f"{broker.http_url}/metrics")
    assert status == 200
    out: Samples = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(m: Samples, name: str, **labels: str) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, list]]:
    b = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", overrides={
        "http.listeners": "http://127.0.0.1:0",
        "client.metrics.push.interval.ms": "1000",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": "0",
    })
    seen: list[tuple[int, dict]] = []  # /readyz answers from the moment HTTP is bound

    def poll_ready() -> None:
        if not b.http_ready.wait(30):
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                status, body = _get(f"{b.http_url}/readyz", timeout=2)
            except OSError:
                time.sleep(0.005)
                continue
            seen.append((status, json.loads(body)))
            if status == 200:
                return
            time.sleep(0.005)

    poller = threading.Thread(target=poll_ready, daemon=True)
    poller.start()
    b.start()
    poller.join(30)
    try:
        yield b, seen
    finally:
        b.stop()


def test_readyz_503_while_loading_then_200(mbroker: tuple[BrokerProcess, list]) -> None:
    b, seen = mbroker
    assert seen, "never reached /readyz"
    assert seen[0][0] == 503, seen[:3]
    assert seen[0][1]["waiting_for"], seen[0]
    assert seen[-1][0] == 200 and seen[-1][1]["status"] == "ready"
    assert _get(f"{b.http_url}/healthz") == (200, b'{"status": "ok", "node_id": 1}')


def test_raw_produce_and_fetch_move_counters_by_exactly_their_bytes(
        mbroker: tuple[BrokerProcess, list]) -> None:
    b, _ = mbroker
    topic = "exact"
    c = RawClient(b.bootstrap)
    try:
        md = c.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": True})
        assert md.topics[0].error_code == 0
        topic_id = md.topics[0].topic_id
        before = scrape(b)
        batch = build_batch([(1_700_000_000_000, b"k%d" % i, b"v" * 50, ()) for i in range(7)])
        r = c.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0
        fetched = 0
        for version, key in ((12, {"topic": topic}), (13, {"topic_id": topic_id})):
            f = c.call(1, version, {"max_wait": 0, "min_bytes": 0, "forgotten_topics_data": [],
                                    "topics": [{**key, "partitions": [{
                                        "partition": 0, "fetch_offset": 0,
                                        "partition_max_bytes": 1 << 20}]}]})
            fetched += len(f.responses[0].partitions[0].records)
        after = scrape(b)
    finally:
        c.close()
    assert fetched == 2 * len(batch)
    d = {n: val(after, n, topic=topic) - val(before, n, topic=topic) for n in (
        "kafka_server_brokertopicmetrics_bytesin_total",
        "kafka_server_brokertopicmetrics_messagesin_total",
        "kafka_server_brokertopicmetrics_bytesout_total")}
    assert d == {"kafka_server_brokertopicmetrics_bytesin_total": len(batch),
                 "kafka_server_brokertopicmetrics_messagesin_total": 7,
                 "kafka_server_brokertopicmetrics_bytesout_total": 2 * len(batch)}
    assert val(after, "kafka_log_log_size", topic=topic, partition="0") == len(batch)
    assert val(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == 7
    produce = ("kafka_network_requestmetrics_requests_total", {"request": "Produce",
                                                              "version": "9"})
    assert val(after, produce[0], **produce[1]) - val(before, produce[0], **produce[1]) == 1
    errs = "kafka_network_requestmetrics_errors_total"
    assert val(after, errs, request="Produce", error="NONE") - \
        val(before, errs, request="Produce", error="NONE") == 1
    assert val(after, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") >= 2


def test_client_workload_and_group_lag(mbroker: tuple[BrokerProcess, list]) -> None:
    b, _ = mbroker
    topic, n, size = "known", 500, 100
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept: results need it alive
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    before = scrape(b)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5,
                  "compression.type": "none", "enable.metrics.push": False})
    for i in range(n):
        p.produce(topic, b"%099d" % i)
    assert p.flush(15) == 0
    mid = scrape(b)
    grew = val(mid, "kafka_log_log_size", topic=topic, partition="0") - \
        val(before, "kafka_log_log_size", topic=topic, partition="0")
    bytes_in = val(mid, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) - \
        val(before, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert val(mid, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) - \
        val(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    assert bytes_in == grew > n * size

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-metrics",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.metrics.push": False})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 20
    while got < n and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            assert m.error() is None
            got += 1
    assert got == n
    c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
    c.close()  # before more records arrive: it would fetch them too
    for i in range(30):
        p.produce(topic, b"%099d" % i)
    assert p.flush(15) == 0
    after = scrape(b)
    # librdkafka may fetch a batch twice (it pre-fetches, then seeks to its position):
    # BytesOut counts what the broker sent, as Kafka's does; the exact figure is checked
    # with a raw fetch above
    out = val(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) - \
        val(before, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert grew <= out < 2 * grew
    lab = {"consumergroup": "g-metrics", "topic": topic, "partition": "0"}
    assert val(after, "kafka_consumergroup_current_offset", **lab) == n
    assert val(after, "kafka_consumergroup_lag", **lab) == 30
    assert val(after, "kafka_consumergroup_lag_sum", consumergroup="g-metrics") == 30


def test_lso_lag_up_while_a_transaction_is_open(mbroker: tuple[BrokerProcess, list]) -> None:
    b, _ = mbroker
    topic = "txn-lag"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept: results need it alive
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-metrics",
                  "enable.metrics.push": False})
    p.init_transactions(10)
    before = scrape(b)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"v%d" % i)
    assert p.flush(10) == 0
    lab = {"topic": topic, "partition": "0"}
    lag = "kafka_cluster_partition_laststableoffsetlag"
    during = scrape(b)
    assert val(during, lag, **lab) == 5
    assert val(during, "tidegate_transactions_open") >= 1
    assert ("tidegate_transaction_age_seconds", frozenset(
        {"transactional_id": "tx-metrics"}.items())) not in during  # has producer_id too
    assert any(k[0] == "tidegate_transaction_age_seconds"
               and ("transactional_id", "tx-metrics") in k[1] for k in during)
    p.commit_transaction(10)
    deadline = time.monotonic() + 10
    while True:  # the markers are written after EndTxn answers
        after = scrape(b)
        if val(after, lag, **lab) == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert val(after, lag, **lab) == 0
    assert val(after, "tidegate_log_last_stable_offset", **lab) == 6  # 5 records + marker
    assert val(after, "tidegate_transaction_endtxn_total", result="commit") - \
        val(before, "tidegate_transaction_endtxn_total", result="commit") == 1
    assert val(after, "tidegate_transaction_markers_total", result="commit") - \
        val(before, "tidegate_transaction_markers_total", result="commit") == 1


def test_librdkafka_pushes_client_metrics(mbroker: tuple[BrokerProcess, list]) -> None:
    b, _ = mbroker
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "kip714-client",
                  "enable.metrics.push": True})
    p.produce("kip714", b"x")
    assert p.flush(10) == 0
    deadline = time.monotonic() + 15
    found: list[str] = []
    while not found and time.monotonic() < deadline:
        p.poll(0.2)
        m = scrape(b)
        found = [name for name, labels in m if ("client_id", "kip714-client") in labels
                 and any(k == "client_instance_id" for k, _ in labels)]
    p.flush(5)
    assert found, "no KIP-714 series with client_id=kip714-client"
    assert any(name.startswith("org_apache_kafka_producer_") for name in found), found
    assert val(scrape(b), "tidegate_client_metrics_clients") >= 1


def _http(b: BrokerProcess, raw: bytes, read: bool = True) -> bytes:
    host, port = b.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(raw)
        return s.recv(4096) if read else b""


def test_bad_http_gets_errors_and_kafka_carries_on(mbroker: tuple[BrokerProcess, list]) -> None:
    b, _ = mbroker
    assert _http(b, b"GARBAGE\r\n\r\n").split(b" ")[1] == b"400"
    huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    assert _http(b, huge).split(b" ")[1] in (b"400", b"431")
    many = b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(500))
    assert _http(b, many + b"\r\n").split(b" ")[1] in (b"400", b"431")
    assert _get(f"{b.http_url}/nope")[0] == 404
    assert _get(f"{b.http_url}/static/../../../etc/passwd")[0] in (400, 403, 404)
    req = urllib.request.Request(f"{b.http_url}/metrics", data=b"x" * 10, method="POST")
    try:
        urllib.request.urlopen(req, timeout=5)
        raise AssertionError("POST /metrics answered 2xx")
    except urllib.error.HTTPError as e:
        assert e.code == 405
    # slow clients hold their own connections only: Kafka and scrapes go on
    host, port = b.http_url.removeprefix("http://").rsplit(":", 1)
    slow = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
    try:
        for s in slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHo")
        t0 = time.monotonic()
        c = RawClient(b.bootstrap)
        try:
            batch = build_batch([(1_700_000_000_000, b"k", b"v", ())])
            r = c.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": "after-bad-http", "partition_data": [{"index": 0, "records": batch}]}]})
            assert r.responses[0].partition_responses[0].error_code in (0, 3)
        finally:
            c.close()
        assert scrape(b)
        assert time.monotonic() - t0 < 5
    finally:
        for s in slow:
            s.close()


def test_scrapes_while_topics_are_deleted(mbroker: tuple[BrokerProcess, list]) -> None:
    b, _ = mbroker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    names = [f"doomed-{i}" for i in range(20)]
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in names]).values():
        f.result(20)
    failures: list[object] = []
    stop = threading.Event()
    scrapes = 0

    def scraper() -> None:
        nonlocal scrapes
        while not stop.is_set():
            try:
                scrape(b)
                scrapes += 1
            except Exception as e:  # pragma: no cover - the failure is reported below
                failures.append(e)

    t = threading.Thread(target=scraper)
    t.start()
    try:
        for f in admin.delete_topics(names).values():
            f.result(20)
    finally:
        stop.set()
        t.join(20)
    assert not failures and scrapes > 0
    final = scrape(b)
    assert not any(("topic", n) in labels for _, labels in final for n in names)
    assert val(final, "kafka_server_kafkaserver_brokerstate") == 3
    assert val(final, "kafka_server_socketservermetrics_connection_count",
               listener="PLAINTEXT") >= 1


def test_console_served_by_a_broker_on_port_0(tmp_path: Path) -> None:
    """The broker's own console talks to the address the broker bound: with port 0 for
    Kafka and HTTP, the pages still show this broker's data."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate.cli.main", "serve",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", "http.listeners=http://127.0.0.1:0",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        url = bootstrap = ""
        deadline = time.monotonic() + 30
        while not (url and bootstrap) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("HTTP listener on "):
                url = line.split()[-1]
            elif " listening on " in line:
                bootstrap = line.split(" listening on ")[1].split()[0]
        assert url and bootstrap and not bootstrap.endswith(":0"), (url, bootstrap)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("seen-by-console", 1, 1)])["seen-by-console"].result(30)
        status, body = _get(url + "/topics")
        assert status == 200 and b"seen-by-console" in body, body[:500]
    finally:
        proc.terminate()
        proc.wait(30)
