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

`--cluster` runs them against a 3-broker cluster instead (ZooKeeper and three brokers
with the same listeners, _broker.CompatCluster) with KGO_TEST_RF=3 and every broker in
KGO_SEEDS; the logs go to build/franz-go/cluster/. `--tls` adds an SSL listener that
requires a client certificate (a CA and certificates made with openssl, as the
security tests do) and points KGO_SEEDS at it with KGO_TEST_TLS (ca, cert and key);
the SCRAM and OAUTHBEARER tests stay on their SASL_PLAINTEXT listeners (they dial
without TLS), and TestIssue769 is skipped (TLS_SKIP says why). Both options go together.

The tests that skip themselves, and why, are listed in docs/compatibility.md ("Client
test suites"). Usage:

    python tests/compat/franz_go.py                  # everything, one broker
    python tests/compat/franz_go.py --cluster --tls  # three brokers, over TLS
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
from tests.compat._broker import CompatBroker, CompatCluster  # noqa: E402

MODULE = "github.com/twmb/franz-go"
SCRAM_USER, SCRAM_PASSWORD = "kgo", "kgo-secret"
UNSECURED_HANDLER = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                     "OAuthBearerUnsecuredValidatorCallbackHandler")
# TestIssue769 dials through a Dialer of its own, and NewClient refuses one beside
# KGO_TEST_TLS's DialTLSConfig ("cannot set both Dialer and DialTLSConfig"): the test
# dereferences the nil client and the panic ends the whole binary, against any broker.
TLS_SKIP = "^TestIssue769$"
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


LISTENERS = {
    "PLAINTEXT": "PLAINTEXT",
    "SCRAM": "SASL_PLAINTEXT",
    "OAUTH": "SASL_PLAINTEXT",
}
SASL_CONFIGS = {
    "listener.name.scram.sasl.enabled.mechanisms": "SCRAM-SHA-256",
    "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
    "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": UNSECURED_HANDLER,
    "inter.broker.listener.name": "PLAINTEXT",
}


def tls_configs(pki: Path) -> dict[str, str]:
    """The broker's SSL listener: its certificate, and client certificates required."""
    from tests.integration.security_util import make_pki
    make_pki(pki)
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.crt"),
        "listener.name.ssl.ssl.client.auth": "required",
    }


def nodes(args: argparse.Namespace, data: Path) -> CompatBroker | CompatCluster:
    """One broker or a cluster with the listeners of LISTENERS (and SSL with --tls)."""
    listeners = dict(LISTENERS, **({"SSL": "SSL"} if args.tls else {}))
    configs = {"listener.security.protocol.map":
               ",".join(f"{n}:{p}" for n, p in listeners.items()), **SASL_CONFIGS}
    if args.tls:
        configs.update(tls_configs(data / "pki"))
    names = tuple(listeners)
    if args.cluster:
        logs = args.work / "cluster"
        logs.mkdir(parents=True, exist_ok=True)
        return CompatCluster(data, logs, 3, names, "franz_go.py", configs)
    (data / "broker").mkdir()
    return CompatBroker(data / "broker", args.work / "broker.log", names, "franz_go.py",
                        configs)


def add_scram_user(bootstrap: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run(
        [sys.executable, "-m", "tidegate.cli.main", "users", "add", SCRAM_USER,
         "--mechanism", "SCRAM-SHA-256", "--password-file", "-",
         "--bootstrap-server", bootstrap],
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
    ap.add_argument("--cluster", action="store_true",
                    help="three brokers on ZooKeeper, KGO_TEST_RF=3")
    ap.add_argument("--tls", action="store_true",
                    help="KGO_SEEDS on an SSL listener (KGO_TEST_TLS, client certificates)")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "franz-go",
                    help="where the suite, its binary and the logs go")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    binary = prepare(go_binary(), args.version, args.work)
    test_log = args.work / ("kgo-test" + "-cluster" * args.cluster + "-tls" * args.tls + ".log")
    with tempfile.TemporaryDirectory(prefix="tidegate-franz-") as data:
        broker = nodes(args, Path(data))
        broker.start()
        try:
            add_scram_user(broker.seeds("PLAINTEXT"))
            env = dict(os.environ, KGO_SEEDS=broker.seeds("SSL" if args.tls else "PLAINTEXT"),
                       KGO_TEST_RF="3" if args.cluster else "1",
                       KGO_TEST_RECORDS=str(args.records),
                       KGO_TEST_SCRAM_SEEDS=broker.seeds("SCRAM"),
                       KGO_TEST_SCRAM=f"{SCRAM_USER}:{SCRAM_PASSWORD}:256",
                       KGO_TEST_OAUTH_SEEDS=broker.seeds("OAUTH"))
            if args.tls:
                pki = Path(data) / "pki"
                env["KGO_TEST_TLS"] = (f"ca:{pki / 'ca.crt'},cert:{pki / 'client.crt'},"
                                       f"key:{pki / 'client.key'}")
            cmd = [str(binary), "-test.v", "-test.timeout", args.timeout]
            if args.run:
                cmd += ["-test.run", args.run]
            if args.tls:  # its client sets a Dialer, which franz-go refuses beside TLS
                cmd += ["-test.skip", TLS_SKIP]
            print(f"running {' '.join(cmd)} (KGO_SEEDS={env['KGO_SEEDS']}, "
                  f"KGO_TEST_RF={env['KGO_TEST_RF']}, KGO_TEST_RECORDS={args.records}"
                  f"{', KGO_TEST_TLS' if args.tls else ''}); output in {test_log}", flush=True)
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
    what = ("a 3-broker Tidegate cluster" if args.cluster else "Tidegate") + \
        (" over TLS" if args.tls else "")
    print(f"franz-go {args.version} pkg/kgo against {what} in {elapsed:.0f} s: "
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
