"""`tidegate produce`'s input reader over a stream without a file descriptor (a caller's
in-memory stdin): it reads the lines instead of leaving the command waiting forever."""

from __future__ import annotations

import asyncio
import io

from tidegate.cli.produce import _chunks


async def _read_all(stream: io.BytesIO) -> list[bytes]:
    lines: list[bytes] = []
    async for chunk in _chunks(stream):
        lines.extend(chunk)
    return lines


def test_in_memory_stream_is_read() -> None:
    stream = io.BytesIO(b"a\nbb\n\nlast-without-newline")
    got = asyncio.run(asyncio.wait_for(_read_all(stream), 10))
    assert got == [b"a", b"bb", b"", b"last-without-newline"]
