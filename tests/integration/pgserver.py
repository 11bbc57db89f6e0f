"""A throwaway PostgreSQL server for the pattern tests (Debian's `postgresql` package).

`PostgresServer().start()` runs ``initdb`` and ``pg_ctl start`` from
/usr/lib/postgresql/*/bin on a free loopback port with trust authentication (data in a
fresh /tmp directory, removed by `stop`), and `url` names its ``postgres`` database.
PostgreSQL refuses to run as root: as root the commands run as the ``postgres`` user
(`runuser`), which owns the data directory.
`available()` says why the server cannot run here (None: it can).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.integration.conftest import free_port


def _bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def available() -> str | None:
    if _bindir() is None:
        return "PostgreSQL is not installed (make deps-system installs Debian's postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg 3 is not installed (pip install 'tidegate[postgres]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser"
    return None


class PostgresServer:
    def __init__(self) -> None:
        bindir = _bindir()
        assert bindir is not None
        self.bindir = bindir
        # Not under pytest's tmp_path: its parents are root's, closed to `postgres`.
        self.base = Path(tempfile.mkdtemp(prefix="tidegate-pg-"))
        self.data = self.base / "pgdata"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        self._run(f"{self.bindir}/initdb", "-D", str(self.data), "-U", "postgres",
                  "-A", "trust", "--no-sync")
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.base} "
                "-c fsync=off -c max_connections=50")
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-o", opts, "-w",
                  "-l", str(self.base / "pg.log"), "start")

    def stop(self) -> None:
        try:
            self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", "immediate",
                      "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.base, ignore_errors=True)
