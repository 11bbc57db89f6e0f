"""`EmbeddedBrokerTestCase`: the pytest fixtures' equivalent for `unittest`.

    class OrdersTest(EmbeddedBrokerTestCase):            # or, for asyncio tests:
        tidegate_config = {"num.partitions": 3}          # class OrdersTest(
                                                         #     EmbeddedBrokerTestCase,
        def test_orders(self):                           #     IsolatedAsyncioTestCase)
            self.broker.create_topic("orders")
            ... self.bootstrap_servers ...

One broker per class by default (started in setUpClass, closed by a class cleanup);
`tidegate_per_test = True` gives each test its own. `tidegate_mode = "process"` makes
`self.broker.kill()` a real SIGKILL for crash tests. Data goes to a temporary directory
removed afterwards.
"""

from __future__ import annotations

import unittest
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from tidegate.embedded import EmbeddedBroker, Mode

__all__ = ["EmbeddedBrokerTestCase"]


class EmbeddedBrokerTestCase(unittest.TestCase):
    tidegate_config: ClassVar[Mapping[str, object]] = {}
    tidegate_mode: ClassVar[Mode] = "thread"
    tidegate_per_test: ClassVar[bool] = False
    broker: EmbeddedBroker

    @classmethod
    def _tidegate_start(cls) -> EmbeddedBroker:
        from tidegate.embedded import EmbeddedBroker

        return EmbeddedBroker(cls.tidegate_config, mode=cls.tidegate_mode).start()

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        if not cls.tidegate_per_test:
            cls.broker = cls._tidegate_start()
            cls.addClassCleanup(cls.broker.close)

    def setUp(self) -> None:
        super().setUp()
        if self.tidegate_per_test:
            self.broker = self._tidegate_start()
            self.addCleanup(self.broker.close)

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers
