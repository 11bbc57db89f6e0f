"""Start-up safety: no open port for a listener declared secure, one broker per directory.

- A listener whose security protocol is not PLAINTEXT (SSL://, SASL_PLAINTEXT://,
  SASL_SSL://, or a name mapped to one of them in `listener.security.protocol.map`)
  and that lacks the settings it needs (a key store, SASL mechanisms Tidegate has)
  stops `tidegate serve` before anything binds or touches the data directory: exit
  code 2, one line naming the listener and what is missing, no traceback. So do
  Kafka's own listener errors (a name missing from the map, advertised names that are
  not listeners).
- A second broker on a data directory in use exits with Kafka's "Failed to acquire
  lock" message naming the holder's pid and does not touch the first broker's segments;
  after kill -9 of the holder, a new broker starts (the kernel released the lock).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import ROOT, BrokerProcess, free_port


def _serve(*overrides: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run `tidegate serve` with `overrides` until it exits (it must refuse to start)."""
    args = [sys.executable, "-m", "tidegate.cli.main", "serve"]
    for o in overrides:
        args += ["--override", o]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_secure_listener_refused(tmp_path: Path, protocol: str) -> None:
    plain, secure = free_port(), free_port()
    data = tmp_path / "data"
    r = _serve(f"listeners=PLAINTEXT://127.0.0.1:{plain},{protocol}://127.0.0.1:{secure}",
               f"log.dirs={data}")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out, out
    assert f"listener {protocol}:" in out or f"listener {protocol} " in out, out
    assert ("key store" in out) if "SSL" in protocol else ("GSSAPI" in out), out
    assert "listening on" not in out, out
    assert not data.exists(), "the data directory was touched before the config was checked"
    assert _port_is_free(plain) and _port_is_free(secure)


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_mapped_secure_listener_refused(tmp_path: Path, protocol: str) -> None:
    port = free_port()
    r = _serve(f"listeners=INTERNAL://127.0.0.1:{port}",
               f"listener.security.protocol.map=INTERNAL:{protocol},PLAINTEXT:PLAINTEXT",
               f"log.dirs={tmp_path / 'data'}")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out, out
    assert "listener INTERNAL:" in out or "listener INTERNAL " in out, out
    assert ("key store" in out) if "SSL" in protocol else ("GSSAPI" in out), out


def test_listener_name_missing_from_map_refused(tmp_path: Path) -> None:
    r = _serve(f"listeners=INTERNAL://127.0.0.1:{free_port()}", f"log.dirs={tmp_path / 'd'}")
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert "No security protocol defined for listener INTERNAL" in out, out


def test_bad_protocol_in_map_refused(tmp_path: Path) -> None:
    r = _serve(f"listeners=INTERNAL://127.0.0.1:{free_port()}",
               "listener.security.protocol.map=INTERNAL:TLS", f"log.dirs={tmp_path / 'd'}")
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert "Invalid security protocol `TLS`" in out, out


def test_advertised_listener_checked(tmp_path: Path) -> None:
    port = free_port()
    r = _serve(f"listeners=PLAINTEXT://127.0.0.1:{port}",
               f"advertised.listeners=SASL_SSL://example.com:{port}",
               f"log.dirs={tmp_path / 'd'}")
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert "advertised.listeners" in out and "SASL_SSL" in out, out


def test_mapped_plaintext_listener_serves(tmp_path: Path) -> None:
    port = free_port()
    b = BrokerProcess(tmp_path / "data", port, {"listeners": f"INTERNAL://127.0.0.1:{port}",
                                                 "listener.security.protocol.map":
                                                 "INTERNAL:PLAINTEXT"})
    b.start()
    try:
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        assert [x.port for x in md.brokers.values()] == [b.port]
    finally:
        assert b.stop() == 0


# -- one broker per data directory --------------------------------------------------------


def _segment_state(data: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(data)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(data.rglob("*.log"))}


def _produce(bootstrap: str, topic: str, n: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, f"{tag}-{i}".encode() * 20, f"k{i}".encode())
    assert p.flush(30) == 0


def _count(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high - low)
    finally:
        c.close()


def test_second_broker_on_same_directory_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data)
    first.start()
    try:
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        admin.create_topics([NewTopic("locked", 1, 1)])["locked"].result(30)
        _produce(first.bootstrap, "locked", 200, "a")
        assert first.proc is not None
        pid = first.proc.pid
        assert (data / ".lock").read_text().strip() == str(pid)
        before = _segment_state(data)
        assert any(size > 0 for size, _ in before.values())

        second_port = free_port()
        r = _serve(f"listeners=PLAINTEXT://127.0.0.1:{second_port}", f"log.dirs={data}")
        out = r.stdout + r.stderr
        assert r.returncode != 0, out
        assert "Traceback" not in out, out
        assert (f"Failed to acquire lock on file .lock in {data.resolve()}. A Kafka instance "
                f"in another process or thread is using this directory.") in out, out
        assert f"held by process {pid}" in out, out
        assert "recover" not in out and "loading" not in out, out
        assert _segment_state(data) == before, "the second broker touched the segments"
        assert _port_is_free(second_port)

        _produce(first.bootstrap, "locked", 10, "b")  # the first broker carries on
        assert _count(first.bootstrap, "locked") == 210
    finally:
        first.kill()  # kill -9: the kernel releases the lock

    third = BrokerProcess(data)
    third.start()
    try:
        assert third.proc is not None
        assert (data / ".lock").read_text().strip() == str(third.proc.pid)
        assert _count(third.bootstrap, "locked") == 210
    finally:
        assert third.stop() == 0
    assert (data / ".lock").read_text() == ""  # released on a clean stop

    fourth = BrokerProcess(data)  # and a clean stop lets the next one in
    fourth.start()
    fourth.stop()
