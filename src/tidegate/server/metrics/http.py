"""The broker's HTTP listener: /metrics, /healthz, /readyz, and the routes others mount.

`http.listeners` (default `http://127.0.0.1:9644`, Redpanda's admin port; empty: off) is
served by aiohttp on the broker's event loop. It starts before the logs are recovered,
so /readyz can answer 503 while the broker loads, and stops after the Kafka listeners.
Port 0 binds a free port; `bound` says which (`tidegate serve` prints it).

- `/metrics`: the Prometheus text format (OpenMetrics if the scraper asks for it),
  through prometheus-client's registry, from `BrokerCollector` (collector.py) plus the
  process's own `process_*` / `python_*` metrics; exposition.py writes the text.
- `/healthz`: 200 while the process serves HTTP at all (a liveness probe).
- `/readyz`: 200 once the logs are recovered, both coordinators loaded, the Kafka
  listeners bound and, in a cluster, the broker registered in ZooKeeper; else 503. Both
  answer a small JSON body; /readyz's names what is not ready.
- `extra_routes(app)`: what `tidegate serve` mounts besides (the web console).

Bad input gets an HTTP error from aiohttp's parser — an over-long request line or
header (8 KiB each, at most 100 headers) 400/431, a body on these GET endpoints is not
read, an unknown path 404, another method 405 — and never reaches the Kafka side: the
HTTP and Kafka listeners share only the event loop, and each HTTP request is short. A
client that sends its headers slowly holds only its own connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder

from tidegate.common.errors import InvalidConfigError
from tidegate.server.metrics.collector import BrokerCollector
from tidegate.server.metrics.exposition import CONTENT_TYPE, render
from tidegate.server.metrics.state import MetricsState

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

RouteAdder = Callable[[web.Application], None]


def parse_http_listeners(value: str) -> list[tuple[str, int]]:
    """`http://host:port[,http://host:port]` -> [(host, port)]; empty host: all
    interfaces. Raises InvalidConfigError on anything else (https is not served)."""
    out = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        parts = urlsplit(item)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "http" or port is None or parts.path not in ("", "/"):
            raise InvalidConfigError(
                f"http.listeners entry {item!r} must look like http://127.0.0.1:9644")
        out.append((parts.hostname or "", port))
    return out


class HttpListener:
    def __init__(self, broker: Broker, state: MetricsState,
                 extra_routes: RouteAdder | None = None) -> None:
        self.broker = broker
        self.state = state
        self.addresses = parse_http_listeners(broker.config.get("http.listeners"))
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BrokerCollector(broker, state)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.app = web.Application(client_max_size=64 * 1024)
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        if extra_routes is not None:
            extra_routes(self.app)
        self.runner: web.AppRunner | None = None
        self.bound: list[tuple[str, int]] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://{h if ':' not in h else f'[{h}]'}:{p}" for h, p in self.bound]

    async def start(self) -> list[tuple[str, int]]:
        self.runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False,
            max_line_size=8190, max_field_size=8190, max_headers=100,
            keepalive_timeout=75.0)
        await self.runner.setup()
        for host, port in self.addresses:
            site = web.TCPSite(self.runner, host or None, port, reuse_address=True)
            await site.start()
        # the bound sockets (with port 0: the ports picked)
        self.bound = [(str(a[0]), int(a[1])) for a in self.runner.addresses]
        return self.bound

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # -- endpoints ------------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        if not content_type.startswith("application/openmetrics"):
            encoder, content_type = render, CONTENT_TYPE  # the same text, written faster
        try:
            body = encoder(self.registry)
        except Exception:
            log.exception("metrics scrape failed")
            return web.json_response({"error": "metrics scrape failed; see the broker log"},
                                     status=500)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": self.broker.node_id})

    async def _readyz(self, request: web.Request) -> web.Response:
        problems = self.state.readiness.problems(self.broker)
        if problems:
            return web.json_response({"status": "not ready", "waiting_for": problems},
                                     status=503)
        return web.json_response({"status": "ready", "node_id": self.broker.node_id})
