"""The web console's HTTP side: `add_routes()` puts its pages on an aiohttp Application.

The broker mounts it on its HTTP listener (bootstrap = its own Kafka listener) and
`tidegate console` runs it standalone against any Kafka cluster. Routes:

    GET  /                          overview + live throughput chart (/api/throughput)
    GET  /topics, /topics/{t}       topics; partitions with HW, LSO, sizes; configs
    POST /topics, /topics/{t}/delete            create; delete (after a confirmation)
    GET  /topics/{t}/messages       the message browser
    GET  /groups, /groups/{g}       groups; members, assignment, lag per partition
    GET  /groups/{g}/reset          offset reset dry run; POST applies it
    GET  /transactions              open transactions, partitions whose LSO is pinned
    POST /transactions/abort        abort one partition's open transaction (confirmed)
    POST /transactions/terminate    abort a transactional id's transaction (confirmed)
    GET  /static/{name}             the files in console/static (nothing else)

Any page with ``?fragment=1`` answers only its live part (the browser polls it).
Every POST needs the app's CSRF token (in a hidden field) and, when the browser sends an
Origin header, a same-origin one; read-only mode refuses POSTs (403) and hides their
forms. Bad parameters are a 400 with a message; a missing topic or group a 404; a
broker error a 502; a broker that does not answer within `REQUEST_TIMEOUT_S` a 504.
Each failure is logged once and never reaches the Kafka listeners.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from urllib.parse import urlsplit

from aiohttp import web

from tidegate.client.types import TopicPartition
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.console import pages
from tidegate.console.data import ConsoleClient
from tidegate.console.fetch import LeaderConnections, browse
from tidegate.console.params import (
    LIMITS,
    ParamError,
    choice_param,
    int_param,
    name_param,
)
from tidegate.console.render import FORMATS, Markup, esc, layout, seg, url
from tidegate.console.txns import abort_in_partition, force_terminate, transactions

__all__ = ["add_routes"]

log = logging.getLogger("tidegate.console")

REQUEST_TIMEOUT_S = 20.0
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
NOT_FOUND = {ErrorCode.unknown_topic_or_partition, ErrorCode.group_id_not_found,
             ErrorCode.transactional_id_not_found}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _static_files() -> dict[str, bytes]:
    root = resources.files("tidegate.console") / "static"
    return {f.name: f.read_bytes() for f in root.iterdir()
            if f.is_file() and any(f.name.endswith(s) for s in STATIC_TYPES)}


class Console:
    """The routes' shared state: the client, the CSRF token, read-only mode."""

    def __init__(self, settings: Mapping[str, object], read_only: bool,
                 bootstrap: str | Callable[[], str]) -> None:
        self.settings = dict(settings)
        self.bootstrap = bootstrap  # a callable: known once the broker has bound its port
        self.read_only = read_only
        self.csrf = secrets.token_urlsafe(32)
        self.static = _static_files()
        self._client: ConsoleClient | None = None
        self.conns: LeaderConnections | None = None

    async def client(self) -> ConsoleClient:
        if self._client is None:
            b = self.bootstrap
            self._client = ConsoleClient(
                {**self.settings, "bootstrap.servers": b() if callable(b) else b})
            self.conns = LeaderConnections(self._client)
        await self._client.ensure_started()
        return self._client

    async def close(self, _app: web.Application | None = None) -> None:
        if self.conns is not None:
            await self.conns.close()
        if self._client is not None:
            await self._client.close()

    # -- responses ---------------------------------------------------------------------

    def page(self, request: web.Request, title: str, live: Markup, *, active: str = "",
             after: Markup | None = None, status: int = 200, poll: bool = True
             ) -> web.Response:
        if request.query.get("fragment") == "1":
            return web.Response(text=str(live), content_type="text/html", status=status,
                                headers=SECURITY_HEADERS)
        flash = request.query.get("flash", "")[:500]
        frag = ""
        if poll:
            frag = url(request.path, **{**dict(request.query), "fragment": "1",
                                        "flash": ""})
        text = layout(title, live, active=active, read_only=self.read_only, live=frag,
                      flash=flash, after=after)
        return web.Response(text=text, content_type="text/html", status=status,
                            headers=SECURITY_HEADERS)

    def error(self, request: web.Request, status: int, message: str) -> web.Response:
        body = Markup(f'<p class="flash bad" id="error">{esc(message)}</p>')
        return self.page(request, f"Error {status}", body, status=status, poll=False)

    async def form(self, request: web.Request) -> dict[str, str]:
        """The POST's fields, after the read-only, Origin and CSRF checks."""
        if self.read_only:
            raise web.HTTPForbidden(text="the console is read-only")
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            raise web.HTTPForbidden(text="cross-origin POST refused")
        data = await request.post()
        fields = {k: v for k, v in data.items() if isinstance(v, str)}
        if not hmac.compare_digest(fields.get("csrf", ""), self.csrf):
            raise web.HTTPForbidden(text="missing or wrong CSRF token: reload the page")
        return fields


