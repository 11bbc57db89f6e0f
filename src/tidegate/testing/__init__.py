"""Tidegate as a test fixture: a pytest plugin, a unittest mixin and helpers.

- `tidegate.testing.plugin`: pytest fixtures (`tidegate_broker`, `tidegate_session_broker`,
  `tidegate_bootstrap_servers`, `tidegate_broker_factory`), registered through the
  `pytest11` entry point, so installing tidegate is all it takes. See docs/testing.md.
- `EmbeddedBrokerTestCase` (tidegate/testing/case.py): the same for `unittest`, also
  with `IsolatedAsyncioTestCase`.
- `create_topics` and `read_topic` (tidegate/testing/helpers.py): over any bootstrap
  string; `read_topic` reads read_committed by default.

Every name here is imported on first use: pytest imports the plugin in every run of
every project once tidegate is installed, and that must cost next to nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidegate.embedded import EmbeddedBroker as EmbeddedBroker
    from tidegate.testing.case import EmbeddedBrokerTestCase as EmbeddedBrokerTestCase
    from tidegate.testing.helpers import create_topics as create_topics
    from tidegate.testing.helpers import read_topic as read_topic

__all__ = ["EmbeddedBroker", "EmbeddedBrokerTestCase", "create_topics", "read_topic"]

_WHERE = {
    "EmbeddedBroker": "tidegate.embedded",
    "EmbeddedBrokerTestCase": "tidegate.testing.case",
    "create_topics": "tidegate.testing.helpers",
    "read_topic": "tidegate.testing.helpers",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'tidegate.testing' has no attribute {name!r}")
