"""`tidegate COMMAND` builds only that command's parser: `serve` must not pay for
importing every other command (about 0.7 s of a broker's start)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tidegate.cli.main import SUBCOMMANDS, build_parser


def test_a_named_command_imports_only_its_own_module() -> None:
    probe = ("import json, sys\n"
             "from tidegate.cli.main import build_parser\n"
             "build_parser('serve')\n"
             "print(json.dumps([m for m in sys.modules if m.startswith('tidegate.cli.')]))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out))
    assert "tidegate.cli.serve" in loaded
    others = {f"tidegate.cli.{n}" for n in SUBCOMMANDS if n != "serve"}
    assert not others & loaded, loaded


def test_the_whole_parser_still_lists_every_command_and_extension() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(SUBCOMMANDS) <= set(sub.choices)  # type: ignore[arg-type]
    topics = build_parser("topics").parse_args(["topics", "reassign", "--list"])
    assert topics.command == "topics"


def test_the_overview_help_matches_the_whole_parsers_and_imports_no_command() -> None:
    from tidegate.cli.main import overview_parser

    assert overview_parser().format_help() == build_parser().format_help()
    probe = ("import json, sys\n"
             "from tidegate.cli.main import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(json.dumps([m for m in sys.modules if m.startswith('tidegate.cli.')]))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.splitlines()[-1]) == ["tidegate.cli.main"]


def test_no_command_prints_the_overview_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    from tidegate.cli.main import main

    assert main([]) == 2
    assert "live throughput, lag and open transactions" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["bogus"])
    assert e.value.code == 2


def test_a_command_parser_leaves_the_admin_modules_to_the_run() -> None:
    probe = ("import json, sys\n"
             "from tidegate.cli.main import build_parser\n"
             "build_parser('topics').parse_args(['topics', 'list'])\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out.splitlines()[-1]))
    assert "tidegate.cli.leaders" in loaded  # via topics reassign
    assert not {m for m in loaded if m.endswith("_admin") or m.endswith(".admin")}, loaded
