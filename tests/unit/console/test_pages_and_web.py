"""The console's HTML (escaping of everything from Kafka) and its HTTP edge (bad input,
static files, CSRF, read-only mode), without a broker."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tidegate.cli.groups import Member
from tidegate.client.types import PartitionInfo, TopicPartition, TransactionDescription
from tidegate.console import pages
from tidegate.console.browse import BrowsedRecord
from tidegate.console.data import GroupDetail, LagRow, PartitionOffsets, TopicSummary
from tidegate.console.fetch import BrowseResult
from tidegate.console.render import esc, layout, show_bytes
from tidegate.console.txns import OpenTxn, PinnedPartition, TxnView
from tidegate.console.web import add_routes

EVIL = '<script>alert("x")</script>'


def _no_raw(html: str) -> None:
    assert "<script>alert" not in html
    assert "&lt;script&gt;" in html


def test_values_keys_and_headers_are_escaped_in_every_format() -> None:
    for fmt in ("text", "json", "hex"):
        out = show_bytes(EVIL.encode(), fmt)
        assert "<script>" not in out
    assert "&lt;script&gt;" in show_bytes(EVIL.encode(), "text")
    assert show_bytes(b'{"a": 1}', "json").count("\n") == 2  # pretty-printed
    assert "3c 73" in show_bytes(b"<s", "hex")
    assert "null" in show_bytes(None, "text")
    big = show_bytes(b"x" * 20_000, "text")
    assert "more bytes" in big and len(big) < 10_000
    rec = BrowsedRecord(5, 1000, EVIL.encode(), EVIL.encode(), ((EVIL, EVIL.encode()),),
                        transactional=True, producer_id=3)
    res = BrowseResult(TopicPartition("t", 0), PartitionOffsets(0, 6, 6), 5, [rec], note=EVIL)
    _no_raw(pages.messages(res, "text"))


def test_names_from_the_cluster_are_escaped() -> None:
    _no_raw(pages.topics([TopicSummary(EVIL, 1, 2, 3, 0)]))
    member = Member(EVIL, None, EVIL, EVIL, {"t": [0]})
    group = GroupDetail(EVIL, "Stable", "consumer", EVIL, [member],
                        [LagRow("t", 0, 2, PartitionOffsets(0, 5, 2), EVIL)])
    html = pages.group(group)
    _no_raw(html)
    assert "stops at the LSO (2)" in html
    d = TransactionDescription(EVIL, 1, "Ongoing", 4, 0, 60_000, 1_000,
                               (TopicPartition("t", 0),))
    view = TxnView([OpenTxn(d)], [PinnedPartition(TopicPartition("t", 0),
                                                  PartitionOffsets(0, 5, 2), 4, 0, 0, 1_000,
                                                  EVIL, "")])
    html = pages.transactions(view, 11_000, "tok", read_only=False)
    _no_raw(html)
    assert "10.0 s" in html and 'name="csrf" value="tok"' in html
    assert "<form" not in pages.transactions(view, 11_000, "tok", read_only=True)
    page = layout(EVIL, esc(EVIL), flash=EVIL, live="/x?a=1&b=<")
    _no_raw(page)
    assert 'data-live="/x?a=1&amp;b=&lt;"' in page


def test_topic_page_shows_offsets_and_pinned() -> None:
    from tidegate.client.types import ConfigEntry
    from tidegate.console.data import PartitionRow, TopicDetail
    d = TopicDetail("t", str(uuid.uuid4()), False,
                    [PartitionRow(PartitionInfo(0, 1, 0, (1,), (1,)),
                                  PartitionOffsets(3, 10, 7), 2048)],
                    {"retention.ms": ConfigEntry("retention.ms", "1000", source=1)})
    html = pages.topic(d)
    cells = re.findall(r"<td>(.*?)</td>", html)
    assert cells[4:9] == ["3", "10", "7", '<span class="badge warn">3</span>', "2.0 KiB"]
    assert "override" in html


# -- the HTTP edge -------------------------------------------------------------------------


def _with_client(read_only: bool, test: Callable[[TestClient[Any, Any]], Awaitable[None]]
                 ) -> None:
    async def main() -> None:
        app = web.Application()
        # nothing listens there: these requests must be answered before any Kafka call
        add_routes(app, "127.0.0.1:1", read_only=read_only)
        async with TestClient(TestServer(app)) as client:
            await test(client)
    asyncio.run(main())


async def _raw_get(client: TestClient[Any, Any], path: str) -> tuple[int, str]:
    """GET `path` exactly as given (an HTTP client library would normalize the dots)."""
    server = client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_static_files_and_path_traversal() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        r = await client.get("/static/console.js")
        assert r.status == 200 and "refreshLive" in await r.text()
        assert r.headers["Content-Type"].startswith("text/javascript")
        for path in ("/static/../../etc/passwd", "/static/..%2f..%2fetc%2fpasswd",
                     "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%5c..%5cwin.ini",
                     "/static/"):
            status, body = await _raw_get(client, path)
            assert status == 400, path
            assert "bad static file name" in body and "root:" not in body
        r = await client.get("/static/nope.js")
        assert r.status == 404
    _with_client(False, check)


def test_bad_browser_parameters_are_400s() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        for query, why in (("offset=-1", "at least 0"), ("offset=abc", "whole number"),
                           ("offset=99999999999999999999", "at most"),
                           ("limit=100000", "at most 500"), ("max_bytes=999999999", "at most"),
                           ("partition=-3", "at least 0"), ("isolation=dirty", "one of"),
                           ("format=<b>", "one of")):
            r = await client.get(f"/topics/t/messages?{query}")
            body = await r.text()
            assert r.status == 400, query
            assert why in body and "<b>" not in body.split("<main>")[1]
    _with_client(False, check)


def test_posts_need_the_csrf_token_and_a_writable_console() -> None:
    async def writable(client: TestClient[Any, Any]) -> None:
        r = await client.post("/topics", data={"name": "x"})
        assert r.status == 403 and "CSRF" in await r.text()
        r = await client.post("/transactions/abort", data={"csrf": "guess", "topic": "t"})
        assert r.status == 403
        page = await (await client.get("/static/console.css")).text()
        assert page  # the console still answers
    _with_client(False, writable)

    async def read_only(client: TestClient[Any, Any]) -> None:
        for path in ("/topics", "/topics/t/delete", "/groups/g/reset", "/transactions/abort",
                     "/transactions/terminate"):
            r = await client.post(path, data={"csrf": "x"})
            assert r.status == 403, path
            assert "read-only" in await r.text()
    _with_client(True, read_only)


def test_cross_origin_posts_are_refused() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        r = await client.post("/topics", data={"name": "x"},
                              headers={"Origin": "http://evil.example"})
        assert r.status == 403 and "cross-origin" in await r.text()
    _with_client(False, check)
