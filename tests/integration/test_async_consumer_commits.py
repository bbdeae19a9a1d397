"""AsyncConsumer on a real broker: the documented loop (handle a record, commit) that stops
mid-batch commits exactly what it was handed, with kafka-python's whole fetches underneath."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from recipes.partitioning import AsyncConsumer, TopicPartition

from .test_async_recipes import FAST, eventually
from .test_consumer import create, produce

pytestmark = pytest.mark.integration


def test_a_loop_that_stops_mid_batch_commits_what_it_was_handed_only(kafka: str) -> None:
    topic = f"aio-batch-{uuid.uuid4().hex[:8]}"
    group = f"aio-batch-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 1)
    produce(kafka, topic, 1, 600)

    async def scenario() -> None:
        handed: list[int] = []
        async with AsyncConsumer(group, topics=[topic], bootstrap_servers=kafka, **FAST) as c:
            async for record in c:  # docs/partitioning.md's loop
                handed.append(record.offset)
                await c.commit()
                if len(handed) == 25:
                    break  # stops (or crashes) in the middle of a fetch of up to 500
        assert handed == list(range(25))
        async with AsyncConsumer(group, topics=[topic], bootstrap_servers=kafka, **FAST) as late:
            await eventually(lambda: len(late.assignment()) == 1, 30, "late owns it")
            assert await late.committed([TopicPartition(topic, 0)]) == {
                TopicPartition(topic, 0): 25
            }
            assert (await late.getone()).offset == 25  # the next owner starts right after

    asyncio.run(scenario())
