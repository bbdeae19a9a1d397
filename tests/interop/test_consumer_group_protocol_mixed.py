"""This library's consumer in one KIP-848 consumer group (``group.protocol=consumer``) with
Kafka's Java consumer and librdkafka, on Kafka 4: the broker splits the partitions among
the three kinds, each joining and leaving moves partitions with nothing lost and no
partition owned by two members at once (from the members' own reports, as the classic
mixed-group tests check).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordination import describe_group

from .._versions import VERSIONS
from .peers import (
    PeerProcess,
    create_topic,
    produce,
    start_java_peer,
    start_ours_peer,
    start_rdkafka_peer,
    topic_partitions,
    wait_settled,
)
from .test_peers import PARTITIONS, SETTLE_S, check_history, new_name, no_errors

pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize(
        "kafka",
        [v for v in VERSIONS if v.startswith("4.")],
        indirect=True,
        ids=lambda v: f"kafka-{v}",
    ),
]

START = {"java": start_java_peer, "rdkafka": start_rdkafka_peer, "ours": start_ours_peer}


def start(kind: str, kafka: str, group: str, topic: str, name: str, logs: Path) -> PeerProcess:
    return START[kind](kafka, group, [topic], name=name, log_dir=logs, group_protocol="consumer")


def test_ours_java_and_rdkafka_share_a_consumer_protocol_group_through_joins_and_leaves(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    topic, group = new_name("kip848"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    produced = produce(kafka, topic, 120, PARTITIONS)
    for kind in ("ours", "java", "rdkafka"):
        peers.append(start(kind, kafka, group, topic, f"{kind}-1", tmp_path))
    wait_settled(peers, everything, SETTLE_S, same_generation=False)
    assert sorted(len(p.owned()) for p in peers) == [2, 2, 2]  # the uniform assignor
    # The broker sees one KIP-848 group of three members of the new protocol.
    described = describe_group(group, bootstrap_servers=kafka)
    assert described.group_type == "consumer" and len(described.members) == 3
    assert not any(m.decoded and m.decoded["classic_member"] for m in described.members)
    produced |= produce(kafka, topic, 120, PARTITIONS)
    check_history(peers, produced)

    # Each kind leaves once (its partitions go to the others) and comes back.
    for n, leaving in enumerate(list(peers[:3])):
        leaving.terminate()
        live = [p for p in peers if p.running]
        wait_settled(live, everything, SETTLE_S, same_generation=False)
        produced |= produce(kafka, topic, 60, PARTITIONS)
        peers.append(start(leaving.kind, kafka, group, topic, f"{leaving.kind}-{n + 2}", tmp_path))
        live = [p for p in peers if p.running]
        wait_settled(live, everything, SETTLE_S, same_generation=False)
    produced |= produce(kafka, topic, 120, PARTITIONS)
    check_history(peers, produced)
    assert all(p.consumed() for p in peers if p.running)
    live = [p for p in peers if p.running]
    for p in live:
        p.terminate()
    no_errors(peers)


def test_a_live_classic_group_upgrades_to_the_consumer_protocol_member_by_member_and_back(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    """Kafka converts a classic group of the ``consumer`` protocol type into a KIP-848 group
    when a member of the new protocol joins it (online: the classic members stay, the broker
    assigns to them through JoinGroup and SyncGroup), and back once the last member of the
    new protocol left. Each kind is replaced, one member at a time, first by a member of the
    new protocol, then by a classic one again: nothing lost, no partition owned twice.

    The classic members use ``range``: Kafka converts only a group whose assignor carries no
    data of its own in the subscriptions, and the Java and librdkafka ``cooperative-sticky``
    assignors write some (the broker then refuses the member of the new protocol with
    GROUP_ID_NOT_FOUND, "an unsupported custom assignor is in use")."""
    topic, group = new_name("upgrade"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    produced = produce(kafka, topic, 120, PARTITIONS)
    kinds = ("ours", "java", "rdkafka")
    for kind in kinds:
        peers.append(
            START[kind](
                kafka, group, [topic], name=f"{kind}-classic", log_dir=tmp_path, assignor="range"
            )
        )
    wait_settled(peers, everything, SETTLE_S)
    for target in ("consumer", "classic"):
        for kind in kinds:
            old = next(p for p in peers if p.running and p.kind == kind)
            old.terminate()
            name = f"{kind}-{target}"
            peers.append(
                START[kind](
                    kafka,
                    group,
                    [topic],
                    name=name,
                    log_dir=tmp_path,
                    group_protocol=target,
                    assignor="range",
                )
            )
            live = [p for p in peers if p.running]
            wait_settled(live, everything, SETTLE_S * 2, same_generation=False)
            produced |= produce(kafka, topic, 30, PARTITIONS)
        described = describe_group(group, bootstrap_servers=kafka)
        expected_type = "consumer" if target == "consumer" else "classic"
        assert described.group_type == expected_type, described
    check_history(peers, produced)
    for p in peers:
        if p.running:
            p.terminate()
    no_errors(peers)
