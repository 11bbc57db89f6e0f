"""`tidegate.EmbeddedBroker` and the test helpers (tidegate/embedded.py, tidegate/testing/).

One thread-flavour broker serves the module's read-only checks; the crash test has a
process-flavour broker of its own (kill() is a real SIGKILL). The example project
(examples/testing_with_tidegate) runs its own pytest, through the plugin's entry point,
and docs/testing.md must show its files as they are.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.integration.conftest import ROOT

import tidegate
from tidegate.embedded import EmbeddedBroker, EmbeddedBrokerError

EXAMPLE = ROOT / "examples" / "testing_with_tidegate"


@pytest.fixture(scope="module")
def thread_broker() -> Iterator[EmbeddedBroker]:
    with tidegate.EmbeddedBroker({"num.partitions": 2}) as broker:
        yield broker


def _transactions(bootstrap: str, topic: str) -> None:
    """Three committed records, then two in an aborted transaction."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions()
    for values, commit in ((["a", "b", "c"], True), (["x", "y"], False)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v.encode(), partition=0)
        p.flush()
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()


def test_thread_broker_reads_committed_and_restarts(thread_broker: EmbeddedBroker) -> None:
    assert thread_broker.running and thread_broker.mode == "thread"
    thread_broker.create_topic("eos", partitions=1)
    _transactions(thread_broker.bootstrap_servers, "eos")
    assert [r.value for r in thread_broker.read_topic("eos")] == [b"a", b"b", b"c"]
    everything = thread_broker.read_topic("eos", isolation_level="read_uncommitted")
    assert [r.value for r in everything] == [b"a", b"b", b"c", b"x", b"y"]
    with pytest.raises(EmbeddedBrokerError, match="mode='process'"):
        thread_broker.kill()  # a thread cannot crash: refused, not faked
    thread_broker.restart()  # clean stop, same port and data
    assert [r.value for r in thread_broker.read_topic("eos")] == [b"a", b"b", b"c"]


def test_settings_use_kafkas_names(thread_broker: EmbeddedBroker) -> None:
    thread_broker.create_topic("defaults")  # num.partitions=2 from the settings
    from tidegate.client import Admin

    with Admin({"bootstrap.servers": thread_broker.bootstrap_servers}) as admin:
        (description,) = admin.describe_topics(["defaults"])
        assert len(description.partitions) == 2


def test_the_temporary_data_directory_goes_away() -> None:
    broker = EmbeddedBroker()
    with broker:
        data = broker.data_dir
        assert data.is_dir()
    assert not data.exists() and not broker.running


def test_process_broker_kill_is_a_crash(tmp_path: Path) -> None:
    with EmbeddedBroker(mode="process", data_dir=tmp_path / "data") as broker:
        broker.create_topic("crash")
        _transactions(broker.bootstrap_servers, "crash")
        pid = broker._proc.pid if broker._proc else -1
        broker.kill()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        # no clean-shutdown marker: the restart recovers the log as after any crash
        assert not (tmp_path / "data" / "crash-0" / ".clean_shutdown").exists()
        broker.restart()
        assert [r.value for r in broker.read_topic("crash")] == [b"a", b"b", b"c"]
        broker.stop()
        assert (tmp_path / "data" / "crash-0" / ".clean_shutdown").exists()


def test_unittest_helper() -> None:
    from tidegate.testing import EmbeddedBrokerTestCase

    seen: list[str] = []

    class Orders(EmbeddedBrokerTestCase):
        tidegate_config = {"num.partitions": 3}

        def test_a(self) -> None:
            self.broker.create_topic("orders-a")
            seen.append(self.bootstrap_servers)

        def test_b(self) -> None:
            seen.append(self.bootstrap_servers)

    class AsyncOrders(EmbeddedBrokerTestCase, unittest.IsolatedAsyncioTestCase):
        tidegate_per_test = True

        async def test_c(self) -> None:
            seen.append(self.bootstrap_servers)

        async def test_d(self) -> None:
            seen.append(self.bootstrap_servers)

    suite = unittest.TestSuite()
    loader = unittest.defaultTestLoader
    suite.addTests(loader.loadTestsFromTestCase(Orders))
    suite.addTests(loader.loadTestsFromTestCase(AsyncOrders))
    result = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0).run(suite)  # noqa: SIM115
    assert result.wasSuccessful(), result.errors + result.failures
    assert len(seen) == 4
    assert seen[0] == seen[1], "one broker per class by default"
    assert seen[2] != seen[3], "tidegate_per_test: one broker per test"


def test_example_project_uses_the_plugin() -> None:
    """The example's tests need nothing but the installed plugin (no conftest.py)."""
    assert not (EXAMPLE / "conftest.py").exists()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                       cwd=EXAMPLE, capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert re.search(r"\b4 passed\b", r.stdout), r.stdout[-2000:]


def test_docs_show_the_example_as_it_is() -> None:
    """docs/testing.md's ```py blocks that start with `# <file>` are that file of the
    example project, verbatim (the example's own run above tests them)."""
    page = (ROOT / "docs" / "testing.md").read_text()
    blocks = re.findall(r"^```py\n# (\S+)\n(.*?)^```", page, re.S | re.M)
    assert {name for name, _ in blocks} >= {"invoicer.py", "test_invoicer.py"}
    for name, code in blocks:
        assert code == (EXAMPLE / name).read_text(), f"docs/testing.md: {name} differs"


def test_internal_topics_are_small_and_keep_their_count(tmp_path: Path) -> None:
    """An embedded broker makes its internal topics with 4 partitions (Kafka's 50 were
    most of its start); a data directory made with another count keeps it, since the
    coordinators hash group and transactional ids over it."""
    def count(d: Path, topic: str) -> int:
        return sum(1 for p in d.iterdir() if re.fullmatch(rf"{topic}-\d+", p.name))

    small = tmp_path / "small"
    EmbeddedBroker(data_dir=small).start().stop()
    assert count(small, "__consumer_offsets") == count(small, "__transaction_state") == 4
    six = tmp_path / "six"
    EmbeddedBroker({"offsets.topic.num.partitions": 6}, data_dir=six).start().stop()
    assert count(six, "__consumer_offsets") == 6
    again = EmbeddedBroker(data_dir=six).broker_settings()
    assert again["offsets.topic.num.partitions"] == "6"
    assert again["transaction.state.log.num.partitions"] == "4"
