"""`EmbeddedBroker`: a real Tidegate broker inside a program or a test run.

    with tidegate.EmbeddedBroker({"num.partitions": "3"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

Settings use Kafka's names (the same keys as `tidegate serve --override`). By default
the broker gets a temporary data directory (removed when the `with` block ends) and a
free loopback port, serves no HTTP listener, and makes its internal topics
(`__consumer_offsets`, `__transaction_state`) with 4 partitions each rather than 50:
most of a start on an empty directory was creating those (`offsets.topic.num.partitions`
and `transaction.state.log.num.partitions` in the settings choose otherwise; a data
directory that has them keeps their count).

Two flavours, chosen by `mode`:

- ``"thread"`` (the default): `BrokerApp` runs on a background thread with an event loop
  of its own. Nothing is started but a thread, and the broker's modules are usually
  already imported by the caller, so the first request is served in about a tenth of
  a second (bench/embedded_start.py). A thread cannot be crashed, so `kill()` is
  refused there.
- ``"process"``: `tidegate serve` as a child process. It starts slower (a new
  interpreter imports the broker), but `kill()` is a real crash: SIGKILL, no flush, no
  clean-shutdown marker, exactly what a crash test needs; `restart()` then recovers the
  same data directory on the same port.

`stop()` shuts the broker down cleanly (flush, checkpoints, `.clean_shutdown`) and keeps
the data; `restart()` is `stop()` (or nothing after `kill()`) then `start()`.
`create_topic()` and `read_topic()` are shortcuts over Tidegate's own client for tests.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tidegate.client.types import ConsumerRecord
    from tidegate.server.app import BrokerApp

__all__ = ["EmbeddedBroker", "EmbeddedBrokerError"]

Mode = Literal["thread", "process"]

# partitions of each internal topic in a new data directory (Kafka's default is 50)
INTERNAL_PARTITIONS = 4


class EmbeddedBrokerError(RuntimeError):
    """The broker did not start, or an operation does not fit its state or flavour."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_setting(value: object) -> str:
    if isinstance(value, bool):  # Kafka's spelling, not Python's
        return "true" if value else "false"
    return str(value)


