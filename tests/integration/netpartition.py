"""Real network partitions between processes of this machine, made with iptables.

A test gives each simulated *host* a numeric Unix group of its own (no /etc/group entry
is needed) and starts that host's processes with it (`BrokerProcess.group`, or
`Popen(group=...)`); the user stays root, so they read the venv and the data directories
as before. The kernel tells the hosts apart by the group owning each socket
(`-m owner --gid-owner`). The rules live in one chain of the filter table,
`TIDEGATE-TEST-<pid>`, jumped to from OUTPUT: on loopback every packet, in either
direction, leaves through its sender's OUTPUT, so one chain sees everything.

- Always on, from `add_host`: a connection a host's process opens to any port but the
  host's own is marked (CONNMARK) with the host's group when its first packet leaves.
  Connections from processes of no host (the test itself, ZooKeeper) stay unmarked.
- `isolate(host)`: drops every packet, both directions, of the connections the host
  opened (to ZooKeeper, to other hosts), and of the connections other hosts opened to
  its ports. Packets are dropped, not rejected: both ends see silence, as with a cut
  cable, and established connections hang until their owners' timeouts. The test's own
  connections are untouched: it can still reach every side.
- `heal(host)` / `heal_all()`: removes those drop rules; the owners re-make what timed
  out.
- `close()`: removes the chain; a new `Network` also removes chains left by test
  processes that died without cleaning up.

Only 127.0.0.1 traffic of the registered groups is affected; other processes on the
machine, and other test runs (groups derived from the pid), are not.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

CHAIN_PREFIX = "TIDEGATE-TEST-"
# groups (and connection marks) well above any real gid, distinct per test process
_GID_BASE = 0x60000000


class PartitionUnavailable(Exception):
    """iptables cannot make partitions here (not installed, no netfilter, not root)."""


@dataclass
class Host:
    name: str
    gid: int
    ports: tuple[int, ...]
    drops: list[list[str]] = field(default_factory=list)  # rules while isolated


def _iptables_path() -> str | None:
    # /usr/sbin is not on every PATH
    found = shutil.which("iptables")
    return found or ("/usr/sbin/iptables" if os.access("/usr/sbin/iptables", os.X_OK) else None)


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # -w: wait for the xtables lock rather than fail when another iptables runs
    return subprocess.run([_iptables_path() or "iptables", "-w", *args], check=check,
                          capture_output=True, text=True, timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_chain(chain: str) -> None:
    while _iptables("-D", "OUTPUT", "-j", chain, check=False).returncode == 0:
        pass
    _iptables("-F", chain, check=False)
    _iptables("-X", chain, check=False)


class Network:
    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise PartitionUnavailable("network partitions need root (iptables)")
        if _iptables_path() is None:
            raise PartitionUnavailable(
                "iptables is not installed (Debian package `iptables`, `make deps-system`)")
        listing = _iptables("-S", check=False)
        if listing.returncode != 0:
            raise PartitionUnavailable(f"iptables does not work here: {listing.stderr.strip()}")
        for m in re.finditer(rf"^-N {CHAIN_PREFIX}(\d+)$", listing.stdout, re.M):
            if not _alive(int(m.group(1))):
                _remove_chain(CHAIN_PREFIX + m.group(1))
        self.chain = f"{CHAIN_PREFIX}{os.getpid()}"
        _remove_chain(self.chain)  # ours, from an earlier Network of this process
        made = _iptables("-N", self.chain, check=False)
        if made.returncode != 0:
            raise PartitionUnavailable(f"iptables cannot create a chain: {made.stderr.strip()}")
        _iptables("-I", "OUTPUT", "-j", self.chain)
        self.hosts: list[Host] = []
        self._next_gid = _GID_BASE + (os.getpid() % 0x100000) * 0x100

    def add_host(self, name: str, ports: list[int]) -> Host:
        """A host serving `ports`; start its processes with group `Host.gid`, after this."""
        host = Host(name, self._next_gid, tuple(ports))
        self._next_gid += 1
        rule = ["-p", "tcp", "-m", "conntrack", "--ctstate", "NEW",
                "-m", "owner", "--gid-owner", str(host.gid)]
        if ports:
            rule += ["-m", "multiport", "!", "--dports", ",".join(map(str, ports))]
        made = _iptables("-A", self.chain, *rule, "-j", "CONNMARK", "--set-mark",
                         str(host.gid), check=False)
        if made.returncode != 0:  # no owner/conntrack/connmark support in this kernel
            raise PartitionUnavailable(f"iptables rule refused: {made.stderr.strip()}")
        self.hosts.append(host)
        return host

    def isolate(self, host: Host) -> None:
        """Cut `host` off from every other host and from the services it uses."""
        assert not host.drops, f"{host.name} is already isolated"
        drops = [["-m", "connmark", "--mark", str(host.gid), "-j", "DROP"]]
        for other in self.hosts:
            if other is host:
                continue
            for port in host.ports:
                drops.append(["-p", "tcp", "-m", "connmark", "--mark", str(other.gid),
                              "-m", "conntrack", "--ctorigdstport", str(port), "-j", "DROP"])
        for rule in drops:
            _iptables("-A", self.chain, *rule)
        host.drops = drops

    def heal(self, host: Host) -> None:
        for rule in host.drops:
            _iptables("-D", self.chain, *rule, check=False)
        host.drops = []

    def heal_all(self) -> None:
        for host in self.hosts:
            self.heal(host)

    def dropped_packets(self) -> int:
        """Packets dropped by this network's rules so far (proof the partition bit)."""
        out = _iptables("-L", self.chain, "-v", "-n", "-x").stdout
        return sum(int(line.split()[0]) for line in out.splitlines()
                   if line.split()[2:3] == ["DROP"])

    def close(self) -> None:
        _remove_chain(self.chain)
        self.hosts.clear()
