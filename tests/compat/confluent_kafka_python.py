"""Run confluent-kafka-python's own integration tests against a Tidegate broker.

confluent-kafka-python (github.com/confluentinc/confluent-kafka-python) keeps its
integration suite in its repository (`tests/integration/`, not in the wheel or the
sdist); its `kafka_cluster` fixture uses an existing cluster named by the BROKERS
environment variable instead of launching one with trivup. This runner:

1. takes the suite from a checkout (`--suite DIR`, default
   build/confluent-kafka-python/suite), or extracts tag `--ref` (default v2.15.0) from a
   git directory (`--git-dir`), or clones the repository at that tag;
2. makes a venv in build/confluent-kafka-python/venv that sees this interpreter's
   packages (confluent-kafka, pytest) and adds only what the suite imports besides
   (trivup from the suite's own tarball, the Schema Registry client's dependencies,
   pytest-asyncio), so the project's venv is left as it is;
3. starts one embedded broker from this tree with a scratch data directory and two
   listeners on free loopback ports: PLAINTEXT (BROKERS) and SASL_PLAINTEXT with PLAIN
   user `sasl_user` (the suite's SASL cluster, reached through tests/compat/
   ck_python_byo.py), with the authorizer on and `allow.everyone.if.no.acl.found=true`
   (the suite creates and deletes ACLs and checks authorized operations);
4. runs the broker tests twice, with the classic group protocol and with KIP-848's
   (TEST_CONSUMER_GROUP_PROTOCOL=consumer), one pytest process at a time, its output
   in build/confluent-kafka-python/pytest-<protocol>.log and the broker's in
   build/confluent-kafka-python/broker.log;
5. calls the broker checks of the old standalone script `integration_test.py` one by
   one (producer, consumer, batch consumer, their million-message performance runs,
   stats_cb, throttle_cb with a quota on its `throttled_client`), unless `--no-legacy`
   or `-k`, output in build/confluent-kafka-python/legacy.log;
6. prints the pass/fail/skip counts of each run, every failure, and every skip with the
   test's reason; the exit status is 1 if a run failed.

Left out (docs/compatibility.md, "Client test suites"): Schema Registry tests and share
group tests (KIP-932). Usage:

    python tests/compat/confluent_kafka_python.py
    python tests/compat/confluent_kafka_python.py --protocol classic -k transactions
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: tests/compat/ is on sys.path, not the root
from tests.compat._broker import CompatBroker  # noqa: E402

REPO_URL = "https://github.com/confluentinc/confluent-kafka-python"
SASL_USER = "sasl_user"
# What the suite imports besides confluent-kafka and pytest (its cluster fixture imports
# trivup and the Schema Registry client even when neither is used).
EXTRA_PACKAGES = ["authlib", "httpx", "cachetools", "attrs", "certifi", "jwcrypto",
                  "requests", "avro", "pytest-asyncio"]
OUT_OF_SCOPE = [  # (path under tests/integration, why)
    ("schema_registry", "needs a Schema Registry"),
    ("share_consumer", "KIP-932 share groups (ShareFetch/ShareAcknowledge), not served"),
    ("share_consumer_oauth", "KIP-932 share groups over OAUTHBEARER, not served"),
    ("share_consumer_sasl", "KIP-932 share groups over SASL, not served"),
]
# The old standalone script tests/integration/integration_test.py: its main() does not
# start on confluent-kafka 2.16 (its version banner raises TypeError), so its broker
# checks are called one by one. Left out: test_producer_dr_only_error (it fails on a
# garbage-collection assertion about the client's callback object before it reaches a
# broker) and the Schema Registry ones.
LEGACY_CHECKS = ["verify_producer", "verify_producer_performance", "verify_consumer",
                 "verify_batch_consumer", "verify_consumer_performance",
                 "verify_batch_consumer_performance", "verify_stats_cb",
                 "verify_throttle_cb"]
LEGACY_DRIVER = """
import sys, traceback
sys.path.insert(0, '.')
import tests.integration.integration_test as it
it.bootstrap_servers, it.topic, it.with_progress = sys.argv[1], 'test-topic', False
for name in sys.argv[2:]:
    print('=' * 20, name, flush=True)
    try:
        getattr(it, name)()
        print('RESULT', name, 'PASS', flush=True)
    except BaseException as e:
        traceback.print_exc()
        print('RESULT', name, 'FAIL', repr(e)[:200], flush=True)
