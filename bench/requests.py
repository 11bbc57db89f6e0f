"""The broker's fixed cost per small request, beside Apache Kafka.

Every small request — a heartbeat, an offset commit, each of a transaction's three, a
metadata refresh — pays the same network-side work on the broker: read and frame,
decode the header and body, dispatch, run the handler, encode, frame and send. This bench
measures that cost alone: `--connections` (8) connections each keep `--depth` (16)
requests pipelined (send a batch, read its answers, send the next), for `--seconds` per
round, and reports requests/s and the broker's CPU per request: all its threads, and for
Tidegate the event-loop thread alone (/proc schedstat before/after each round).

Two requests, each its own part:

- `api_versions` (ApiVersions v3): no state at all; the floor of the request path.
- `heartbeat` (Heartbeat v4 for a group nobody joined): goes through the group
  coordinator's lookup and answers an error (UNKNOWN_MEMBER_ID / GROUP_ID_NOT_FOUND on
  Tidegate, as on Kafka) — a request that touches the coordinator's path cheaply, as
  consumers' heartbeats do, without a join protocol in the load generator. The warm-up
  asks FindCoordinator until it answers without error, so `__consumer_offsets` exists
  on both brokers first.

The load generator is raw sockets carrying requests encoded once with Tidegate's own
protocol code (protocol/headers.py, protocol/messages.py): per answer it only reads
the 4-byte size and skips the frame, so it loads the broker more and itself less than
kio's or any client's per-request objects would (it uses a few per cent of a core).
One process, one thread per connection.

Targets: the broker of this tree, optionally a broker run from another source tree
(`--before DIR`, e.g. a `git worktree` of HEAD: the same bench measures a change), and
Apache Kafka (`--peer`, default `kafka`: Kafka's defaults; fsync settings do not matter
to requests that write nothing). Rounds alternate the targets, order rotating.

    .venv/bin/python bench/requests.py [--rounds 3] [--seconds 5] [--connections 8]
        [--depth 16] [--apis api_versions,heartbeat] [--before /tmp/x] [--peer kafka|none]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer_kafka
from bench._cluster_launch import Broker, _die_with_parent, progress, stop_all

from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_request_header, parse_response_header
from tidegate.protocol.messages import build, decode, encode, request_class, response_class

_SIZE = struct.Struct(">i")
# api name -> (api key, version, request fields)
APIS: dict[str, tuple[int, int, dict[str, Any]]] = {
    "api_versions": (18, 3, {"client_software_name": "bench",
                             "client_software_version": "1"}),
    "heartbeat": (12, 4, {"group_id": "bench-nobody", "generation_id": 1,
                          "member_id": "nobody"}),
}
FIND_COORDINATOR = (10, 4)


class TreeBroker(Broker):
    """A `tidegate serve` run from the source tree `src_root` (its `src/`)."""

    def __init__(self, name: str, data_dir: Path, src_root: Path) -> None:
        super().__init__(name, data_dir, {})
        self.src_root = src_root

    def start(self) -> None:
        import subprocess

        args = [sys.executable, "-m", "tidegate.cli.main", "serve"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(self.src_root / "src")}
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=env,
                                         cwd=self.src_root, preexec_fn=_die_with_parent)


def request_bytes(api: str, correlation_id: int) -> bytes:
    key, version, fields = APIS.get(api, (*FIND_COORDINATOR, {}))
    cls = request_class(key, version)
    if key == FIND_COORDINATOR[0]:
        fields = {"key_type": 0, "coordinator_keys": ("bench-nobody",)}
    flexible = bool(getattr(cls, "__flexible__", False))
    return encode_frame(encode_request_header(key, version, correlation_id, "bench", flexible)
                        + encode(build(cls, fields)))


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + _SIZE.unpack_from(buf)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf[4:]


def warm_coordinator(bootstrap: str, timeout: float = 60.0) -> None:
    """FindCoordinator until it answers without error: `__consumer_offsets` exists."""
    cls = response_class(*FIND_COORDINATOR)
    deadline = time.monotonic() + timeout
    with _connect(bootstrap) as sock:
        while True:
            sock.sendall(request_bytes("find_coordinator", 1))
            frame = _read_frame(sock)
            _, pos = parse_response_header(frame, True)
            resp: Any = decode(cls, frame, pos)
            if all(int(c.error_code) == 0 for c in resp.coordinators):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"FindCoordinator still failing on {bootstrap}: {resp}")
            time.sleep(0.2)


def send_frames(sock: socket.socket, frames: list[bytes]) -> None:
    """The frames in one sendmsg; whatever the socket did not take, with sendall."""
    sent = sock.sendmsg(frames)
    if sent < sum(map(len, frames)):
        sock.sendall(b"".join(frames)[sent:])


def await_answers(sock: socket.socket, pending: bytes, count: int) -> bytes:
    """Read until `count` more whole answers are in (sizes only); the bytes past them."""
    while count:
        chunk = sock.recv(262144)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        pending += chunk
        pos = 0
        while len(pending) - pos >= 4:
            size = _SIZE.unpack_from(pending, pos)[0]
            if len(pending) - pos - 4 < size:
                break
            pos += 4 + size
            count -= 1
        pending = pending[pos:]
    return pending


# A pump: (its arguments..., stop, counts, its index) -> None; it keeps counts[i] current.
Pump = Callable[..., None]


def run_pumps(pump: Pump, args: list[tuple[Any, ...]], seconds: float,
              join_s: float = 30) -> tuple[int, float]:
    """(requests answered, elapsed seconds) of one `pump` thread per `args` entry, run
    for `seconds`."""
    stop = threading.Event()
    counts = [0] * len(args)
    threads = [threading.Thread(target=pump, args=(*a, stop, counts, i), daemon=True)
               for i, a in enumerate(args)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(join_s)
    return sum(counts), time.perf_counter() - start


def _pump(bootstrap: str, batch: bytes, depth: int, stop: threading.Event,
          counts: list[int], i: int) -> None:
    """Send `depth` pipelined requests, read their `depth` answers (sizes only), again."""
    with _connect(bootstrap) as sock:
        n = 0
        pending = b""
        while not stop.is_set():
            sock.sendall(batch)
            pending = await_answers(sock, pending, depth)
            n += depth
            counts[i] = n


def load_round(bootstrap: str, api: str, connections: int, depth: int,
               seconds: float) -> tuple[int, float]:
    """(requests answered, elapsed seconds) of `connections` pumps run for `seconds`."""
    batch = b"".join(request_bytes(api, c) for c in range(depth))
    return run_pumps(_pump, [(bootstrap, batch, depth)] * connections, seconds)


def loop_cpu(broker: Any) -> float | None:
    """CPU seconds of a Tidegate broker's main thread (its event loop); None for Kafka."""
    if not isinstance(broker, Broker) or broker.proc is None:
        return None
    pid = broker.proc.pid
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--apis", default="api_versions,heartbeat")
    ap.add_argument("--before", type=Path, default=None,
                    help="another source tree whose broker runs beside this tree's")
    peer_kafka.add_peer_option(ap)
    ap.set_defaults(peer="kafka")
    args = ap.parse_args()
    apis = [a for a in args.apis.split(",") if a]
    modes, note = peer_kafka.wanted(args.peer)
    print(f"bench/requests.py: {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {args.connections} connections x {args.depth} "
          f"pipelined, {args.rounds} rounds of {args.seconds:g} s per target and API")
    if note:
        print(note)
    if modes:
        print(peer_kafka.describe(modes))
    # target -> api -> per round (requests/s, broker CPU us/request, loop CPU us/request)
    res: dict[str, dict[str, list[tuple[float, float, float | None]]]] = {}
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-",
                                     dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        base = Path(tmp)
        brokers: dict[str, Any] = {"tidegate": TreeBroker("tidegate", base / "tidegate",
                                                          Path(__file__).resolve().parents[1])}
        if args.before is not None:
            brokers["before"] = TreeBroker("before", base / "before", args.before.resolve())
        try:
            for b in brokers.values():
                b.start()
            for b in brokers.values():
                b.wait_ready()
            with peer_kafka.peers(base, modes) as kafkas:
                brokers.update(kafkas)
                names = tuple(brokers)
                for name in names:
                    progress(f"warm-up, {name}")
                    warm_coordinator(brokers[name].bootstrap)
                    for api in apis:
                        load_round(brokers[name].bootstrap, api, args.connections,
                                   args.depth, 1.0)
                for r in range(args.rounds):
                    k = r % len(names)
                    for name in names[k:] + names[:k]:
                        b = brokers[name]
                        for api in apis:
                            progress(f"round {r + 1}/{args.rounds}: {api}, {name}")
                            cpu0, loop0 = b.cpu_seconds(), loop_cpu(b)
                            n, elapsed = load_round(b.bootstrap, api, args.connections,
                                                    args.depth, args.seconds)
                            cpu1, loop1 = b.cpu_seconds(), loop_cpu(b)
                            loop_us = (None if loop0 is None or loop1 is None
                                       else (loop1 - loop0) / n * 1e6)
                            res.setdefault(name, {}).setdefault(api, []).append(
                                (n / elapsed, (cpu1 - cpu0) / n * 1e6, loop_us))
                for name in names[len(brokers) - len(kafkas):]:
                    del brokers[name]  # stopped by peers()
        finally:
            stop_all([b for b in brokers.values() if isinstance(b, Broker)])
    report(res, apis, os.getloadavg()[0])


def _med(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def report(res: dict[str, dict[str, list[tuple[float, float, float | None]]]],
           apis: list[str], load_end: float) -> None:
    print(f"\nmedian (range) of the rounds; load average at the end {load_end:.1f}")
    for api in apis:
        print(f"\n{api}")
        print(f"  {'target':<12} {'requests/s':>26} {'broker CPU us/req':>26} "
              f"{'loop CPU us/req':>26}")
        for name, per_api in res.items():
            rows = per_api.get(api, [])
            if not rows:
                continue
            loops = [lp for _r, _c, lp in rows if lp is not None]
            print(f"  {name:<12} {_med([r for r, _c, _l in rows]):>26} "
                  f"{_med([c for _r, c, _l in rows]):>26} "
                  f"{_med(loops) if loops else '-':>26}")


if __name__ == "__main__":
    main()
