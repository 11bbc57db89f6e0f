"""Every benchmark at a small size, one after the other, each table printed: `make bench-quick`.

Meant to show a change's effect before it lands, in about two minutes on an idle 2-core
machine: the figures are single short rounds (noisy; the full benches, `make bench`,
are what the docs quote). When Kafka's jars are there (`make deps-kafka`), one Apache
Kafka peer (`bench/peer_kafka.py`) is started once, with `log.flush.interval.messages=1`
only (each batch flushed before the answer, as Tidegate's default: the like-for-like
reference; `make bench` adds Kafka's no-fsync default), and every bench that runs beside
Kafka uses it (`TIDEGATE_BENCH_KAFKA`) instead of starting a JVM of its own; it runs
with `group.initial.rebalance.delay.ms=0`, which bench/groups.py asks for and the others
do not notice. Its JVM starts while bench/spark.py, which runs first, starts its own
JVM and runs its untimed first query (~20 s that measure nothing), and the first bench
that needs it waits for it. bench/security.py, whose Kafka needs SSL and SASL_SSL
listeners (a JVM of its own), runs Tidegate only here. The last line sums the times:
two minutes in all is the aim (issue 20).

    .venv/bin/python bench/quick.py [--only produce_consume,transactions] [--skip spark]
        [--peer auto|none]

Each bench's tables are printed as it runs (its stderr only if it fails, or with
TIDEGATE_BENCH_VERBOSE=1), then its wall time; a summary of the times comes last. A
failing bench is reported and the others still run (exit status 1).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer_kafka

HERE = Path(__file__).resolve().parent
# (script without .py, its small-size arguments), the broker benches first. The sizes
# are the smallest that still print a meaningful row: two minutes in all is the aim
# (issue 20), so each bench gets ~5-15 s on an idle 2-core machine.
BENCHES: list[tuple[str, list[str]]] = [
    # first: the Kafka peers' JVMs start beside its session start and untimed first
    # query. The batch read only: one Spark session (the streaming pipeline's JVM-side
    # warm-up and queries cost more than the rest of the quick run)
    ("spark", ["--rows", "20000", "--rounds", "1", "--only", "read"]),
    ("produce_consume", ["--quick", "--peer", "kafka-fsync"]),
    ("idempotence", ["--quick", "--peer", "kafka-fsync"]),
    ("transactions", ["--quick", "--targets", "embedded", "--peer", "kafka-fsync"]),
    ("groups", ["--quick", "--peer", "kafka-fsync"]),
    # Tidegate only: its Kafka peer would need JVMs of its own (SSL listeners), ~20 s
    ("security", ["--records", "3000", "--rounds", "1", "--peer", "none"]),
    # the reference (confluent-kafka) and aiokafka; not kafka-python, the slowest
    ("clients", ["--records", "5000", "--repeat", "1", "--clients",
                 "tidegate,tidegate-sync,confluent,aiokafka"]),
    ("transactions_client", ["--quick"]),
    # Tidegate only: its Kafka reference is Kafka's default mode, not the shared peer's
    ("requests", ["--rounds", "1", "--seconds", "2", "--peer", "none"]),
    ("metrics_cost", ["--records", "10000", "--rounds", "1", "--scrape-partitions", "200",
                      "--scrapes", "3"]),
    ("records", ["--per-record-only"]),
    ("frame_assembler", ["--frames", "800", "--rounds", "3"]),
    ("produce_inproc", ["--partitions", "1,100", "--rounds", "3", "--pairs", "1"]),
    ("embedded_start", ["--rounds", "1"]),
    ("patterns", ["--quick"]),
    ("cluster", ["--quick"]),
    # partitions (1 and 300: start after kill -9 included) and producer ids; its groups
    # and transactions parts need ~10 s of broker starts each (`make bench` runs them)
    ("scale", ["--quick", "--no-plot", "--parts", "partitions,pids"]),
]
SHARED_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
SHARED_MODE = "kafka-fsync"  # the one Kafka peer the benches above ask for (--peer)
KAFKA_BENCHES = {"produce_consume", "idempotence", "transactions", "groups", "security"}
SHARED_USERS = KAFKA_BENCHES - {"security"}  # security's Kafka needs listeners of its own


def without_peer(argv: list[str]) -> list[str]:
    """`argv` without its `--peer X` pair."""
    out, skip = [], False
    for a in argv:
        if not skip and a != "--peer":
            out.append(a)
        skip = a == "--peer"
    return out


def start_shared(tmp: Path) -> subprocess.Popen[bytes] | None:
    """`peer_kafka.serve` in a child process, not waited for (`wait_shared`); None when
    Kafka cannot run here."""
    why = peer_kafka.available()
    if why is not None:
        print(f"note: Apache Kafka not measured ({why}); Tidegate only", flush=True)
        return None
    state = tmp / "peers.json"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from bench import peer_kafka; "
            f"peer_kafka.serve(Path(sys.argv[2]), {[SHARED_MODE]!r}, "
            f"{SHARED_SETTINGS!r})")
    return subprocess.Popen([sys.executable, "-c", code, str(HERE.parent), str(state)])


def wait_shared(proc: subprocess.Popen[bytes], tmp: Path) -> float:
    """Seconds waited until `start_shared`'s peers serve; their state file named in the
    environment the benches inherit."""
    state, t0 = tmp / "peers.json", time.monotonic()
    deadline = t0 + 120
    while not state.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the shared Kafka peers did not start")
        time.sleep(0.2)
    os.environ[peer_kafka.SHARED_ENV] = str(state)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated bench names")
    ap.add_argument("--skip", default="", help="comma-separated bench names")
    ap.add_argument("--peer", choices=("auto", "none"), default="auto")
    args = ap.parse_args()
    only, skip = set(filter(None, args.only.split(","))), set(args.skip.split(","))
    benches = [(n, a) for n, a in BENCHES
               if (not only or n in only) and n not in skip and (HERE / f"{n}.py").exists()]
    times: dict[str, tuple[float, int]] = {}
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-quick-") as tmp:
        uses_kafka = any(n in SHARED_USERS for n, _a in benches)
        server = start_shared(Path(tmp)) if args.peer == "auto" and uses_kafka else None
        waiting = server is not None
        try:
            for name, extra in benches:
                if args.peer == "none" and name in KAFKA_BENCHES:
                    extra = [*without_peer(extra), "--peer", "none"]
                if waiting and name in SHARED_USERS and server is not None:
                    waited = wait_shared(server, Path(tmp))
                    times["(waiting for the Kafka peers)"] = (waited, 0)
                    print(f"\n(the shared Kafka peers: waited {waited:.1f} s more for them)",
                          flush=True)
                    waiting = False
                print(f"\n=== bench/{name}.py {' '.join(extra)}", flush=True)
                t0 = time.monotonic()
                # progress lines and librdkafka's logs go to stderr: shown when a bench
                # fails (or with TIDEGATE_BENCH_VERBOSE=1), so the tables stay readable
                verbose = bool(os.environ.get("TIDEGATE_BENCH_VERBOSE"))
                proc = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *extra],
                                      stderr=None if verbose else subprocess.PIPE,
                                      check=False)
                rc = proc.returncode
                if rc != 0 and proc.stderr:
                    print(proc.stderr.decode(errors="replace")[-3000:], flush=True)
                times[name] = (time.monotonic() - t0, rc)
                print(f"=== bench/{name}.py: {times[name][0]:.1f} s"
                      + ("" if rc == 0 else f", FAILED (exit status {rc})"), flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(60)
    total = time.monotonic() - t_all
    print(f"\nbench-quick: {total:.0f} s in all (load average {os.getloadavg()[0]:.1f} "
          "at the end): " + ", ".join(f"{n} {s:.0f} s" + ("" if rc == 0 else " FAILED")
                                      for n, (s, rc) in times.items()))
    if any(rc for _s, rc in times.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
