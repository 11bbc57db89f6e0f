"""Brokers for tests/compat/librdkafka.sh's runs that `tidegate cluster up` cannot start.

`cluster up` gives every broker one PLAINTEXT listener and the same configs. Two of
librdkafka's test setups need more: its security tests (0097, 0135, 0142) connect
through SSL, SASL_PLAINTEXT and SASL_SSL listeners, and 0101 (fetch from follower)
wants each broker in a rack of its own, `broker.rack=RACK<id>` as trivup sets it. This
script starts one embedded broker (`--brokers 1`) or a ZooKeeper server and N brokers
(`broker.id` 1..N), each on the named loopback listeners (free ports; PLAINTEXT always
first, for the runner's own administration), with the `--override` configs for all and,
with `--racks`, `broker.rack=RACK<id>` and Kafka's RackAwareReplicaSelector. When every
broker listens (and, for a cluster, all N are registered) it writes the bootstrap list
of each listener to `<dir>/listeners.env` (`SASL_SSL=127.0.0.1:p1,127.0.0.1:p2,...`,
shell syntax) and waits for SIGTERM, then stops the brokers and ZooKeeper.

    python tests/compat/rdkafka_cluster.py --dir D --brokers 3 --racks \\
        --listeners PLAINTEXT,SASL_SSL --override k=v ...
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: tests/compat/ is on sys.path, not the root
sys.path.insert(0, str(ROOT / "src"))
from tests.compat._broker import CompatBroker, free_port  # noqa: E402

from tidegate.cli import zk_launch  # noqa: E402
from tidegate.cli.cluster_plan import small_cluster_defaults  # noqa: E402
from tidegate.cli.cluster_up import describe_cluster  # noqa: E402

RACK_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--listeners", default="PLAINTEXT",
                    help="comma-separated listener names (PLAINTEXT is added first)")
    ap.add_argument("--racks", action="store_true", help="broker.rack=RACK<id> per broker")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    return ap.parse_args(argv)


def wait_formed(bootstrap: str, want: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            desc = describe_cluster(bootstrap, timeout=5.0)
        except Exception as e:  # not answering yet
            last = f"{type(e).__name__}: {e}"
        else:
            if len(desc.brokers) >= want and desc.controller_id >= 0:
                return
            last = f"brokers {sorted(b.node_id for b in desc.brokers)}"
        time.sleep(0.5)
    raise SystemExit(f"rdkafka_cluster.py: the cluster did not form ({last})")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    names = ["PLAINTEXT"] + [n for n in args.listeners.split(",") if n and n != "PLAINTEXT"]
    common = dict(kv.split("=", 1) for kv in args.override)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    zk: subprocess.Popen[bytes] | None = None
    brokers: list[CompatBroker] = []
    try:
        if args.brokers > 1:
            zk_port = free_port()
            settings = zk_launch.ZooKeeperSettings(data_dir=args.dir / "zookeeper",
                                                   port=zk_port)
            with open(args.dir / "zookeeper.log", "ab") as log:
                zk = zk_launch.launch(settings, cfg_path=args.dir / "zoo.cfg", output=log)
            if not zk_launch.wait_until_serving("127.0.0.1", zk_port, timeout=60.0, proc=zk):
                raise SystemExit(f"rdkafka_cluster.py: ZooKeeper did not start; see {args.dir}")
            common = {**small_cluster_defaults(args.brokers),
                      "zookeeper.connect": f"127.0.0.1:{zk_port}/tidegate", **common}
        for bid in range(1, args.brokers + 1):
            configs = dict(common)
            if args.brokers > 1:
                configs["broker.id"] = str(bid)
            if args.racks:
                configs.update({"broker.rack": f"RACK{bid}",
                                "replica.selector.class": RACK_SELECTOR})
            brokers.append(CompatBroker(args.dir / f"broker-{bid}", args.dir / f"broker-{bid}.log",
                                        tuple(names), "rdkafka_cluster.py", configs))
        for b in brokers:
            b.start(timeout=120.0)
        plaintext = ",".join(b.seeds("PLAINTEXT") for b in brokers)
        if args.brokers > 1:
            wait_formed(plaintext, args.brokers)
        env = "".join(f"{n}={','.join(b.seeds(n) for b in brokers)}\n" for n in names)
        tmp = args.dir / "listeners.env.tmp"
        tmp.write_text(env)
        tmp.rename(args.dir / "listeners.env")
        while not stopping and all(b.proc is not None and b.proc.poll() is None for b in brokers):
            time.sleep(0.5)
    finally:
        for b in brokers:
            b.stop()
        if zk is not None:
            zk.terminate()
            zk.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
