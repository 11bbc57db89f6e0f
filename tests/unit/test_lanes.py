"""tests/conftest.py's lanes: which tests `make test` runs one after another on one
worker, and that its xdist scheduler keeps each lane in one work unit.

`lane()` decides from a nodeid alone; the scheduler is driven here as xdist's controller
drives it (two workers register, collect, are handed work, report tests complete) with
stand-in workers that record which collection indices each was sent.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from tests.conftest import LIGHT_MODULES, lane, pytest_xdist_make_scheduler

SERIAL = ("tests/integration/test_spark_failures.py::"
          "test_driver_killed_between_broker_commit_and_spark_commit_log")
LIGHT = "tests/integration/test_examples.py::test_doc_snippet_runs[spark.md-0]"
UNIT = "tests/unit/coordinator/test_group_state_machine.py::TestGroupMachineRandom::runTest"


def test_a_timing_sensitive_module_runs_in_the_serial_lane() -> None:
    assert lane(SERIAL) == "serial"
    eos = "tests/integration/test_cluster_eos.py::test_history_on_the_cluster_under_faults"
    assert lane(eos) == "serial"


def test_a_module_not_listed_as_light_is_serial() -> None:
    assert "test_brand_new" not in LIGHT_MODULES
    assert lane("tests/integration/test_brand_new.py::test_x") == "serial"


def test_a_light_module_is_its_own_lane() -> None:
    assert lane(LIGHT) == "test_examples"
    admin = "tests/integration/test_admin.py::test_config_sources_and_dynamic_broker_keys"
    assert lane(admin) == "test_admin"


def test_a_unit_test_is_a_lane_of_its_own() -> None:
    assert lane(UNIT) == UNIT
    other = "tests/unit/coordinator/test_group_state_machine.py::test_other"
    assert lane(other) == other


@pytest.mark.parametrize("params", [
    "[a/b]",
    "[x::y]",
    "[tests/integration/test_admin.py::t]",
    "[tests/unit/foo.py]",
    "[spark.md-0/1::2]",
])
def test_parameters_do_not_change_the_lane(params: str) -> None:
    assert lane(f"tests/integration/test_cluster.py::test_x{params}") == "serial"
    assert lane(f"tests/integration/test_admin.py::test_x{params}") == "test_admin"
    assert lane(f"tests/integration/test_admin.py::TestCase::test_x{params}") == "test_admin"
    unit = f"tests/unit/storage/test_log.py::test_x{params}"
    assert lane(unit) == unit


def test_helper_files_in_the_integration_directory_fall_back_to_serial() -> None:
    # not a test module, but a nodeid under it (doctest) must not become a light lane
    assert lane("tests/integration/cluster.py::tests.integration.cluster") == "serial"


class _Worker:
    """Stands in for xdist's WorkerController: records what the scheduler sends it."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return f"<worker {self.gateway.id}>"


def _config(dist: str) -> Any:
    values = {"dist": dist, "tx": ["popen", "popen"]}
    return SimpleNamespace(getvalue=values.__getitem__,
                           option=SimpleNamespace(loadscopereorder=True))


def _collection() -> list[str]:
    serial = [f"tests/integration/{m}.py::test_{i}[p/{i}::q]"
              for m in ("test_cluster", "test_spark_failures", "test_disk_full_txn")
              for i in range(3)]
    light = [f"tests/integration/{m}.py::test_{i}[{m}/{i}]"
             for m in ("test_examples", "test_admin") for i in range(4)]
    unit = [f"tests/unit/storage/test_log.py::test_{i}" for i in range(12)]
    # interleaved, as pytest's collection order would not group them by lane
    return [t for group in zip(unit[:9], serial, [*light, ""]) for t in group if t] + unit[9:]


def _run(collection: list[str]) -> dict[str, set[str]]:
    """Drive the scheduler to the end of the run; the worker each nodeid ran on."""
    scheduler = pytest_xdist_make_scheduler(_config("loadgroup"), None)
    workers = [_Worker("gw0"), _Worker("gw1")]
    for w in workers:
        scheduler.add_node(w)
    for w in workers:
        scheduler.add_node_collection(w, collection)
    scheduler.schedule()
    ran_on: dict[str, set[str]] = defaultdict(set)
    done = {w.gateway.id: 0 for w in workers}
    progress = True
    while progress:  # complete the tests each worker was sent, in order, turn by turn
        progress = False
        for w in workers:
            if done[w.gateway.id] < len(w.sent):
                index = w.sent[done[w.gateway.id]]
                done[w.gateway.id] += 1
                ran_on[collection[index]].add(w.gateway.id)
                scheduler.mark_test_complete(w, index)
                progress = True
    assert scheduler.tests_finished
    return ran_on


def test_the_scheduler_gives_each_lane_to_one_worker() -> None:
    collection = _collection()
    ran_on = _run(collection)
    assert sorted(ran_on) == sorted(collection)  # every test ran...
    assert all(len(workers) == 1 for workers in ran_on.values())  # ...once
    by_lane: dict[str, set[str]] = defaultdict(set)
    for nodeid, workers in ran_on.items():
        by_lane[lane(nodeid)] |= workers
    assert len([n for n in collection if lane(n) == "serial"]) == 9
    assert all(len(workers) == 1 for workers in by_lane.values()), by_lane
    # and the unit tests were spread, not kept in one unit
    unit_workers = set().union(*(ran_on[n] for n in collection if n.startswith("tests/unit/")))
    assert unit_workers == {"gw0", "gw1"}


def test_the_scheduler_is_only_used_for_loadgroup() -> None:
    assert pytest_xdist_make_scheduler(_config("load"), None) is None
    assert pytest_xdist_make_scheduler(_config("loadgroup"), None) is not None
