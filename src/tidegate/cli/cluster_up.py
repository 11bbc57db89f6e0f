"""`tidegate cluster up`: run a `ClusterPlan` — one ZooKeeper and N brokers on this
machine — until Ctrl-C or SIGTERM, then stop them all.

Order matters both ways. ZooKeeper starts first (the brokers register in it) and stops
last (a stopping broker still talks to it). Brokers start together, and the cluster is
announced only once every broker is registered and a controller is elected, so the
printed bootstrap list works on the next command. They stop one at a time, SIGTERM then
SIGKILL after `--stop-timeout`, the controller last so that leadership moves once per
broker rather than chasing a controller election each time.

Every child runs in its own session: a Ctrl-C typed in the terminal reaches only this
launcher, which does the ordered stop (a second Ctrl-C kills what is left at once). On
Linux each child is also asked (PR_SET_PDEATHSIG) to get SIGTERM if the launcher dies
without stopping it, so a kill -9 of the launcher leaves no orphan holding the ports.
Signal handlers only set flags; every wait is a short poll that checks them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

import tidegate
from tidegate.cli import zk_launch
from tidegate.cli.cluster_plan import ClusterPlan
from tidegate.client.admin import AsyncAdmin
from tidegate.client.types import ClusterDescription

__all__ = ["ClusterLauncher", "LaunchError"]

POLL_S = 0.1
ZK_START_TIMEOUT_S = 60.0
BROKER_START_TIMEOUT_S = 90.0
FORM_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 15
PR_SET_PDEATHSIG = 1


class LaunchError(RuntimeError):
    """Something stops the cluster from starting; the message says what to do."""


@dataclass
class Child:
    name: str  # "ZooKeeper", "broker 2"
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_start: int  # the log's size at launch: this run's output starts there
    started: float
    reported_exit: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def new_output(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_start)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join("    " + x for x in self.new_output().splitlines()[-lines:])


def _die_with_parent() -> Callable[[], object] | None:
    """A preexec_fn that makes the child get SIGTERM when the launcher dies (Linux).
    prctl is looked up here, before fork, so the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    term = int(signal.SIGTERM)
    return lambda: prctl(PR_SET_PDEATHSIG, term)


