"""recipes.queues.AsyncShareWorker on a real broker (share groups, KIP-932, Kafka 4.x).

An async handler handles each record once and its outcomes are the ShareWorker's: the
records it returns for are accepted, a poison record is copied to the dead-letter topic and
rejected, and no other member gets any of them after; the asyncio example of docs/queues.md
runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from recipes.queues import AsyncShareWorker, ShareConsumer, ShareRecord

from .test_consumer_group_member import create_topic_with_id
from .test_share_consumer import ON_SHARE_BROKERS, TIMEOUT_S, produced, share_group
from .test_share_worker import wait_until

pytestmark = [pytest.mark.integration, ON_SHARE_BROKERS]


class Retryable(Exception):
    pass


class Poison(Exception):
    pass


def nothing_left(kafka: str, group: str, topic: str) -> None:
    """Every record was accepted or rejected: a new member of the group gets none."""
    other = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
    try:
        assert other.poll(timeout_ms=1500) == []
    finally:
        other.close()


def test_an_async_handler_handles_each_record_once_and_poison_is_dead_lettered(
    kafka: str,
) -> None:
    topic = produced(kafka, 20, partitions=2)
    dead_letters = f"{topic}.dlq"
    create_topic_with_id(kafka, dead_letters, 1)
    group = share_group(kafka)
    handled: list[tuple[int, int, int]] = []

    async def handle(record: ShareRecord) -> None:
        handled.append((record.partition, record.offset, record.delivery_count))
        await asyncio.sleep(0.01)  # the other coroutines run meanwhile
        if record.value == b"job-7":
            raise Poison("cannot parse job-7")

    async def scenario() -> None:
        async with AsyncShareWorker(
            group,
            topics=[topic],
            handler=handle,
            concurrency=4,
            retry_on=Retryable,
            dead_letter_topic=dead_letters,
            bootstrap_servers=kafka,
        ) as worker:
            runner = asyncio.create_task(worker.run())
            deadline = time.monotonic() + TIMEOUT_S
            while (worker.metrics().accepted, worker.metrics().rejected) != (19, 1):
                assert time.monotonic() < deadline, worker.metrics()
                await asyncio.sleep(0.05)
            worker.stop()
            await runner
        m = worker.metrics()
        assert (m.received, m.dead_lettered, m.acknowledgements_failed) == (20, 1, 0)

    asyncio.run(scenario())
    records = [(p, o) for p, o, _ in handled]
    assert len(records) == 20 and len(set(records)) == 20  # each once
    assert {count for _, _, count in handled} == {1}
    reader = KafkaConsumer(
        dead_letters,
        bootstrap_servers=kafka,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        copy = next(iter(reader))
    finally:
        reader.close()
    assert copy.value == b"job-7"
    headers = dict(copy.headers)
    assert headers["__dlq.group.id"] == group.encode()
    assert headers["__dlq.reason"] == b"not_retryable"
    assert headers["__dlq.error.class"].endswith(b".Poison")
    nothing_left(kafka, group, topic)


def test_the_asyncio_worker_example_of_the_docs_runs(
    kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = (Path(__file__).parents[2] / "docs" / "queues.md").read_text(encoding="utf-8")
    section = docs[docs.index("## asyncio worker") :]
    example = section[section.index("```python\n") + 10 : section.index("\n```\n")]
    name = f"emails-{uuid.uuid4().hex[:8]}"
    topic = produced(kafka, 3)
    create_topic_with_id(kafka, f"{name}.dlq", 1)
    group = share_group(kafka)
    code = (
        example.replace('"emails",', f'"{group}",')
        .replace('["emails"]', f'["{topic}"]')
        .replace('"emails.dlq"', f'"{name}.dlq"')
        .replace("localhost:9092", kafka)
    )
    previous = signal.getsignal(signal.SIGTERM)
    printed: list[str] = []

    # SIGTERM, as `kill` sends it, once the three records are handled.
    def terminate_when_done() -> None:
        def sent_three() -> bool:
            printed.append(capsys.readouterr().out)
            return "".join(printed).count("sending") >= 3

        wait_until(sent_three, "three sent")
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_when_done)
    killer.start()
    try:
        exec(compile(code, "docs/queues.md", "exec"), {"__name__": "example"})
    finally:
        signal.signal(signal.SIGTERM, previous)
        killer.join(TIMEOUT_S)
    nothing_left(kafka, group, topic)