class EmbeddedBroker:
    """One broker on 127.0.0.1, in a thread (default) or a child process."""

    def __init__(
        self,
        config: Mapping[str, object] | None = None,
        *,
        mode: Mode = "thread",
        data_dir: str | Path | None = None,
        port: int | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process', not {mode!r}")
        self.mode: Mode = mode
        self.settings: dict[str, str] = {k: _as_setting(v) for k, v in (config or {}).items()}
        self._own_dir = data_dir is None and "log.dirs" not in self.settings
        if data_dir is not None:
            self.data_dir = Path(data_dir)
        elif "log.dirs" in self.settings:
            self.data_dir = Path(self.settings["log.dirs"])
        else:
            self.data_dir = Path(tempfile.mkdtemp(prefix="tidegate-embedded-"))
        self._fixed_port = port is not None or "listeners" in self.settings
        self.port = port or _free_port()
        self.start_timeout = start_timeout
        # thread flavour
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app: BrokerApp | None = None
        self._error: BaseException | None = None
        # process flavour: the child and the last lines it printed
        self._proc: subprocess.Popen[str] | None = None
        self.log_lines: collections.deque[str] = collections.deque(maxlen=2000)

    # -- what a client needs --------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        if self.mode == "thread":
            return self._thread is not None and self._thread.is_alive()
        return self._proc is not None and self._proc.poll() is None

    def broker_settings(self) -> dict[str, str]:
        """What the broker is started with: the caller's settings over the embedded
        defaults (this port, this data directory, no HTTP listener, small internal
        topics)."""
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "http.listeners": "",
            **self._internal_topic_partitions(),
            **self.settings,
        }

    def _internal_topic_partitions(self) -> dict[str, str]:
        """`__consumer_offsets` and `__transaction_state` with INTERNAL_PARTITIONS
        partitions each instead of Kafka's 50: creating 100 partition directories (each
        fsynced) was most of an embedded broker's start. A data directory whose topic
        file already lists them keeps their count, since the coordinators hash ids over
        it."""
        from tidegate.storage.topics import TOPICS_FILE, load_topics

        known = {}
        if (self.data_dir / TOPICS_FILE).exists():
            with contextlib.suppress(Exception):  # unreadable: the broker will say why
                known = load_topics(self.data_dir)
        out = {}
        for key, topic in (("offsets.topic.num.partitions", "__consumer_offsets"),
                           ("transaction.state.log.num.partitions", "__transaction_state")):
            meta = known.get(topic)
            out[key] = str(meta.partitions if meta is not None else INTERNAL_PARTITIONS)
        return out

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> EmbeddedBroker:
        if self.running:
            raise EmbeddedBrokerError("the broker is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # A free port can be taken between our probe and the broker's bind: try another
        # one, unless the caller chose the port.
        for attempt in range(3):
            try:
                if self.mode == "thread":
                    self._start_thread()
                else:
                    self._start_process()
                return self
            except OSError:
                if self._fixed_port or attempt == 2:
                    raise
                self.port = _free_port()
        return self  # pragma: no cover - the loop returns or raises

    def stop(self, timeout: float = 30.0) -> None:
        """Shut down cleanly and keep the data directory."""
        if self.mode == "thread":
            self._stop_thread(timeout)
        else:
            self._stop_process(timeout)

    def kill(self) -> None:
        """Crash the broker (SIGKILL): no flush, no checkpoint, no clean-shutdown marker.
        Only the process flavour can crash; a thread can only be stopped."""
        if self.mode != "process":
            raise EmbeddedBrokerError(
                "kill() is a real crash (SIGKILL) and needs EmbeddedBroker(mode='process'); "
                "a broker thread can only stop() cleanly")
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()
        self._proc = None

    def restart(self) -> EmbeddedBroker:
        """Stop (if still running) and start again on the same port and data."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop, and remove the data directory if it is the temporary one."""
        try:
            self.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<EmbeddedBroker {self.mode} {self.bootstrap_servers} {state}>"

    # -- thread flavour -------------------------------------------------------------------
    def _start_thread(self) -> None:
        from tidegate.common.config import BrokerConfig

        config = BrokerConfig(self.broker_settings())
        ready = threading.Event()
        self._error = None
        self._thread = threading.Thread(
            target=self._run_thread, args=(config, ready),
            name=f"tidegate-embedded-{self.port}", daemon=True)
        self._thread.start()
        if not ready.wait(self.start_timeout):
            self._stop_thread(5.0)
            raise EmbeddedBrokerError(f"the broker did not start in {self.start_timeout} s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error

    def _run_thread(self, config: object, ready: threading.Event) -> None:
        try:
            import uvloop

            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            runner = asyncio.Runner()
        with runner:
            try:
                runner.run(self._serve(config, ready))
            except BaseException as e:  # reported to start(), or lost after a stop
                self._error = self._error or e
                ready.set()

    async def _serve(self, config: object, ready: threading.Event) -> None:
        from tidegate.common.config import BrokerConfig
        from tidegate.server.app import BrokerApp

        assert isinstance(config, BrokerConfig)
        app = BrokerApp(config)
        try:
            await app.start()
        except BaseException:
            if app.observability is not None:
                with contextlib.suppress(Exception):
                    await app.observability.stop()
            app.dir_lock.release()
            raise
        self._loop = asyncio.get_running_loop()
        self._app = app
        ready.set()
        try:
            await app.serve_forever()
        finally:
            self._app = None
            await app.stop()

    def _stop_thread(self, timeout: float) -> None:
        thread, loop, app = self._thread, self._loop, self._app
        if thread is None:
            return
        if loop is not None and app is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(app.request_stop)
        thread.join(timeout)
        if thread.is_alive():
            raise EmbeddedBrokerError(f"the broker thread did not stop in {timeout} s")
        self._thread = self._loop = None

    # -- process flavour ------------------------------------------------------------------
    def _start_process(self) -> None:
        args = [sys.executable, "-m", "tidegate.cli.main", "serve"]
        for key, value in self.broker_settings().items():
            args += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1])  # this tidegate, even uninstalled
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        self._proc = proc
        ready = threading.Event()

        def pump() -> None:  # keeps reading so the child never blocks on a full pipe
            assert proc.stdout is not None
            for line in proc.stdout:
                self.log_lines.append(line.rstrip("\n"))
                if "listening on" in line:
                    ready.set()

        threading.Thread(target=pump, name=f"tidegate-embedded-log-{self.port}",
                         daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not ready.wait(0.01):
            if proc.poll() is not None:
                self._proc = None
                tail = "\n".join(list(self.log_lines)[-30:])
                if "Address already in use" in tail:
                    raise OSError(f"port {self.port} is taken:\n{tail}")
                raise EmbeddedBrokerError(f"the broker exited:\n{tail}")
            if time.monotonic() > deadline:
                self.kill()
                raise EmbeddedBrokerError(f"the broker did not start in {self.start_timeout} s")

    def _stop_process(self, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None

    def logs(self) -> str:
        """What the broker process printed last (process flavour; the thread flavour logs
        through the caller's `logging`)."""
        return "\n".join(self.log_lines)

    # -- test shortcuts (Tidegate's own client) ------------------------------------------
    def create_topic(self, name: str, partitions: int | None = None,
                     config: Mapping[str, object] | None = None) -> None:
        from tidegate.testing.helpers import create_topics

        create_topics(self.bootstrap_servers, [name], partitions=partitions, config=config)

    def read_topic(self, topic: str, *, isolation_level: str = "read_committed",
                   timeout: float = 10.0) -> list[ConsumerRecord]:
        from tidegate.testing.helpers import read_topic

        return read_topic(self.bootstrap_servers, topic, isolation_level=isolation_level,
                          timeout=timeout)

    def create_topics(self, names: Iterable[str], partitions: int | None = None,
                      config: Mapping[str, object] | None = None) -> None:
        from tidegate.testing.helpers import create_topics

        create_topics(self.bootstrap_servers, names, partitions=partitions, config=config)
