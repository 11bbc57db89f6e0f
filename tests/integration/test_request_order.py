"""A connection's requests take effect in the order sent, as on Kafka.

Kafka reads a connection's next request only once the current one is answered, and
clients rely on it: confluent-kafka's AdminClient sends DeleteRecords and, at once,
ListOffsets(earliest) on its one connection and expects the new log start. Each pair
below is sent pipelined — both requests in one write, before either answer is read —
over a raw socket, and the second answer must show the first request's effect. Then
the same with confluent-kafka's AdminClient, and a check that a producer's pipelined
Produce requests still share fsyncs (group commit) and are answered in order.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

from tidegate.protocol.headers import parse_response_header
from tidegate.protocol.messages import build, decode, encode, request_class, response_class
from tidegate.records.builder import build_batch

ROUNDS = 10

Request = tuple[int, int, dict[str, Any]]


@pytest.fixture(scope="module")
def order_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("order") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def pipelined(c: RawClient, *requests: Request) -> list[Any]:
    """Send `requests` in one write, then read their answers (checking each one's
    correlation id, so answers out of order fail too)."""
    data = b""
    sent: list[tuple[int, int, int]] = []
    for api_key, version, fields in requests:
        body = encode(build(request_class(api_key, version), fields))
        payload = c.request_bytes(api_key, version, body)
        data += struct.pack(">i", len(payload)) + payload
        sent.append((api_key, version, c.correlation))
    c.send_raw(data)
    answers = []
    for api_key, version, correlation in sent:
        frame = c.recv_frame()
        assert frame is not None, "the broker closed the connection"
        cls = response_class(api_key, version)
        corr, pos = parse_response_header(frame, bool(getattr(cls, "__flexible__", False)))
        assert corr == correlation
        answers.append(decode(cls, frame, pos))
    return answers


def _create(c: RawClient, topic: str, partitions: int = 1) -> None:
    r = c.call(19, 7, {"topics": [_new_topic(topic, partitions)], "timeout": 10000})
    assert r.topics[0].error_code.value == 0, r


def _new_topic(topic: str, partitions: int = 1) -> dict[str, Any]:
    return {"name": topic, "num_partitions": partitions, "replication_factor": 1,
            "assignments": [], "configs": []}


def _produce(c: RawClient, topic: str, count: int) -> None:
    batch = build_batch([(1_700_000_000_000 + i, None, b"v%d" % i, ()) for i in range(count)])
    r = c.call(0, 9, {"acks": -1, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert r.responses[0].partition_responses[0].error_code.value == 0


def test_delete_records_then_list_offsets(order_broker: BrokerProcess) -> None:
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-dr")
        _produce(c, "order-dr", ROUNDS + 1)
        for i in range(1, ROUNDS + 1):
            deleted, listed = pipelined(
                c,
                (21, 2, {"topics": [{"name": "order-dr", "partitions": [
                    {"partition_index": 0, "offset": i}]}], "timeout": 10000}),
                (2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": "order-dr", "partitions": [
                        {"partition_index": 0, "timestamp": -2}]}]}),  # earliest
            )
            assert deleted.topics[0].partitions[0].low_watermark == i
            assert listed.topics[0].partitions[0].offset == i, f"round {i}: old log start"
    finally:
        c.close()


def test_create_topics_then_metadata(order_broker: BrokerProcess) -> None:
    c = RawClient(order_broker.bootstrap)
    try:
        for i in range(ROUNDS):
            name = f"order-ct-{i}"
            created, md = pipelined(
                c,
                (19, 7, {"topics": [_new_topic(name, 3)], "timeout": 10000}),
                (3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False}),
            )
            assert created.topics[0].error_code.value == 0
            assert md.topics[0].error_code.value == 0, f"{name}: {md.topics[0].error_code}"
            assert len(md.topics[0].partitions) == 3
    finally:
        c.close()


def test_delete_topics_then_create_topics(order_broker: BrokerProcess) -> None:
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-dt")
        for i in range(ROUNDS):
            deleted, created = pipelined(
                c,
                (20, 6, {"topics": [{"name": "order-dt"}], "timeout": 10000}),
                (19, 7, {"topics": [_new_topic("order-dt", 1 + i % 3)], "timeout": 10000}),
            )
            assert deleted.responses[0].error_code.value == 0
            assert created.topics[0].error_code.value == 0, f"round {i}: {created.topics[0]}"
    finally:
        c.close()


def test_offset_commit_then_offset_fetch(order_broker: BrokerProcess) -> None:
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-oc")
        for i in range(ROUNDS):
            committed, fetched = pipelined(
                c,
                (8, 8, {"group_id": "order-g", "generation_id_or_member_epoch": -1,
                        "member_id": "", "topics": [{"name": "order-oc", "partitions": [
                            {"partition_index": 0, "committed_offset": 100 + i,
                             "committed_metadata": ""}]}]}),
                (9, 7, {"group_id": "order-g", "topics": [
                    {"name": "order-oc", "partition_indexes": [0]}]}),
            )
            assert committed.topics[0].partitions[0].error_code.value == 0
            got = fetched.topics[0].partitions[0].committed_offset
            assert got == 100 + i, f"round {i}: OffsetFetch answered {got}"
    finally:
        c.close()


def test_alter_configs_then_describe_configs(order_broker: BrokerProcess) -> None:
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-ac")
        for i in range(ROUNDS):
            value = str(3_600_000 + i)
            altered, described = pipelined(
                c,
                (33, 2, {"resources": [{"resource_type": 2, "resource_name": "order-ac",
                                        "configs": [{"name": "retention.ms", "value": value}]}],
                         "validate_only": False}),
                (32, 4, {"resources": [{"resource_type": 2, "resource_name": "order-ac",
                                        "configuration_keys": ["retention.ms"]}]}),
            )
            assert altered.responses[0].error_code.value == 0
            got = {e.name: e.value for e in described.results[0].configs}
            assert got.get("retention.ms") == value, f"round {i}: {got}"
    finally:
        c.close()


def test_pipelined_produce_is_answered_in_order_after_its_appends(
    order_broker: BrokerProcess,
) -> None:
    """Five acks=all Produce requests then ListOffsets(latest), in one write: the
    produces get consecutive offsets in the order sent, and ListOffsets, which waits
    for them all, sees every record below the high watermark."""
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-pr")
        produce = [
            (0, 9, {"acks": -1, "timeout": 10000, "topic_data": [{"name": "order-pr",
             "partition_data": [{"index": 0, "records": build_batch(
                 [(1_700_000_000_000, None, b"%d-%d" % (n, k), ()) for k in range(n + 1)])}]}]})
            for n in range(5)
        ]
        latest = (2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "order-pr", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        *produced, listed = pipelined(c, *produce, latest)
        bases = [r.responses[0].partition_responses[0].base_offset for r in produced]
        assert bases == [0, 1, 3, 6, 10]
        assert listed.topics[0].partitions[0].offset == 15
    finally:
        c.close()


def test_a_long_poll_fetch_holds_the_connection_like_kafka(order_broker: BrokerProcess) -> None:
    """A Fetch waiting for data, then a Produce of that data on the same connection: as
    on Kafka the Produce is not run until the Fetch has answered (empty, at its
    max_wait), so clients that fetch must keep other traffic off that connection (the
    Java client and Tidegate's own open a separate one to the group coordinator)."""
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-lp")
        fetch = (1, 12, {"max_wait": 1000, "min_bytes": 1, "topics": [
            {"topic": "order-lp", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []})
        produce = (0, 9, {"acks": -1, "timeout": 10000, "topic_data": [{"name": "order-lp",
                   "partition_data": [{"index": 0, "records": build_batch(
                       [(1_700_000_000_000, None, b"late", ())])}]}]})
        start = time.monotonic()
        fetched, produced = pipelined(c, fetch, produce)
        assert time.monotonic() - start >= 0.9
        assert not fetched.responses[0].partitions[0].records
        assert produced.responses[0].partition_responses[0].base_offset == 0
    finally:
        c.close()


def test_confluent_admin_delete_records_then_list_offsets(order_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": order_broker.bootstrap})
    admin.create_topics([NewTopic("order-admin", 1, 1)])["order-admin"].result(30)
    p = Producer({"bootstrap.servers": order_broker.bootstrap, "linger.ms": 5})
    for i in range(30):
        p.produce("order-admin", b"%d" % i, partition=0)
    assert p.flush(30) == 0
    tp = TopicPartition("order-admin", 0)
    stale = []
    for i in range(1, 21):
        # ListOffsets is sent before DeleteRecords is answered: no result() in between
        deleted = admin.delete_records([TopicPartition("order-admin", 0, i)])
        listed = admin.list_offsets({tp: OffsetSpec.earliest()})
        assert deleted[tp].result(30).low_watermark == i
        got = listed[tp].result(30).offset
        if got != i:
            stale.append((i, got))
    assert not stale, f"ListOffsets(earliest) gave the old log start: {stale}"


def test_requests_after_a_bad_frame_are_not_run_but_earlier_ones_are_answered(
    order_broker: BrokerProcess,
) -> None:
    """A DeleteRecords, then a request of an unknown API, in one write: the
    DeleteRecords is answered, then the connection closes; a KIP-511 ApiVersions at an
    unsupported version is still answered in order."""
    c = RawClient(order_broker.bootstrap)
    try:
        _create(c, "order-bad")
        _produce(c, "order-bad", 3)
        body = encode(build(request_class(21, 2), {"topics": [{"name": "order-bad",
                      "partitions": [{"partition_index": 0, "offset": 2}]}], "timeout": 10000}))
        payload = c.request_bytes(21, 2, body)
        good = struct.pack(">i", len(payload)) + payload
        bad = struct.pack(">hhi", 9999, 0, 77) + b"\x00\x03raw"
        # ApiVersions v99: answered at v0 with UNSUPPORTED_VERSION (KIP-511)
        av = struct.pack(">hhi", 18, 99, 78) + b"\x00\x03raw"
        c.send_raw(good + struct.pack(">i", len(av)) + av + struct.pack(">i", len(bad)) + bad)
        frame = c.recv_frame()
        assert frame is not None
        cls = response_class(21, 2)
        corr, pos = parse_response_header(frame, True)
        assert corr == c.correlation
        assert decode(cls, frame, pos).topics[0].partitions[0].low_watermark == 2
        frame = c.recv_frame()
        assert frame is not None
        corr, pos = parse_response_header(frame, False)
        assert corr == 78
        assert decode(response_class(18, 0), frame, pos).error_code.value == 35
        assert c.is_closed_by_peer()
    finally:
        c.close()
