"""KIP-714 client metrics store: pushes decoded, bounded, expired; bad pushes refused."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tidegate.common.clock import ManualClock
from tidegate.common.config import BrokerConfig
from tidegate.records.compression import Codec, compress
from tidegate.server.metrics import telemetry as t
from tidegate.server.metrics.telemetry import ClientTelemetry


def payload(n_series: int = 1, value: float = 1.5, name: str = "org.apache.kafka.producer.x"
            ) -> bytes:
    md = metrics_pb2.MetricsData()
    sm = md.resource_metrics.add().scope_metrics.add()
    g = sm.metrics.add(name=name)
    for i in range(n_series):
        dp = g.gauge.data_points.add(as_double=value)
        dp.attributes.append(common_pb2.KeyValue(
            key="node.id", value=common_pb2.AnyValue(string_value=str(i))))
    s = sm.metrics.add(name="org.apache.kafka.producer.sent")
    s.sum.is_monotonic = True
    s.sum.data_points.add(as_int=42)
    h = sm.metrics.add(name="org.apache.kafka.producer.lat")
    h.histogram.data_points.add(count=3, sum=9.0)
    return md.SerializeToString()


def store(**overrides: str) -> tuple[ClientTelemetry, ManualClock]:
    clock = ManualClock()
    cfg = BrokerConfig({"client.metrics.push.interval.ms": "1000", **overrides})
    return ClientTelemetry(cfg, clock), clock


def series(tel: ClientTelemetry) -> dict[tuple[str, str], list[tuple[t.Labels, float]]]:
    return {(name, kind): samples for name, kind, samples in tel.families()}


def test_a_push_is_exported_with_client_labels() -> None:
    tel, _ = store()
    iid = tel.subscribe(None)
    assert iid != t.ZERO_UUID
    sub = tel.subscription.subscription_id
    assert tel.push(iid, sub, False, 0, payload(), "cid", "User:alice") == t.NONE
    found = series(tel)
    (labels, value), = found[("org_apache_kafka_producer_x", "gauge")]
    assert value == 1.5
    assert dict(labels) == {"client_instance_id": str(iid), "client_id": "cid",
                            "principal": "User:alice", "node_id": "0"}
    assert found[("org_apache_kafka_producer_sent", "counter")][0][1] == 42
    assert found[("org_apache_kafka_producer_lat_count", "gauge")][0][1] == 3
    assert tel.subscription.requested_metrics == ("",)  # KIP-714: all metrics


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_compressed_pushes_decode(codec: Codec) -> None:
    tel, _ = store()
    iid = tel.subscribe(None)
    data = compress(codec, payload(value=7.0))
    assert tel.push(iid, tel.subscription.subscription_id, False, int(codec), data, "c",
                    "User:ANONYMOUS") == t.NONE
    assert series(tel)[("org_apache_kafka_producer_x", "gauge")][0][1] == 7.0


def test_bad_pushes_get_kip714_errors() -> None:
    tel, clock = store(**{"telemetry.max.bytes": "2000"})
    sub = tel.subscription.subscription_id
    iid = uuid.uuid4()
    assert tel.push(None, sub, False, 0, payload(), "c", "p") == t.INVALID_REQUEST
    assert tel.push(iid, sub + 1, False, 0, payload(), "c", "p") == t.UNKNOWN_SUBSCRIPTION_ID
    assert tel.push(iid, sub, False, 9, payload(), "c", "p") == t.UNSUPPORTED_COMPRESSION_TYPE
    assert tel.push(iid, sub, False, 0, b"x" * 2001, "c", "p") == t.TELEMETRY_TOO_LARGE
    bomb = compress(Codec.ZSTD, b"\0" * 100_000)  # small on the wire, huge decompressed
    assert tel.push(uuid.uuid4(), sub, False, int(Codec.ZSTD), bomb, "c", "p") == \
        t.TELEMETRY_TOO_LARGE
    assert tel.push(uuid.uuid4(), sub, False, 0, b"\xff\xff\xff", "c", "p") == t.INVALID_RECORD
    assert tel.push(iid, sub, False, 0, payload(), "c", "p") == t.NONE
    # too early for the next push (half an interval), unless terminating
    clock.advance(100)
    assert tel.push(iid, sub, False, 0, payload(), "c", "p") == t.THROTTLING_QUOTA_EXCEEDED
    assert tel.push(iid, sub, True, 0, payload(), "c", "p") == t.NONE
    clock.advance(1000)
    assert tel.push(iid, sub, False, 0, payload(), "c", "p") == t.INVALID_REQUEST  # terminated
    assert tel.rejected[t.THROTTLING_QUOTA_EXCEEDED] == 1


def test_series_and_clients_are_capped_and_expire() -> None:
    tel, clock = store(**{"client.metrics.max.series": "5", "client.metrics.max.clients": "2"})
    sub = tel.subscription.subscription_id
    a, b = uuid.uuid4(), uuid.uuid4()
    assert tel.push(a, sub, False, 0, payload(n_series=50), "a", "p") == t.NONE
    assert sum(len(s) for s in series(tel).values()) == 5
    assert tel.push(b, sub, False, 0, payload(), "b", "p") == t.NONE
    assert tel.push(uuid.uuid4(), sub, False, 0, payload(), "c", "p") == \
        t.THROTTLING_QUOTA_EXCEEDED
    clock.advance(tel.expiry_ms - 1)
    assert tel.push(b, sub, False, 0, payload(), "b", "p") == t.NONE
    clock.advance(2)
    tel.expire()  # (pushes and scrapes expire too)
    assert set(tel.clients) == {b}  # a stopped pushing three intervals (or a minute) ago


def test_names_and_labels_are_sanitised() -> None:
    tel, _ = store()
    iid = tel.subscribe(uuid.UUID(int=5))
    assert iid == uuid.UUID(int=5)  # a client that has an id keeps it
    tel.push(iid, tel.subscription.subscription_id, False, 0,
             payload(name='9bad name{"}\n'), "c", "p")
    names = {name for name, _ in series(tel)}
    assert "_9bad_name____" in names
