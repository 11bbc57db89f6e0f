"""Hypothesis strategies for kio's phantom types, registered on demand.

`import tidegate` imports kio with Hypothesis hidden (see tidegate/__init__.py: it
saves about a second of every cold start), so kio's types (i8, i16, u32, TZAware...)
have no registered strategy. A test that draws kio entities with `st.from_type` calls
`register()` first; it does what kio would have done at import.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["register"]


def register() -> None:
    phantom: Any = importlib.import_module("kio.static._phantom")
    importlib.import_module("kio.static.primitive")  # defines the phantom types
    if phantom.hypothesis is not None:
        return  # kio registered them itself (Hypothesis was not hidden)
    phantom.hypothesis = importlib.import_module("hypothesis")  # kio checks it from now on
    todo = list(phantom.Phantom.__subclasses__())
    while todo:  # every phantom type, subclasses of subclasses included
        cls = todo.pop(0)
        cls.__hypothesis_hook__()
        todo += cls.__subclasses__()
