"""Share groups seen from outside on a real broker: with a ShareConsumer running,
``list_groups`` lists its group with the type ``share``, ``describe_group`` (and the
``coordination`` command) shows the member, its assignment and each share-partition's start
offset and lag; a broker without share groups calls such a group missing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from coordination import GroupDescription, GroupInspector, describe_group, list_groups
from coordination.__main__ import NO_SUCH_GROUP, main
from recipes.queues import AcknowledgeType, ShareConsumer

from .test_share_consumer import (
    ON_OLDER_BROKERS,
    ON_SHARE_BROKERS,
    TIMEOUT_S,
    consumer,
    poll_until,
    produced,
    share_group,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    made: list[ShareConsumer] = []
    yield made
    for c in made:
        c.close(timeout=10)


def described_until(
    kafka: str, group: str, done: Callable[[GroupDescription], bool]
) -> GroupDescription:
    """The group's description once ``done(description)`` holds (the share coordinator
    persists the share-partitions' state after the acknowledgements are answered)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        described = describe_group(group, bootstrap_servers=kafka)
        if done(described):
            return described
        assert time.monotonic() < deadline, described
        time.sleep(0.5)


@ON_SHARE_BROKERS
def test_a_running_share_group_is_listed_and_described(
    kafka: str, consumers: list[ShareConsumer], capsys: pytest.CaptureFixture[str]
) -> None:
    topic = produced(kafka, 6, partitions=2)
    group = share_group(kafka)
    c = consumer(kafka, group, topic, consumers, client_id="inspected-worker")
    poll_until(c, lambda got: len(got) >= 6, lambda r: c.acknowledge(r, AcknowledgeType.ACCEPT))
    assert all(error is None for error in c.commit().values())

    (listed,) = [g for g in list_groups(bootstrap_servers=kafka) if g.group_id == group]
    assert (listed.group_type, listed.protocol_type) == ("share", "share")
    assert listed.state == "Stable"

    # Every record is accepted: nothing left to do in either partition. The start offset
    # need not move past them yet (Kafka 4.3 keeps 0 while the accepted batch is in its
    # state); it can only be between the first offset and the end.
    described = described_until(
        kafka,
        group,
        lambda d: (
            {k: v["lag"] for k, v in d.summary.get("share_partitions", {}).items()}
            == {f"{topic}-0": 0, f"{topic}-1": 0}
        ),
    )
    assert all(0 <= p["start_offset"] <= 3 for p in described.summary["share_partitions"].values())
    assert described.exists
    assert (described.group_type, described.protocol_type) == ("share", "share")
    assert described.state == "Stable" and described.protocol  # the broker's assignor
    (member,) = described.members
    assert member.member_id == c.member_id
    assert member.client_id == "inspected-worker"
    assert member.decoded is not None
    assert member.decoded["assigned"] == [[topic, 0], [topic, 1]]
    assert member.decoded["subscribed_topics"] == [topic]
    assert described.summary["sharing"] == {
        f"{topic}-0": [c.member_id],
        f"{topic}-1": [c.member_id],
    }

    with GroupInspector(bootstrap_servers=kafka) as inspector:
        assert inspector.describe(group).members == described.members

    assert main(["describe", group, "--bootstrap-servers", kafka, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["group_type"] == "share"
    assert [m["member_id"] for m in shown["members"]] == [c.member_id]
    assert main(["describe", group, "--bootstrap-servers", kafka]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"group {group}: Stable, protocol type 'share'")
    assert f"- {c.member_id} inspected-worker@" in text
    assert main(["groups", "--bootstrap-servers", kafka]) == 0
    assert any(
        line.split() == [group, "share", "Stable", "share"]
        for line in capsys.readouterr().out.splitlines()
    )


@ON_SHARE_BROKERS
def test_an_empty_share_group_start_offset_is_reset_and_records_come_again(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 3)
    group = share_group(kafka)
    first = consumer(kafka, group, topic, consumers)
    poll_until(
        first, lambda got: len(got) >= 3, lambda r: first.acknowledge(r, AcknowledgeType.ACCEPT)
    )
    first.close(timeout=10)
    with GroupInspector(bootstrap_servers=kafka) as inspector:
        deadline = time.monotonic() + TIMEOUT_S
        while inspector.describe(group).members:  # the group empties once the leave is seen
            assert time.monotonic() < deadline
            time.sleep(0.5)
        outcome = inspector.alter_share_group_offsets(group, {(topic, 0): 1})
    assert outcome == {(topic, 0): None}
    described_until(
        kafka,
        group,
        lambda d: (
            d.summary.get("share_partitions", {}).get(f"{topic}-0", {}).get("start_offset") == 1
        ),
    )
    again = consumer(kafka, group, topic, consumers)
    got = poll_until(
        again, lambda got: len(got) >= 2, lambda r: again.acknowledge(r, AcknowledgeType.ACCEPT)
    )
    assert sorted(r.offset for r in got) == [1, 2]


@ON_SHARE_BROKERS
def test_a_group_of_no_kind_is_missing_on_a_broker_with_share_groups(
    kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    group = f"nothing-{uuid.uuid4().hex[:8]}"
    assert not describe_group(group, bootstrap_servers=kafka).exists
    assert main(["describe", group, "--bootstrap-servers", kafka]) == NO_SUCH_GROUP
    assert "does not exist" in capsys.readouterr().err


@ON_OLDER_BROKERS
def test_a_broker_without_share_groups_describes_a_missing_group(kafka: str) -> None:
    assert not describe_group(f"nothing-{uuid.uuid4().hex[:8]}", bootstrap_servers=kafka).exists


@ON_SHARE_BROKERS
def test_the_reset_command_prints_its_plan_and_applies_it_only_when_told(
    kafka: str, consumers: list[ShareConsumer], capsys: pytest.CaptureFixture[str]
) -> None:
    topic = produced(kafka, 6, partitions=2)  # offsets 0..2 on each partition
    group = share_group(kafka)
    first = consumer(kafka, group, topic, consumers)
    poll_until(
        first, lambda got: len(got) >= 6, lambda r: first.acknowledge(r, AcknowledgeType.ACCEPT)
    )
    command = ["reset-share-offsets", group, "--topic", f"{topic}:1", "--bootstrap-servers", kafka]

    # With a member left, the broker refuses; the command says what to do.
    assert main([*command, "--to-offset", "1", "--execute"]) == 1
    assert "still has members: close its consumers" in capsys.readouterr().err
    first.close(timeout=10)
    with GroupInspector(bootstrap_servers=kafka) as inspector:
        deadline = time.monotonic() + TIMEOUT_S
        while inspector.describe(group).members:
            assert time.monotonic() < deadline
            time.sleep(0.5)

    assert main([*command, "--to-earliest"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == [topic, "1", "0"]
    assert "dry run: nothing changed" in out
    # Past the end is the end: Kafka refuses a start beyond it.
    assert main([*command, "--to-offset", "99"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == [topic, "1", "3"]

    assert main([*command, "--to-offset", "1", "--execute"]) == 0
    assert "1 start offset(s) set" in capsys.readouterr().out
    again = consumer(kafka, group, topic, consumers)
    got = poll_until(
        again, lambda got: len(got) >= 2, lambda r: again.acknowledge(r, AcknowledgeType.ACCEPT)
    )
    # Partition 0 was left as it was (all accepted); partition 1 starts at 1 again.
    assert sorted((r.partition, r.offset) for r in got) == [(1, 1), (1, 2)]


@ON_SHARE_BROKERS
def test_the_reset_command_names_a_topic_or_partition_that_does_not_exist(
    kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = produced(kafka, 1)
    group = share_group(kafka)
    base = ["reset-share-offsets", group, "--to-latest", "--bootstrap-servers", kafka]
    assert main([*base, "--topic", "no-such-topic-here"]) == 1
    assert "topic 'no-such-topic-here' does not exist" in capsys.readouterr().err
    assert main([*base, "--topic", f"{topic}:0,5"]) == 1
    assert f"topic {topic!r} has no partition [5]" in capsys.readouterr().err
    assert main([*base, "--topic", f"{topic}:x"]) == 1
    assert "partitions must be numbers" in capsys.readouterr().err
