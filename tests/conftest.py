"""How `make test` spreads tests over the machine's two cores (pytest-xdist, `--dist
loadgroup` with the scheduler below).

Integration tests are of two kinds. Most start one embedded broker and talk to it with
real clients: they mostly wait on sockets and fsyncs, and running two modules at once
changes nothing they check. Others measure or provoke timing — clusters with ZooKeeper
sessions and failover deadlines, kill -9 and SIGSTOP schedules, Spark's JVM, benchmark
smokes, quota rates, disk-full episodes — and were written for a machine they have to
themselves (give or take the other lane). Those run one after another in a single lane
(one xdist work unit, "serial"); the light modules run in the other lane, each module kept on one
worker so its module-scoped broker starts once, and the unit tests fill the gaps.

A module is light only if it is listed here: a new module runs in the serial lane until
someone decides otherwise.

Property tests (Hypothesis) run without a per-example deadline: on a loaded 2-core
machine one example of a cheap test can take longer than the default 200 ms, and the
deadline then fails a test that checks correctness, not speed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("tidegate", deadline=None)
settings.load_profile("tidegate")

LIGHT_MODULES = frozenset({
    "test_acks_visibility",
    "test_acls",
    "test_admin",
    "test_admin_kafka4",
    "test_bad_input",
    "test_cli_client",
    "test_client_eos",
    "test_client_fetch_pipeline",
    "test_client_idempotence",
    "test_client_interop",
    "test_client_read_committed",
    "test_client_security",
    "test_client_transactions",
    "test_examples",
    "test_fetch_sessions",
    "test_fuzz_requests",
    "test_group_authorized_ops",
    "test_groups_broker",
    "test_groups_client",
    "test_idempotence",
    "test_interop",
    "test_java_client",
    "test_kafka_cli",
    "test_kafkajs",
    "test_metrics",
    "test_request_order",
    "test_security",
    "test_security_oauth",
    "test_security_cert_acls",
    "test_startup_safety",
    "test_transactions",
    "test_txn_cli",
    "test_txn_pipelined",
    "test_txn_protocol",
})


def lane(nodeid: str) -> str:
    """The xdist work unit a test belongs to: "serial" for a timing-sensitive
    integration module, the module's name for a light one, the test itself for a unit
    test (spread one by one)."""
    path = nodeid.split("::")[0]
    if not path.startswith("tests/integration/"):
        return nodeid
    module = Path(path).stem
    return module if module in LIGHT_MODULES else "serial"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with the lanes above, computed from the nodeid's path.

    xdist's own loadgroup cannot be used: it reads a test's group from an "@group"
    suffix its worker writes into `item._nodeid`, and pytest 9 builds `nodeid` from
    `item._id`, so the suffix never arrives and every test became its own work unit (the
    "serial" modules ran two at a time, one per worker). Work units are handed out
    largest first (xdist's `loadscopereorder`), so the serial lane starts at once and the
    light modules and unit tests fill the other worker."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane(nodeid)

    return Lanes(config, log)


# Where `make test`'s time goes: the seconds of setup, call and teardown summed per
# worker and for the serial lane, printed at the end, so that a lane that became the
# long pole shows in the CI log, with the serial lane's longest modules.
_SECONDS: dict[str, float] = {}
_SERIAL_MODULES: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # xdist's controller: the worker that ran it
    gateway = getattr(node, "gateway", None)
    worker = str(getattr(gateway, "id", "this process"))
    _SECONDS[worker] = _SECONDS.get(worker, 0.0) + report.duration
    path = report.nodeid.split("::")[0]
    if lane(report.nodeid) == "serial":
        _SECONDS["serial lane"] = _SECONDS.get("serial lane", 0.0) + report.duration
        module = Path(path).stem
        _SERIAL_MODULES[module] = _SERIAL_MODULES.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SECONDS:
        terminalreporter.write_line("test seconds: " + ", ".join(
            f"{name} {secs:.0f}" for name, secs in sorted(_SECONDS.items())))
    if _SERIAL_MODULES:
        longest = sorted(_SERIAL_MODULES.items(), key=lambda kv: -kv[1])[:12]
        terminalreporter.write_line("serial lane's longest modules: " + ", ".join(
            f"{name} {secs:.0f}" for name, secs in longest))
