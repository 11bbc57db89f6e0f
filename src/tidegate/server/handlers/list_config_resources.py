"""ListConfigResources (API 74; v0 was ListClientMetricsResources, KIP-714; v1 KIP-1142,
Kafka 4.1): the names of the resources DescribeConfigs can be asked about.

v0 lists client-metrics resources only. Tidegate keeps KIP-714's subscription in broker
settings rather than in named client-metrics resources, so that list is always empty.
v1 takes resource types (none: every type Kafka 4.1 lists): topics (2, internal ones
included), the brokers (4) and their loggers (8) by node id, groups (32, those this
broker's group coordinator holds: in a cluster, each broker answers for the groups of
the `__consumer_offsets` partitions it leads, as Kafka's coordinator does; and those
with configs set, even with no members or offsets, as Kafka lists them), and
client-metrics (16, empty). Another type is UNSUPPORTED_VERSION for the request.

ACL, as Kafka's KafkaApis: DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED with no resources.
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

log = logging.getLogger(__name__)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


def _answer(ctx: RequestContext, code: ErrorCode, resources: list[dict[str, Any]]) -> Any:
    return build(ctx.response_class, {"throttle_time": 0, "error_code": code,
                                      "config_resources": resources})


async def _names(broker: Broker, rtype: int) -> list[str]:
    if rtype == TOPIC:
        return sorted(broker.metadata.topic_names())
    if rtype in (BROKER, BROKER_LOGGER):
        return [str(b.node_id) for b in sorted(broker.metadata.brokers(),
                                               key=lambda b: b.node_id)]
    if rtype == GROUP:
        _code, groups = await broker.group_coordinator.list_groups([], [])
        # and a group with configs but no members or offsets (never used, or deleted):
        # Kafka keeps its configs and lists it (kafka-configs --describe shows them)
        return sorted({g.group_id for g in groups} | set(broker.group_configs.groups()))
    return []  # CLIENT_METRICS: no named subscriptions


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if not check_cluster(broker, ctx, Op.DESCRIBE_CONFIGS):
        return _answer(ctx, ErrorCode.cluster_authorization_failed, [])
    if ctx.api_version == 0:
        return _answer(ctx, ErrorCode.none, [])
    types = [int(t) for t in view(req, "resource_types", ()) or ()] or list(SUPPORTED)
    unsupported = sorted(set(types) - set(SUPPORTED))
    if unsupported:
        log.info("ListConfigResources from %s: unsupported resource types %s", ctx.peer,
                 unsupported)
        return _answer(ctx, ErrorCode.unsupported_version, [])
    resources = [{"resource_name": name, "resource_type": rtype}
                 for rtype in dict.fromkeys(types) for name in await _names(broker, rtype)]
    return _answer(ctx, ErrorCode.none, resources)
