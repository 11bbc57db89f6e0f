"""`tidegate produce TOPIC`: send each input line as a record (like kafka-console-producer).

Lines come from stdin or `--file`; the line ending (\\n, \\r\\n) is not part of the
value. With `--key-separator SEP` each line is split at the first SEP into key and
value (a line without SEP is an error, as in Kafka). `--header k=v` adds headers to
every record. When reading a file, a progress bar (percent, lines, lines/s) is drawn on
stderr — live on a terminal, as a final summary line otherwise.

Input is read by a thread as it arrives (see `_chunks`), so interactive and piped input
is sent line by line while large files stream at full speed. Records go through the
asyncio producer's non-blocking path (`try_append`) with one shared completion tracker
instead of a future per line, so the CLI costs little beyond the producer itself.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import sys
import threading
import time
from collections.abc import AsyncGenerator
from typing import IO, Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import parse_pairs, run_client
from tidegate.client.config import ProducerConfig
from tidegate.client.errors import explain
from tidegate.client.producer.producer import AsyncProducer
from tidegate.client.types import RecordMetadata


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "produce",
        help="send lines from stdin or a file as records",
        description="Produce one record per input line (like kafka-console-producer.sh).",
    )
    p.add_argument("topic")
    p.add_argument("--file", metavar="PATH", help="read lines from this file instead of stdin")
    p.add_argument(
        "--key-separator", metavar="SEP", help="split each line at the first SEP into key and value"
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="add a header to every record (repeatable)",
    )
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument(
        "--acks",
        default="all",
        choices=["all", "-1", "0", "1"],
        help="acknowledgements to wait for (default all)",
    )
    p.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type (default none)",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any producer config, e.g. linger.ms=20 (repeatable)",
    )
    p.add_argument("--no-progress", action="store_true", help="do not draw a progress bar")
    add_bootstrap(p)
    p.set_defaults(func=run)


class Tracker:
    """Completion token shared by every record: counts acks, keeps the first error."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.error: BaseException | None = None

    def done(self) -> bool:
        return False

    def set_result(self, result: RecordMetadata, /) -> None:
        self.acked += 1

    def set_exception(self, exception: BaseException, /) -> None:
        self.failed += 1
        if self.error is None:
            self.error = exception


class Progress:
    """A progress bar on stderr: percent of the file, lines and lines per second."""

    def __init__(self, total_bytes: int, enabled: bool) -> None:
        self.total = max(total_bytes, 1)
        self.enabled = enabled
        self.live = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, done_bytes: int, lines: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and (not self.live or now - self._last < 0.1):
            return
        self._last = now
        rate = lines / max(now - self.start, 1e-6)
        frac = min(done_bytes / self.total, 1.0)
        filled = int(frac * 30)
        bar = "#" * filled + "." * (30 - filled)
        line = f"[{bar}] {frac * 100:5.1f}%  {lines:,} lines  {rate:,.0f} lines/s"
        if self.live:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    async def main() -> int:
        headers = tuple((k, v.encode()) for k, v in parse_pairs(args.header, "--header").items())
        config = client_settings(args, ProducerConfig, {
            "client.id": "tidegate-produce",
            "acks": args.acks,
            "compression.type": args.compression,
        })
        config.update(parse_pairs(args.producer_property, "--producer-property"))
        sep = args.key_separator.encode() if args.key_separator else None
        if args.file:
            stream: IO[bytes] = open(args.file, "rb")  # noqa: SIM115 - closed below
            progress = Progress(os.fstat(stream.fileno()).st_size, not args.no_progress)
        else:
            stream = sys.stdin.buffer
            progress = Progress(0, False)
        producer = AsyncProducer(config)
        tracker = Tracker()
        try:
            await producer.start()
            lines = await _pump(producer, args, stream, sep, headers, tracker, progress)
            await producer.flush()
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
            await producer.close()
        progress.update(progress.total, lines, final=True)
        if tracker.error is not None:
            print(
                f"tidegate produce: {tracker.failed} of {lines} records failed: "
                f"{explain(tracker.error)}",
                file=sys.stderr,
            )
            return 1
        return 0

    return run_client("produce", main)


async def _chunks(stream: IO[bytes]) -> AsyncGenerator[list[bytes], None]:
    """Lines of `stream` in chunks, as soon as they are available.

    A thread reads with `os.read`, which returns whatever has arrived, so lines typed
    at a terminal or trickling through a pipe are sent at once, while the event loop
    (and the producer's sender) keeps running during blocking reads.

    The consumer may stop early (a bad line, a failed send): closing this generator
    tells the thread to stop, and the thread never touches a loop that has gone away,
    so nothing but the command's own error reaches stderr."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[list[bytes] | BaseException | None] = asyncio.Queue(maxsize=8)
    stop = threading.Event()

    def put(item: list[bytes] | BaseException | None) -> bool:
        """Hand `item` to the loop, waiting for room; False once nobody listens."""
        if stop.is_set():
            return False
        coro = queue.put(item)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            return False
        try:
            future.result()
        except (concurrent.futures.CancelledError, RuntimeError):
            return False  # the loop shut down (cancelling the put) before it ran
        return not stop.is_set()

    def reader() -> None:
        rest = b""
        try:
            try:
                fd = stream.fileno()
            except (OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
                fd = -1
            while chunk := (os.read(fd, 1 << 18) if fd >= 0 else stream.read(1 << 18)):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                if lines and not put(lines):
                    return
            if rest and not put([rest]):
                return
            put(None)
        except BaseException as e:  # surfaced in the event loop
            put(e)

    threading.Thread(target=reader, name="tidegate-produce-input", daemon=True).start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while not queue.empty():  # unblock a put the thread is waiting on
            queue.get_nowait()


async def _pump(
    producer: AsyncProducer,
    args: argparse.Namespace,
    stream: IO[bytes],
    sep: bytes | None,
    headers: tuple[tuple[str, bytes], ...],
    tracker: Tracker,
    progress: Progress,
) -> int:
    topic, partition = args.topic, args.partition
    prepare, try_append, append = producer.prepare, producer.try_append, producer.append
    hdrs = headers or None
    lines = 0
    done_bytes = 0
    async with contextlib.aclosing(_chunks(stream)) as chunks:
        async for chunk in chunks:
            for line in chunk:
                lines += 1
                done_bytes += len(line) + 1
                if line.endswith(b"\r"):
                    line = line[:-1]
                key: bytes | None = None
                if sep is not None:
                    key, found, line = line.partition(sep)
                    if not found:
                        raise ValueError(
                            f"line {lines} has no key separator {sep.decode()!r}; "
                            "every line must look like KEY<SEP>VALUE"
                        )
                prepared = prepare(topic, line, key, hdrs)
                if not try_append(topic, partition, prepared, None, tracker):
                    await append(topic, partition, prepared, None, tracker)
            progress.update(done_bytes, lines)
            if tracker.error is not None:
                break  # failures are final (the producer already retried): stop early
    return lines
