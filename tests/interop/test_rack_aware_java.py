"""Rack-aware assignment (KIP-881) against Kafka's own: the same generated cases run
through our range, sticky and cooperative-sticky assignors and through Java's
(kafka-clients 4.3.1, tests/interop/java/RackAssign.java), and the assignments must be
equal."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordination.testing import resolve_classpath
from recipes.partitioning import CooperativeStickyAssignor, RangeAssignor, StickyAssignor
from recipes.partitioning.assignors.base import PartitionAssignor
from recipes.partitioning.protocol import Subscription, TopicPartition, encode_sticky_user_data

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "RackAssign.java"
ARTIFACTS = ["org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36"]
RACKS = ("r0", "r1", "r2")

Case = tuple[dict[str, list[frozenset[str]]], dict[str, Subscription]]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """Java's RangeAssignor in one JVM, answering case after case."""
    for tool in ("java", "javac"):
        assert shutil.which(tool), f"`{tool}` is not on PATH: install a JDK 17+"
    jars = [str(p) for p in resolve_classpath(ARTIFACTS)]
    classes = tmp_path_factory.mktemp("rack-assign")
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", os.pathsep.join(jars), str(JAVA_SOURCE)],
        check=True,
        timeout=300,
    )
    process = subprocess.Popen(
        ["java", "-cp", os.pathsep.join([str(classes), *jars]), "RackAssign"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    yield process
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()
    process.wait(30)
    process.stdout.close()


def java_assign(
    java: subprocess.Popen[str], case: Case, assignor: str = "range"
) -> dict[str, list[tuple[str, int]]]:
    racks, subscriptions = case
    lines = [f"A {assignor}"]
    # As a leader does: only topics some member subscribes to are the assignor's.
    subscribed = {t for sub in subscriptions.values() for t in sub.topics}
    for topic, partitions in racks.items():
        if topic not in subscribed:
            continue
        described = ";".join(",".join(sorted(r)) or "-" for r in partitions)
        lines.append(f"T {topic} {described}")
    for member, sub in subscriptions.items():
        owned = ",".join(f"{tp.topic}-{tp.partition}" for tp in sub.owned_partitions) or "-"
        user_data = sub.user_data.hex() if sub.user_data else "-"
        lines.append(
            f"M {member} {sub.rack_id or '-'} {sub.group_instance_id or '-'} {','.join(sub.topics)}"
            f" {owned} {sub.generation_id} {user_data}"
        )
    assert java.stdin is not None and java.stdout is not None
    java.stdin.write("\n".join([*lines, "END"]) + "\n")
    java.stdin.flush()
    result: dict[str, list[tuple[str, int]]] = {}
    while (line := java.stdout.readline().strip()) != "DONE":
        assert line, "the JVM stopped"
        member, _, parts = line.partition(" ")
        result[member] = sorted(
            (p.rsplit("-", 1)[0], int(p.rsplit("-", 1)[1])) for p in parts.split(",") if p
        )
    return result


def ours(case: Case, assignor: PartitionAssignor | None = None) -> dict[str, list[tuple[str, int]]]:
    racks, subscriptions = case
    counts = {t: len(p) for t, p in racks.items()}
    plan = (assignor or RangeAssignor()).assign(  # type: ignore[call-arg]
        counts, subscriptions, partition_racks=racks
    )
    return {m: sorted((tp.topic, tp.partition) for tp in a.partitions) for m, a in plan.items()}


def generated(seed: int) -> Case:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 3))]
    racks: dict[str, list[frozenset[str]]] = {}
    same = rng.randint(1, 12)  # co-partitioned topics share a partition count
    for topic in topics:
        count = same if rng.random() < 0.6 else rng.randint(1, 12)
        everywhere = rng.random() < 0.15  # every partition on every rack: racks do not matter
        racks[topic] = [
            frozenset(RACKS)
            if everywhere
            else frozenset(rng.sample(RACKS, rng.randint(1, 2)))
            if rng.random() < 0.9
            else frozenset()
            for _ in range(count)
        ]
    subscriptions = {}
    for i in range(rng.randint(1, 6)):
        subscribed = tuple(sorted(rng.sample(topics, rng.randint(1, len(topics)))))
        if rng.random() < 0.5:
            subscribed = tuple(topics)
        subscriptions[f"m{i:02d}-{rng.randint(0, 99)}"] = Subscription(
            subscribed,
            rack_id=rng.choice([*RACKS, "r9", None]),
            group_instance_id=f"i{rng.randint(0, 99)}" if rng.random() < 0.2 else None,
        )
    return racks, subscriptions


