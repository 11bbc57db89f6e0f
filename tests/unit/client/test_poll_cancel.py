"""A cancelled poll() must raise CancelledError, even when the cancellation races the
wake-up it was waiting for (Python 3.11's asyncio.wait_for returned normally then, so
a Ctrl-C on `tidegate consume` was lost while fetched data kept arriving)."""

from __future__ import annotations

import asyncio
import time
import types

from tidegate.client.consumer.consumer import AsyncConsumer


async def _cancel_as_data_arrives() -> bool:
    fetcher = types.SimpleNamespace(data_ready=asyncio.Event())
    consumer = types.SimpleNamespace(_group=None)  # assign(): no group to wait on
    task = asyncio.create_task(
        AsyncConsumer._wait(consumer, fetcher, time.monotonic() + 5))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # waiting on data_ready now
    fetcher.data_ready.set()  # a fetch answer lands...
    task.cancel()  # ...as Ctrl-C cancels the main task
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


def test_a_cancellation_racing_fetched_data_is_not_swallowed() -> None:
    async def main() -> list[bool]:
        return [await _cancel_as_data_arrives() for _ in range(20)]

    assert all(asyncio.run(main()))
