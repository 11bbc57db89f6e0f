"""`tidegate.spark.register()`'s check of the Python Spark starts for its workers.

A stand-in SparkSession carries what the check reads (master, pythonExec, executor
environment, shipped files); the interpreters are real: this test's own Python (which
imports tidegate), the same Python with ``-I -S`` (no site-packages, no PYTHONPATH: no
tidegate, as a system ``python3`` would be) and a path that does not exist.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
from tidegate.spark import WorkerPythonError, register
from tidegate.spark.workers import _probe, check_worker_python


class FakeContext:
    def __init__(self, python: str, master: str = "local[2]",
                 includes: list[str] | None = None) -> None:
        self.master = master
        self.pythonExec = python
        self.environment: dict[str, str] = {"PYTHONHASHSEED": "0"}
        self._python_includes = includes or []

    def getConf(self) -> dict[str, str]:
        return {}


class FakeSession:
    def __init__(self, sc: FakeContext) -> None:
        self.sparkContext = sc
        self.registered: list[Any] = []
        self.dataSource = self

    def register(self, source: Any) -> None:
        self.registered.append(source)


@pytest.fixture
def bare_python(tmp_path: Path) -> str:
    """A Python that cannot import tidegate."""
    script = tmp_path / "bare-python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    script.chmod(0o755)
    return str(script)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    _probe.cache_clear()


def test_a_python_with_tidegate_passes_and_registers() -> None:
    spark = FakeSession(FakeContext(sys.executable))
    register(spark)  # type: ignore[arg-type]
    assert len(spark.registered) == 1


def test_a_python_without_tidegate_is_refused_with_what_to_set(bare_python: str) -> None:
    spark = FakeSession(FakeContext(bare_python))
    with pytest.raises(WorkerPythonError) as e:
        register(spark)  # type: ignore[arg-type]
    text = str(e.value)
    assert bare_python in text and "No module named 'tidegate'" in text
    assert f"PYSPARK_PYTHON={sys.executable}" in text
    assert spark.registered == []
    register(spark, check_workers=False)  # type: ignore[arg-type]
    assert len(spark.registered) == 1


def test_python3_from_path_is_named_as_the_default(
        bare_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(Path(bare_python).parent) + os.pathsep
                       + os.environ["PATH"])
    Path(bare_python).rename(Path(bare_python).parent / "python3")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(WorkerPythonError, match="PYSPARK_PYTHON was not set"):
        check_worker_python(FakeSession(FakeContext("python3")))  # type: ignore[arg-type]


def test_a_missing_interpreter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkerPythonError, match="was not found"):
        check_worker_python(FakeSession(FakeContext(str(tmp_path / "nope"))))  # type: ignore[arg-type]


def test_the_executor_pythonpath_counts(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # no site-packages, but PYTHONPATH is read (`-I` would ignore it)
    script = tmp_path / "nosite-python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    script.chmod(0o755)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    sc = FakeContext(str(script))
    with pytest.raises(WorkerPythonError):
        check_worker_python(FakeSession(sc))  # type: ignore[arg-type]
    # spark.executorEnv.PYTHONPATH (SparkContext.environment) reaches the workers
    sc.environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[3] / "src")
    check_worker_python(FakeSession(sc))  # type: ignore[arg-type]


@pytest.mark.parametrize("sc_kw", [{"master": "spark://10.0.0.1:7077"},
                                   {"master": "yarn"},
                                   {"includes": ["deps.zip"]}])
def test_nothing_is_checked_where_this_process_cannot_tell(
        bare_python: str, sc_kw: dict[str, Any]) -> None:
    check_worker_python(FakeSession(FakeContext(bare_python, **sc_kw)))  # type: ignore[arg-type]


def test_an_unclear_failure_only_warns(tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    script = tmp_path / "broken-python"
    script.write_text("#!/bin/sh\necho 'something else went wrong' >&2\nexit 3\n")
    script.chmod(0o755)
    with caplog.at_level(logging.WARNING, "tidegate.spark"):
        check_worker_python(FakeSession(FakeContext(str(script))))  # type: ignore[arg-type]
    assert "something else went wrong" in caplog.text


def test_the_probe_runs_once_per_interpreter() -> None:
    spark = FakeSession(FakeContext(sys.executable))
    check_worker_python(spark)  # type: ignore[arg-type]
    check_worker_python(spark)  # type: ignore[arg-type]
    assert _probe.cache_info().misses == 1 and _probe.cache_info().hits == 1
