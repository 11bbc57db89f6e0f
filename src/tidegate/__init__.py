"""Tidegate: a Kafka-wire-compatible streaming log built for exactly-once.

`tidegate.EmbeddedBroker` (tidegate/embedded.py) runs a broker inside a program or a
test. It is imported on first use, so `import tidegate` stays cheap (the pytest plugin
in tidegate/testing/ is loaded by every pytest run), and by name, so that the layers
below, which import this package for `__version__`, do not appear to import the broker
(import-linter reads every import statement, TYPE_CHECKING ones included).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

__version__ = "0.1.0"


def _import_kio_without_hypothesis() -> None:
    """Import kio's phantom-type base with Hypothesis hidden.

    kio (the wire schemas) imports `hypothesis.strategies` whenever Hypothesis is
    installed, only to register strategies for its own types: ~1 s of a cold start (and
    pytest, trio and more with it) that a broker never uses. Hiding Hypothesis for the
    length of that one import makes kio skip the registration; Hypothesis itself
    imports normally afterwards. Tests that draw kio types with `st.from_type` call
    `tidegate.protocol.kio_hypothesis.register()`. Nothing is hidden when kio or
    Hypothesis is already imported, or with TIDEGATE_KIO_HYPOTHESIS=1.
    """
    if ("kio" in sys.modules or "hypothesis" in sys.modules
            or os.environ.get("TIDEGATE_KIO_HYPOTHESIS") == "1"):
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        importlib.import_module("kio.static._phantom")
    except ImportError:  # pragma: no cover - kio missing: the real import will say so
        pass
    finally:
        if "hypothesis" in sys.modules and sys.modules["hypothesis"] is None:
            del sys.modules["hypothesis"]


_import_kio_without_hypothesis()


def __getattr__(name: str) -> Any:
    if name == "EmbeddedBroker":
        return importlib.import_module("tidegate.embedded").EmbeddedBroker
    raise AttributeError(f"module 'tidegate' has no attribute {name!r}")
