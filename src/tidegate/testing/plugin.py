"""The pytest plugin (entry point `pytest11`: `tidegate = tidegate.testing.plugin`).

Installed with tidegate, so it is loaded by every pytest run in the environment — the
project's own suite included. It therefore defines fixtures only (none autouse), one
marker, and imports nothing of the broker until a fixture is requested.

Fixtures:
- `tidegate_broker`: a broker for one test, data in the test's `tmp_path`. Its settings
  come from `tidegate_config` (override that fixture) and the `tidegate` marker:
  `@pytest.mark.tidegate(config={...}, mode="process")`; mode "process" makes
  `kill()` a real SIGKILL for crash tests.
- `tidegate_session_broker`: one broker for the whole run (settings:
  `tidegate_session_config`, a session fixture to override), and
  `tidegate_bootstrap_servers`, its bootstrap string.
- `tidegate_broker_factory`: `make(config=None, mode="thread")` for tests that need
  several brokers or settings of their own; all are closed after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tidegate.embedded import EmbeddedBroker, Mode

BrokerFactory = Callable[..., "EmbeddedBroker"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tidegate(config=None, mode='thread'): settings (Kafka's names) and flavour of the "
        "tidegate_broker fixture's broker",
    )


def _start(data_dir: Path, config: Mapping[str, object], mode: Mode) -> EmbeddedBroker:
    from tidegate.embedded import EmbeddedBroker

    return EmbeddedBroker(config, mode=mode, data_dir=data_dir).start()


@pytest.fixture
def tidegate_config() -> dict[str, object]:
    """Settings for `tidegate_broker`; override this fixture to change them."""
    return {}


@pytest.fixture
def tidegate_broker(request: pytest.FixtureRequest, tmp_path: Path,
                    tidegate_config: dict[str, object]) -> Iterator[EmbeddedBroker]:
    marker = request.node.get_closest_marker("tidegate")
    config: dict[str, object] = dict(tidegate_config)
    mode: Mode = "thread"
    if marker is not None:
        config.update(marker.kwargs.get("config") or {})
        mode = marker.kwargs.get("mode", "thread")
    broker = _start(tmp_path / "tidegate", config, mode)
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def tidegate_session_config() -> dict[str, object]:
    """Settings for `tidegate_session_broker`; override this (session) fixture."""
    return {}


@pytest.fixture(scope="session")
def tidegate_session_broker(tmp_path_factory: pytest.TempPathFactory,
                            tidegate_session_config: dict[str, object]
                            ) -> Iterator[EmbeddedBroker]:
    broker = _start(tmp_path_factory.mktemp("tidegate"), tidegate_session_config, "thread")
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def tidegate_bootstrap_servers(tidegate_session_broker: EmbeddedBroker) -> str:
    return tidegate_session_broker.bootstrap_servers


@pytest.fixture
def tidegate_broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    brokers: list[EmbeddedBroker] = []

    def make(config: Mapping[str, object] | None = None, mode: Mode = "thread"
             ) -> EmbeddedBroker:
        broker = _start(tmp_path / f"tidegate-{len(brokers)}", config or {}, mode)
        brokers.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in reversed(brokers):
            broker.close()