def port_in_use(host: str, port: int) -> bool:
    """Whether a listener could not bind there (SO_REUSEADDR, as the servers bind, so a
    port in TIME_WAIT after the last run counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class ClusterLauncher:
    def __init__(self, plan: ClusterPlan, *, stop_timeout: float = 20.0,
                 out: TextIO | None = None) -> None:
        self.plan = plan
        self.stop_timeout = stop_timeout
        self.out = out or sys.stdout
        self.zk: Child | None = None
        self.brokers: dict[int, Child] = {}
        self.controller = -1
        self.signals = 0
        self._lock_file: IO[str] | None = None
        self._preexec = _die_with_parent()

    # -- output ------------------------------------------------------------------------

    def say(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.out, flush=True)

    @property
    def stopping(self) -> bool:
        return self.signals > 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1  # no printing here: the main loop may be inside a print

    # -- run -----------------------------------------------------------------------------

    def run(self) -> int:
        """Start, wait for a signal, stop. LaunchError for what the user must fix."""
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._lock_directory()
            self._preflight()
            ok = self._start() and self._watch()
            return 0 if ok else 1
        finally:
            self._stop_all()
            for s, handler in old.items():
                signal.signal(s, handler)
            if self._lock_file is not None:
                self._lock_file.close()

    def _lock_directory(self) -> None:
        plan = self.plan
        plan.directory.mkdir(parents=True, exist_ok=True)
        f = open(plan.lock_path, "a+")  # noqa: SIM115 - held for the launcher's life
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            pid = f.read().strip() or "?"
            f.close()
            raise LaunchError(
                f"another `tidegate cluster up` (pid {pid}) is running on {plan.directory}: "
                f"stop it first (Ctrl-C in its terminal), or use another --dir") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._lock_file = f

    def _preflight(self) -> None:
        plan = self.plan
        try:
            zk_launch.find_java()
            zk_launch.find_zookeeper_classpath()
        except zk_launch.ZooKeeperNotInstalledError as e:
            raise LaunchError(str(e)) from None
        if port_in_use(plan.host, plan.zk_port):
            raise LaunchError(
                f"port {plan.zk_port} (for ZooKeeper) is already in use on {plan.host}: "
                f"another ZooKeeper or cluster is running there; stop it, or choose a free "
                f"port with --zk-port")
        busy = [b for b in plan.broker_ids if port_in_use(plan.host, plan.port(b))]
        if busy:
            which = ", ".join(f"{plan.port(b)} (broker {b})" for b in busy)
            verb = "is" if len(busy) == 1 else "are"
            raise LaunchError(
                f"port{'s' if len(busy) > 1 else ''} {which} {verb} already in use on "
                f"{plan.host}: another broker, Kafka or "
                f"cluster is running there; stop it, or choose other ports with --base-port "
                f"(brokers use {plan.base_port}..{plan.port(plan.brokers)})")
        busy_http = [u for b in plan.broker_ids if (u := plan.http_url(b)) is not None
                     and port_in_use(plan.host, int(u.rsplit(":", 1)[1]))]
        if busy_http:
            raise LaunchError(
                f"{', '.join(busy_http)} (the brokers' HTTP listeners) "
                f"{'is' if len(busy_http) == 1 else 'are'} already in use on {plan.host}: "
                f"a broker started with `tidegate serve` takes 9644 by default; stop it, or "
                f"start the cluster without HTTP listeners (--override http.listeners=)")

    def _start(self) -> bool:
        plan = self.plan
        plan.logs_dir.mkdir(parents=True, exist_ok=True)
        reuse = any(plan.broker_dir(b).exists() for b in plan.broker_ids)
        self.say(f"Starting a Tidegate cluster of {plan.brokers} "
                 f"broker{'s' if plan.brokers > 1 else ''} in {plan.directory}"
                 + (" (reusing its data)" if reuse else ""))
        if not self._start_zookeeper():
            return False
        for bid in plan.broker_ids:
            self.brokers[bid] = self._spawn_broker(bid)
        for bid in plan.broker_ids:
            if not self._wait_broker(bid):
                return False
        return self._wait_formed()

    def _start_zookeeper(self) -> bool:
        plan = self.plan
        settings = zk_launch.ZooKeeperSettings(data_dir=plan.zk_dir / "data",
                                               port=plan.zk_port, host=plan.host)
        log_path = plan.log_path("zookeeper")
        self.say(f"starting ZooKeeper on {plan.zk_address} ...", end=" ")
        with open(log_path, "ab") as log:
            start = log.tell()
            proc = zk_launch.launch(settings, cfg_path=plan.zk_dir / "zoo.cfg", output=log,
                                    log_level="info", preexec_fn=self._preexec)
        self.zk = zk = Child("ZooKeeper", proc, log_path, start, time.monotonic())
        deadline = zk.started + ZK_START_TIMEOUT_S
        while not self.stopping:
            if zk_launch.ruok(plan.host, plan.zk_port, timeout=0.5):
                self.say(f"ready ({time.monotonic() - zk.started:.1f} s)")
                return True
            if not zk.alive() or time.monotonic() > deadline:
                return self._failed(zk, "did not answer `ruok`")
            time.sleep(POLL_S)
        self.say("interrupted")
        return False

    def _spawn_broker(self, bid: int) -> Child:
        log_path = self.plan.log_path(f"broker-{bid}")
        env = dict(os.environ)
        # the brokers run this very tidegate, wherever it was imported from
        src = str(Path(tidegate.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(x for x in (src, env.get("PYTHONPATH")) if x)
        with open(log_path, "ab") as log:
            start = log.tell()
            proc = subprocess.Popen(
                self.plan.broker_command(bid), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=self._preexec)
        return Child(f"broker {bid}", proc, log_path, start, time.monotonic())

    def _wait_broker(self, bid: int) -> bool:
        child = self.brokers[bid]
        self.say(f"broker {bid} ...", end=" ")
        deadline = child.started + BROKER_START_TIMEOUT_S
        while not self.stopping:
            if "listening on" in child.new_output():
                self.say(f"listening on {self.plan.address(bid)} "
                         f"({time.monotonic() - child.started:.1f} s)")
                return True
            if not child.alive():
                return self._failed(child, f"exited with status {child.proc.returncode}")
            if time.monotonic() > deadline:
                return self._failed(child, f"not listening after {BROKER_START_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        self.say("interrupted")
        return False

    def _failed(self, child: Child, what: str) -> bool:
        child.reported_exit = True
        self.say("failed")
        print(f"tidegate cluster: {child.name} {what}; the end of {child.log_path}:\n"
              f"{child.tail()}", file=sys.stderr, flush=True)
        return False

    def _wait_formed(self) -> bool:
        """Until every broker is registered and one is the controller."""
        want = set(self.plan.broker_ids)
        self.say("waiting for the brokers to register and elect a controller ...", end=" ")
        deadline = time.monotonic() + FORM_TIMEOUT_S
        last = ""
        while not self.stopping:
            try:
                desc = describe_cluster(self.plan.bootstrap, timeout=5.0)
            except Exception as e:  # not answering yet: try again until the deadline
                last = f"{type(e).__name__}: {e}"
            else:
                live = {b.node_id for b in desc.brokers}
                if live >= want and desc.controller_id in live:
                    self.controller = desc.controller_id
                    self.say(f"controller is broker {desc.controller_id}")
                    self._announce(desc)
                    return True
                last = f"brokers {sorted(live)}, controller {desc.controller_id}"
            dead = [c for c in self.brokers.values() if not c.alive()]
            if dead:
                return self._failed(dead[0], f"exited with status {dead[0].proc.returncode}")
            if time.monotonic() > deadline:
                self.say("failed")
                print(f"tidegate cluster: the cluster did not form within {FORM_TIMEOUT_S:.0f} "
                      f"s (last seen: {last}); see the logs in {self.plan.logs_dir}",
                      file=sys.stderr, flush=True)
                return False
            time.sleep(3 * POLL_S)
        self.say("interrupted")
        return False

    def _announce(self, desc: ClusterDescription) -> None:
        plan = self.plan
        rf = min(3, plan.brokers)
        self.say(f"Cluster {desc.cluster_id or '-'} is up: {plan.brokers} broker"
                 f"{'s' if plan.brokers > 1 else ''}, ZooKeeper {plan.zk_connect}.")
        self.say(f"Bootstrap servers: {plan.bootstrap}")
        self.say(f"  try: tidegate topics create demo --partitions 6 --replication-factor {rf} "
                 f"--bootstrap-server {plan.bootstrap}")
        self.say(f"       kcat -b {plan.bootstrap} -L")
        urls = [u for b in plan.broker_ids if (u := plan.http_url(b)) is not None]
        if urls:
            self.say(f"Metrics, health and the web console: {', '.join(urls)}")
        self.say(f"Logs in {plan.logs_dir}. Press Ctrl-C to stop the cluster.")

    def _watch(self) -> bool:
        """Until a signal. A broker that dies is reported (the others keep serving);
        ZooKeeper dying, or every broker, ends the run."""
        while not self.stopping:
            for child in self.brokers.values():
                if not child.alive() and not child.reported_exit:
                    child.reported_exit = True
                    print(f"tidegate cluster: {child.name} exited with status "
                          f"{child.proc.returncode}; see {child.log_path}",
                          file=sys.stderr, flush=True)
            if all(c.reported_exit for c in self.brokers.values()):
                print("tidegate cluster: every broker has exited; stopping ZooKeeper",
                      file=sys.stderr, flush=True)
                return False
            if self.zk is not None and not self.zk.alive():
                self.zk.reported_exit = True
                print(f"tidegate cluster: ZooKeeper exited with status "
                      f"{self.zk.proc.returncode}; see {self.zk.log_path}; stopping the brokers",
                      file=sys.stderr, flush=True)
                return False
            time.sleep(2 * POLL_S)
        return True

    # -- stop ----------------------------------------------------------------------------

    def _stop_order(self) -> list[Child]:
        if self.signals < 2:
            with contextlib.suppress(Exception):  # the cached controller will do
                self.controller = describe_cluster(self.plan.bootstrap, timeout=2.0
                                                   ).controller_id
        ids = sorted(self.brokers, reverse=True)
        ids.sort(key=lambda b: b == self.controller)  # stable: the controller goes last
        return [self.brokers[b] for b in ids]

    def _stop_all(self) -> None:
        running = [c for c in self.brokers.values() if c.alive()]
        if running or (self.zk is not None and self.zk.alive()):
            if self.signals and self.out.isatty():
                self.say("")  # the terminal echoed ^C: start a line of our own
            self.say("Stopping the cluster" + (" (press Ctrl-C again to kill it at once)"
                                               if self.signals < 2 else ""))
        for child in self._stop_order() if running else []:
            self._stop(child)
        if self.zk is not None:
            self._stop(self.zk)
        if running:
            self.say(f"Cluster stopped; data kept in {self.plan.directory} "
                     f"(`{self.plan.up_command()}` starts it again).")

    def _stop(self, child: Child) -> None:
        if not child.alive():
            return
        self.say(f"stopping {child.name} ...", end=" ")
        began = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.proc.pid, signal.SIGCONT)  # a paused process cannot act on TERM
            child.proc.terminate()
        deadline = began + self.stop_timeout
        while child.alive() and time.monotonic() < deadline and self.signals < 2:
            time.sleep(POLL_S)
        if child.alive():
            child.proc.kill()
            child.proc.wait()
            why = ("killed (second Ctrl-C)" if self.signals >= 2 else
                   f"still running after {self.stop_timeout:g} s: killed")
            self.say(why)
            return
        self.say(f"stopped ({time.monotonic() - began:.1f} s)")


def describe_cluster(bootstrap: str, timeout: float) -> ClusterDescription:
    async def ask() -> ClusterDescription:
        admin = AsyncAdmin({"bootstrap.servers": bootstrap, "client.id": "tidegate-cluster"})
        try:
            await admin.start()
            return await admin.describe_cluster()
        finally:
            await admin.close()

    async def bounded() -> ClusterDescription:
        return await asyncio.wait_for(ask(), timeout)

    return asyncio.run(bounded())
