"""The broker's metric state outside the request path, and its readiness.

`MetricsState` is made by BrokerApp when `http.listeners` is set. It holds the request
counters (requests.py), the KIP-714 client metrics (telemetry.py) and the few counters
that need a hook elsewhere: fsync times and group-commit sizes (from
server/durability.py's `on_fsync`), transaction markers written (a wrapper around the
transaction finisher's marker writer), ISR shrinks and expansions (a wrapper around the
cluster's ISR writer), coordinator load times (measured by BrokerApp) and how many
connections each Kafka listener holds. Everything else is read from the broker when
Prometheus scrapes (collector.py).

`Readiness` is what /readyz reports: the logs recovered, both coordinators loaded, the
Kafka listeners bound and, in a cluster, the broker registered in ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidegate.common.clock import Clock
from tidegate.common.config import BrokerConfig
from tidegate.coordinator.runtime import PartitionState
from tidegate.server.metrics.requests import TIME_BUCKETS_MS, Histogram, RequestMetrics
from tidegate.server.metrics.telemetry import ClientTelemetry

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

# Requests released by one fsync (group commit).
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass
class Readiness:
    logs_loaded: bool = False
    listening: bool = False
    stopping: bool = False
    # cluster mode only: registered in ZooKeeper (None: not a cluster)
    registered: Callable[[], bool] | None = None

    def problems(self, broker: Broker | None) -> list[str]:
        """What is not ready yet, in words (empty: ready)."""
        out = []
        if self.stopping:
            out.append("the broker is shutting down")
        if not self.logs_loaded:
            out.append("logs are being recovered")
        if broker is not None and self.logs_loaded:
            for name, coord in (("group", broker.group_coordinator),
                                ("transaction", broker.txn_coordinator)):
                loading = coordinator_loading(coord, broker.replicas.cluster)
                if loading is not None:
                    out.append(f"{name} coordinator loading ({loading})")
        if self.registered is not None and not self.registered():
            out.append("not registered in ZooKeeper")
        if not self.listening:
            out.append("Kafka listeners not bound yet")
        return out


def coordinator_loading(coord: Any, cluster: bool) -> str | None:
    """None once the coordinator's partitions led here are loaded; else which are not."""
    if not coord.shell.started:
        return "not started"
    runtime = coord.runtime
    parts: Iterable[int] = (sorted(runtime.leader_epochs) if cluster  # those led here
                            else range(runtime.num_partitions))
    waiting = [p for p in parts if runtime.state(p) is not PartitionState.ACTIVE]
    if not waiting:
        return None
    shown = ", ".join(f"{runtime.topic}-{p}" for p in waiting[:5])
    return shown + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")


@dataclass
class MetricsState:
    config: BrokerConfig
    clock: Clock
    requests: RequestMetrics
    telemetry: ClientTelemetry
    readiness: Readiness = field(default_factory=Readiness)
    fsync_ms: Histogram = field(default_factory=lambda: Histogram(TIME_BUCKETS_MS))
    group_commit: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    markers: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})
    isr_shrinks: int = 0
    isr_expands: int = 0
    load_time_ms: dict[str, float] = field(default_factory=dict)  # coordinator -> ms
    started_ms: int = 0
    # listener name -> open connections (BrokerApp sets it from the Kafka listener)
    connections: Callable[[], dict[str, int]] = lambda: {}

    def on_fsync(self, seconds: float, released: int) -> None:
        self.fsync_ms.observe(seconds * 1000.0)
        if released:
            self.group_commit.observe(float(released))

    def count_markers(self, write: Callable[..., Awaitable[dict[Any, Any]]]
                      ) -> Callable[..., Awaitable[dict[Any, Any]]]:
        """The finisher's marker writer, counting the markers it wrote (code NONE)."""

        async def counted(marker: Any, partitions: Any) -> dict[Any, Any]:
            results = await write(marker, partitions)
            self.markers[bool(marker.commit)] += sum(1 for c in results.values() if not c)
            return results

        return counted

    def count_isr(self, writer: Callable[[Any, tuple[int, ...]], None]
                  ) -> Callable[[Any, tuple[int, ...]], None]:
        """The cluster's ISR writer, counting shrinks and expansions proposed."""

        def counted(part: Any, new: tuple[int, ...]) -> None:
            lead = part.leadership
            old = len(lead.state.isr) if lead is not None else len(new)
            if len(new) < old:
                self.isr_shrinks += 1
            elif len(new) > old:
                self.isr_expands += 1
            writer(part, new)

        return counted