@pytest.mark.parametrize("seed", range(60))
def test_range_with_racks_gives_javas_assignment(java: subprocess.Popen[str], seed: int) -> None:
    case = generated(seed)
    assert ours(case) == java_assign(java, case)


def test_without_member_racks_the_racks_change_nothing(java: subprocess.Popen[str]) -> None:
    racks, subscriptions = generated(7)
    plain = {m: Subscription(s.topics) for m, s in subscriptions.items()}
    counts = {t: len(p) for t, p in racks.items()}
    with_racks = ours((racks, plain))
    without = RangeAssignor().assign(counts, plain)
    assert with_racks == {
        m: sorted((tp.topic, tp.partition) for tp in a.partitions) for m, a in without.items()
    }
    assert with_racks == java_assign(java, (racks, plain))


def with_claims(case: Case, seed: int, *, eager: bool) -> Case:
    """The case's members as after an earlier generation: each claims the partitions an
    assignment without racks gave it (some members new, one stale claim set)."""
    racks, subscriptions = case
    rng = random.Random(seed)
    counts = {t: len(p) for t, p in racks.items()}
    plain = {m: Subscription(s.topics) for m, s in subscriptions.items()}
    earlier = StickyAssignor().assign(counts, plain)
    claimed: dict[str, Subscription] = {}
    for member, sub in subscriptions.items():
        owned: tuple[TopicPartition, ...] = ()
        generation = -1
        if rng.random() < 0.8:
            owned = tuple(earlier[member].partitions)
            generation = 5 if rng.random() < 0.9 else 4
        if eager:
            user_data = encode_sticky_user_data(owned, generation) if generation >= 0 else None
            claimed[member] = Subscription(sub.topics, user_data=user_data, rack_id=sub.rack_id)
        else:
            claimed[member] = Subscription(
                sub.topics, owned_partitions=owned, generation_id=generation, rack_id=sub.rack_id
            )
    return racks, claimed


STICKY = {"sticky": StickyAssignor, "cooperative-sticky": CooperativeStickyAssignor}


@pytest.mark.parametrize("name", sorted(STICKY))
@pytest.mark.parametrize("seed", range(100))
def test_sticky_with_racks_gives_javas_assignment(
    java: subprocess.Popen[str], name: str, seed: int
) -> None:
    case = generated(seed)
    # A fresh assignment (no claims), then one where members claim what they had.
    assert ours(case, STICKY[name]()) == java_assign(java, case, name)
    claimed = with_claims(case, seed, eager=name == "sticky")
    assert ours(claimed, STICKY[name]()) == java_assign(java, claimed, name)


@pytest.mark.parametrize("name", sorted(STICKY))
def test_sticky_without_member_racks_ignores_the_partitions_racks(
    java: subprocess.Popen[str], name: str
) -> None:
    racks, subscriptions = generated(35)
    plain = {m: Subscription(s.topics) for m, s in subscriptions.items()}
    counts = {t: len(p) for t, p in racks.items()}
    without = STICKY[name]().assign(counts, plain)
    assert ours((racks, plain), STICKY[name]()) == {
        m: sorted((tp.topic, tp.partition) for tp in a.partitions) for m, a in without.items()
    }
    assert ours((racks, plain), STICKY[name]()) == java_assign(java, (racks, plain), name)
