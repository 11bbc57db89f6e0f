"""ApiVersions: tell the client which versions of each API this broker speaks."""

from __future__ import annotations

from typing import Any

from tidegate.protocol.messages import build
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext


def api_keys_payload(broker: Broker) -> list[dict[str, int]]:
    apis = broker.dispatcher.apis
    return [
        {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
        for a in sorted(apis.values(), key=lambda a: a.key)
    ]


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return build(
        ctx.response_class,
        {
            "error_code": 0,
            "api_keys": api_keys_payload(broker),
            "throttle_time": 0,
            "finalized_features_epoch": -1,
        },
    )
