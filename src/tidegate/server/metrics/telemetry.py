"""KIP-714 client metrics: the subscription clients ask for and the metrics they push.

A client (librdkafka from 2.5 with `enable.metrics.push=true`, its default; Kafka's Java
client from 3.7) that sees GetTelemetrySubscriptions (API 71) and PushTelemetry (API 72)
in ApiVersions asks for a subscription, then pushes its own metrics every push interval
as an OpenTelemetry `MetricsData` protobuf, possibly compressed. `ClientTelemetry` keeps
the latest value of each pushed series per client instance so that /metrics re-exports
them with `client_instance_id`, `client_id` and `principal` labels: how producers and
consumers see the broker, from the broker.

Kafka configures subscriptions dynamically (`kafka-client-metrics.sh`); Tidegate has one
subscription for every client, from static settings: `client.metrics.push.interval.ms`,
`client.metrics.prefixes` and `telemetry.max.bytes` (Kafka's name). Its id is a hash of
those settings, so a client holding an old id after a restart with other settings gets
UNKNOWN_SUBSCRIPTION_ID and asks again, as KIP-714 intends.

Bounds, because clients choose what they send: a push larger than
`telemetry.max.bytes` (compressed, or once decompressed) is refused with
TELEMETRY_TOO_LARGE; a payload that does not decode is INVALID_RECORD (logged once per
client); each client keeps at most `client.metrics.max.series` series (later ones of a
push are dropped) and at most `client.metrics.max.clients` clients are kept (a new one
beyond gets THROTTLING_QUOTA_EXCEEDED); a client that has not pushed for three push
intervals (at least a minute) is forgotten with its series. A non-terminating push less
than half an interval after the previous one is THROTTLING_QUOTA_EXCEEDED, as on Kafka.
Sums are asked for as cumulative values (`delta_temporality` false).
"""

from __future__ import annotations

import logging
import re
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from tidegate.common.clock import Clock
from tidegate.common.config import BrokerConfig
from tidegate.records.compression import Codec, DecompressedSizeError, decompress

log = logging.getLogger(__name__)

NONE, INVALID_REQUEST, UNSUPPORTED_COMPRESSION_TYPE = 0, 42, 76
INVALID_RECORD, THROTTLING_QUOTA_EXCEEDED = 87, 89
UNKNOWN_SUBSCRIPTION_ID, TELEMETRY_TOO_LARGE = 117, 118

# Kafka's preference order in the subscription's accepted_compression_types
ACCEPTED_COMPRESSION = (int(Codec.ZSTD), int(Codec.LZ4), int(Codec.GZIP), int(Codec.SNAPPY))
ZERO_UUID = uuid.UUID(int=0)
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_:]")
_LABEL_BAD = re.compile(r"[^a-zA-Z0-9_]")
_CLIENT_LABELS = ("client_instance_id", "client_id", "principal")

Labels = tuple[tuple[str, str], ...]


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    client_id: str
    principal: str
    last_push_ms: int
    terminated: bool = False
    warned: bool = False
    # (family name, kind) -> labels -> value; kind: gauge | counter
    series: dict[tuple[str, str], dict[Labels, float]] = field(default_factory=dict)
    count: int = 0


@dataclass(frozen=True)
class Subscription:
    subscription_id: int
    push_interval_ms: int
    requested_metrics: tuple[str, ...]
    max_bytes: int


