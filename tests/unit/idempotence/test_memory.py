"""memory_estimate() stays within a factor of what tracemalloc actually measures."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from tidegate.storage.producer_state import ProducerStateManager

from ._support import at, header

N = 5_000


@pytest.mark.parametrize("batches", [1, 5])
def test_memory_estimate_is_close_to_measured(batches: int) -> None:
    headers = [
        at(header(7_000_000 + i, 0, 100 * b, 3, timestamp=1_700_000_000_000), 10**9 + 3 * k)
        for k, (b, i) in enumerate((b, i) for b in range(batches) for i in range(N))
    ]
    psm = ProducerStateManager()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for h in headers:
            psm.update(h, 1_700_000_000_000 + h.base_offset)
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert 0.6 < psm.memory_estimate() / used < 1.6, (used / N, psm.memory_estimate() / N)
