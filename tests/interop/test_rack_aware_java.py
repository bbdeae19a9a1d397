"""Rack-aware range assignment (KIP-881) against Kafka's own: the same generated cases run
through our RangeAssignor and through Java's (kafka-clients 4.3.1, tests/interop/java/
RackAssign.java), and the assignments must be equal."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordination.testing import resolve_classpath
from recipes.partitioning import RangeAssignor
from recipes.partitioning.protocol import Subscription

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


def java_assign(java: subprocess.Popen[str], case: Case) -> dict[str, list[tuple[str, int]]]:
    racks, subscriptions = case
    lines = []
    for topic, partitions in racks.items():
        described = ";".join(",".join(sorted(r)) or "-" for r in partitions)
        lines.append(f"T {topic} {described}")
    for member, sub in subscriptions.items():
        lines.append(
            f"M {member} {sub.rack_id or '-'} {sub.group_instance_id or '-'} {','.join(sub.topics)}"
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


def ours(case: Case) -> dict[str, list[tuple[str, int]]]:
    racks, subscriptions = case
    counts = {t: len(p) for t, p in racks.items()}
    plan = RangeAssignor().assign(counts, subscriptions, partition_racks=racks)
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