class ClientTelemetry:
    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        self.clock = clock
        interval = config.get_int("client.metrics.push.interval.ms", 30000) or 30000
        max_bytes = config.get_int("telemetry.max.bytes", 1048576) or 1048576
        prefixes = [p.strip() for p in config.get("client.metrics.prefixes", "*").split(",")]
        prefixes = [p for p in prefixes if p]
        # KIP-714: [""] subscribes to every metric
        requested = ("",) if not prefixes or "*" in prefixes else tuple(prefixes)
        key = f"{interval}|{max_bytes}|{','.join(requested)}".encode()
        self.subscription = Subscription(
            zlib.crc32(key) & 0x7FFFFFFF, interval, requested, max_bytes)
        self.max_series = config.get_int("client.metrics.max.series", 1000) or 1000
        self.max_clients = config.get_int("client.metrics.max.clients", 1000) or 1000
        self.expiry_ms = max(3 * interval, 60000)
        self.clients: dict[uuid.UUID, ClientInstance] = {}
        self.pushes = 0
        self.rejected: dict[int, int] = {}  # error code -> pushes refused

    # -- GetTelemetrySubscriptions ------------------------------------------------------

    def subscribe(self, instance_id: uuid.UUID | None) -> uuid.UUID:
        """The client's instance id: a new one for a client that has none (zero UUID)."""
        self.expire()
        if instance_id is None or instance_id == ZERO_UUID:
            return uuid.uuid4()
        return instance_id

    # -- PushTelemetry ------------------------------------------------------------------

    def push(self, instance_id: uuid.UUID | None, subscription_id: int, terminating: bool,
             compression: int, payload: bytes, client_id: str, principal: str) -> int:
        """Store a push; the error code to answer with."""
        code = self._push(instance_id, subscription_id, terminating, compression, payload,
                          client_id, principal)
        if code:
            self.rejected[code] = self.rejected.get(code, 0) + 1
        else:
            self.pushes += 1
        return code

    def _push(self, instance_id: uuid.UUID | None, subscription_id: int, terminating: bool,
              compression: int, payload: bytes, client_id: str, principal: str) -> int:
        now = self.clock.now_ms()
        self.expire(now)
        if instance_id is None or instance_id == ZERO_UUID:
            return INVALID_REQUEST
        if subscription_id != self.subscription.subscription_id:
            return UNKNOWN_SUBSCRIPTION_ID
        client = self.clients.get(instance_id)
        if client is not None and client.terminated:
            return INVALID_REQUEST  # KIP-714: nothing after a terminating push
        if client is not None and not terminating and \
                now - client.last_push_ms < self.subscription.push_interval_ms // 2:
            return THROTTLING_QUOTA_EXCEEDED
        if client is None and len(self.clients) >= self.max_clients:
            return THROTTLING_QUOTA_EXCEEDED
        if compression != 0 and compression not in ACCEPTED_COMPRESSION:
            return UNSUPPORTED_COMPRESSION_TYPE
        limit = self.subscription.max_bytes
        if len(payload) > limit:
            return TELEMETRY_TOO_LARGE
        if client is None:
            client = ClientInstance(instance_id, client_id, principal, now)
            self.clients[instance_id] = client
        client.last_push_ms = now
        client.terminated = terminating
        client.client_id, client.principal = client_id, principal
        try:
            data = decompress(compression, payload, max_size=limit) if compression else payload
        except DecompressedSizeError:
            return TELEMETRY_TOO_LARGE
        except Exception as e:
            self._warn(client, f"cannot decompress its metrics: {e}")
            return INVALID_RECORD
        try:
            self._store(client, data)
        except Exception as e:
            self._warn(client, f"pushed metrics that do not decode: {e}")
            return INVALID_RECORD
        return NONE

    def _warn(self, client: ClientInstance, what: str) -> None:
        if not client.warned:  # once per client instance
            client.warned = True
            log.warning("client %s (client.id %r, %s) %s", client.instance_id,
                        client.client_id, client.principal, what)

    def _store(self, client: ClientInstance, data: bytes) -> None:
        from opentelemetry.proto.metrics.v1 import metrics_pb2

        md = metrics_pb2.MetricsData()
        md.ParseFromString(data)
        base: Labels = (("client_instance_id", str(client.instance_id)),
                        ("client_id", client.client_id), ("principal", client.principal))
        for rm in md.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    self._store_metric(client, base, m)

    def _store_metric(self, client: ClientInstance, base: Labels, m: object) -> None:
        name = _metric_name(str(getattr(m, "name", "")))
        if not name:
            return
        kind = m.WhichOneof("data")  # type: ignore[attr-defined]
        if kind == "gauge":
            for dp in m.gauge.data_points:  # type: ignore[attr-defined]
                self._set(client, name, "gauge", base + _attrs(dp), _number(dp))
        elif kind == "sum":
            s = m.sum  # type: ignore[attr-defined]
            typ = "counter" if s.is_monotonic else "gauge"
            for dp in s.data_points:
                self._set(client, name, typ, base + _attrs(dp), _number(dp))
        elif kind == "histogram":
            for dp in m.histogram.data_points:  # type: ignore[attr-defined]
                labels = base + _attrs(dp)
                self._set(client, name + "_count", "gauge", labels, float(dp.count))
                self._set(client, name + "_sum", "gauge", labels, float(dp.sum))

    def _set(self, client: ClientInstance, name: str, kind: str, labels: Labels,
             value: float) -> None:
        values = client.series.setdefault((name, kind), {})
        if labels not in values:
            if client.count >= self.max_series:
                return
            client.count += 1
        values[labels] = value

    # -- expiry and export --------------------------------------------------------------

    def expire(self, now: int | None = None) -> None:
        now = self.clock.now_ms() if now is None else now
        for iid, client in list(self.clients.items()):
            if now - client.last_push_ms > self.expiry_ms:
                del self.clients[iid]

    def families(self) -> Iterator[tuple[str, str, list[tuple[Labels, float]]]]:
        """(name, kind, [(labels, value)]) for every pushed series, merged over clients."""
        self.expire()
        merged: dict[tuple[str, str], list[tuple[Labels, float]]] = {}
        for client in self.clients.values():
            for key, values in client.series.items():
                merged.setdefault(key, []).extend(values.items())
        for (name, kind), samples in sorted(merged.items()):
            yield name, kind, samples


def _metric_name(otel: str) -> str:
    """org.apache.kafka.producer.node.request.latency.avg ->
    org_apache_kafka_producer_node_request_latency_avg (Prometheus's charset)."""
    name = _NAME_BAD.sub("_", otel)[:200]
    if name and name[0].isdigit():
        name = "_" + name
    return name


def _attrs(dp: object) -> Labels:
    out = []
    for kv in dp.attributes:  # type: ignore[attr-defined]
        key = _LABEL_BAD.sub("_", str(kv.key))[:100]
        if not key or key in _CLIENT_LABELS or key.startswith("__"):
            continue
        v = kv.value
        which = v.WhichOneof("value")
        value = getattr(v, which) if which else ""
        out.append((key, str(value)[:256]))
    return tuple(sorted(out))


def _number(dp: object) -> float:
    which = dp.WhichOneof("value")  # type: ignore[attr-defined]
    return float(getattr(dp, which)) if which else 0.0
