"""`AsyncAdmin`: manage topics, partitions, configs and offsets of a cluster.

Each method sends the matching Kafka admin request: CreateTopics, DeleteTopics and
CreatePartitions and IncrementalAlterConfigs to the controller; DescribeConfigs and
DescribeCluster to any broker; ListOffsets and DeleteRecords to each partition's
leader. The transaction tools (KIP-664: list/describe transactions, describe producers,
abort a partition's open transaction) live in `txn_admin.py`. SCRAM users (Describe/
AlterUserScramCredentials) are in `scram_admin.py`. Methods on many topics
return a per-topic result (None or the error); the single-topic conveniences raise the
error instead. A NOT_CONTROLLER answer refreshes
metadata and retries within ``default.api.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client import acl_admin, quota_admin
from tidegate.client.config import AdminConfig
from tidegate.client.metadata import MetadataClient
from tidegate.client.net import NetworkClient, Response
from tidegate.client.offsets import list_offsets
from tidegate.client.scram_admin import (
    ScramCredentialInfo,
    ScramUpsertion,
    alter_scram,
    describe_scram,
)
from tidegate.client.txn_admin import TxnAdmin
from tidegate.client.types import (
    BrokerInfo,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    LogDirDescription,
    NewTopic,
    OffsetAndTimestamp,
    ProducerState,
    TopicDescription,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from tidegate.common.acl import AclBinding, AclBindingFilter
from tidegate.common.errors import KafkaError, UnsupportedVersionError, error_for_code

__all__ = ["AsyncAdmin"]

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 32, 37, 44
DESCRIBE_LOG_DIRS = 35
DESCRIBE_CLUSTER = 60
SET, DELETE = 0, 1


def _error(code: ErrorCode, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return error_for_code(code.value, f"{what}: {message or code.name.upper()}")


class AsyncAdmin:
    """See the module docstring. Use as ``async with AsyncAdmin({...}) as admin:``."""

    def __init__(self, config: AdminConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        if isinstance(config, AdminConfig):
            self.config = config
        else:
            self.config = AdminConfig.from_dict(config, **overrides)
        self._net = NetworkClient(self.config)
        self._metadata = MetadataClient(self._net, max_age_ms=self.config.metadata_max_age_ms,
                                        allow_auto_create=False,
                                        retry_backoff_ms=self.config.retry_backoff_ms)
        self._txn = TxnAdmin(self._metadata, self.config.default_api_timeout_ms,
                             self.config.retry_backoff_ms)

    async def start(self) -> None:
        await self._metadata.refresh([])

    async def close(self) -> None:
        await self._net.close()

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    @property
    def _timeout_ms(self) -> int:
        return self.config.default_api_timeout_ms

    async def _controller_request(self, api_key: int, data: Mapping[str, Any]) -> Response:
        """Send to the controller (any broker if none is known)."""
        await self._metadata.refresh([])
        controller = self._metadata.cache.controller_id
        node = controller if controller in self._metadata.cache.brokers else None
        return await self._net.request(node, api_key, data)

    async def _retrying(self, api_key: int, data: Mapping[str, Any],
                        codes_of: Callable[[Response], set[ErrorCode]]) -> Response:
        """Send to the controller; while any result says NOT_CONTROLLER, refresh
        metadata and retry (until default.api.timeout.ms)."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            resp = await self._controller_request(api_key, data)
            if ErrorCode.not_controller not in codes_of(resp) or time.monotonic() > deadline:
                return resp
            self._metadata.cache.request_update()
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- topics ------------------------------------------------------------------------

    async def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False
                            ) -> dict[str, KafkaError | None]:
        """Create topics; per topic, None on success or the error."""
        new = list(topics)
        data = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                            "replication_factor": t.replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}
                           for t in new],
                "timeout": self._timeout_ms, "validate_only": validate_only}
        resp = await self._retrying(CREATE_TOPICS, data,
                                    lambda r: {t.error_code for t in r.topics})
        out: dict[str, KafkaError | None] = {
            t.name: _error(t.error_code, getattr(t, "error_message", None),
                           f"cannot create topic {t.name!r}") for t in resp.topics}
        if not validate_only and any(v is None for v in out.values()):
            await self._wait_for_topics([n for n, v in out.items() if v is None], True)
        return out

    async def create_topic(self, name: str, num_partitions: int = 1,
                           replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> None:
        result = await self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, dict(configs or {}))])
        err = result.get(name)
        if err is not None:
            raise err

    async def delete_topics(self, names: Iterable[str]) -> dict[str, KafkaError | None]:
        topics = list(names)
        data = {"topic_names": topics, "topics": [{"name": n} for n in topics],
                "timeout": self._timeout_ms}
        resp = await self._retrying(DELETE_TOPICS, data,
                                    lambda r: {t.error_code for t in r.responses})
        out: dict[str, KafkaError | None] = {
            t.name: _error(t.error_code, getattr(t, "error_message", None),
                           f"cannot delete topic {t.name!r}") for t in resp.responses}
        if any(v is None for v in out.values()):
            await self._wait_for_topics([n for n, v in out.items() if v is None], False)
        return out

    async def delete_topic(self, name: str) -> None:
        err = (await self.delete_topics([name])).get(name)
        if err is not None:
            raise err

    async def _wait_for_topics(self, names: list[str], exist: bool) -> None:
        """Wait until metadata shows the topics created (with leaders) or gone, as
        Kafka's admin tools do, so the next command sees the change."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        while time.monotonic() < deadline:
            md = await self._metadata.fetch_all()
            infos = [md.topic(n) for n in names]
            if exist and all(i is not None and all(p.leader >= 0 for p in i.partitions.values())
                             for i in infos):
                return
            if not exist and all(i is None for i in infos):
                return
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def list_topics(self, include_internal: bool = False) -> dict[str, TopicInfo]:
        md = await self._metadata.fetch_all()
        return {n: t for n, t in sorted(md.topics.items())
                if include_internal or not t.is_internal}

    async def describe_topics(self, names: Iterable[str] | None = None,
                              include_configs: bool = True) -> list[TopicDescription]:
        """Partitions, leaders and replicas of each topic (None: all topics), with the
        topic's configs. Raises UnknownTopicOrPartitionError for a missing topic."""
        wanted = None if names is None else list(names)
        md = await self._metadata.fetch_all()
        if wanted is None:
            wanted = [n for n, t in sorted(md.topics.items()) if not t.is_internal]
        configs: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for name in wanted:
            if md.topic(name) is None:
                raise md.topic_error(name) or error_for_code(
                    ErrorCode.unknown_topic_or_partition.value,
                    f"topic {name!r} does not exist")
        if include_configs and wanted:
            configs = await self.describe_configs([ConfigResource.topic(n) for n in wanted])
        out = []
        for name in wanted:
            info = md.topics[name]
            out.append(TopicDescription(
                name, info.topic_id, tuple(info.partitions[p] for p in sorted(info.partitions)),
                info.is_internal, configs.get(ConfigResource.topic(name), {})))
        return out

    async def create_partitions(self, new_totals: Mapping[str, int], *,
                                validate_only: bool = False) -> dict[str, KafkaError | None]:
        """Raise each topic's partition count to the given total."""
        data = {"topics": [{"name": n, "count": c, "assignments": None}
                           for n, c in new_totals.items()],
                "timeout": self._timeout_ms, "validate_only": validate_only}
        resp = await self._retrying(CREATE_PARTITIONS, data,
                                    lambda r: {t.error_code for t in r.results})
        return {t.name: _error(t.error_code, getattr(t, "error_message", None),
                               f"cannot add partitions to {t.name!r}") for t in resp.results}

    # -- configs -----------------------------------------------------------------------

    async def describe_configs(self, resources: Iterable[ConfigResource]
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        res = list(resources)
        data = {"resources": [{"resource_type": r.type, "resource_name": r.name,
                               "configuration_keys": None} for r in res],
                "include_synonyms": False, "include_documentation": False}
        resp = await self._net.request(None, DESCRIBE_CONFIGS, data)
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for r in resp.results:
            resource = ConfigResource(int(r.resource_type), r.resource_name)
            err = _error(r.error_code, r.error_message,
                         f"cannot describe configs of {resource.name!r}")
            if err is not None:
                raise err
            out[resource] = {
                c.name: ConfigEntry(c.name, c.value, bool(c.read_only),
                                    int(getattr(c, "config_source", -1)), bool(c.is_sensitive))
                for c in r.configs}
        return out

    async def incremental_alter_configs(
        self, resource: ConfigResource, set: Mapping[str, str] | None = None,
        delete: Iterable[str] = (), *, validate_only: bool = False,
    ) -> None:
        """Set and/or delete (revert to default) config keys of one resource."""
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in (set or {}).items()]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
        data = {"resources": [{"resource_type": resource.type,
                               "resource_name": resource.name, "configs": ops}],
                "validate_only": validate_only}
        resp = await self._retrying(INCREMENTAL_ALTER_CONFIGS, data,
                                    lambda r: {x.error_code for x in r.responses})
        for r in resp.responses:
            err = _error(r.error_code, r.error_message,
                         f"cannot alter configs of {resource.name!r}")
            if err is not None:
                raise err

    # -- offsets and records -----------------------------------------------------------

    async def list_offsets(self, query: Mapping[TopicPartition, int], *,
                           isolation_level: int = 0
                           ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition: a timestamp, or -2 (earliest) / -1 (latest) / -3 (max ts)."""
        return await list_offsets(self._metadata, query, isolation_level=isolation_level,
                                  timeout_ms=self._timeout_ms,
                                  retry_backoff_ms=self.config.retry_backoff_ms)

    async def delete_records(self, before: Mapping[TopicPartition, int]
                             ) -> dict[TopicPartition, int]:
        """Delete records before the given offsets (-1: the high watermark); return each
        partition's new low watermark (log start offset)."""
        await self._metadata.refresh({tp.topic for tp in before})
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in before:
            leader = self._metadata.cache.leader_for(tp)
            if leader is None:
                raise error_for_code(ErrorCode.unknown_topic_or_partition.value,
                                     f"no leader known for {tp.topic}-{tp.partition}")
            by_node.setdefault(leader, []).append(tp)
        out: dict[TopicPartition, int] = {}
        for node, tps in by_node.items():
            topics: dict[str, list[dict[str, int]]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "offset": before[tp]})
            resp = await self._net.request(node, DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout": self._timeout_ms})
            for t in resp.topics:
                for p in t.partitions:
                    err = _error(p.error_code, None,
                                 f"cannot delete records of {t.name}-{p.partition_index}")
                    if err is not None:
                        raise err
                    out[TopicPartition(t.name, int(p.partition_index))] = int(p.low_watermark)
        return out

    # -- cluster -----------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        conn = await self._net.any_connection()
        try:
            conn.version(DESCRIBE_CLUSTER)
        except UnsupportedVersionError:
            md = await self._metadata.refresh([])
            return ClusterDescription(md.cluster_id, md.controller_id,
                                      tuple(md.brokers[n] for n in sorted(md.brokers)))
        resp = await conn.request(DESCRIBE_CLUSTER, {
            "include_cluster_authorized_operations": False, "endpoint_type": 1})
        err = _error(resp.error_code, resp.error_message, "cannot describe the cluster")
        if err is not None:
            raise err
        return ClusterDescription(
            resp.cluster_id, int(resp.controller_id),
            tuple(BrokerInfo(int(b.broker_id), b.host, int(b.port), b.rack)
                  for b in resp.brokers))

    async def describe_log_dirs(self) -> list[LogDirDescription]:
        """Every broker's log directories, with their partitions' sizes and (from
        DescribeLogDirs v4) the free space of their volumes."""
        md = await self._metadata.refresh([])
        out: list[LogDirDescription] = []
        for node in sorted(md.brokers):
            resp = await self._net.request(node, DESCRIBE_LOG_DIRS, {"topics": None})
            for r in resp.results:
                err = _error(r.error_code, None, f"log dir {r.log_dir}")
                sizes = {TopicPartition(t.name, int(p.partition_index)): int(p.partition_size)
                         for t in r.topics for p in t.partitions}
                out.append(LogDirDescription(
                    node, r.log_dir, None if err is None else str(err),
                    int(getattr(r, "total_bytes", -1)), int(getattr(r, "usable_bytes", -1)),
                    sizes))
        return out

    # -- transactions (KIP-664) --------------------------------------------------------

    async def list_transactions(self, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                duration_filter_ms: int = -1) -> list[TransactionListing]:
        """Every coordinator's transactional ids, optionally only those in `states`
        (Kafka's names), of `producer_ids`, or running longer than `duration_filter_ms`
        (ListTransactions v1). ValueError for an unknown state name."""
        return await self._txn.list_transactions(states, producer_ids, duration_filter_ms)

    async def describe_transactions(self, ids: Iterable[str]
                                    ) -> dict[str, TransactionDescription]:
        """Each transactional id as its coordinator sees it; raises the first error
        (TransactionalIdNotFoundError for an id the coordinator does not know)."""
        return {tid: await self._txn.describe_transaction(tid) for tid in dict.fromkeys(ids)}

    async def describe_producers(self, partitions: Iterable[TopicPartition]
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader remembers, with the start offset of
        the transaction each has open there (-1: none)."""
        return await self._txn.describe_producers(partitions)

    # -- ACLs (client/acl_admin.py) -------------------------------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding]) -> list[KafkaError | None]:
        return await acl_admin.create_acls(self._net, bindings)

    async def describe_acls(self, f: AclBindingFilter) -> list[AclBinding]:
        return await acl_admin.describe_acls(self._net, f)

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        return await acl_admin.delete_acls(self._net, filters)

    # -- client quotas (client/quota_admin.py) ------------------------------------------

    async def describe_client_quotas(
            self, components: Iterable[tuple[str, str | None]] = (), strict: bool = False,
    ) -> dict[quota_admin.QuotaEntity, dict[str, float]]:
        return await quota_admin.describe_quotas(self._net, components, strict)

    async def alter_client_quotas(
            self, alterations: Iterable[quota_admin.QuotaAlteration],
            validate_only: bool = False) -> list[KafkaError | None]:
        return await quota_admin.alter_quotas(self._net, alterations, validate_only)

    # -- SCRAM users (client/scram_admin.py) ----------------------------------------------

    async def describe_user_scram_credentials(
            self, users: Iterable[str] | None = None,
    ) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
        return await describe_scram(self._net, users)

    async def alter_user_scram_credentials(
            self, upsertions: Iterable[ScramUpsertion] = (),
            deletions: Iterable[tuple[str, str]] = ()) -> dict[str, KafkaError | None]:
        return await alter_scram(self._net, upsertions, deletions)

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        """Write an ABORT marker for `producer_id` into one partition (WriteTxnMarkers to
        its leader), ending the transaction it has open there — for a hanging
        transaction, with the epoch and coordinator epoch DescribeProducers reports."""
        await self._txn.abort_transaction(topic, partition, producer_id, producer_epoch,
                                          coordinator_epoch)
