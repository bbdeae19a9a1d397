"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge bytes (KIP-932),
and the admin's DescribeShareGroupOffsets and AlterShareGroupOffsets, against Kafka's own
client, both ways: kafka-clients 4.3.1's generated message classes
(tests/interop/java/ShareGroupWire.java, compiled at run time) write each case as the golden
bytes of tests/unit/test_share_group_codec.py and test_share_group_offsets_codec.py say (a
ShareFetch's record batch included, built by Kafka's MemoryRecords), and read our encoding
of each case back as the same message, every byte used."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from coordination._protocol import share_group_codec as codec
from coordination.testing import resolve_classpath

from ..unit import test_share_group_offsets_codec as admin
from ..unit.test_share_group_codec import CASES, GOLDEN, HEADERS, ours

ADMIN_GOLDEN = {name: golden.replace(" ", "") for name, (_, _, golden) in admin.GOLDEN.items()}


def _ours(name: str) -> bytes:
    if name in admin.GOLDEN:
        message, version, _ = admin.GOLDEN[name]
        return codec.encode(message, version)
    return ours(name)


JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ShareGroupWire.java"
ARTIFACTS = ["org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36"]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, str]]:
    """Java's bytes for each case, and its verdict on ours."""
    for tool in ("java", "javac"):
        assert shutil.which(tool), f"`{tool}` is not on PATH: install a JDK 17+"
    jars = [str(p) for p in resolve_classpath(ARTIFACTS)]
    classes = tmp_path_factory.mktemp("share-group-wire")
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", os.pathsep.join(jars), str(JAVA_SOURCE)],
        check=True,
        timeout=300,
    )
    names = [*CASES, *HEADERS, *admin.GOLDEN]
    ours_lines = "".join(f"{name} {_ours(name).hex()}\n" for name in names)
    done = subprocess.run(
        ["java", "-cp", os.pathsep.join([str(classes), *jars]), "ShareGroupWire"],
        input=ours_lines + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    written, _, verdicts = done.stdout.partition("END\n")
    theirs = dict(line.split(" ", 1) for line in written.splitlines())
    read = dict(line.split(" ", 1) for line in verdicts.splitlines() if line != "END")
    return theirs, read


def test_the_cases_are_the_same_on_both_sides(java: tuple[dict[str, str], dict[str, str]]) -> None:
    theirs, _ = java
    assert set(theirs) == set(CASES) | set(HEADERS) | set(admin.GOLDEN)
    assert set(CASES) | set(HEADERS) == set(GOLDEN)


def test_kafka_writes_the_golden_bytes(java: tuple[dict[str, str], dict[str, str]]) -> None:
    theirs, _ = java
    assert theirs == {**GOLDEN, **ADMIN_GOLDEN}


def test_kafka_reads_ours_back(java: tuple[dict[str, str], dict[str, str]]) -> None:
    _, read = java
    assert read == dict.fromkeys([*CASES, *HEADERS, *admin.GOLDEN], "equal")
