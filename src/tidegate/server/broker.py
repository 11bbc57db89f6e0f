"""The broker: configuration, the partition logs, durability, and the fetch wake-ups.

Handlers receive the `Broker` and use it as their only way to the storage layer, so
the rules that tie storage to the protocol live here: when the high watermark moves
(after fsync when every write is flushed, right after append otherwise), and which
long-polling fetches to wake when it does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from tidegate.common.clock import Clock, SystemClock
from tidegate.common.config import BrokerConfig
from tidegate.common.errors import InvalidConfigError
from tidegate.coordinator.producer_ids import ProducerIdManager
from tidegate.server.durability import Flushable, GroupCommit
from tidegate.storage.config import LogConfig, topic_defaults_from_broker
from tidegate.storage.log import Log
from tidegate.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id = config.node_id
        self.dynamic_configs: dict[str, str] = _load_dynamic(config.log_dir)
        self.log_defaults: LogConfig = topic_defaults_from_broker(
            {**config.props, **self.dynamic_configs}
        )
        self.logs = LogManager(
            config.log_dir,
            self.log_defaults,
            self.clock,
            node_id=self.node_id,
            cluster_id=config.get("cluster.id") or None,
        )
        self.group_commit = GroupCommit(self._on_flushed)
        self._watchers: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._log_tp: dict[int, TopicPartition] = {}
        self.started_at = self.clock.monotonic()
        self._init_idempotence()
        self._init_group_coordinator()
        self._init_txn_coordinator()
        from tidegate.server.dispatch import default_dispatcher

        self.dispatcher = default_dispatcher()

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    # -- lifecycle --------------------------------------------------------------------

    def load(self) -> None:
        self.logs.load(progress=lambda msg: log.info("%s", msg))
        for topic, partition, lg in self.logs.logs():
            self._log_tp[id(lg)] = (topic, partition)
            lg.update_high_watermark(lg.log_end_offset)

    def close(self) -> None:
        self.logs.close()

    # -- durability and the high watermark -------------------------------------------

    def syncs_every_write(self, lg: Log) -> bool:
        return lg.config.flush_messages <= 1

    def after_append(self, topic: str, partition: int, lg: Log) -> None:
        """Called after each append: advance HW now, or once the data is fsynced."""
        self._log_tp[id(lg)] = (topic, partition)
        if self.syncs_every_write(lg):
            self.group_commit.mark_dirty(lg)
        else:
            self._advance_hw(lg, lg.log_end_offset)

    async def wait_durable(self, lg: Log, offset: int) -> None:
        """Return once `lg` is durable up to `offset` and the high watermark covers it."""
        if self.syncs_every_write(lg):
            await self.group_commit.wait_durable(lg, offset)
            # The flush raises the recovery point in its worker thread; the flusher moves
            # the high watermark on the loop a moment later. A waiter that found the
            # recovery point already past it must not be answered before that move.
            self._advance_hw(lg, lg.recovery_point)

    def _on_flushed(self, target: Flushable, recovery_point: int) -> None:
        if isinstance(target, Log) and self.syncs_every_write(target):
            self._advance_hw(target, recovery_point)

    def _advance_hw(self, lg: Log, hw: int) -> None:
        if lg.update_high_watermark(hw):  # clamps to the log end; also moves the LSO
            tp = self._log_tp.get(id(lg))
            if tp is not None:
                self._notify(tp)

    # -- fetch wake-ups --------------------------------------------------------------

    def _notify(self, tp: TopicPartition) -> None:
        for fut in self._watchers.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        """Sleep until one of `tps` gets new committed data, or `timeout` seconds."""
        if timeout <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._watchers.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                watchers = self._watchers.get(tp)
                if watchers is not None:
                    watchers.discard(fut)
                    if not watchers:
                        del self._watchers[tp]

    # -- dynamic broker configs -------------------------------------------------------

    def validate_dynamic(self, configs: dict[str, str]) -> LogConfig:
        return topic_defaults_from_broker({**self.config.props, **configs})

    def set_dynamic_configs(self, configs: dict[str, str]) -> None:
        defaults = self.validate_dynamic(configs)
        _save_dynamic(self.config.log_dir, configs)
        self.dynamic_configs = dict(configs)
        self.log_defaults = defaults
        self.logs.set_broker_defaults(defaults)
        log.info("dynamic broker configs now %s", configs)

    # -- topics ----------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get_log(topic, partition)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> uuid.UUID:
        meta = self.logs.create_topic(name, partitions, configs)
        for p in range(meta.partitions):
            lg = self.logs.get_log(name, p)
            if lg is not None:
                self._log_tp[id(lg)] = (name, p)
        log.info("created topic %s with %d partitions", name, partitions)
        return meta.topic_id

    def delete_topic(self, name: str) -> None:
        meta = self.logs.topics.get(name)
        if meta is not None:
            for p in range(meta.partitions):
                lg = self.logs.get_log(name, p)
                if lg is not None:
                    self.group_commit.forget(lg)
                    self._log_tp.pop(id(lg), None)
                self._notify((name, p))
        self.logs.delete_topic(name)
        self.group_coordinator.on_topic_deleted(name)  # its committed offsets go too
        log.info("deleted topic %s", name)

    def auto_create_enabled(self) -> bool:
        return self.config.get_bool("auto.create.topics.enable")

    def default_partitions(self) -> int:
        return self.config.get_int("num.partitions", 1) or 1

    # -- idempotent producers: producer ids and producer-state expiry -----------------

    def _init_idempotence(self) -> None:
        """Producer ids for InitProducerId, reserved in durable blocks in the log dir."""
        self.producer_ids = ProducerIdManager(self.config.log_dir / PRODUCER_ID_FILE)

    @property
    def producer_id_expiration_ms(self) -> int:
        value = self.config.get_int("producer.id.expiration.ms", 86400000)
        return 86400000 if value is None else value

    def expire_producers(self) -> int:
        """Forget, in every partition, producers idle for producer.id.expiration.ms
        (blocking; run it in a worker thread). Returns how many were removed."""
        now, expiration = self.clock.now_ms(), self.producer_id_expiration_ms
        removed = 0
        for topic, partition, lg in self.logs.logs():
            n = lg.remove_expired_producers(now, expiration)
            if n:
                log.info("%s-%d: expired %d idle producer ids", topic, partition, n)
            removed += n
        return removed

    # -- coordinators: groups (__consumer_offsets) and transactions (__transaction_state)

    def _init_group_coordinator(self) -> None:
        """The group coordinator; `BrokerApp` starts it (creates and replays
        __consumer_offsets) after the logs are loaded. See server/group_coordinator.py."""
        from tidegate.server.group_coordinator import GroupCoordinator

        self.group_coordinator = GroupCoordinator(self)

    def _init_txn_coordinator(self) -> None:
        """The transaction coordinator; `BrokerApp` starts it after the group coordinator
        (markers to __consumer_offsets go through that one). See
        server/txn_coordinator.py."""
        from tidegate.server.txn_coordinator import TransactionCoordinator

        self.txn_coordinator = TransactionCoordinator(self)


PRODUCER_ID_FILE = "tidegate-producer-ids"
_DYNAMIC_FILE = "tidegate-broker-configs.json"


def _load_dynamic(log_dir: Path) -> dict[str, str]:
    path = log_dir / _DYNAMIC_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise InvalidConfigError(f"cannot read dynamic broker configs {path}: {e}") from e
    return {str(k): str(v) for k, v in dict(data).items()}


def _save_dynamic(log_dir: Path, configs: dict[str, str]) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / _DYNAMIC_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(configs, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