"""
PROTOCOLS: dict[str, dict[str, str]] = {
    "classic": {}, "consumer": {"TEST_CONSUMER_GROUP_PROTOCOL": "consumer"}}


def get_suite(args: argparse.Namespace) -> Path:
    """A directory holding the repository's tests/ (a checkout or an extracted tag)."""
    suite: Path = args.suite
    if (suite / "tests" / "integration" / "conftest.py").exists():
        return suite
    suite.mkdir(parents=True, exist_ok=True)
    if args.git_dir:
        archive = subprocess.Popen(["git", "--git-dir", str(args.git_dir), "archive", args.ref],
                                   stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(suite)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"confluent_kafka_python.py: git archive {args.ref} failed")
    else:
        suite.rmdir()
        out = subprocess.run(["git", "clone", "--depth", "1", "--branch", args.ref, REPO_URL,
                              str(suite)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"confluent_kafka_python.py: cloning {REPO_URL} failed "
                             f"({out.stderr.strip()[-300:]}); put a checkout of {args.ref} "
                             f"in {suite} or pass --suite DIR or --git-dir DIR")
    return suite


def make_venv(work: Path, suite: Path) -> Path:
    """The python of a venv that sees this interpreter's packages plus the suite's."""
    venv = work / "venv"
    python = venv / "bin" / "python"
    marker = venv / ".suite-deps"
    if marker.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # Appended after the venv's own site-packages: what pip installs here comes first.
    Path(purelib, "zz_project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    trivup = sorted((suite / "tests" / "trivup").glob("trivup-*.tar.gz"))
    print("installing the suite's test dependencies in a venv of their own (once)...",
          flush=True)
    out = subprocess.run([str(python), "-m", "pip", "install", "-q",
                          *[str(t) for t in trivup[-1:]], *EXTRA_PACKAGES],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"confluent_kafka_python.py: pip install failed:\n{out.stderr[-2000:]}")
    marker.write_text("\n".join(EXTRA_PACKAGES) + "\n")
    return python


class Broker(CompatBroker):
    """One embedded broker from this tree on a PLAINTEXT and a SASL_PLAINTEXT listener."""

    def __init__(self, data: Path, log: Path) -> None:
        super().__init__(data, log, ("PLAINTEXT", "SASL"), "confluent_kafka_python.py", {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{SASL_USER}="{SASL_USER}";',
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        })


def summarize(junit: Path) -> dict[str, list[tuple[str, str]]]:
    """Each outcome's (test id, reason) from pytest's JUnit XML report."""
    results: dict[str, list[tuple[str, str]]] = {"passed": [], "failed": [], "skipped": []}
    if not junit.exists():
        return results
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, reason = "failed", (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                outcome, reason = "skipped", child.get("message") or ""
        results[outcome].append((name, reason))
    return results


def run_pytest(python: Path, suite: Path, work: Path, protocol: str, brokers: str,
               sasl_brokers: str, keyword: str) -> tuple[int, dict[str, list[tuple[str, str]]]]:
    log, junit = work / f"pytest-{protocol}.log", work / f"pytest-{protocol}.xml"
    junit.unlink(missing_ok=True)
    env = dict(os.environ, BROKERS=brokers, CK_SASL_BROKERS=sasl_brokers,
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",  # not the project venv's plugins
               PYTHONPATH=str(Path(__file__).resolve().parent))
    env.pop("TEST_CONSUMER_GROUP_PROTOCOL", None)
    env.update(PROTOCOLS[protocol])
    cmd = [str(python), "-m", "pytest", "-p", "pytest_asyncio.plugin", "-p", "pytest_timeout",
           "-p", "ck_python_byo", "--timeout", "300", "-q", "-rA", f"--junitxml={junit}",
           "tests/integration"]
    cmd += [f"--ignore=tests/integration/{path}" for path, _ in OUT_OF_SCOPE]
    if keyword:
        cmd += ["-k", keyword]
    print(f"running the suite with group.protocol={protocol} (BROKERS={brokers}); "
          f"output in {log}", flush=True)
    with log.open("w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                            cwd=suite).returncode
    return rc, summarize(junit)


def run_legacy(python: Path, suite: Path, work: Path,
               brokers: str) -> dict[str, list[tuple[str, str]]]:
    """The old script's broker checks, after giving its `throttled_client` a quota (its
    README's setup) so that throttle_cb has something to report."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    subprocess.run([sys.executable, "-m", "tidegate.cli.main", "quotas", "set",
                    "--client-id", "throttled_client", "--add-config",
                    "producer_byte_rate=1,consumer_byte_rate=1", "--bootstrap-server",
                    brokers], capture_output=True, env=env, cwd=ROOT, check=True)
    log = work / "legacy.log"
    print(f"running integration_test.py's broker checks; output in {log}", flush=True)
    with log.open("w") as out:
        subprocess.run([str(python), "-c", LEGACY_DRIVER, brokers, *LEGACY_CHECKS],
                       stdout=out, stderr=subprocess.STDOUT, cwd=suite)
    results: dict[str, list[tuple[str, str]]] = {"passed": [], "failed": [], "skipped": []}
    seen = set()
    for line in log.read_text(errors="replace").splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "RESULT":
            seen.add(parts[1])
            outcome = "passed" if parts[2] == "PASS" else "failed"
            results[outcome].append((parts[1], parts[3] if len(parts) > 3 else ""))
    results["failed"] += [(name, "did not finish") for name in LEGACY_CHECKS
                          if name not in seen]
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=ROOT / "build" / "confluent-kafka-python"
                    / "suite", help="a checkout of confluent-kafka-python")
    ap.add_argument("--git-dir", type=Path, help="a git directory to extract --ref from")
    ap.add_argument("--ref", default="v2.15.0", help="the tag to use (default v2.15.0)")
    ap.add_argument("--protocol", choices=["classic", "consumer", "both"], default="both",
                    help="the consumer group protocol(s) to run the suite with")
    ap.add_argument("-k", dest="keyword", default="", help="pytest -k: select tests")
    ap.add_argument("--no-legacy", action="store_true",
                    help="skip the old integration_test.py script's broker checks")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "confluent-kafka-python",
                    help="where the venv and the logs go")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    suite = get_suite(args)
    python = make_venv(args.work, suite)
    protocols = ["classic", "consumer"] if args.protocol == "both" else [args.protocol]
    worst = 0
    with tempfile.TemporaryDirectory(prefix="tidegate-ckpy-") as data:
        broker = Broker(Path(data), args.work / "broker.log")
        broker.start()
        try:
            runs = []
            for protocol in protocols:
                started = time.monotonic()
                rc, results = run_pytest(python, suite, args.work, protocol,
                                         broker.seeds("PLAINTEXT"), broker.seeds("SASL"),
                                         args.keyword)
                runs.append((protocol, rc, results, time.monotonic() - started))
            if not args.no_legacy and not args.keyword:
                started = time.monotonic()
                results = run_legacy(python, suite, args.work, broker.seeds("PLAINTEXT"))
                runs.append(("legacy", 1 if results["failed"] else 0, results,
                             time.monotonic() - started))
        finally:
            broker.stop()
    for protocol, rc, results, elapsed in runs:
        what = ("integration_test.py's broker checks" if protocol == "legacy"
                else f"tests/integration, group.protocol={protocol},")
        print(f"confluent-kafka-python {args.ref} {what} against Tidegate "
              f"in {elapsed:.0f} s: {len(results['passed'])} "
              f"passed, {len(results['failed'])} failed, {len(results['skipped'])} skipped; "
              f"exit status {rc}")
        for name, reason in results["failed"]:
            print(f"  FAIL {name}: {reason}")
        for name, reason in results["skipped"]:
            print(f"  SKIP {name}: {reason}")
        worst = max(worst, 1 if rc not in (0, 5) else 0)
    for path, why in OUT_OF_SCOPE:
        print(f"  not run: tests/integration/{path}/ ({why})")
    return worst


if __name__ == "__main__":
    sys.exit(main())
