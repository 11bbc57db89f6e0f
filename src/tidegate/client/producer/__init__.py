"""The producer: accumulator (batching), sender (requests), and `AsyncProducer`."""

from tidegate.client.producer.idempotence import FatalProducerError
from tidegate.client.producer.producer import AsyncProducer, DeliveryCallback

__all__ = ["AsyncProducer", "DeliveryCallback", "FatalProducerError"]