def _guard(console: Console, handler: Handler) -> Handler:
    """Turn bad input and broker errors into clear HTTP answers, logged once."""
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await asyncio.wait_for(handler(request), REQUEST_TIMEOUT_S)
        except web.HTTPException as e:
            if e.status >= 400 and e.text:
                return console.error(request, e.status, e.text)
            raise
        except ParamError as e:
            return console.error(request, 400, str(e))
        except KafkaError as e:
            status = 404 if e.code in NOT_FOUND else 502
            log.warning("console %s %s: %s", request.method, request.path, e)
            return console.error(request, status, str(e))
        except ValueError as e:  # a refused action (group has members, no open txn)
            return console.error(request, 409, str(e))
        except TimeoutError:
            log.warning("console %s %s: no answer within %.0f s", request.method,
                        request.path, REQUEST_TIMEOUT_S)
            return console.error(request, 504, "the cluster did not answer in time")
        except Exception:
            log.exception("console %s %s failed", request.method, request.path)
            return console.error(request, 500, "internal error (see the log)")
    return wrapped


def _back(path: str, flash: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(url(path, flash=flash))


def add_routes(app: web.Application, bootstrap: str | Callable[[], str], *, read_only: bool,
               client_config: Mapping[str, object] | None = None) -> None:
    """Add the console's routes (see the module docstring) to `app`. `bootstrap`: the
    servers, or a function giving them at the first request (a broker mounting its own
    console learns its bound port only once it listens). `client_config`: extra Kafka
    client settings (security.protocol, ssl.*, sasl.*)."""
    c = Console(dict(client_config or {}), read_only, bootstrap)
    app.on_cleanup.append(c.close)

    async def overview(request: web.Request) -> web.StreamResponse:
        ov = await (await c.client()).overview()
        return c.page(request, "Overview", pages.overview(ov), active="/",
                      after=pages.throughput_chart())

    async def throughput(request: web.Request) -> web.StreamResponse:
        t, produced, consumed = await (await c.client()).offset_totals()
        return web.json_response({"t": t, "produced": produced, "consumed": consumed},
                                 headers=SECURITY_HEADERS)

    async def topic_list(request: web.Request) -> web.StreamResponse:
        found = await (await c.client()).topics()
        after = Markup("") if c.read_only else pages.create_topic_form(c.csrf)
        return c.page(request, "Topics", pages.topics(found), active="/topics", after=after)

    async def topic_create(request: web.Request) -> web.StreamResponse:
        f = await c.form(request)
        name = name_param(f, "name")
        parts = int_param(f, "partitions", 1, lo=1, hi=10_000)
        rf = int_param(f, "replication_factor", 1, lo=1, hi=32)
        configs = {}
        for item in filter(None, (s.strip() for s in f.get("configs", "").split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ParamError(f"configs: {item[:60]!r} is not key=value")
            configs[key.strip()] = value.strip()
        await (await c.client()).create_topic(name, parts, rf, configs)
        raise _back("/topics/" + seg(name), f"Created topic {name}.")

    async def topic_detail(request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        d = await (await c.client()).topic(name)
        after = Markup("") if c.read_only else pages.delete_topic_form(name, c.csrf)
        return c.page(request, f"Topic {name}", pages.topic(d), active="/topics", after=after)

    async def topic_delete(request: web.Request) -> web.StreamResponse:
        f = await c.form(request)
        name = request.match_info["topic"]
        if f.get("confirm") != "yes":
            return c.page(request, f"Delete topic {name}?", pages.confirm(
                f"Delete topic {name} and all its records? This cannot be undone.",
                f"/topics/{seg(name)}/delete", {}, f"Yes, delete {name}", c.csrf,
                f"/topics/{seg(name)}"), poll=False)
        await (await c.client()).delete_topic(name)
        raise _back("/topics", f"Deleted topic {name}.")

    async def messages(request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        q = request.query
        partition = int_param(q, "partition", 0, hi=1_000_000)
        offset = int_param(q, "offset", -1) if q.get("offset", "").strip() else None
        ts = int_param(q, "timestamp", -1) if q.get("timestamp", "").strip() else None
        limit = int_param(q, "limit", 50, lo=1, hi=LIMITS["limit"])
        max_bytes = int_param(q, "max_bytes", 1 << 20, lo=1024, hi=LIMITS["max_bytes"])
        iso = choice_param(q, "isolation", ("read_uncommitted", "read_committed"))
        fmt = choice_param(q, "format", FORMATS)
        client = await c.client()
        desc = (await client.admin.describe_topics([name], include_configs=False))[0]
        assert c.conns is not None  # made by c.client()
        res = await browse(client, c.conns, TopicPartition(name, partition), offset=offset,
                           timestamp=ts, limit=limit, max_bytes=max_bytes,
                           read_committed=iso == "read_committed")
        form = pages.message_query(name, len(desc.partitions), dict(q))
        return c.page(request, f"Messages of {name}", Markup(form + pages.messages(res, fmt)),
                      active="/topics", poll=False)

    async def group_list(request: web.Request) -> web.StreamResponse:
        found = await (await c.client()).group_list()
        return c.page(request, "Consumer groups", pages.groups(found), active="/groups")

    async def group_detail(request: web.Request) -> web.StreamResponse:
        gid = request.match_info["group"]
        client = await c.client()
        d = await client.group(gid)
        after = Markup("")
        if not c.read_only:
            topics = sorted({r.topic for r in d.partitions}
                            or set(await client.admin.list_topics()))
            after = pages.reset_form(gid, topics)
        return c.page(request, f"Group {gid}", pages.group(d), active="/groups", after=after)

    async def group_reset_preview(request: web.Request) -> web.StreamResponse:
        gid = request.match_info["group"]
        q = request.query
        topic = name_param(q, "topic")
        to = choice_param(q, "to", ("earliest", "latest", "offset"))
        offset = int_param(q, "offset", None if to == "offset" else 0)
        plan = await (await c.client()).reset_plan(gid, topic, to, offset)
        return c.page(request, f"Reset {gid} on {topic}",
                      pages.reset_plan(gid, topic, plan, c.csrf, c.read_only),
                      active="/groups", poll=False)

    async def group_reset_apply(request: web.Request) -> web.StreamResponse:
        f = await c.form(request)
        gid = request.match_info["group"]
        topic = name_param(f, "topic")
        plan: dict[int, int] = {}
        for item in filter(None, f.get("plan", "").split(",")):
            p, _, o = item.partition(":")
            plan[int_param({"p": p}, "p", hi=1_000_000)] = int_param({"o": o}, "o")
        if not plan:
            raise ParamError("plan is required")
        await (await c.client()).apply_reset(gid, topic, plan)
        raise _back("/groups/" + seg(gid), f"Reset the offsets of {gid} on {topic}.")

    async def txn_page(request: web.Request) -> web.StreamResponse:
        view = await transactions(await c.client())
        body = pages.transactions(view, int(time.time() * 1000), c.csrf, c.read_only)
        return c.page(request, "Transactions", body, active="/transactions")

    async def txn_abort(request: web.Request) -> web.StreamResponse:
        f = await c.form(request)
        topic = name_param(f, "topic")
        partition = int_param(f, "partition", hi=1_000_000)
        pid = int_param(f, "producer_id")
        where = f"{topic}-{partition}"
        if f.get("confirm") != "yes":
            return c.page(request, "Abort a transaction?", pages.confirm(
                f"Write an ABORT marker for producer {pid} in {where}? Its records there "
                "become aborted and the partition's last stable offset moves on.",
                "/transactions/abort", {"topic": topic, "partition": partition,
                                        "producer_id": pid},
                "Yes, abort it", c.csrf, "/transactions"), poll=False)
        lso = await abort_in_partition(await c.client(), TopicPartition(topic, partition), pid)
        raise _back("/transactions", f"Aborted the transaction of producer {pid} in {where}; "
                    f"its last stable offset is now {lso}.")

    async def txn_terminate(request: web.Request) -> web.StreamResponse:
        f = await c.form(request)
        tid = name_param(f, "transactional_id", max_len=32767)
        if f.get("confirm") != "yes":
            return c.page(request, "Abort a transaction?", pages.confirm(
                f"Abort the transaction of {tid!r} through its coordinator? Its producer "
                "is fenced: its next request fails.", "/transactions/terminate",
                {"transactional_id": tid}, "Yes, abort it", c.csrf, "/transactions"),
                poll=False)
        before = await force_terminate(await c.client(), tid)
        raise _back("/transactions", f"Aborted the transaction of {tid!r} (it was {before}); "
                    "its producer is fenced.")

    async def static(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = c.static.get(name)
        if body is None:
            if not name or any(s in name for s in ("..", "/", "\\", "%", "\x00")):
                raise ParamError(f"bad static file name {name[:80]!r}")
            raise web.HTTPNotFound(text=f"no static file {name[:80]!r}")
        ctype = STATIC_TYPES[name[name.rindex("."):]]
        return web.Response(body=body, content_type=ctype,
                            headers={"X-Content-Type-Options": "nosniff",
                                     "Cache-Control": "max-age=300"})

    def g(h: Handler) -> Handler:
        return _guard(c, h)

    app.router.add_get("/", g(overview))
    app.router.add_get("/api/throughput", g(throughput))
    app.router.add_get("/topics", g(topic_list))
    app.router.add_post("/topics", g(topic_create))
    app.router.add_get("/topics/{topic}", g(topic_detail))
    app.router.add_post("/topics/{topic}/delete", g(topic_delete))
    app.router.add_get("/topics/{topic}/messages", g(messages))
    app.router.add_get("/groups", g(group_list))
    app.router.add_get("/groups/{group}", g(group_detail))
    app.router.add_get("/groups/{group}/reset", g(group_reset_preview))
    app.router.add_post("/groups/{group}/reset", g(group_reset_apply))
    app.router.add_get("/transactions", g(txn_page))
    app.router.add_post("/transactions/abort", g(txn_abort))
    app.router.add_post("/transactions/terminate", g(txn_terminate))
    app.router.add_get("/static/{name:.*}", g(static))
