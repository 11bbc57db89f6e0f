"""A Spark standalone cluster for integration tests: one master and N workers started
from the pip-installed pyspark (its bin/spark-class, SPARK_HOME = the pyspark package).

Invariants: everything binds to 127.0.0.1 on free ports; logs and worker directories
live under the given directory (never inside the pyspark package); each daemon runs in
its own process group, and `stop()` ends exactly those groups (SIGTERM, then SIGKILL),
so a test must call it in a `finally` (or use `SparkCluster` as a context manager).
Workers run executors with the same Python (PYSPARK_PYTHON = sys.executable) and with
src/ on PYTHONPATH, so `tidegate` imports on the executors.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import pyspark
from tests.integration.conftest import ROOT, free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def cluster_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the daemons and for a driver talking to them."""
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = str(SPARK_HOME)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


class SparkCluster:
    def __init__(self, base_dir: Path, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = "1g") -> None:
        self.base_dir = base_dir
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.port = free_port()
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> Path:
        log = self.base_dir / "logs" / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out,
                stderr=subprocess.STDOUT, env=env, cwd=self.base_dir, start_new_session=True)
        self.procs.append((proc, log))
        return log

    def _wait_for(self, log: Path, marker: str, timeout: float) -> None:
        proc = next(p for p, lg in self.procs if lg == log)
        deadline = time.monotonic() + timeout
        while marker not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"{log.name} exited:\n{self.tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{log.name} not ready in {timeout}s:\n{self.tail(log)}")
            time.sleep(0.1)

    @staticmethod
    def tail(log: Path, lines: int = 40) -> str:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def start(self, timeout: float = 60.0) -> None:
        (self.base_dir / "logs").mkdir(parents=True, exist_ok=True)
        env = cluster_env()
        env["SPARK_LOG_DIR"] = str(self.base_dir / "logs")
        env["SPARK_PID_DIR"] = str(self.base_dir)
        env["SPARK_NO_DAEMONIZE"] = "1"
        try:
            master_log = self._spawn("master", [
                MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(free_port())], env)
            self._wait_for(master_log, "New state: ALIVE", timeout)
            logs = []
            for i in range(self.workers):
                work = self.base_dir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                logs.append(self._spawn(f"worker-{i}", [
                    WORKER_CLASS, "--host", "127.0.0.1", "--port", str(free_port()),
                    "--webui-port", str(free_port()), "--cores", str(self.worker_cores),
                    "--memory", self.worker_memory, "--work-dir", str(work),
                    self.master_url], {**env, "SPARK_WORKER_DIR": str(work)}))
            for log in logs:
                self._wait_for(log, "Successfully registered with master", timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 15.0) -> None:
        for proc, _ in reversed(self.procs):  # workers first, then the master
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc, _ in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # the group also holds the executors and Python workers it started
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs = []

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
