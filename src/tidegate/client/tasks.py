"""Stopping background tasks reliably.

On Python 3.11, `asyncio.wait_for` can swallow a cancellation that arrives together
with the wake-up it was waiting for, so a loop built on it may survive one `cancel()`
and an `await task` after it can hang forever. `cancel_and_wait` cancels again until
the task is done, within a bound, and never raises the task's own outcome.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task[Any], timeout: float = 5.0) -> None:
    """Cancel `task` and wait until it finishes (at most `timeout` seconds).

    A cancellation of the caller itself still propagates.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not task.done():
        left = deadline - loop.time()
        if left <= 0:
            log.warning("task %s did not stop within %.1f s", task.get_name(), timeout)
            return
        task.cancel()
        await asyncio.wait({task}, timeout=min(0.05, left))
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
