"""Start a standalone ZooKeeper server from Debian's `zookeeper` package, for development
(`tidegate cluster up`) and for the cluster tests.

It only builds a `zoo.cfg` and a `java` command line over the package's jars
(/usr/share/java/zookeeper.jar, whose manifest names its dependencies) and checks the
server answers the `ruok` four-letter word. No ZooKeeper client here: the broker's
client lives in `server/cluster/zk.py`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "ZooKeeperNotInstalledError",
    "ZooKeeperSettings",
    "find_java",
    "find_zookeeper_classpath",
    "java_command",
    "launch",
    "ruok",
    "wait_until_serving",
    "zoo_cfg",
]

JAVA_DIRS = (Path("/usr/share/java"), Path("/usr/share/zookeeper/lib"))
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = (
    "ZooKeeper is not installed: run `make deps-system` (or `apt-get install zookeeper` "
    "on Debian/Ubuntu; it brings a Java runtime)"
)


class ZooKeeperNotInstalledError(RuntimeError):
    pass


@dataclass
class ZooKeeperSettings:
    """What goes into zoo.cfg. Session timeouts are bounded by the server to
    [min, max]: the defaults allow Kafka's 18 s and the short ones fault tests use."""

    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    tick_time_ms: int = 2000
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 60000
    max_client_connections: int = 0  # 0: unlimited (ZooKeeper's default is 60 per host)
    extra: dict[str, str] = field(default_factory=dict)


def zoo_cfg(s: ZooKeeperSettings) -> str:
    lines = {
        "tickTime": str(s.tick_time_ms),
        "dataDir": str(s.data_dir),
        "clientPort": str(s.port),
        "clientPortAddress": s.host,
        "minSessionTimeout": str(s.min_session_timeout_ms),
        "maxSessionTimeout": str(s.max_session_timeout_ms),
        "maxClientCnxns": str(s.max_client_connections),
        # no Jetty admin server on 8080: several servers (and brokers) share a machine
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr,stat,mntr,cons",
        # small, quick snapshots for development data directories
        "autopurge.snapRetainCount": "3",
        "autopurge.purgeInterval": "1",
    }
    lines.update(s.extra)
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalledError(INSTALL_HINT + " (no java on PATH)")
    return java


def find_zookeeper_classpath() -> list[Path]:
    """zookeeper.jar (its manifest's Class-Path brings jute, netty, slf4j-api, ...) plus
    an slf4j binding, so the server logs go to stderr instead of being dropped."""
    for directory in JAVA_DIRS:
        jar = directory / "zookeeper.jar"
        if jar.is_file():
            cp = [jar]
            jute = directory / "zookeeper-jute.jar"
            if jute.is_file():
                cp.append(jute)
            simple = directory / "slf4j-simple.jar"
            if simple.is_file():
                cp.append(simple)
            return cp
    raise ZooKeeperNotInstalledError(INSTALL_HINT)


def java_command(cfg: Path, *, log_level: str = "warn", heap_mb: int = 256) -> list[str]:
    """The command line: a small heap, serial GC and C1 only (a development server on a
    shared machine starts faster and takes less CPU), IPv4, logs on stderr."""
    classpath = os.pathsep.join(str(p) for p in find_zookeeper_classpath())
    return [
        find_java(),
        f"-Xmx{heap_mb}m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.net.preferIPv4Stack=true",
        "-Dzookeeper.admin.enableServer=false",
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-cp",
        classpath,
        MAIN_CLASS,
        str(cfg),
    ]


def launch(
    settings: ZooKeeperSettings,
    *,
    cfg_path: Path | None = None,
    output: IO[bytes] | int | None = None,
    log_level: str = "warn",
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.Popen[bytes]:
    """Write zoo.cfg (beside the data directory unless told) and start the server.
    The caller owns the process; `wait_until_serving` tells when it answers.
    `preexec_fn` runs in the child before java starts (`cluster up` uses it so that
    ZooKeeper dies with the launcher)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    cfg = cfg_path or settings.data_dir.parent / f"zoo-{settings.port}.cfg"
    cfg.write_text(zoo_cfg(settings))
    return subprocess.Popen(
        java_command(cfg, log_level=log_level),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
        start_new_session=True,  # Ctrl-C in a terminal is the launcher's to handle
        preexec_fn=preexec_fn,
    )


def ruok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if a ZooKeeper server answers "imok" to "ruok" there."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False


def wait_until_serving(
    host: str,
    port: int,
    timeout: float = 30.0,
    proc: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Poll `ruok` until it answers (True), the process exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if ruok(host, port, timeout=0.5):
            return True
        time.sleep(0.1)
    return False
