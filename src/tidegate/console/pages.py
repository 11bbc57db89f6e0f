"""The console's pages as HTML, from the data of `data.py`, `txns.py` and `fetch.py`.

Pure functions: data in, escaped HTML (`render.Markup`) out, so they are unit-tested
without a server. Each page has a *live* part (tables the browser refreshes every
1.5 s, see static/console.js) and a *static* part (forms, the chart) that stays put
while the user types. Mutating forms are POSTs carrying the CSRF token and are left
out in read-only mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from tidegate.console.browse import BrowsedRecord
from tidegate.console.data import GroupDetail, GroupSummary, Overview, TopicDetail, TopicSummary
from tidegate.console.fetch import BrowseResult
from tidegate.console.render import (
    FORMATS,
    Markup,
    badge,
    esc,
    fmt_bytes,
    fmt_ms,
    form,
    link,
    opt,
    seg,
    show_bytes,
    table,
    url,
)
from tidegate.console.txns import TxnView

STATUS_KIND = {"committed": "ok", "aborted": "bad", "open": "warn", "control": "info",
               "error": "bad"}


def overview(ov: Overview) -> Markup:
    brokers = table(["ID", "HOST", "PORT", "RACK"],
                    [[str(b[0]), b[1], str(b[2]), b[3] or "-"] for b in ov.brokers],
                    id="brokers")
    facts = table(["CLUSTER ID", "CONTROLLER", "TOPICS", "PARTITIONS", "GROUPS", "CONSOLE"],
                  [[ov.cluster_id, ov.controller_id, ov.topics, ov.partitions, ov.groups,
                    f"tidegate {ov.console_version}"]], id="cluster")
    return Markup(f"{facts}<h2>Brokers</h2>{brokers}")


def throughput_chart() -> Markup:
    return Markup('<h2>Throughput</h2><p class="hint">records per second, from the change '
                  'of end offsets (produced) and of committed offsets (consumed)</p>'
                  '<canvas id="chart" width="900" height="220" data-src="/api/throughput">'
                  '</canvas><p id="rates"></p>')


def topics(found: list[TopicSummary]) -> Markup:
    return table(["TOPIC", "PARTITIONS", "MESSAGES", "SIZE", "HW-LSO"],
                 [[link(url("/topics/" + seg(t.name)), t.name), t.partitions, t.messages,
                   fmt_bytes(t.size_bytes),
                   badge(t.pinned, "warn") if t.pinned else "0"] for t in found],
                 id="topics", empty="no topics")


def create_topic_form(csrf: str) -> Markup:
    return Markup(
        '<h2>Create a topic</h2><form method="post" action="/topics" id="create-topic">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<label>name <input name="name" required maxlength="249"></label> '
        '<label>partitions <input name="partitions" value="1" size="4"></label> '
        '<label>replication factor <input name="replication_factor" value="1" size="3">'
        '</label> <label>configs <input name="configs" placeholder="key=value,key=value">'
        '</label> <button type="submit">Create</button></form>')


def topic(d: TopicDetail) -> Markup:
    rows = []
    for r in d.partitions:
        o, p = r.offsets, r.info.partition
        rows.append([
            p, r.info.leader, ",".join(map(str, r.info.replicas)) or "-",
            ",".join(map(str, r.info.isr)) or "-", opt(o.log_start), opt(o.high_watermark),
            opt(o.last_stable), badge(o.pinned, "warn") if o.pinned else "0",
            fmt_bytes(r.size_bytes),
            link(url(f"/topics/{seg(d.name)}/messages", partition=p), "browse")])
    parts = table(["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG START", "HW", "LSO",
                   "HW-LSO", "SIZE", ""], rows, id="partitions")
    configs = table(["CONFIG", "VALUE", "SOURCE"],
                    [[c.name, "(sensitive)" if c.is_sensitive else (c.value or "-"),
                      "default" if c.is_default else "override" if c.source == 1
                      else "broker"]
                     for c in sorted(d.configs.values(), key=lambda c: c.name)],
                    id="configs", empty="no configs")
    return Markup(f'<p>topic id {esc(d.topic_id)}{" · internal" if d.internal else ""}</p>'
                  f"{parts}<h2>Configs</h2>{configs}")


def delete_topic_form(name: str, csrf: str) -> Markup:
    return Markup("<h2>Delete</h2>" + form(f"/topics/{seg(name)}/delete", {},
                                           f"Delete topic {name}…", csrf=csrf, cls="danger"))


def message_query(topic: str, partitions: int, q: Mapping[str, str]) -> Markup:
    """The browser's GET form: partition, offset or timestamp, limit, isolation, format."""
    def sel(name: str, values: list[str], current: str) -> str:
        return f'<select name="{name}">' + "".join(
            f'<option{" selected" if v == current else ""}>{esc(v)}</option>'
            for v in values) + "</select>"
    return Markup(
        f'<form method="get" action="/topics/{esc(seg(topic))}/messages" id="browse">'
        f'<label>partition {sel("partition", [str(p) for p in range(partitions)], q.get("partition", "0"))}</label> '  # noqa: E501
        f'<label>offset <input name="offset" size="10" value="{esc(q.get("offset", ""))}"></label> '
        f'<label>or timestamp (ms) <input name="timestamp" size="14" value="{esc(q.get("timestamp", ""))}"></label> '  # noqa: E501
        f'<label>limit <input name="limit" size="4" value="{esc(q.get("limit", "50"))}"></label> '
        f'<label>isolation {sel("isolation", ["read_uncommitted", "read_committed"], q.get("isolation", "read_uncommitted"))}</label> '  # noqa: E501
        f'<label>format {sel("format", list(FORMATS), q.get("format", "text"))}</label> '
        '<button type="submit">Show</button></form>')


