"""tests/compat/go_test_counts.py: the counts `make compat-kafka-go` prints."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "compat" / "go_test_counts.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("go_test_counts", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stream(tmp_path: Path, events: list[dict[str, str]]) -> str:
    path = tmp_path / "go-test.json"
    lines = [json.dumps(e) for e in events] + ["not json: a build line"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_counts_top_level_and_subtests(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    pkg = "github.com/segmentio/kafka-go"
    path = _stream(tmp_path, [
        {"Action": "run", "Package": pkg, "Test": "TestConn"},
        {"Action": "pass", "Package": pkg, "Test": "TestConn/a"},
        {"Action": "fail", "Package": pkg, "Test": "TestConn/b"},
        {"Action": "skip", "Package": pkg, "Test": "TestConn/c"},
        {"Action": "fail", "Package": pkg, "Test": "TestConn"},
        {"Action": "pass", "Package": pkg, "Test": "TestWriter"},
        {"Action": "skip", "Package": pkg, "Test": "TestOld"},
        {"Action": "fail", "Package": pkg},
        {"Action": "pass", "Package": pkg + "/sasl"},
    ])
    assert _module().main(path) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "top-level tests: pass 1, fail 1, skip 1"
    assert out[1] == "all tests and subtests: pass 2, fail 2, skip 2"
    assert out[2:] == [f"FAIL {pkg} TestConn", f"FAIL {pkg} TestConn/b"]


def test_a_package_failing_without_a_test_is_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = "github.com/segmentio/kafka-go"
    path = _stream(tmp_path, [
        {"Action": "pass", "Package": pkg, "Test": "TestA"},
        {"Action": "fail", "Package": pkg},  # a panic ends the binary: no test failed
    ])
    assert _module().main(path) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"FAIL {pkg} (no failing test: a panic, a timeout or a build error)")


def test_all_passed_exits_zero(tmp_path: Path) -> None:
    path = _stream(tmp_path, [{"Action": "pass", "Package": "p", "Test": "TestA"},
                              {"Action": "pass", "Package": "p"}])
    assert _module().main(path) == 0
