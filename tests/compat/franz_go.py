"""Run franz-go's own integration tests (`pkg/kgo`) against a Tidegate broker.

franz-go (github.com/twmb/franz-go) tests its client against any broker named by
KGO_SEEDS. This runner:

1. puts franz-go's module (default v1.22.3; `go mod download`, from the Go module cache
   or the proxy) in a writable copy under build/franz-go/ and compiles the test binary
   of `pkg/kgo` once (`go test -c`);
2. starts one embedded broker from this tree with a scratch data directory and three
   listeners on free loopback ports: PLAINTEXT (KGO_SEEDS), SASL_PLAINTEXT with
   SCRAM-SHA-256 (KGO_TEST_SCRAM_SEEDS, a user added with `tidegate users add`) and
   SASL_PLAINTEXT with OAUTHBEARER's unsecured validator (KGO_TEST_OAUTH_SEEDS);
3. runs the tests with KGO_TEST_RF=1 (one node) and KGO_TEST_RECORDS (default 20,000,
   a run of a few minutes), one test binary, its output in build/franz-go/kgo-test.log
   and the broker's in build/franz-go/broker.log;
4. prints the pass/fail/skip counts (top-level tests and subtests), every failure, and
   every skip with the test's reason; the exit status is the test binary's.

The tests that skip themselves on a single Tidegate node, and why, are listed in
docs/compatibility.md ("Client test suites"). Usage:

    python tests/compat/franz_go.py                  # everything
    python tests/compat/franz_go.py --run 'TestTxnEtl|TestGroupETL' --records 50000
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: tests/compat/ is on sys.path, not the root
from tests.compat._broker import CompatBroker  # noqa: E402

MODULE = "github.com/twmb/franz-go"
SCRAM_USER, SCRAM_PASSWORD = "kgo", "kgo-secret"
UNSECURED_HANDLER = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                     "OAuthBearerUnsecuredValidatorCallbackHandler")
RESULT = re.compile(r"^(\s*)--- (PASS|FAIL|SKIP): (\S+)")


def go_binary() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go"
                                if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise SystemExit("franz_go.py: no Go toolchain (go) on PATH")
    return go


def prepare(go: str, version: str, work: Path) -> Path:
    """The compiled `pkg/kgo` test binary of franz-go `version`, built in `work`."""
    src = work / f"franz-go@{version}"
    binary = work / f"kgo-{version}.test"
    if binary.exists():
        return binary
    if not src.exists():
        out = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{version}"],
                             capture_output=True, text=True, cwd=work)
        m = re.search(r'"Dir":\s*"([^"]+)"', out.stdout)
        if out.returncode != 0 or m is None:
            raise SystemExit(f"franz_go.py: go mod download {MODULE}@{version} failed:\n"
                             f"{out.stdout[-800:]}{out.stderr[-800:]}")
        shutil.copytree(m.group(1), src)
        for path in [src, *src.rglob("*")]:  # the module cache is read-only
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    print(f"building the pkg/kgo tests of {MODULE}@{version} (once)...", flush=True)
    out = subprocess.run([go, "test", "-c", "-o", str(binary), "./pkg/kgo"], cwd=src,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"franz_go.py: go test -c failed:\n{out.stderr[-2000:]}")
    return binary


class Broker(CompatBroker):
    """One embedded broker from this tree on three loopback listeners."""

    def __init__(self, data: Path, log: Path) -> None:
        super().__init__(data, log, ("PLAINTEXT", "SCRAM", "OAUTH"), "franz_go.py", {
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,SCRAM:SASL_PLAINTEXT,OAUTH:SASL_PLAINTEXT",
            "listener.name.scram.sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class":
                UNSECURED_HANDLER,
        })

    def add_scram_user(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        out = subprocess.run(
            [sys.executable, "-m", "tidegate.cli.main", "users", "add", SCRAM_USER,
             "--mechanism", "SCRAM-SHA-256", "--password-file", "-",
             "--bootstrap-server", self.seeds("PLAINTEXT")],
            input=SCRAM_PASSWORD + "\n", capture_output=True, text=True, env=env, cwd=ROOT)
        if out.returncode != 0:
            raise SystemExit(f"franz_go.py: adding the SCRAM user failed: {out.stderr}")


def summarize(log: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Each outcome's test names (subtests with their parent's name) and each skipped
    test's reason, from the verbose output of the test binary."""
    results: dict[str, list[str]] = {"PASS": [], "FAIL": [], "SKIP": []}
    reasons: dict[str, str] = {}
    last_note: dict[str, str] = {}
    note = re.compile(r"^\s+\w+_test\.go:\d+: (.*)$")
    current = ""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(("=== RUN", "=== CONT", "=== NAME")):
            current = line.split()[-1]
            continue
        m = note.match(line)
        if m and current:
            last_note[current] = m.group(1)
            continue
        r = RESULT.match(line)
        if r:
            results[r.group(2)].append(r.group(3))
            if r.group(2) == "SKIP":
                reasons[r.group(3)] = last_note.get(r.group(3), "")
    return results, reasons


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="v1.22.3", help="franz-go version (default v1.22.3)")
    ap.add_argument("--records", type=int, default=20000, help="KGO_TEST_RECORDS")
    ap.add_argument("--run", default="", help="go test -run: a regex of test names")
    ap.add_argument("--timeout", default="30m", help="go test -timeout")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "franz-go",
                    help="where the suite, its binary and the logs go")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    binary = prepare(go_binary(), args.version, args.work)
    test_log = args.work / "kgo-test.log"
    with tempfile.TemporaryDirectory(prefix="tidegate-franz-") as data:
        broker = Broker(Path(data), args.work / "broker.log")
        broker.start()
        try:
            broker.add_scram_user()
            env = dict(os.environ, KGO_SEEDS=broker.seeds("PLAINTEXT"), KGO_TEST_RF="1",
                       KGO_TEST_RECORDS=str(args.records),
                       KGO_TEST_SCRAM_SEEDS=broker.seeds("SCRAM"),
                       KGO_TEST_SCRAM=f"{SCRAM_USER}:{SCRAM_PASSWORD}:256",
                       KGO_TEST_OAUTH_SEEDS=broker.seeds("OAUTH"))
            cmd = [str(binary), "-test.v", "-test.timeout", args.timeout]
            if args.run:
                cmd += ["-test.run", args.run]
            print(f"running {' '.join(cmd)} (KGO_SEEDS={env['KGO_SEEDS']}, "
                  f"KGO_TEST_RECORDS={args.records}); output in {test_log}", flush=True)
            started = time.monotonic()
            with test_log.open("w") as out:
                rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=binary.parent / f"franz-go@{args.version}" / "pkg" / "kgo"
                                    ).returncode
            elapsed = time.monotonic() - started
        finally:
            broker.stop()
    results, reasons = summarize(test_log)
    top = {k: [n for n in v if "/" not in n] for k, v in results.items()}
    sub = {k: [n for n in v if "/" in n] for k, v in results.items()}
    print(f"franz-go {args.version} pkg/kgo against Tidegate in {elapsed:.0f} s: "
          f"{len(top['PASS'])} passed, {len(top['FAIL'])} failed, {len(top['SKIP'])} skipped "
          f"(subtests: {len(sub['PASS'])} passed, {len(sub['FAIL'])} failed, "
          f"{len(sub['SKIP'])} skipped); exit status {rc}")
    for name in results["FAIL"]:
        print(f"  FAIL {name}")
    for name in results["SKIP"]:
        print(f"  SKIP {name}: {reasons.get(name, '')}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