def fmt_ts(ms: int) -> Markup:
    """A record timestamp as UTC time, with the milliseconds value on hover."""
    if ms < 0:
        return Markup("-")
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return esc(ms)
    return Markup(f'<span title="{ms}">{when}</span>')


def _headers(r: BrowsedRecord, fmt: str) -> Markup:
    if not r.headers:
        return Markup("")
    return Markup("".join(f'<div class="hdr"><b>{esc(k)}</b>: {show_bytes(v, fmt)}</div>'
                          for k, v in r.headers))


def messages(res: BrowseResult, fmt: str) -> Markup:
    o = res.offsets
    rows: list[list[object]] = []
    for r in res.rows:
        if r.status == "error":
            rows.append([opt(r.offset), "-", "-", Markup(f'<pre class="v">{esc(r.error)}</pre>'),
                         "", badge("error", "bad")])
            continue
        if r.status == "control":
            what = badge(f"{r.marker} marker", "info")
            rows.append([r.offset, fmt_ts(r.timestamp), "-", what, "", badge("control", "info")])
            continue
        status = badge(r.status, STATUS_KIND[r.status])
        if r.transactional:
            status = Markup(f"{status} <small>pid {r.producer_id}</small>")
        rows.append([r.offset, fmt_ts(r.timestamp), show_bytes(r.key, fmt),
                     show_bytes(r.value, fmt), _headers(r, fmt), status])
    head = (f"<p>{esc(res.tp.topic)}-{res.tp.partition}: log start {o.log_start}, "
            f"LSO {o.last_stable}, HW {o.high_watermark}; from offset {res.start}</p>")
    note = f'<p class="hint" id="note">{esc(res.note)}</p>' if res.note else ""
    return Markup(head + note + table(["OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS",
                                       "STATUS"], rows, id="messages", empty="no records"))


def groups(found: list[GroupSummary]) -> Markup:
    return table(["GROUP", "STATE", "PROTOCOL TYPE", "MEMBERS", "LAG"],
                 [[link(url("/groups/" + seg(g.group_id)), g.group_id), g.state,
                   g.protocol_type or "-", opt(g.members), opt(g.lag)] for g in found],
                 id="groups", empty="no consumer groups")


def group(d: GroupDetail) -> Markup:
    members = table(["MEMBER", "INSTANCE", "CLIENT", "HOST", "ASSIGNMENT"],
                    [[m.member_id, m.instance_id or "-", m.client_id, m.host,
                      ", ".join(f"{t}-{p}" for t, ps in sorted(m.assignment.items())
                                for p in ps) or "-"] for m in d.members],
                    id="members", empty="no members")
    rows = []
    for r in d.partitions:
        o = r.offsets
        why = Markup("")
        if r.behind_lso and o is not None:
            why = Markup(badge(f"read_committed stops at the LSO ({o.last_stable})", "warn")
                         + " " + link("/transactions", "which transaction pins it?"))
        rows.append([r.topic, r.partition, opt(r.committed),
                     "-" if o is None else o.last_stable, "-" if o is None else o.high_watermark,
                     opt(r.lag), r.owner or "-", why])
    lag = table(["TOPIC", "PARTITION", "COMMITTED", "LSO", "HW", "LAG", "OWNER", ""], rows,
                id="lag", empty="no committed offsets")
    return Markup(f'<p>state <b id="state">{esc(d.state)}</b> · protocol '
                  f'{esc(d.protocol_type or "-")}/{esc(d.protocol or "-")} · total lag '
                  f'<b id="total-lag">{d.lag}</b></p><h2>Members</h2>{members}'
                  f"<h2>Lag</h2>{lag}")


