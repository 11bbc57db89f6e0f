"""How `make test` spreads tests over the machine's two cores (pytest-xdist, `--dist
loadgroup`).

Integration tests are of two kinds. Most start one embedded broker and talk to it with
real clients: they mostly wait on sockets and fsyncs, and running two modules at once
changes nothing they check. Others measure or provoke timing — clusters with ZooKeeper
sessions and failover deadlines, kill -9 and SIGSTOP schedules, Spark's JVM, benchmark
smokes, quota rates, disk-full episodes — and were written for a machine they have to
themselves (give or take the other lane). Those run one after another in a single lane
(xdist group "serial"); the light modules run in the other lane, each module kept on one
worker so its module-scoped broker starts once, and the unit tests fill the gaps.

A module is light only if it is listed here: a new module runs in the serial lane until
someone decides otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
    "test_groups_broker",
    "test_groups_client",
    "test_idempotence",
    "test_interop",
    "test_java_client",
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if path.parent.name != "integration":
            continue  # unit tests: spread one by one
        module = path.stem
        group = module if module in LIGHT_MODULES else "serial"
        item.add_marker(pytest.mark.xdist_group(group))


# Where `make test`'s time goes: the seconds of setup, call and teardown summed per
# worker and for the serial lane, printed at the end, so that a lane that became the
# long pole shows in the CI log.
_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # xdist's controller: the worker that ran it
    gateway = getattr(node, "gateway", None)
    worker = str(getattr(gateway, "id", "this process"))
    _SECONDS[worker] = _SECONDS.get(worker, 0.0) + report.duration
    path = report.nodeid.split("::")[0]
    if path.startswith("tests/integration/") and Path(path).stem not in LIGHT_MODULES:
        _SECONDS["serial lane"] = _SECONDS.get("serial lane", 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SECONDS:
        terminalreporter.write_line("test seconds: " + ", ".join(
            f"{name} {secs:.0f}" for name, secs in sorted(_SECONDS.items())))
