"""Tidegate: a Kafka-wire-compatible streaming log built for exactly-once."""

__version__ = "0.1.0"
