"""How fast a cluster's brokers take up their `__consumer_offsets` partitions.

On a new 3-broker cluster, the first FindCoordinator creates `__consumer_offsets`; each
broker then opens the replicas it holds and loads a coordinator shard for each
partition it leads, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile. The bench
measures, per round:

1. create: from the first FindCoordinator to the moment every partition answers
   OffsetFetch without an error on its coordinator (a group id per partition; each
   poll asks FindCoordinator, then OffsetFetch of the node it names);
2. failover: kill -9 of a broker other than the controller, then until every
   partition answers again; printed from the kill, and from the first moved partition
   answering to the last (the take-up itself: the time before it is the ZooKeeper
   session timeout, `--session-ms`).

Source trees are compared in one run, interleaved (`--tree A --tree B`: each round
starts its brokers from each tree in turn, e.g. a checkout of main and a branch);
medians and ranges printed side by side.

    .venv/bin/python bench/cluster_takeup.py [--tree DIR ...] [--rounds 3]
        [--partitions 50] [--session-ms 4000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench._cluster_launch as launch

from tidegate.coordinator.partitioning import partition_for
from tidegate.protocol.headers import encode_request_header, parse_response_header
from tidegate.protocol.messages import build, decode, encode, request_class, response_class

FIND_COORDINATOR, OFFSET_FETCH = 10, 9


class Conn:
    """A blocking request/response connection (one request at a time)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def call(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        self.correlation += 1
        head = encode_request_header(api_key, version, self.correlation, "takeup", False)
        payload = head + encode(build(request_class(api_key, version), data))
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._exact(4))[0]
        frame = self._exact(size)
        _corr, pos = parse_response_header(frame, False)
        return decode(response_class(api_key, version), frame, pos)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def groups_per_partition(n: int) -> dict[int, str]:
    out: dict[int, str] = {}
    i = 0
    while len(out) < n:
        p = partition_for(f"g{i}", n)
        out.setdefault(p, f"g{i}")
        i += 1
    return out


class Prober:
    """Asks, for each pending partition, its coordinator for its group's offsets."""

    def __init__(self, brokers: dict[int, str], partitions: int) -> None:
        self.addrs = brokers  # node id -> bootstrap
        self.conns: dict[int, Conn] = {}
        self.groups = groups_per_partition(partitions)

    def conn(self, node: int) -> Conn:
        c = self.conns.get(node)
        if c is None:
            c = self.conns[node] = Conn(self.addrs[node])
        return c

    def drop(self, node: int) -> None:
        c = self.conns.pop(node, None)
        if c is not None:
            c.close()

    def answers(self, p: int, ask: int) -> int | None:
        """The coordinator node of partition `p` if it answers, else None."""
        group = self.groups[p]
        try:
            found = self.conn(ask).call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
            if found.error_code.value != 0 or found.node_id not in self.addrs:
                return None
            node = int(found.node_id)
            got = self.conn(node).call(OFFSET_FETCH, 3, {"group_id": group, "topics": None})
        except (OSError, ConnectionError):
            self.drop(ask)
            return None
        return node if got.error_code.value == 0 else None

    def wait_all(self, ask: int, t0: float, pending: set[int],
                 timeout: float = 120) -> tuple[float, float, dict[int, int]]:
        """Poll until every partition in `pending` answers: seconds from `t0` to the
        first and to the last answer, and each partition's coordinator."""
        first = None
        owner: dict[int, int] = {}
        while pending:
            if time.monotonic() - t0 > timeout:
                raise SystemExit(f"partitions {sorted(pending)} never answered")
            for p in sorted(pending):
                node = self.answers(p, ask)
                if node is not None:
                    pending.discard(p)
                    owner[p] = node
                    if first is None:
                        first = time.monotonic() - t0
            if pending:
                time.sleep(0.01)
        return first or 0.0, time.monotonic() - t0, owner


def one_round(tree: Path, base: Path, partitions: int, session_ms: int) -> dict[str, float]:
    launch.ROOT = tree  # the brokers run this tree's src/
    overrides = {"offsets.topic.num.partitions": str(partitions)}
    with launch.launched(base, embedded=False, session_ms=session_ms,
                         overrides=lambda _bid: overrides) as up:
        addrs = {bid: b.bootstrap for bid, b in up.cluster.items()}
        probe = Prober(addrs, partitions)
        t0 = time.monotonic()
        first, last, owner = probe.wait_all(1, t0, set(range(partitions)))
        controller = launch.admin(up.bootstrap).list_topics(timeout=5).controller_id
        victim = next(b for b in (3, 2, 1) if b != controller)
        moved = {p for p, node in owner.items() if node == victim}
        ask = next(b for b in (1, 2, 3) if b != victim)
        del probe.addrs[victim]
        probe.drop(victim)
        t1 = time.monotonic()
        up.cluster[victim].kill()
        f_first, f_last, _ = probe.wait_all(ask, t1, set(moved))
        for c in list(probe.conns):
            probe.drop(c)
        return {"create_first": first, "create_all": last, "failover_first": f_first,
                "failover_all": f_last, "failover_spread": f_last - f_first,
                "moved": float(len(moved))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", type=Path,
                    help="a source tree whose src/ the brokers run (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--session-ms", type=int, default=4000)
    ap.add_argument("--keep", type=Path, help="put the brokers' data and logs here (kept)")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [launch.ROOT])]
    results: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory(prefix="takeup-") as tmp_dir:
        tmp = str(args.keep.resolve()) if args.keep else tmp_dir
        for r in range(args.rounds):
            for i, tree in enumerate(trees):
                base = Path(tmp) / f"r{r}-t{i}"
                base.mkdir(parents=True)
                res = one_round(tree, base, args.partitions, args.session_ms)
                results[tree].append(res)
                launch.progress(f"round {r + 1} {tree}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in res.items()))
    print(f"\n__consumer_offsets with {args.partitions} partitions, 3 brokers, "
          f"zookeeper.session.timeout.ms={args.session_ms}; {args.rounds} rounds, "
          "seconds: median (min-max)")
    keys = ["create_first", "create_all", "failover_first", "failover_all",
            "failover_spread", "moved"]
    print(f"{'':18}" + "".join(f"{str(t)[-28:]:>30}" for t in trees))
    for k in keys:
        cells = []
        for t in trees:
            vals = [res[k] for res in results[t]]
            cells.append(f"{statistics.median(vals):8.2f} ({min(vals):.2f}-{max(vals):.2f})")
        print(f"{k:18}" + "".join(f"{c:>30}" for c in cells))


if __name__ == "__main__":
    main()
