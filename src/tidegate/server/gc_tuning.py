"""The cyclic garbage collector's thresholds for the broker process.

CPython collects its youngest generation after every 700 net allocations of tracked
objects (containers: tuples, lists, dicts, futures, coroutines, dataclass instances).
A Produce request leaves a few dozen of them alive until its group-commit fsync, and a
producer keeps many requests in flight, so a young collection walks thousands of live
objects and then promotes them; the promoted ones are what later triggers the full
collections, which walk every object not frozen at the start (partitions created at
run time are not). At 1,000 partitions (one ~90 KB request per partition and
~3,400 requests per 300,000 records, bench/load_sweep.py) that was 60-90 young, ~6
middle and 1-2 full collections per run, ~0.3 s of collector time on the event loop
(`gc.callbacks`, loaded machine). With the young threshold at 10,000 the same load saw
~3 young and no older collection.

What changes is only when garbage cycles are found: reference counting frees the rest
at once as before, and a cycle waits for at most 10,000 more allocations (kilobytes).
`tune()` is called once by `run_broker` (the broker process owns its heap; the client
library never changes its host's collector); TIDEGATE_GC_TUNING=0 leaves CPython's
defaults (to measure without it).
"""

from __future__ import annotations

import gc
import os

YOUNG_THRESHOLD = 10_000  # CPython's default: 700


def tune() -> bool:
    """Raise the young generation's threshold (the older ones keep theirs); True if
    set."""
    if os.environ.get("TIDEGATE_GC_TUNING", "1") == "0":
        return False
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return True