def reset_form(group_id: str, topics: list[str]) -> Markup:
    opts = "".join(f"<option>{esc(t)}</option>" for t in topics)
    return Markup(
        f'<h2>Reset offsets</h2><form method="get" action="/groups/{esc(seg(group_id))}/reset"'
        f' id="reset"><label>topic <select name="topic">{opts}</select></label> '
        '<label>to <select name="to"><option>earliest</option><option>latest</option>'
        '<option>offset</option></select></label> <label>offset <input name="offset" '
        'size="10"></label> <button type="submit">Preview (dry run)</button></form>')


def reset_plan(group_id: str, topic: str, plan: Mapping[int, tuple[int, int]],
               csrf: str, read_only: bool) -> Markup:
    t = table(["PARTITION", "CURRENT", "NEW"],
              [[p, opt(cur), new] for p, (cur, new) in sorted(plan.items())], id="plan")
    apply = Markup("") if read_only else form(
        f"/groups/{seg(group_id)}/reset",
        {"topic": topic, "plan": ",".join(f"{p}:{new}" for p, (_, new) in sorted(plan.items()))},
        "Apply these offsets", csrf=csrf, cls="danger")
    return Markup(f"<p>Dry run: nothing has changed yet.</p>{t}{apply}")


def transactions(view: TxnView, now_ms: int, csrf: str, read_only: bool) -> Markup:
    rows = []
    for t in view.open:
        d = t.description
        action: object = "" if read_only else form(
            "/transactions/terminate", {"transactional_id": d.transactional_id},
            "Abort (fence producer)…", csrf=csrf, cls="danger")
        rows.append([d.transactional_id, d.state, d.producer_id, d.producer_epoch,
                     fmt_ms(t.age_ms(now_ms)), fmt_ms(d.timeout_ms),
                     ", ".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-",
                     d.coordinator_id, action])
    opened = table(["TRANSACTIONAL ID", "STATE", "PRODUCER ID", "EPOCH", "AGE", "TIMEOUT",
                    "PARTITIONS", "COORDINATOR", ""], rows, id="open-txns",
                   empty="no open transactions")
    prow = []
    for p in view.pinned:
        o = p.offsets
        who: object = "-" if p.producer_id < 0 else p.producer_id
        action = ""
        if p.producer_id >= 0 and not read_only:
            action = form("/transactions/abort", {
                "topic": p.tp.topic, "partition": p.tp.partition,
                "producer_id": p.producer_id}, "Abort in this partition…", csrf=csrf,
                cls="danger")
        state = badge("hanging", "bad") + " " + esc(p.hanging) if p.hanging else (
            badge("open", "warn") if p.producer_id >= 0 else "")
        prow.append([f"{p.tp.topic}-{p.tp.partition}", o.last_stable, o.high_watermark,
                     o.pinned, who, p.transactional_id or "-",
                     fmt_ms(now_ms - p.last_timestamp) if p.last_timestamp >= 0 else "-",
                     Markup(state), action])
    pinned = table(["PARTITION", "LSO", "HW", "HW-LSO", "PINNED BY PRODUCER",
                    "TRANSACTIONAL ID", "PRODUCER SILENT FOR", "", ""], prow, id="pinned",
                   empty="no partition has its LSO behind its high watermark")
    return Markup(f"<h2>Open transactions</h2>{opened}<h2>Partitions whose last stable "
                  f"offset lags the high watermark</h2>{pinned}")


def confirm(question: str, action: str, fields: Mapping[str, object], button: str,
            csrf: str, back: str) -> Markup:
    """A confirmation step: the same POST again with confirm=yes."""
    yes = form(action, {**fields, "confirm": "yes"}, button, csrf=csrf, cls="danger")
    return Markup(f'<p class="confirm">{esc(question)}</p>{yes} {link(back, "Cancel")}')
