"""What `tidegate cluster up` starts, decided before anything runs: `ClusterPlan`.

Pure (no processes, no sockets) so the layout and each broker's settings are unit-tested.
The directory (default ./tidegate-cluster) holds everything, and the next `cluster up`
on it finds its data again:

    zookeeper/data/ and zookeeper/zoo.cfg    the ZooKeeper server
    broker-N/                                log.dirs of broker N
    logs/zookeeper.log, logs/broker-N.log    each process's output, appended
    cluster.lock                             held while a `cluster up` runs on it

Broker N gets broker.id N, PLAINTEXT://127.0.0.1:<base-port + N - 1> and
zookeeper.connect 127.0.0.1:<zk-port>/tidegate. `--override` applies to every broker;
the per-broker keys are refused there since one value for all would break the cluster.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHROOT", "PER_BROKER_KEYS", "ClusterPlan", "PlanError", "small_cluster_defaults"]

CHROOT = "/tidegate"
PER_BROKER_KEYS = frozenset({
    "broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
    "zookeeper.connect",
})
MAX_PORT = 65535
# Broker N's HTTP listener (metrics, health, console): 9644 + N - 1, the broker's default
# port for broker 1, the next ports for the others (one machine, one port each).
HTTP_BASE_PORT = 9644
HTTP_KEY = "http.listeners"


class PlanError(ValueError):
    """Bad `cluster up` arguments: a usage error (exit status 2)."""


def small_cluster_defaults(brokers: int) -> dict[str, str]:
    """Cluster mode asks for 3 replicas of the internal topics (Kafka's defaults); with
    fewer brokers they could never be created, so a development cluster uses what it has
    (and a min ISR of 1, so stopping one of two brokers does not stall transactions)."""
    if brokers >= 3:
        return {}
    return {
        "offsets.topic.replication.factor": str(brokers),
        "transaction.state.log.replication.factor": str(brokers),
        "transaction.state.log.min.isr": "1",
    }


@dataclass(frozen=True)
class ClusterPlan:
    directory: Path
    brokers: int = 3
    base_port: int = 9092
    zk_port: int = 2181
    overrides: tuple[tuple[str, str], ...] = ()
    host: str = "127.0.0.1"

    @classmethod
    def create(cls, directory: Path, brokers: int, base_port: int, zk_port: int,
               overrides: Sequence[str]) -> ClusterPlan:
        """Check the arguments (PlanError says what is wrong) and make the plan."""
        if brokers < 1:
            raise PlanError(f"--brokers must be at least 1, got {brokers}")
        last = base_port + brokers - 1
        if base_port < 1 or last > MAX_PORT:
            raise PlanError(f"--base-port {base_port} with {brokers} brokers needs ports "
                            f"{base_port}..{last}; they must lie within 1..{MAX_PORT}")
        if not 1 <= zk_port <= MAX_PORT:
            raise PlanError(f"--zk-port must lie within 1..{MAX_PORT}, got {zk_port}")
        if base_port <= zk_port <= last:
            raise PlanError(f"--zk-port {zk_port} is one of the brokers' ports "
                            f"({base_port}..{last}); choose another --zk-port or --base-port")
        pairs: list[tuple[str, str]] = []
        for item in overrides:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise PlanError(f"--override {item!r} must look like KEY=VALUE")
            if key in PER_BROKER_KEYS:
                raise PlanError(f"--override {key}: `cluster up` sets {key} for each broker "
                                f"itself (see --base-port, --zk-port and --dir)")
            if key == HTTP_KEY and value.strip():
                raise PlanError(f"--override {key}: `cluster up` gives broker N "
                                f"http://127.0.0.1:{HTTP_BASE_PORT}+N-1; an empty value "
                                f"({key}=) turns the HTTP listeners off")
            pairs.append((key, value.strip()))
        http_last = HTTP_BASE_PORT + brokers - 1
        http_on = dict(pairs).get(HTTP_KEY) != ""
        overlap = not (http_last < base_port or last < HTTP_BASE_PORT) \
            or HTTP_BASE_PORT <= zk_port <= http_last
        if http_on and overlap:
            raise PlanError(f"the brokers' HTTP listeners use ports {HTTP_BASE_PORT}.."
                            f"{http_last}: choose a --base-port and --zk-port outside them, "
                            f"or turn them off with --override {HTTP_KEY}=")
        return cls(directory.absolute(), brokers, base_port, zk_port, tuple(pairs))

    @property
    def broker_ids(self) -> range:
        return range(1, self.brokers + 1)

    def port(self, broker_id: int) -> int:
        return self.base_port + broker_id - 1

    def address(self, broker_id: int) -> str:
        return f"{self.host}:{self.port(broker_id)}"

    def http_url(self, broker_id: int) -> str | None:
        """Broker N's HTTP listener (None: turned off with `--override http.listeners=`)."""
        if dict(self.overrides).get(HTTP_KEY) == "":
            return None
        return f"http://{self.host}:{HTTP_BASE_PORT + broker_id - 1}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(b) for b in self.broker_ids)

    @property
    def zk_address(self) -> str:
        return f"{self.host}:{self.zk_port}"

    @property
    def zk_connect(self) -> str:
        return self.zk_address + CHROOT

    @property
    def zk_dir(self) -> Path:
        return self.directory / "zookeeper"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def lock_path(self) -> Path:
        return self.directory / "cluster.lock"

    def broker_dir(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}"

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def broker_config(self, broker_id: int) -> dict[str, str]:
        """The broker's --override settings: small-cluster defaults, its own identity,
        then the user's overrides (which win over the defaults)."""
        cfg = small_cluster_defaults(self.brokers)
        cfg.update({
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{self.address(broker_id)}",
            "log.dirs": str(self.broker_dir(broker_id)),
            "zookeeper.connect": self.zk_connect,
            HTTP_KEY: self.http_url(broker_id) or "",
        })
        cfg.update(self.overrides)
        return cfg

    def up_command(self) -> str:
        """The `cluster up` command line that starts this cluster again (its non-default
        arguments only; overrides are left out: they may be meant for one run)."""
        words = ["tidegate", "cluster", "up"]
        if self.brokers != 3:
            words += ["--brokers", str(self.brokers)]
        words += ["--dir", shlex.quote(str(self.directory))]
        if self.base_port != 9092:
            words += ["--base-port", str(self.base_port)]
        if self.zk_port != 2181:
            words += ["--zk-port", str(self.zk_port)]
        return " ".join(words)

    def broker_command(self, broker_id: int, python: str = sys.executable) -> list[str]:
        cmd = [python, "-m", "tidegate.cli.main", "serve"]
        for key, value in self.broker_config(broker_id).items():
            cmd += ["--override", f"{key}={value}"]
        return cmd
