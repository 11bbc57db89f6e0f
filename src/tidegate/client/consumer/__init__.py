"""The consumer: assignment state, background fetcher, and `AsyncConsumer`."""

from tidegate.client.consumer.consumer import AsyncConsumer

__all__ = ["AsyncConsumer"]
