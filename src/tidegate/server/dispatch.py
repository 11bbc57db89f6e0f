"""The ApiKey -> handler table and the versions Tidegate advertises.

A handler is `async (broker, ctx, request) -> response | None` (None: send nothing,
as for acks=0 produce). The advertised range of each API is what the handler
implements, clipped to the versions `kio` can encode (or, for the APIs kio lacks, the
hand-written codec: protocol/hand_written.py).

ControlledShutdown is a broker-to-controller API of ZooKeeper-mode clusters: it is
registered (and advertised) only in cluster mode (`register_cluster_apis`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.index import api_key_map, schema_name_map

from tidegate.protocol import hand_written

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext

Handler = Callable[["Broker", "RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


def kio_range(api_key: int) -> tuple[int, int]:
    hand = hand_written.version_range(api_key)
    if hand is not None:
        return hand
    versions = sorted(schema_name_map[api_key_map[api_key]].keys())
    return versions[0], versions[-1]


def api_name(api_key: int) -> str:
    return hand_written.NAMES.get(api_key) or api_key_map[api_key]


class Dispatcher:
    def __init__(self) -> None:
        self.apis: dict[int, Api] = {}
        # ApiVersions responses by (version, transaction.version level): built and
        # encoded once (75 entries: ~0.35 ms a request otherwise); dropped when an API
        # is registered (metrics/wiring.py adds the telemetry APIs after start-up)
        self.api_versions_cache: dict[tuple[int, int], Any] = {}

    def register(self, api_key: int, handler: Handler, min_v: int, max_v: int) -> None:
        lo, hi = kio_range(api_key)
        lo, hi = max(lo, min_v), min(hi, max_v)
        self.apis[api_key] = Api(api_key, api_name(api_key), lo, hi, handler)
        self.api_versions_cache.clear()

    def supports(self, api_key: int, version: int) -> bool:
        api = self.apis.get(api_key)
        return api is not None and api.min_version <= version <= api.max_version


def default_dispatcher() -> Dispatcher:
    from tidegate.server.handlers import (
        acls,
        admin,
        api_versions,
        client_quotas,
        cluster_ops,
        configs,
        consumer_groups,
        describe_topic_partitions,
        fetch,
        find_coordinator,
        group_admin,
        groups,
        init_producer_id,
        list_config_resources,
        log_dirs,
        metadata,
        offsets,
        offsets_commit,
        produce,
        sasl,
        transactions,
        txn_admin,
    )

    d = Dispatcher()
    d.register(18, api_versions.handle, 0, 4)
    d.register(3, metadata.handle, 0, 13)
    # security (handlers/sasl.py): SASL on every listener's connections, SCRAM users
    d.register(17, sasl.handle_sasl_handshake, 0, 1)
    d.register(36, sasl.handle_sasl_authenticate, 0, 2)
    d.register(50, sasl.handle_describe_user_scram_credentials, 0, 0)
    d.register(51, sasl.handle_alter_user_scram_credentials, 0, 0)
    # client quotas (handlers/client_quotas.py, server/quotas/)
    d.register(48, client_quotas.handle_describe_client_quotas, 0, 1)
    d.register(49, client_quotas.handle_alter_client_quotas, 0, 1)
    # ACLs (handlers/acls.py; SECURITY_DISABLED unless authorizer.class.name is set)
    d.register(30, acls.handle_create_acls, 1, 3)
    d.register(29, acls.handle_describe_acls, 1, 3)
    d.register(31, acls.handle_delete_acls, 1, 3)
    d.register(0, produce.handle, 3, 12)
    d.register(1, fetch.handle, 4, 17)
    d.register(2, offsets.handle_list_offsets, 1, 10)
    d.register(23, offsets.handle_offset_for_leader_epoch, 2, 4)
    d.register(21, offsets.handle_delete_records, 0, 2)
    d.register(19, admin.handle_create_topics, 2, 7)
    d.register(20, admin.handle_delete_topics, 1, 6)
    d.register(37, admin.handle_create_partitions, 0, 3)
    d.register(60, admin.handle_describe_cluster, 0, 2)
    d.register(75, describe_topic_partitions.handle, 0, 0)  # KIP-966
    d.register(74, list_config_resources.handle, 0, 1)  # KIP-714 v0, KIP-1142 v1
    d.register(35, log_dirs.handle_describe_log_dirs, 1, 4)
    d.register(34, log_dirs.handle_alter_replica_log_dirs, 1, 2)  # JBOD moves
    d.register(32, configs.handle_describe_configs, 1, 4)
    d.register(33, configs.handle_alter_configs, 0, 2)
    d.register(44, configs.handle_incremental_alter_configs, 0, 1)
    d.register(22, init_producer_id.handle, 0, 6)
    # group coordinator
    d.register(10, find_coordinator.handle, 0, 6)
    d.register(11, groups.handle_join_group, 0, 9)
    d.register(14, groups.handle_sync_group, 0, 5)
    d.register(12, groups.handle_heartbeat, 0, 4)
    d.register(13, groups.handle_leave_group, 0, 5)
    d.register(8, offsets_commit.handle_offset_commit, 2, 10)
    d.register(9, offsets_commit.handle_offset_fetch, 1, 10)
    d.register(47, offsets_commit.handle_offset_delete, 0, 0)
    d.register(15, group_admin.handle_describe_groups, 0, 6)
    d.register(16, group_admin.handle_list_groups, 0, 5)
    d.register(42, group_admin.handle_delete_groups, 0, 2)
    d.register(68, consumer_groups.handle_heartbeat, 0, 1)  # KIP-848
    d.register(69, consumer_groups.handle_describe, 0, 1)
    # transaction coordinator and the partition side of transactions
    d.register(24, transactions.handle_add_partitions, 0, 5)
    d.register(25, transactions.handle_add_offsets, 0, 4)
    d.register(26, transactions.handle_end_txn, 0, 5)
    d.register(27, transactions.handle_write_txn_markers, 0, 2)
    d.register(28, transactions.handle_txn_offset_commit, 0, 5)
    d.register(61, txn_admin.handle_describe_producers, 0, 0)
    d.register(65, txn_admin.handle_describe_transactions, 0, 0)
    d.register(66, txn_admin.handle_list_transactions, 0, 2)
    # the controller's operations (server/cluster_admin.py)
    d.register(43, cluster_ops.handle_elect_leaders, 0, 2)
    d.register(45, cluster_ops.handle_alter_partition_reassignments, 0, 0)
    d.register(46, cluster_ops.handle_list_partition_reassignments, 0, 0)
    return d


def register_cluster_apis(d: Dispatcher) -> None:
    """The APIs only a ZooKeeper-mode broker serves (called by BrokerApp in cluster mode)."""
    from tidegate.server.handlers import cluster_ops

    d.register(7, cluster_ops.handle_controlled_shutdown, 1, 3)
