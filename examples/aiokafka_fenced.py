"""Fencing an aiokafka producer with the election's token: a deposed leader's late write is
rejected by whoever reads it.

    python examples/aiokafka_fenced.py --bootstrap-servers localhost:9092

A first member is elected, and a second one stands by. The leader writes records with
aiokafka, each carrying its leadership's fencing token in a ``token`` header. The first
leader then stops leading (here it closes; in real life it might be paused by a long GC or
a VM migration and not know it yet), the second one leads with a higher token and writes,
and then the first one's late write arrives. A reader that keeps the highest token it has
seen rejects every record with a lower one: the late write never takes effect. Tokens only
grow, even across restarts of the whole group (docs/election.md, "Fencing tokens"), so the
rule holds for any number of leaders.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from recipes.election import AsyncLeaderElection

SETTINGS: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


async def write(producer: AIOKafkaProducer, topic: str, token: int, value: str) -> None:
    """Write ``value`` as the leader with ``token``."""
    await producer.send_and_wait(
        topic, value.encode(), partition=0, headers=[("token", str(token).encode())]
    )


async def read_fenced(bootstrap: str, topic: str, count: int) -> tuple[list[str], list[str]]:
    """Read ``count`` records; accept those whose token is at least the highest seen."""
    accepted: list[str] = []
    rejected: list[str] = []
    highest = -1
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        while len(accepted) + len(rejected) < count:
            record = await consumer.getone()
            token = int(dict(record.headers)["token"])
            value = record.value.decode()
            if token < highest:
                rejected.append(value)  # a deposed leader's write: ignore it
                continue
            highest = token
            accepted.append(value)
    finally:
        await consumer.stop()
    return accepted, rejected


async def demo(bootstrap: str, topic: str, group: str) -> tuple[list[str], list[str]]:
    """Run the story above; return the values accepted and rejected by the reader."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        first = AsyncLeaderElection(
            group, identity="first", priority=1, bootstrap_servers=bootstrap, **SETTINGS
        )
        second = AsyncLeaderElection(
            group, identity="second", bootstrap_servers=bootstrap, **SETTINGS
        )
        try:
            # The first member leads before the second starts: priority decides only among
            # the members of one generation, and the second might otherwise join first.
            await first.start()
            await first.wait_for_leader(timeout=30)
            # The group named it leader; it leads once its fencing token is stored.
            deadline = asyncio.get_running_loop().time() + 30
            while (old := first.leadership()) is None:
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError("the only member did not take the lead in 30 s")
                await asyncio.sleep(0.05)
            await second.start()
            await write(producer, topic, old.token, "first: hello")
            await first.close()  # deposed; it keeps its old token, as a paused leader would
            while (new := second.leadership()) is None:
                await asyncio.sleep(0.05)
            await write(producer, topic, new.token, "second: took over")
            await write(producer, topic, old.token, "first: late write")
        finally:
            await first.close()
            await second.close()
    finally:
        await producer.stop()
    return await read_fenced(bootstrap, topic, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    args = parser.parse_args()
    suffix = uuid.uuid4().hex[:8]
    accepted, rejected = asyncio.run(
        demo(args.bootstrap_servers, f"fenced-{suffix}", f"fenced-{suffix}")
    )
    print("accepted:", accepted)
    print("rejected:", rejected)


if __name__ == "__main__":
    main()
