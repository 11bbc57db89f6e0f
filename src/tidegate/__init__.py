"""Tidegate: a Kafka-wire-compatible streaming log built for exactly-once.

`tidegate.EmbeddedBroker` (tidegate/embedded.py) runs a broker inside a program or a
test. It is imported on first use, so `import tidegate` stays cheap (the pytest plugin
in tidegate/testing/ is loaded by every pytest run), and by name, so that the layers
below, which import this package for `__version__`, do not appear to import the broker
(import-linter reads every import statement, TYPE_CHECKING ones included).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "EmbeddedBroker":
        return importlib.import_module("tidegate.embedded").EmbeddedBroker
    raise AttributeError(f"module 'tidegate' has no attribute {name!r}")
