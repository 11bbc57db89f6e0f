"""Joining a cluster through a real ZooKeeper: connection (down at start, chroot), cluster
id, broker registration (duplicate broker.id, restart after kill -9, session expiry),
and the faults of the ZooKeeper server itself (paused, killed and restarted)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from tests.integration.conftest import ROOT, free_port
from tests.integration.zkserver import ZooKeeperServer, expire_session, member_command

from tidegate.replication.znodes import (
    CLUSTER_ID,
    CONTROLLER,
    BrokerEndpoint,
    BrokerInfo,
    ControllerRegistration,
    broker_path,
)
from tidegate.server.cluster.controller import Controller
from tidegate.server.cluster.errors import DuplicateBrokerIdError, ZkConnectTimeoutError
from tidegate.server.cluster.registration import (
    BrokerRegistrar,
    broker_info_from_config,
    check_data_dir_cluster_id,
    ensure_persistent_paths,
    get_or_create_cluster_id,
)
from tidegate.server.cluster.zk import SessionEvent, SessionState, ZkClient
from tidegate.storage.errors import InconsistentClusterIdError

SESSION_MS = 2000


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def info(broker_id: int, port: int, rack: str | None = None) -> BrokerInfo:
    return BrokerInfo(broker_id, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),), rack)


async def connected(connect: str, session_ms: int = SESSION_MS) -> ZkClient:
    zk = ZkClient(connect, session_timeout_ms=session_ms, connection_timeout_ms=15000)
    await zk.start()
    await ensure_persistent_paths(zk)
    return zk


def test_zookeeper_down_at_start_gives_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there

    async def main() -> None:
        zk = ZkClient(f"127.0.0.1:{port}/kafka", connection_timeout_ms=1500)
        started = time.monotonic()
        with pytest.raises(ZkConnectTimeoutError) as e:
            await zk.start()
        waited = time.monotonic() - started
        assert 1.4 < waited < 5, waited
        assert f"127.0.0.1:{port}" in str(e.value)
        assert "zookeeper.connection.timeout.ms=1500" in str(e.value)

    with caplog.at_level(logging.INFO, logger="tidegate.server.cluster"):
        asyncio.run(main())
    waiting = [r for r in caplog.records if "waiting for ZooKeeper at" in r.getMessage()]
    assert len(waiting) == 1, "logged once"


def test_chroot_is_created_and_cluster_id_shared(
    zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    connect = zk_server.chroot_connect()
    chroot = connect[connect.index("/") :]

    async def main() -> None:
        a = await connected(connect)
        b = await connected(connect)
        root = await connected(zk_server.connect)
        try:
            assert await root.exists(chroot) is not None
            assert await root.exists(f"{chroot}/brokers/ids") is not None
            first = await get_or_create_cluster_id(a)
            assert len(first) == 22  # Kafka's base64 UUID
            assert await get_or_create_cluster_id(b) == first
            data, _ = await root.get(f"{chroot}{CLUSTER_ID}")
            assert json.loads(data) == {"version": "1", "id": first}

            data_dir = tmp_path / "data"
            data_dir.mkdir()
            check_data_dir_cluster_id(data_dir, first)  # a new directory is fine
            (data_dir / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={first}\n")
            check_data_dir_cluster_id(data_dir, first)
            (data_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=other\n")
            with pytest.raises(InconsistentClusterIdError, match="trying to join the wrong"):
                check_data_dir_cluster_id(data_dir, first)
        finally:
            for zk in (a, b, root):
                await zk.close()

    asyncio.run(main())


def test_duplicate_broker_id_is_refused_with_kafkas_message(zk_server: ZooKeeperServer) -> None:
    connect = zk_server.chroot_connect()

    async def main() -> None:
        a, b = await connected(connect), await connected(connect)
        try:
            first = BrokerRegistrar(a, lambda: info(1, 9091))
            epoch = await first.start()
            data, stat = await a.get(broker_path(1))
            assert stat.czxid == epoch and stat.ephemeral_owner == a.session_id
            assert BrokerInfo.decode(1, data).endpoints == info(1, 9091).endpoints
            started = time.monotonic()
            with pytest.raises(DuplicateBrokerIdError) as e:
                await BrokerRegistrar(b, lambda: info(1, 9092)).register()
            assert time.monotonic() - started < 1.0, "another broker: refused at once"
            assert str(e.value).startswith(
                f"Error while creating ephemeral at /brokers/ids/1, node already exists and "
                f"owner '{a.session_id}' does not match current session '{b.session_id}'"
            )
            await first.stop()
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_restart_after_kill_waits_for_the_old_session(zk_server: ZooKeeperServer) -> None:
    """A broker killed with -9 leaves its registration behind for a session timeout; the
    restarted broker (same endpoints) waits it out instead of refusing to start."""
    connect = zk_server.chroot_connect()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        member_command(connect, 7, SESSION_MS, port),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "member 7 up" in line:
                break
        else:
            raise AssertionError("member did not start")
        proc.kill()
        proc.wait()

        async def main() -> None:
            zk = await connected(connect)
            try:
                old = await zk.get_or_none(broker_path(7))
                assert old is not None, "the killed broker's session outlived it"
                started = time.monotonic()
                epoch = await BrokerRegistrar(zk, lambda: info(7, port)).register()
                waited = time.monotonic() - started
                assert epoch != old[1].czxid
                assert waited < SESSION_MS / 1000 + 3, waited
            finally:
                await zk.close()

        asyncio.run(main())
    finally:
        if proc.poll() is None:
            proc.kill()


def test_session_expiry_re_registers_with_a_new_broker_epoch(zk_server: ZooKeeperServer) -> None:
    connect = zk_server.chroot_connect()

    async def main() -> None:
        zk = await connected(connect)
        epochs: list[int] = []
        registrar = BrokerRegistrar(zk, lambda: info(4, 9094), on_epoch=epochs.append)
        first = await registrar.start()
        try:
            expire_session(zk_server, *zk._client.client_id)

            async def again() -> bool:
                return bool(epochs)

            await eventually(again, timeout=15)
            assert epochs[0] != first and registrar.broker_epoch == epochs[0]
            _, stat = await zk.get(broker_path(4))
            assert stat.czxid == epochs[0] and stat.ephemeral_owner == zk.session_id
        finally:
            await registrar.stop()
            await zk.close()

    asyncio.run(main())


def test_a_paused_controller_process_is_replaced_and_resigns_on_resume(
    zk_server: ZooKeeperServer,
) -> None:
    """SIGSTOP the controller's process past its session: another broker becomes
    controller with a higher epoch; after SIGCONT the old one resigns and /controller
    stays with the new one."""
    connect = zk_server.chroot_connect()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    procs = {
        b: subprocess.Popen(
            member_command(connect, b, SESSION_MS, free_port()),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for b in (1, 2)
    }
    lines: dict[int, list[str]] = {b: [] for b in procs}

    def pump(b: int) -> None:
        out = procs[b].stdout
        assert out is not None
        for line in out:
            lines[b].append(line)

    import threading

    for b in procs:
        threading.Thread(target=pump, args=(b,), daemon=True).start()

    async def main() -> None:
        zk = await connected(connect)
        try:

            async def elected() -> bool:
                return await zk.exists(CONTROLLER) is not None

            await eventually(elected, timeout=20)
            data, _ = await zk.get(CONTROLLER)
            old = ControllerRegistration.decode(data).broker_id
            new = 2 if old == 1 else 1
            epoch = int((await zk.get("/controller_epoch"))[0])
            os.kill(procs[old].pid, signal.SIGSTOP)
            try:

                async def replaced() -> bool:
                    got = await zk.get_or_none(CONTROLLER)
                    return (
                        got is not None and ControllerRegistration.decode(got[0]).broker_id == new
                    )

                await eventually(replaced, timeout=15)
                assert int((await zk.get("/controller_epoch"))[0]) == epoch + 1
            finally:
                os.kill(procs[old].pid, signal.SIGCONT)

            async def resigned() -> bool:
                return any("resigns as controller" in line for line in lines[old])

            await eventually(resigned, timeout=15)
            await asyncio.sleep(0.5)
            got = await zk.get(CONTROLLER)
            assert ControllerRegistration.decode(got[0]).broker_id == new
            assert int((await zk.get("/controller_epoch"))[0]) == epoch + 1

            async def back() -> bool:  # and it registered again, on a new session
                return await zk.exists(broker_path(old)) is not None

            await eventually(back, timeout=15)
        finally:
            await zk.close()

    try:
        asyncio.run(main())
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def test_zookeeper_paused_then_killed_and_restarted(tmp_path: Path) -> None:
    """A ZooKeeper pause shorter than the session, and a kill -9 + restart on the same
    data: sessions survive both, so registrations and the controller stay put."""
    with ZooKeeperServer(tmp_path / "zk") as server:

        async def main() -> None:
            # the pause plus a JVM restart stay well inside the session even when the
            # machine is loaded (a 6 s session expired once under a full make test).
            # The server is listed twice: a connection made while the restarted
            # ZooKeeper is still loading its data is neither served nor closed (its
            # close fails inside ZooKeeper), and the client waits for that handshake
            # session timeout / number of hosts (kazoo, as ZooKeeper's Java client) —
            # with one host the whole session, which then expires on the server
            zk = await connected(f"{server.connect},{server.connect}", session_ms=12000)
            events: asyncio.Queue[object] = asyncio.Queue()
            zk.subscribe(events)
            registrar = BrokerRegistrar(zk, lambda: info(1, 9091))
            epoch = await registrar.start()
            controller = Controller(zk, 1)
            await controller.start()
            try:

                async def is_active() -> bool:
                    return controller.active

                await eventually(is_active)
                ctl_epoch = controller.epoch
                session = zk.session_id

                server.pause()
                await asyncio.sleep(1.5)
                server.resume()
                server.kill()
                server.start()

                async def next_state() -> SessionState:
                    ev = await asyncio.wait_for(events.get(), timeout=15)
                    assert isinstance(ev, SessionEvent)
                    return ev.state

                assert await next_state() is SessionState.SUSPENDED
                assert await next_state() is SessionState.CONNECTED  # not LOST: same session
                assert zk.session_id == session
                await asyncio.sleep(0.5)
                assert controller.active and controller.epoch == ctl_epoch
                assert registrar.broker_epoch == epoch
                _, stat = await zk.get(broker_path(1))
                assert stat.czxid == epoch
            finally:
                await controller.stop()
                await registrar.stop()
                await zk.close()

        asyncio.run(main())


def test_cluster_mode_config() -> None:
    from tidegate.common.config import BrokerConfig
    from tidegate.common.errors import InvalidConfigError

    embedded = BrokerConfig()
    assert not embedded.cluster_mode
    assert embedded.get("offsets.topic.replication.factor") == "1"
    assert embedded.get("transaction.state.log.min.isr") == "1"
    cluster = BrokerConfig(
        {"zookeeper.connect": "127.0.0.1:2181/kafka", "broker.id": "3", "broker.rack": "r1"}
    )
    assert cluster.cluster_mode and cluster.node_id == 3
    assert cluster.get("offsets.topic.replication.factor") == "3"
    assert cluster.get("transaction.state.log.replication.factor") == "3"
    assert cluster.get("transaction.state.log.min.isr") == "2"
    assert cluster.zookeeper_connection_timeout_ms == 18000
    explicit = BrokerConfig(
        {"zookeeper.connect": "h:1", "offsets.topic.replication.factor": "2",
         "zookeeper.connection.timeout.ms": "500"}
    )  # fmt: skip
    assert explicit.get("offsets.topic.replication.factor") == "2"
    zk = ZkClient.from_config(explicit)
    assert (zk.hosts, zk.chroot, zk.connection_timeout_ms) == ("h:1", "", 500)
    assert ZkClient.from_config(cluster).chroot == "/kafka"
    with pytest.raises(InvalidConfigError, match=r"broker.id \(2\) and node.id \(1\)"):
        BrokerConfig({"broker.id": "2", "node.id": "1"})
    assert BrokerConfig({"broker.id": "2", "node.id": "2"}).node_id == 2
    info_ = broker_info_from_config(cluster, 7)
    assert info_.broker_id == 3 and info_.rack == "r1" and info_.timestamp_ms == 7
    assert info_.endpoints == (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
