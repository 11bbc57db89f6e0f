"""ApiVersions: tell the client which versions of each API this broker speaks, and its
features (KIP-584).

Features advertised (supported range and finalized level): `metadata.version` (Kafka
4.1's levels, below), `group.version` (1: KIP-848 is on) and `transaction.version`,
finalized at the level the transaction coordinator runs (2 by default): clients that
know it (Kafka's Java client from 4.0) then use transaction version 2 (KIP-890: no
AddPartitionsToTxn round trips, an epoch bump at every commit); clients that do not
(librdkafka, kafka-python, aiokafka, KafkaJS) ignore it and keep version 1,
which stays fully supported.
"""

from __future__ import annotations

from typing import Any

from tidegate.protocol.messages import build, remember_encoding
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

# metadata.version levels (Kafka's MetadataVersion feature levels): 7 is 3.3-IV3, the
# lowest Kafka 4 accepts; 27 is 4.1-IV1, Kafka 4.1.0's latest production level, the one
# a fresh Kafka 4.1 cluster finalizes. Tidegate has no KRaft metadata log: the level
# tells admin tools (`kafka-features.sh describe`, Admin.describeFeatures) which Kafka
# generation of requests this broker serves (DescribeCluster v2, ListConfigResources v1,
# DescribeTopicPartitions), nothing more.
METADATA_VERSION_MIN = 7
METADATA_VERSION = 27


def api_keys_payload(broker: Broker) -> list[dict[str, int]]:
    apis = broker.dispatcher.apis
    return [
        {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
        for a in sorted(apis.values(), key=lambda a: a.key)
    ]


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    level = broker.txn_coordinator.config.transaction_version
    cache = broker.dispatcher.api_versions_cache  # cleared when an API is registered
    response = cache.get((ctx.api_version, level))
    if response is None:
        response = cache[ctx.api_version, level] = _build(broker, ctx, level)
        remember_encoding(response)  # the same bytes every time
    return response


def _build(broker: Broker, ctx: RequestContext, level: int) -> Any:
    return build(
        ctx.response_class,
        {
            "error_code": 0,
            "api_keys": api_keys_payload(broker),
            "throttle_time": 0,
            "supported_features": [
                # metadata.version: Kafka 4.1.0's range (3.3-IV3 .. 4.1-IV1), see above
                {"name": "metadata.version", "min_version": METADATA_VERSION_MIN,
                 "max_version": METADATA_VERSION},
                {"name": "transaction.version", "min_version": 0, "max_version": 2},
                # KIP-848: the consumer group protocol (ConsumerGroupHeartbeat) is on
                {"name": "group.version", "min_version": 0, "max_version": 1}],
            "finalized_features_epoch": 1,
            "finalized_features": [
                {"name": "metadata.version", "max_version_level": METADATA_VERSION,
                 "min_version_level": METADATA_VERSION},
                {"name": "transaction.version", "max_version_level": level,
                 "min_version_level": level},
                {"name": "group.version", "max_version_level": 1, "min_version_level": 1}],
        },
    )
