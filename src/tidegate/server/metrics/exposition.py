"""The Prometheus text format (0.0.4), written faster than prometheus-client writes it.

prometheus-client's `generate_latest` validates and escapes every label name of every
sample again; with a few thousand partitions that is most of a scrape's time (and the
event loop is busy meanwhile). The families come from the same registry and collectors;
only the writing differs: label names are ours and already valid (collector.py, and
telemetry.py sanitises what clients send), so only label values are escaped, and only
when they hold a character that needs it. The output is the same text `generate_latest`
writes, which `prometheus_client.parser` reads back (tests/unit/server). OpenMetrics,
when a scraper asks for it, still goes through prometheus-client's own encoder.
"""

from __future__ import annotations

from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
          "unknown": "untyped"}
_SUFFIXES = ("_created", "_gsum", "_gcount")


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _number(value: float) -> str:
    if type(value) is int:
        return str(value)
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def render(registry: Collector) -> bytes:
    out: list[str] = []
    append = out.append
    for metric in registry.collect():
        name, mtype = metric.name, metric.type
        if mtype == "counter":
            name += "_total"
        elif mtype == "info":
            name += "_info"
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        append(f"# HELP {name} {doc}\n# TYPE {name} {_TYPES.get(mtype, mtype)}\n")
        extra: dict[str, list[str]] = {}
        for s in metric.samples:
            if s.labels:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                line = f"{s.name}{{{labels}}} {_number(s.value)}"
            else:
                line = f"{s.name} {_number(s.value)}"
            if s.timestamp is not None:
                line += f" {int(float(s.timestamp) * 1000)}"
            if s.name.endswith(_SUFFIXES) and s.name[len(metric.name):] in _SUFFIXES:
                extra.setdefault(s.name[len(metric.name):], []).append(line + "\n")
            else:
                append(line + "\n")
        for suffix, lines in sorted(extra.items()):
            append(f"# HELP {metric.name}{suffix} {doc}\n"
                   f"# TYPE {metric.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode()
