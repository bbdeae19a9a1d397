"""The default transport of a member: Kafka through kafka-python, and the wake-up channel."""

from __future__ import annotations

from ._config import CoordinatorConfig
from ._transport.base import Wakeups
from .transport import Transport


def kafka_transport(config: CoordinatorConfig) -> tuple[Transport, Wakeups | None]:
    """The Kafka transport for ``config``'s connection settings, and its wake-up channel if
    ``config.wakeup_topic`` names one."""
    from ._transport.kafka import KafkaTransport

    kafka = KafkaTransport(
        client_id=config.client_id,
        request_timeout_ms=config.request_timeout_ms,
        connection=dict(config.connection),
    )
    if config.wakeup_topic is None:
        return kafka, None
    from ._transport.wakeups import KafkaWakeups

    wakeups = KafkaWakeups(
        kafka,
        group_id=config.group_id,
        topic=config.wakeup_topic,
        request_timeout_ms=config.request_timeout_ms,
    )
    return kafka, wakeups
