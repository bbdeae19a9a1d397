"""This library's consumer in one group with Kafka's Java consumer and librdkafka.

Every test checks, from the members' own reports: no partition owned by two members at
once, every partition owned once the group settles, every produced record consumed,
committed offsets only moving forward, and no member reporting an error (a subscription or
assignment another kind wrote and this one could not decode would show up there).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from .peers import PeerProcess, create_topic, produce, topic_partitions, wait_settled
from .test_peers import PARTITIONS, SETTLE_S, check_history, new_name, no_errors, start_fast

pytestmark = pytest.mark.integration


def no_decode_errors(peers: list[PeerProcess]) -> None:
    for p in peers:
        log = p.stderr_path.read_text(errors="replace") if p.stderr_path.exists() else ""
        assert "cannot be decoded" not in log and "could not be decoded" not in log, p.name


def test_ours_java_and_rdkafka_share_a_cooperative_group(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    topic, group = new_name("mixed"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    produced = produce(kafka, topic, 120, PARTITIONS)
    for kind in ("ours", "java", "rdkafka"):
        peers.append(start_fast(kind, kafka, group, topic, f"{kind}-1", tmp_path))
    wait_settled(peers, topic_partitions(topic, PARTITIONS), SETTLE_S)
    assert sorted(len(p.owned()) for p in peers) == [2, 2, 2]
    produced |= produce(kafka, topic, 120, PARTITIONS)
    check_history(peers, produced)
    assert all(p.consumed() for p in peers)
    for p in peers:
        p.terminate()
    no_errors(peers)
    no_decode_errors(peers)


@pytest.mark.parametrize(("leader", "followers"), [("java", "ours"), ("ours", "java")])
def test_one_kind_leads_and_assigns_to_the_other(
    kafka: str, peers: list[PeerProcess], tmp_path: Path, leader: str, followers: str
) -> None:
    topic, group = new_name("mixed"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    first = start_fast(leader, kafka, group, topic, f"{leader}-leader", tmp_path)
    peers.append(first)
    first.wait_for(lambda p: p.led_count() >= 1, SETTLE_S, "the first member to lead")
    for i in range(2):
        peers.append(start_fast(followers, kafka, group, topic, f"{followers}-{i}", tmp_path))
    wait_settled(peers, everything, SETTLE_S)
    # The first member stayed leader and assigned partitions to members of the other kind.
    assert first.of("led")[-1]["members"] == 3
    assert all(p.owned() for p in peers[1:])
    assert not any(p.of("led") for p in peers[1:])
    produced = produce(kafka, topic, 90, PARTITIONS)
    check_history(peers, produced)
    no_errors(peers)
    no_decode_errors(peers)


def test_random_restarts_of_all_kinds_lose_nothing_and_never_double_own(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    """Members of each kind are stopped (gracefully or killed) and replaced in random order
    for about a minute, records flowing throughout. The current leader is a likelier victim,
    and the churn goes on (up to three minutes) until each kind has led at least once."""
    rng = random.Random(7)
    topic, group = new_name("mixed"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    counter = iter(range(1000))
    live: list[PeerProcess] = []

    def start(kind: str) -> None:
        p = start_fast(kind, kafka, group, topic, f"{kind}-{next(counter)}", tmp_path)
        peers.append(p)
        live.append(p)

    def current_leader() -> PeerProcess | None:
        led = [(float(p.of("led")[-1]["t"]), i) for i, p in enumerate(live) if p.of("led")]
        return live[max(led)[1]] if led else None

    for kind in ("ours", "java", "rdkafka", "ours"):
        start(kind)
    produced = produce(kafka, topic, 60, PARTITIONS)
    wait_settled(live, everything, SETTLE_S)
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        leaders = {p.kind for p in peers if p.led_count()}
        if elapsed > 180 or (elapsed > 60 and leaders == {"ours", "java", "rdkafka"}):
            break
        leader = current_leader()
        victim = leader if leader is not None and rng.random() < 0.5 else rng.choice(live)
        live.remove(victim)
        if rng.random() < 0.5:
            victim.terminate()
        else:
            victim.kill()
        start(victim.kind)
        produced |= produce(kafka, topic, 30, PARTITIONS)
        time.sleep(rng.uniform(1.0, 4.0))
    wait_settled(live, everything, SETTLE_S * 2)
    produced |= produce(kafka, topic, 60, PARTITIONS)
    check_history(peers, produced)
    leaders = {p.kind for p in peers if p.led_count()}
    assert leaders == {"ours", "java", "rdkafka"}, f"only {leaders} led"
    no_errors(live)
    no_decode_errors(peers)


def test_rolling_upgrade_from_range_to_cooperative_sticky_with_mixed_members(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    """Kafka's two-bounce upgrade, members of this library and Java's side by side:
    ``range`` -> ``cooperative-sticky,range`` -> ``cooperative-sticky``."""
    topic, group = new_name("mixed"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    kinds = ["ours", "java", "ours"]
    live = [
        start_fast(k, kafka, group, topic, f"{k}-{i}", tmp_path, "range")
        for i, k in enumerate(kinds)
    ]
    peers += live
    wait_settled(live, everything, SETTLE_S)
    produced = produce(kafka, topic, 60, PARTITIONS)
    n = len(live)
    for assignor in ("cooperative-sticky,range", "cooperative-sticky"):
        for i in range(len(live)):
            live[i].terminate()
            n += 1
            kind = kinds[i]
            live[i] = start_fast(kind, kafka, group, topic, f"{kind}-{n}", tmp_path, assignor)
            peers.append(live[i])
            wait_settled(live, everything, SETTLE_S)
            produced |= produce(kafka, topic, 20, PARTITIONS)
    check_history(peers, produced)
    last_led = max((e for p in live for e in p.of("led")), key=lambda e: float(e["t"]))
    assert last_led["assignor"] == "cooperative-sticky"
    no_errors(peers)
    no_decode_errors(peers)
