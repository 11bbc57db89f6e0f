"""A real standalone ZooKeeper server for the cluster tests: `ZooKeeperServer`.

It runs Debian's `zookeeper` package (installed by `make deps-system`) through
`tidegate.cli.zk_launch`, on a free loopback port with its own data directory, and
supports the faults the tests need: kill -9, SIGSTOP/SIGCONT, restart on the same port
and data. Tests usually share one server per module and isolate themselves with a
chroot of their own (`chroot_connect`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path
from types import TracebackType

import pytest
from tests.integration.conftest import free_port

from tidegate.cli import zk_launch


class ZooKeeperServer:
    def __init__(self, base_dir: Path, port: int | None = None, tick_time_ms: int = 200) -> None:
        self.base_dir = base_dir
        self.port = port or free_port()
        self.settings = zk_launch.ZooKeeperSettings(
            data_dir=base_dir / "data",
            port=self.port,
            tick_time_ms=tick_time_ms,
            # short sessions for fault tests; Kafka's 18 s default still fits
            min_session_timeout_ms=2 * tick_time_ms,
            max_session_timeout_ms=60000,
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = base_dir / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def chroot_connect(self) -> str:
        """A connect string with a fresh chroot: one test's znodes stay out of another's."""
        return f"{self.connect}/t-{uuid.uuid4().hex[:10]}"

    def start(self, timeout: float = 30.0) -> None:
        try:
            zk_launch.find_zookeeper_classpath()
            zk_launch.find_java()
        except zk_launch.ZooKeeperNotInstalledError as e:
            pytest.skip(str(e))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = zk_launch.launch(
                self.settings, cfg_path=self.base_dir / "zoo.cfg", output=out, log_level="info"
            )
        if not zk_launch.wait_until_serving("127.0.0.1", self.port, timeout, self.proc):
            self.kill()
            raise RuntimeError(f"ZooKeeper did not start:\n{self.logs()[-3000:]}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.resume()  # a stopped process cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """kill -9: no goodbye to the clients, sessions survive on disk."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# -- helpers for tests that drive the cluster code in-process ---------------------------


def expire_session(server: ZooKeeperServer, session_id: int, password: bytes) -> None:
    """Make ZooKeeper expire a live session now (the classic trick: attach a second
    client to the same session and close it), as if its owner had been paused past the
    session timeout. The owner sees LOST on its next contact, then a new session."""
    from kazoo.client import KazooClient

    hijack = KazooClient(hosts=server.connect, client_id=(session_id, password))
    hijack.start(timeout=10)
    hijack.stop()
    hijack.close()


# -- a cluster member in its own process (for SIGSTOP / kill -9 of the cluster code) ------

MEMBER_MAIN = "tests.integration.zkserver"


def member_command(connect: str, broker_id: int, session_ms: int, port: int) -> list[str]:
    """`python -m tests.integration.zkserver ...`: a process that registers broker
    `broker_id` (endpoint PLAINTEXT://127.0.0.1:<port>) and runs for controller, logging
    to stdout, until SIGTERM."""
    import sys

    return [
        sys.executable, "-m", MEMBER_MAIN,
        connect, str(broker_id), str(session_ms), str(port),
    ]  # fmt: skip


def _member_main(argv: list[str]) -> None:
    import asyncio
    import logging

    from tidegate.replication.znodes import BrokerEndpoint, BrokerInfo
    from tidegate.server.cluster.controller import Controller
    from tidegate.server.cluster.registration import BrokerRegistrar, ensure_persistent_paths
    from tidegate.server.cluster.zk import ZkClient

    connect, broker_id, session_ms, port = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True
    )
    info = BrokerInfo(broker_id, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),))

    async def main() -> None:
        zk = ZkClient(connect, session_timeout_ms=session_ms, connection_timeout_ms=15000)
        await zk.start()
        await ensure_persistent_paths(zk)
        registrar = BrokerRegistrar(zk, lambda: info)
        await registrar.start()
        controller = Controller(zk, broker_id)
        await controller.start()
        print(f"member {broker_id} up", flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await controller.stop()
        await registrar.stop()
        await zk.close()

    asyncio.run(main())


if __name__ == "__main__":
    import sys

    _member_main(sys.argv[1:])
