"""`tidegate cluster up`'s plan: layout, each broker's settings, refused arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.cli.cluster_plan import ClusterPlan, PlanError, small_cluster_defaults


def plan(tmp_path: Path, brokers: int = 3, overrides: tuple[str, ...] = (),
         base_port: int = 9092, zk_port: int = 2181) -> ClusterPlan:
    return ClusterPlan.create(tmp_path / "c", brokers, base_port, zk_port, overrides)


def test_broker_n_gets_its_id_port_directory_and_chroot(tmp_path: Path) -> None:
    p = plan(tmp_path)
    assert p.broker_config(2) == {
        "broker.id": "2",
        "listeners": "PLAINTEXT://127.0.0.1:9093",
        "log.dirs": str(tmp_path / "c" / "broker-2"),
        "zookeeper.connect": "127.0.0.1:2181/tidegate",
        "http.listeners": "http://127.0.0.1:9645",
    }
    assert p.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert p.log_path("broker-2") == tmp_path / "c" / "logs" / "broker-2.log"
    assert p.zk_dir == tmp_path / "c" / "zookeeper"


def test_relative_directory_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.chdir(tmp_path)
    p = ClusterPlan.create(Path("tidegate-cluster"), 1, 9092, 2181, ())
    assert p.directory == tmp_path / "tidegate-cluster"
    assert p.broker_config(1)["log.dirs"] == str(tmp_path / "tidegate-cluster" / "broker-1")


def test_broker_command_is_serve_with_every_setting(tmp_path: Path) -> None:
    cmd = plan(tmp_path).broker_command(3, python="py")
    assert cmd[:4] == ["py", "-m", "tidegate.cli.main", "serve"]
    pairs = cmd[4:]
    assert pairs[::2] == ["--override"] * (len(pairs) // 2)
    assert "broker.id=3" in pairs and "listeners=PLAINTEXT://127.0.0.1:9094" in pairs


def test_fewer_than_three_brokers_get_internal_topics_they_can_hold(tmp_path: Path) -> None:
    assert small_cluster_defaults(3) == {}
    one = plan(tmp_path, brokers=1).broker_config(1)
    assert one["offsets.topic.replication.factor"] == "1"
    assert one["transaction.state.log.replication.factor"] == "1"
    assert one["transaction.state.log.min.isr"] == "1"
    assert plan(tmp_path, brokers=2).broker_config(1)["offsets.topic.replication.factor"] == "2"
    assert "offsets.topic.replication.factor" not in plan(tmp_path).broker_config(1)


def test_overrides_go_to_every_broker_and_win_over_the_defaults(tmp_path: Path) -> None:
    p = plan(tmp_path, brokers=2, overrides=(
        "default.replication.factor = 2", "offsets.topic.replication.factor=1"))
    for bid in (1, 2):
        cfg = p.broker_config(bid)
        assert cfg["default.replication.factor"] == "2"
        assert cfg["offsets.topic.replication.factor"] == "1"


@pytest.mark.parametrize("key", ["broker.id", "node.id", "listeners", "advertised.listeners",
                                 "log.dirs", "log.dir", "zookeeper.connect"])
def test_per_broker_keys_cannot_be_overridden(tmp_path: Path, key: str) -> None:
    with pytest.raises(PlanError, match=f"sets {key} for each broker"):
        plan(tmp_path, overrides=(f"{key}=x",))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"brokers": 0}, "at least 1"),
    ({"base_port": 65534}, "65534..65536"),
    ({"zk_port": 70000}, "--zk-port must lie within"),
    ({"zk_port": 9093}, "one of the brokers' ports"),
    ({"overrides": ("num.partitions",)}, "KEY=VALUE"),
    ({"overrides": ("=3",)}, "KEY=VALUE"),
    ({"overrides": ("http.listeners=http://127.0.0.1:8080",)}, "9644\\+N-1"),
    ({"base_port": 9643}, "HTTP listeners use ports 9644..9646"),
    ({"zk_port": 9646}, "HTTP listeners use ports 9644..9646"),
])
def test_bad_arguments_say_what_is_wrong(tmp_path: Path, kwargs: dict[str, object],
                                         message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_the_restart_hint_repeats_only_non_default_arguments(tmp_path: Path) -> None:
    d = tmp_path / "c"
    assert plan(tmp_path).up_command() == f"tidegate cluster up --dir {d}"
    assert plan(tmp_path, brokers=2, base_port=19092, zk_port=12181).up_command() == (
        f"tidegate cluster up --brokers 2 --dir {d} --base-port 19092 --zk-port 12181")


def test_each_broker_gets_its_own_http_port_unless_they_are_turned_off(tmp_path: Path) -> None:
    p = plan(tmp_path)
    assert [p.broker_config(b)["http.listeners"] for b in p.broker_ids] == [
        "http://127.0.0.1:9644", "http://127.0.0.1:9645", "http://127.0.0.1:9646"]
    off = plan(tmp_path, overrides=("http.listeners=",), base_port=9644)
    assert off.http_url(1) is None
    assert off.broker_config(2)["http.listeners"] == ""
