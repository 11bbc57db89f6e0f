"""ApiVersions: tell the client which versions of each API this broker speaks, and its
features (KIP-584).

The one feature advertised is `transaction.version`, finalized at the level the
transaction coordinator runs (2 by default): clients that know it (Kafka's Java client
from 4.0) then use transaction version 2 (KIP-890: no AddPartitionsToTxn round trips, an
epoch bump at every commit); clients that do not (librdkafka, kafka-python, aiokafka,
KafkaJS) ignore it and keep version 1, which stays fully supported.
"""

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
    level = broker.txn_coordinator.config.transaction_version
    return build(
        ctx.response_class,
        {
            "error_code": 0,
            "api_keys": api_keys_payload(broker),
            "throttle_time": 0,
            "supported_features": [
                {"name": "transaction.version", "min_version": 0, "max_version": 2}],
            "finalized_features_epoch": 1,
            "finalized_features": [
                {"name": "transaction.version", "max_version_level": level,
                 "min_version_level": level}],
        },
    )
