"""KIP-714: GetTelemetrySubscriptions (API 71) and PushTelemetry (API 72).

Registered by BrokerApp only while the HTTP listener is on (there is nowhere to show
pushed metrics otherwise), with the broker's `ClientTelemetry`
(server/metrics/telemetry.py), which holds the subscription and the pushed series. A
client that does not see these APIs in ApiVersions never pushes: librdkafka and Kafka's
Java client check before they ask.
"""

from __future__ import annotations

from typing import Any

from tidegate.protocol.messages import build
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.metrics.telemetry import ACCEPTED_COMPRESSION, ClientTelemetry


async def handle_get_subscriptions(telemetry: ClientTelemetry, broker: Broker,
                                   ctx: RequestContext, req: Any) -> Any:
    sub = telemetry.subscription
    instance = telemetry.subscribe(req.client_instance_id)
    return build(ctx.response_class, {
        "throttle_time": 0,
        "error_code": 0,
        "client_instance_id": instance,
        "subscription_id": sub.subscription_id,
        "accepted_compression_types": list(ACCEPTED_COMPRESSION),
        "push_interval": sub.push_interval_ms,
        "telemetry_max_bytes": sub.max_bytes,
        "delta_temporality": False,
        "requested_metrics": list(sub.requested_metrics),
    })


async def handle_push(telemetry: ClientTelemetry, broker: Broker, ctx: RequestContext,
                      req: Any) -> Any:
    code = telemetry.push(req.client_instance_id, int(req.subscription_id),
                          bool(req.terminating), int(req.compression_type),
                          bytes(req.metrics), ctx.client_id or "", ctx.principal)
    return build(ctx.response_class, {"throttle_time": 0, "error_code": code})
