"""Run a broker: load the logs, listen, run the background chores, stop cleanly.

`run_broker(config)` is what `tidegate serve` calls. It installs uvloop when present,
recovers every partition (logging progress), binds the listeners, prints where it
listens, then runs retention (`log.retention.check.interval.ms`), the log cleaner
(`log.cleaner.backoff.ms`), the time-based flush (`log.flush.interval.ms`) and the
expiry of idle producer ids (`producer.id.expiration.check.interval.ms`) until
SIGTERM/SIGINT, when it stops accepting, flushes and closes every log cleanly. The group
coordinator, then the transaction coordinator, start after the logs load and stop (in
reverse order) before they close.

Before anything reads or writes the log directory, `BrokerApp` locks it (`<dir>/.lock`,
see storage/dir_lock.py): a second broker on the same directory stops with Kafka's
"Failed to acquire lock" error. It also checks the directory's free space every
`log.dir.free.space.check.interval.ms`; a background job that fails for a full disk
reports it to `broker.logs.space` (logged once) instead of printing a traceback, and
runs again on its next turn.

The HTTP listener (`http.listeners`: /metrics, /healthz, /readyz, the console) starts
first, before the logs load, and stops after the Kafka listeners (server/metrics/).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tidegate.common.config import BrokerConfig
from tidegate.server import gc_tuning, malloc_tuning
from tidegate.server.broker import Broker
from tidegate.server.listener import Listener
from tidegate.storage.dir_lock import LogDirLocks
from tidegate.storage.disk_space import disk_full_error

if TYPE_CHECKING:
    from tidegate.server.cluster.node import ClusterNode
    from tidegate.server.metrics.http import RouteAdder
    from tidegate.server.metrics.wiring import Observability

log = logging.getLogger("tidegate.server")


class BrokerApp:
    def __init__(self, config: BrokerConfig, http_routes: RouteAdder | None = None) -> None:
        self.config = config
        # every directory of log.dirs, before any file is touched
        self.dir_lock = LogDirLocks.acquire(config.log_dirs)
        try:
            self.broker = Broker(config)
        except BaseException:
            self.dir_lock.release()
            raise
        space = self.broker.logs.space
        space.warn_bytes = config.get_int("log.dir.free.space.warn.bytes") or 0
        self.broker.group_commit.on_error = space.write_failed
        self.broker.group_commit.on_log_error = self.broker.logs.log_write_failed  # JBOD
        self.listener = Listener(self.broker)
        # http.listeners: /metrics, /healthz, /readyz (+ `http_routes`); None when empty.
        # See server/metrics/wiring.py, imported only when there is an HTTP listener:
        # aiohttp and prometheus_client are a third of the broker's import time, which
        # an embedded broker (no HTTP by default) should not pay.
        self.observability: Observability | None = None
        if config.get("http.listeners").strip():
            from tidegate.server.metrics.wiring import Observability

            self.observability = Observability.create(self.broker, http_routes)
        # Cluster mode (zookeeper.connect set): ZooKeeper, registration, the controller,
        # metadata and replica roles; see server/cluster/node.py. Off by default.
        self.cluster: ClusterNode | None = None
        if config.get("zookeeper.connect"):
            from tidegate.server.cluster.node import ClusterNode

            self.cluster = ClusterNode(config, on_fatal=self._fatal)
        self.fatal: BaseException | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.bound: list[tuple[str, int]] = []
        self._closers: list[Callable[[], Awaitable[None]]] = []  # stopped after listener
        self.http_urls: list[str] = []
        self.on_http: Callable[[list[str]], None] = lambda _urls: None  # once HTTP is bound

    async def start(self) -> list[tuple[str, int]]:
        loop = asyncio.get_running_loop()
        obs = self.observability
        if obs is not None:  # first: /readyz answers 503 while the rest starts
            self.http_urls = await obs.start()
            self.on_http(self.http_urls)
        if self.cluster is not None:
            await self._prepare_cluster()
        await loop.run_in_executor(None, self.broker.load)
        if obs is not None:
            obs.logs_loaded()
        if self.cluster is not None:
            # The coordinators' shards follow the leadership of the partitions of
            # __consumer_offsets and __transaction_state (loaded where they lead).
            gc, tc = self.broker.group_coordinator, self.broker.txn_coordinator
            self.cluster.coordinator_shells[gc.runtime.topic] = gc.shell.on_leadership
            self.cluster.coordinator_shells[tc.runtime.topic] = tc.shell.on_leadership
            await gc.start()
            await tc.start()
            await self.cluster.start(self.broker.replicas)
            self._wire_cluster_transactions()
            if self.broker.acl_store is not None:  # ZooKeeper's /kafka-acl, read before serving
                await self.broker.acl_store.start()
            self.bound = await self.listener.start()
            if obs is not None:
                obs.serving(self.listener, self.cluster)
            self._start_chores()
            return self.bound
        # -- group coordinator: create __consumer_offsets if missing, replay it in the
        # background (COORDINATOR_LOAD_IN_PROGRESS until done), run its timers and
        # offset expiry (offsets.retention.check.interval.ms); see server/group_coordinator.py
        await self._timed("group", self.broker.group_coordinator.start())
        # -- transaction coordinator: __transaction_state, then markers for what a crash
        # left prepared; see server/txn_coordinator.py
        await self._timed("transaction", self.broker.txn_coordinator.start())
        if self.broker.acl_store is not None:
            await self.broker.acl_store.start()
        self.bound = await self.listener.start()
        if obs is not None:
            obs.serving(self.listener, None)
        self._start_chores()
        return self.bound

    async def _timed(self, name: str, start: Awaitable[None]) -> None:
        """A coordinator's start, timed for the metrics when they are on."""
        if self.observability is None:
            await start
        else:
            await self.observability.timed(name, start)

    async def _prepare_cluster(self) -> None:
        """Before the logs load: ZooKeeper, the cluster id, the metadata view, topic admin."""
        from tidegate.server.cluster.cluster_admin import ClusterNodeAdmin
        from tidegate.server.cluster.topic_admin import ClusterTopicAdmin
        from tidegate.server.dispatch import register_cluster_apis

        assert self.cluster is not None
        cluster_id = await self.cluster.prepare()
        self.broker.logs.adopt_cluster_id(cluster_id)
        md = self.broker.metadata = self.cluster.make_metadata()
        rf = self.config.get_int("default.replication.factor", 1) or 1
        self.broker.topic_admin = ClusterTopicAdmin(self.cluster.zk, rf,
                                                    cached=md.topics)
        self.broker.cluster_admin = ClusterNodeAdmin(self.cluster)  # the controller's ops
        register_cluster_apis(self.broker.dispatcher)  # ControlledShutdown
        # client quotas: /config/users, /config/clients and their change notifications
        from tidegate.server.cluster.client_quotas import ZkQuotaStore

        quota_store = ZkQuotaStore(self.cluster.zk, self.broker.quotas)
        self.broker.quota_store = quota_store
        await quota_store.start()
        self._closers.append(quota_store.stop)
        # dynamic broker configs: /config/brokers/<default> and /config/brokers/<id>
        from tidegate.server.cluster.broker_configs import ZkBrokerConfigs

        broker_configs = ZkBrokerConfigs(self.cluster.zk, self.config.node_id,
                                         self.broker.dynamic, self.broker.set_dynamic_configs)
        self.broker.broker_configs = broker_configs
        await broker_configs.start()
        self._closers.append(broker_configs.stop)
        with contextlib.suppress(TimeoutError):  # the cluster's values before serving
            await asyncio.wait_for(broker_configs.synced.wait(), 10)
        # SCRAM users: /config/users/<user> too, shared by every broker
        from tidegate.server.cluster.scram_users import ZkScramStore

        scram_store = ZkScramStore(self.cluster.zk)
        self.broker.scram_users = scram_store
        for runtime in self.broker.listener_security.values():
            runtime.scram = scram_store
        await scram_store.start()
        self._closers.append(scram_store.stop)
        with contextlib.suppress(TimeoutError):  # users known before the first login
            await asyncio.wait_for(scram_store.synced.wait(), 10)
        if self.broker.authorizer is not None:  # ACLs in ZooKeeper's /kafka-acl
            from tidegate.server.cluster.acls import ZkAclStore

            self.broker.acl_store = ZkAclStore(self.cluster.zk, self.broker.authorizer)
        # producer ids: blocks from /latest_producer_id_block, unique across brokers
        from tidegate.coordinator.producer_ids import ProducerIdManager
        from tidegate.server.cluster.producer_ids import ZkProducerIdBlocks

        blocks = ZkProducerIdBlocks(self.cluster.zk, self.config.node_id,
                                    asyncio.get_running_loop())
        self.broker.producer_ids = ProducerIdManager(
            self.config.log_dir / "unused-in-cluster-mode", reserve=blocks)

    def _wire_cluster_transactions(self) -> None:
        """Cluster mode: markers for partitions led by other brokers travel as
        WriteTxnMarkers (the marker channel), and KIP-890 verification of an id
        coordinated elsewhere as AddPartitionsToTxn to its coordinator; both over
        inter-broker connections to the brokers' replication endpoints."""
        from tidegate.server.cluster.marker_channel import MarkerChannel
        from tidegate.server.cluster.txn_verify import RemoteTxnVerifier

        assert self.cluster is not None and self.cluster.fetchers is not None
        endpoint = self.cluster.fetchers.endpoint
        node = self.config.node_id
        channel = MarkerChannel(self.broker, endpoint, f"broker-{node}-markers")
        verifier = RemoteTxnVerifier(self.broker, endpoint, f"broker-{node}-verifier")
        self.broker.txn_coordinator.finisher.write = channel.write
        self.broker.txn_coordinator.remote = verifier
        self._closers += [channel.stop, verifier.stop]

    def _fatal(self, exc: BaseException) -> None:
        log.error("stopping: %s", exc)
        self.fatal = exc
        self.request_stop()

    def _start_chores(self) -> None:
        interval = self.config.get_int("log.retention.check.interval.ms", 300000) or 300000
        self._tasks.append(asyncio.create_task(self._every(interval, self._retention)))
        if self.config.get_bool("log.cleaner.enable"):
            backoff = self.config.get_int("log.cleaner.backoff.ms", 15000) or 15000
            self._tasks.append(asyncio.create_task(self._every(backoff, self._clean)))
        ckpt = self.config.get_int("log.flush.offset.checkpoint.interval.ms", 60000) or 60000
        self._tasks.append(asyncio.create_task(self._every(ckpt, self._checkpoint)))
        if self.cluster is not None:  # followers' and leaders' HWs survive a restart
            hw_ms = self.config.get_int("replica.high.watermark.checkpoint.interval.ms") or 5000
            self._tasks.append(asyncio.create_task(self._every(hw_ms, self._checkpoint_hw)))
        sched = self.config.get_int("log.flush.scheduler.interval.ms", 1000) or 1000
        self._tasks.append(asyncio.create_task(self._every(sched, self._timed_flush)))
        # -- idempotent producers: expire idle producer state -------------------------
        check = self.config.get_int("producer.id.expiration.check.interval.ms") or 600000
        self._tasks.append(asyncio.create_task(self._every(check, self._expire_producers)))
        # -- log directory free space ------------------------------------------------------
        space_ms = self.config.get_int("log.dir.free.space.check.interval.ms") or 30000
        self.broker.logs.space.check()
        self._tasks.append(asyncio.create_task(self._every(space_ms, self._check_space)))

    async def _every(self, interval_ms: int, job: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await loop.run_in_executor(None, job)
            except Exception as e:
                if disk_full_error(e) is not None:  # logged once; retried next time
                    self.broker.logs.space.write_failed(e, f"background job {job.__name__}")
                else:
                    log.exception("background job %s failed", job.__name__)

    def _retention(self) -> None:
        self.broker.logs.run_retention(self.broker.clock.now_ms())

    def _clean(self) -> None:
        self.broker.logs.run_cleaner(self.broker.clock.now_ms())

    def _checkpoint(self) -> None:
        self.broker.logs.checkpoint_recovery_points()

    def _checkpoint_hw(self) -> None:
        self.broker.logs.checkpoint_high_watermarks()

    def _timed_flush(self) -> None:
        now = self.broker.clock.now_ms()
        for _topic, _p, lg in list(self.broker.logs.logs()):
            flush_ms = lg.config.flush_ms
            if self.broker.syncs_every_write(lg) or flush_ms <= 0:
                continue
            if lg.recovery_point < lg.log_end_offset and now - lg.last_flush_ms >= flush_ms:
                lg.flush()

    def _expire_producers(self) -> None:
        self.broker.expire_producers()

    def _check_space(self) -> None:
        self.broker.logs.space.check()

    def request_stop(self) -> None:
        self._stop.set()

    async def serve_forever(self) -> None:
        await self._stop.wait()

    async def stop(self) -> None:
        log.info("shutting down")
        if self.observability is not None:
            self.observability.stopping()  # /readyz: 503 from now on
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.cluster is not None:  # leaderships moved away while clients can still ask
            await self.cluster.controlled_shutdown()
        await self.listener.stop()
        if self.broker.acl_store is not None:
            with contextlib.suppress(Exception):
                await self.broker.acl_store.stop()
        for close in self._closers:
            with contextlib.suppress(Exception):
                await close()
        if self.cluster is not None:
            await self.cluster.stop()
        await self.broker.txn_coordinator.stop()
        await self.broker.group_coordinator.stop()
        if self.observability is not None:  # before the logs close under a scrape
            await self.observability.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.broker.close)
        self.dir_lock.release()
        log.info("stopped cleanly")


async def _main(config: BrokerConfig, on_ready: Callable[[list[tuple[str, int]]], None],
                http_routes: RouteAdder | None, on_http: Callable[[list[str]], None]) -> None:
    app = BrokerApp(config, http_routes)
    app.on_http = on_http
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, app.request_stop)
    try:
        bound = await app.start()
    except BaseException:
        if app.observability is not None:
            with contextlib.suppress(Exception):
                await app.observability.stop()
        app.dir_lock.release()
        raise
    on_ready(bound)
    try:
        await app.serve_forever()
    finally:
        await app.stop()
    if app.fatal is not None:
        raise app.fatal


def run_broker(
    config: BrokerConfig, on_ready: Callable[[list[tuple[str, int]]], None] = lambda _: None,
    *, http_routes: RouteAdder | None = None,
    on_http: Callable[[list[str]], None] = lambda _: None,
) -> None:
    """`http_routes`: more routes for the HTTP listener (the web console);
    `on_http(urls)`: told where it listens, before the logs load."""
    malloc_tuning.tune()  # request-sized buffers stay on the heap (see the module)
    gc_tuning.tune()  # fewer collector passes over requests in flight (see the module)
    main = _main(config, on_ready, http_routes, on_http)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main)
    else:
        uvloop.run(main)
