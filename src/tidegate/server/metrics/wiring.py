"""How BrokerApp plugs observability into a broker: one object, a few calls.

`Observability.create(...)` returns None when `http.listeners` is empty: then the broker
has no request counters, no KIP-714 APIs and no HTTP listener, and nothing here runs.
Otherwise it sets the request-path counters on the broker, hooks the group commit's
fsync times, registers GetTelemetrySubscriptions/PushTelemetry, and BrokerApp calls:

- `start()` first, before the logs load (so /readyz answers 503 meanwhile). With the
  default address (`http.listeners` not set) a port already in use is a warning and the
  broker runs without HTTP — several development brokers on one machine must not fail
  on 9644; an address set explicitly that cannot be bound stops the broker, as a Kafka
  listener would;
- `logs_loaded()`, `timed(name, coroutine)` around each coordinator's start,
  `serving(listener, cluster)` once the Kafka listeners are bound (it wraps the marker
  and ISR writers, which exist only then), `stopping()` and `stop()`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from tidegate.server.handlers.telemetry import handle_get_subscriptions, handle_push
from tidegate.server.metrics.http import HttpListener, RouteAdder
from tidegate.server.metrics.requests import RequestMetrics
from tidegate.server.metrics.state import MetricsState
from tidegate.server.metrics.telemetry import ClientTelemetry

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.cluster.node import ClusterNode
    from tidegate.server.listener import Listener

log = logging.getLogger("tidegate.server")


class Observability:
    def __init__(self, broker: Broker, routes: RouteAdder | None) -> None:
        self.broker = broker
        self.explicit = "http.listeners" in broker.config.explicit

        def topic_name(topic_id: Any) -> str | None:
            meta = broker.logs.topic_by_id(topic_id)
            return None if meta is None else meta.name

        self.state = MetricsState(broker.config, broker.clock, RequestMetrics(topic_name),
                                  ClientTelemetry(broker.config, broker.clock),
                                  started_ms=broker.clock.now_ms())
        self.http = HttpListener(broker, self.state, routes)
        broker.request_metrics = self.state.requests
        broker.group_commit.on_fsync = self.state.on_fsync
        tel = self.state.telemetry
        broker.dispatcher.register(71, functools.partial(handle_get_subscriptions, tel), 0, 0)
        broker.dispatcher.register(72, functools.partial(handle_push, tel), 0, 0)

    @classmethod
    def create(cls, broker: Broker, routes: RouteAdder | None = None) -> Observability | None:
        if not broker.config.get("http.listeners").strip():
            return None
        return cls(broker, routes)

    @property
    def urls(self) -> list[str]:
        return self.http.urls

    async def start(self) -> list[str]:
        try:
            await self.http.start()
        except OSError as e:
            if self.explicit:
                raise OSError(e.errno, f"http.listeners {self.broker.config.get('http.listeners')}"
                                       f": {e.strerror}") from e
            log.warning("HTTP listener off: the default http.listeners %s cannot be bound "
                        "(%s); set http.listeners to another address, or empty",
                        self.broker.config.get("http.listeners"), e.strerror)
            await self.http.stop()
            return []
        return self.urls

    def logs_loaded(self) -> None:
        self.state.readiness.logs_loaded = True

    async def timed(self, name: str, start: Awaitable[None]) -> None:
        began = time.perf_counter()
        await start
        self.state.load_time_ms[name] = (time.perf_counter() - began) * 1000.0

    def serving(self, listener: Listener, cluster: ClusterNode | None) -> None:
        st = self.state
        tc = self.broker.txn_coordinator
        tc.finisher.write = st.count_markers(tc.finisher.write)
        if cluster is not None:
            st.readiness.registered = lambda: cluster.broker_epoch >= 0
            replicas = self.broker.replicas
            if replicas.isr_writer is not None:
                replicas.isr_writer = st.count_isr(replicas.isr_writer)
        names = [lis.name for lis in self.broker.config.listeners()]
        st.connections = functools.partial(_connections, listener, names)
        st.readiness.listening = True

    def stopping(self) -> None:
        self.state.readiness.stopping = True

    async def stop(self) -> None:
        await self.http.stop()


def _connections(listener: Listener, names: list[str]) -> dict[str, int]:
    return {name: listener.open_by_listener.get(name, 0) for name in names}
