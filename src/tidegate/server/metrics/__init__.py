"""Observability: Prometheus metrics, health checks and KIP-714 client metrics.

requests.py counts in the request path; state.py holds the other counters and the
readiness; collector.py reads the broker when Prometheus scrapes; telemetry.py keeps
what clients push; http.py serves it all on `http.listeners`. See docs/observability.md.
"""
