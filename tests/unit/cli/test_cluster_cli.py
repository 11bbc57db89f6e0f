"""`tidegate cluster` and `topics` arguments, and the launcher's checks and stop logic
(no ZooKeeper, no broker: refusals happen before anything starts; the stop logic runs
on small stand-in processes)."""

from __future__ import annotations

import io
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidegate.cli import cluster_up, zk_launch
from tidegate.cli.cluster_plan import ClusterPlan
from tidegate.cli.cluster_up import Child, ClusterLauncher, LaunchError
from tidegate.cli.main import build_parser, main


def test_cluster_up_defaults() -> None:
    args = build_parser().parse_args(["cluster", "up"])
    assert (args.brokers, args.dir, args.base_port, args.zk_port, args.override) == (
        3, Path("tidegate-cluster"), 9092, 2181, [])
    assert args.stop_timeout == 20.0


def test_cluster_up_options() -> None:
    args = build_parser().parse_args([
        "cluster", "up", "--brokers", "5", "--dir", "/tmp/x", "--base-port", "19092",
        "--zk-port", "12181", "--override", "a=1", "--override", "b=2"])
    assert (args.brokers, args.dir, args.base_port, args.zk_port, args.override) == (
        5, Path("/tmp/x"), 19092, 12181, ["a=1", "b=2"])


@pytest.mark.parametrize("argv", [["--brokers", "0"], ["--brokers", "x"],
                                  ["--base-port", "0"], ["--zk-port", "65536"]])
def test_bad_numbers_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["cluster", "up", *argv])
    assert e.value.code == 2


def test_status_takes_a_bootstrap_and_says_its_exit_codes(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    args = build_parser().parse_args(["cluster", "status", "--bootstrap-server", "h:1,h:2"])
    assert args.bootstrap_server == "h:1,h:2"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cluster", "status", "--help"])
    assert "1 when any partition is under-replicated or offline" in " ".join(
        capsys.readouterr().out.split())


def test_topics_describe_filters_and_create_default_factor() -> None:
    args = build_parser().parse_args(["topics", "describe", "t", "--under-replicated-partitions",
                                      "--unavailable-partitions"])
    assert args.under_replicated_partitions and args.unavailable_partitions
    plain = build_parser().parse_args(["topics", "describe"])
    assert plain.name is None and not plain.under_replicated_partitions
    assert not plain.unavailable_partitions and not plain.include_internal
    # like kafka-topics: no --replication-factor asks for the broker's default (-1)
    assert build_parser().parse_args(["topics", "create", "t"]).replication_factor == -1
    rf = build_parser().parse_args(["topics", "create", "t", "--replication-factor", "3"])
    assert rf.replication_factor == 3


@pytest.mark.parametrize(("override", "message"), [
    ("broker.id=7", "sets broker.id for each broker"),
    ("num.partitions=x", "configuration error: num.partitions='x' is not an integer"),
])
def test_bad_overrides_stop_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str) -> None:
    rc = main(["cluster", "up", "--dir", str(tmp_path / "c"), "--override", override])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


# -- the launcher ---------------------------------------------------------------------


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend ZooKeeper is installed: the checks under test come before it is needed."""
    monkeypatch.setattr(zk_launch, "find_java", lambda: "java")
    monkeypatch.setattr(zk_launch, "find_zookeeper_classpath", lambda: [Path("zk.jar")])


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def launcher(tmp_path: Path, base_port: int, zk_port: int, brokers: int = 3) -> ClusterLauncher:
    plan = ClusterPlan.create(tmp_path / "c", brokers, base_port, zk_port, ())
    return ClusterLauncher(plan, stop_timeout=0.5, out=io.StringIO())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_zookeeper_not_installed_says_how_to_install(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> list[Path]:
        raise zk_launch.ZooKeeperNotInstalledError(zk_launch.INSTALL_HINT)

    monkeypatch.setattr(zk_launch, "find_zookeeper_classpath", missing)
    with pytest.raises(LaunchError, match="apt-get install zookeeper"):
        launcher(tmp_path, free_port(), free_port()).run()


def test_a_busy_broker_port_names_the_broker_and_base_port(
        tmp_path: Path, installed: None, listening: int) -> None:
    la = launcher(tmp_path, listening - 1, free_port())
    # (broker 1's and broker 3's ports may be taken too, by a test on the other xdist
    # worker: the message then lists them beside broker 2's)
    with pytest.raises(LaunchError, match=rf"{listening} \(broker 2\)(, \d+ \(broker 3\))? "
                                          r"(is|are) already in use.*--base-port"):
        la.run()
    assert la.zk is None and not la.brokers


def test_a_busy_zookeeper_port_suggests_zk_port(tmp_path: Path, installed: None,
                                                listening: int) -> None:
    with pytest.raises(LaunchError, match=rf"port {listening} \(for ZooKeeper\).*--zk-port"):
        launcher(tmp_path, free_port(), listening, brokers=1).run()


def test_one_launcher_per_directory(tmp_path: Path, installed: None, listening: int) -> None:
    first = launcher(tmp_path, free_port(), free_port(), brokers=1)
    first._lock_directory()
    try:
        with pytest.raises(LaunchError, match=r"another `tidegate cluster up` \(pid \d+\)"):
            launcher(tmp_path, free_port(), free_port(), brokers=1).run()
    finally:
        assert first._lock_file is not None
        first._lock_file.close()
    # released: the next one gets past the lock (and stops at the busy port)
    with pytest.raises(LaunchError, match="already in use"):
        launcher(tmp_path, free_port(), listening, brokers=1).run()


def stand_in(tmp_path: Path, name: str, ignore_term: bool) -> Child:
    code = ("import signal, time\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "print('ready', flush=True)\ntime.sleep(60)\n")
    log = tmp_path / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out)
    deadline = time.monotonic() + 10
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    return Child(name, proc, log, 0, time.monotonic())


def test_stop_terms_then_kills_what_lingers_brokers_first_controller_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(bootstrap: str, timeout: float) -> None:
        raise OSError("no cluster here")

    monkeypatch.setattr(cluster_up, "describe_cluster", unreachable)
    la = launcher(tmp_path, free_port(), free_port())
    la.brokers = {1: stand_in(tmp_path, "broker 1", False),
                  2: stand_in(tmp_path, "broker 2", True),
                  3: stand_in(tmp_path, "broker 3", False)}
    la.zk = stand_in(tmp_path, "ZooKeeper", False)
    la.controller = 2
    la._stop_all()
    out = la.out.getvalue()  # type: ignore[attr-defined]
    order = [line.split(" ...")[0] for line in out.splitlines() if line.startswith("stopping")]
    assert order == ["stopping broker 3", "stopping broker 1", "stopping broker 2",
                     "stopping ZooKeeper"]
    assert "stopping broker 2 ... still running after 0.5 s: killed" in out
    assert la.brokers[1].proc.returncode == -signal.SIGTERM
    assert la.brokers[2].proc.returncode == -signal.SIGKILL
    assert la.zk.proc.returncode == -signal.SIGTERM
    assert "Cluster stopped; data kept in" in out
