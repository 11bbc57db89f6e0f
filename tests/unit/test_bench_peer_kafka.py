"""bench/peer_kafka.py without starting a JVM: the two peer modes' settings, `--peer`'s
parsing, and when a bench attaches to the peers `bench/quick.py` shares (the oracle tests
start the launcher itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import peer_kafka


def _props(broker: peer_kafka.KafkaBroker) -> dict[str, str]:
    lines = broker._properties().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_fsync_mode_flushes_every_message_and_default_mode_does_not(tmp_path: Path) -> None:
    default = _props(peer_kafka.KafkaBroker(tmp_path / "a", peer_kafka.MODES["kafka"][1]))
    fsync = _props(peer_kafka.KafkaBroker(tmp_path / "b", peer_kafka.MODES["kafka-fsync"][1]))
    assert "log.flush.interval.messages" not in default
    assert fsync["log.flush.interval.messages"] == "1"
    for props in (default, fsync):  # one node: internal topics with one replica
        assert props["offsets.topic.replication.factor"] == "1"
        assert props["transaction.state.log.min.isr"] == "1"


def test_each_listener_gets_its_own_port_and_protocol(tmp_path: Path) -> None:
    b = peer_kafka.KafkaBroker(tmp_path, listeners=("PLAINTEXT", "SSL", "SASL_SSL"))
    props = _props(b)
    assert len({b.ports["PLAINTEXT"], b.ports["SSL"], b.ports["SASL_SSL"],
                b.controller_port}) == 4
    assert f"SSL://127.0.0.1:{b.ports['SSL']}" in props["advertised.listeners"]
    assert "CONTROLLER" not in props["advertised.listeners"]
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"]
    assert b.bootstrap_of("SSL") == f"127.0.0.1:{b.ports['SSL']}"


def test_peer_option(monkeypatch: pytest.MonkeyPatch) -> None:
    assert peer_kafka.wanted("none") == ([], None)
    with pytest.raises(SystemExit, match="unknown"):
        peer_kafka.wanted("kafka,zookeeper")
    monkeypatch.setattr(peer_kafka, "available", lambda: peer_kafka.HOW_TO_GET)
    modes, why = peer_kafka.wanted("auto")
    assert modes == [] and why is not None and "make deps-kafka" in why
    monkeypatch.setattr(peer_kafka, "available", lambda: None)
    assert peer_kafka.wanted("auto") == (list(peer_kafka.MODES), None)
    assert peer_kafka.wanted("kafka-fsync") == (["kafka-fsync"], None)


def test_shared_peers_only_when_their_settings_cover_the_bench(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "peers.json"
    state.write_text(json.dumps({"kafka": {
        "port": 1234, "pid": 1, "dir": str(tmp_path),
        "overrides": {"group.initial.rebalance.delay.ms": "0"}}}))
    deleted: list[str] = []
    monkeypatch.setattr(peer_kafka, "_delete_topics", deleted.append)
    monkeypatch.delenv(peer_kafka.SHARED_ENV, raising=False)
    assert peer_kafka.shared(["kafka"], {}, ("PLAINTEXT",)) is None  # none shared
    monkeypatch.setenv(peer_kafka.SHARED_ENV, str(state))
    got = peer_kafka.shared(["kafka"], {"group.initial.rebalance.delay.ms": "0"},
                            ("PLAINTEXT",))
    assert got is not None and got["kafka"].bootstrap == "127.0.0.1:1234"
    assert deleted == ["127.0.0.1:1234"]  # the bench starts on empty peers
    got["kafka"].stop()  # not the bench's to stop: a no-op
    assert peer_kafka.shared(["kafka-fsync"], {}, ("PLAINTEXT",)) is None  # other mode
    assert peer_kafka.shared(["kafka"], {"ssl.keystore.type": "PEM"}, ("PLAINTEXT",)) is None
    assert peer_kafka.shared(["kafka"], {}, ("PLAINTEXT", "SSL")) is None  # other listeners


def test_cluster_ids_never_look_like_an_option() -> None:
    # 1 in 64 random ids starts with "-": the format tool then fails to parse its argument
    ids = [peer_kafka.random_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
