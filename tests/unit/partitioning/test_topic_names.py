"""A KIP-848 member names the topics of its assignments (the broker sends topic ids): each
id is looked up once it is first seen, and never again once found."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from recipes.partitioning import BrokerAssignedPartitioning

ORDERS, PAYMENTS = uuid.uuid4(), uuid.uuid4()


class CountingTopicIds:
    """The cluster's topics, some made later; counts the lookups."""

    def __init__(self) -> None:
        self.topics = {ORDERS: "orders"}
        self.lookups = 0

    def topic_ids(self) -> Mapping[uuid.UUID, str]:
        self.lookups += 1
        return dict(self.topics)


def member(metadata: CountingTopicIds) -> BrokerAssignedPartitioning:
    return BrokerAssignedPartitioning(
        "g",
        pattern="orders|payments",
        topic_metadata=metadata,  # type: ignore[arg-type]
        bootstrap_servers="h:1",
    )


def test_a_topic_id_once_named_is_not_looked_up_again() -> None:
    metadata = CountingTopicIds()
    group = member(metadata)
    assert group._names_of(frozenset({ORDERS})) == {ORDERS: "orders"}
    assert metadata.lookups == 1
    # Named again (its partitions all gone and assigned anew, say): from what was found.
    assert group._names_of(frozenset({ORDERS})) == {ORDERS: "orders"}
    assert metadata.lookups == 1


def test_an_id_not_known_yet_is_asked_for_again_until_its_topic_is_seen() -> None:
    metadata = CountingTopicIds()
    group = member(metadata)
    # The broker assigns a topic the metadata does not show yet: left out, asked again.
    assert group._names_of(frozenset({ORDERS, PAYMENTS})) == {ORDERS: "orders"}
    assert group._names_of(frozenset({ORDERS, PAYMENTS})) == {ORDERS: "orders"}
    assert metadata.lookups == 2
    metadata.topics[PAYMENTS] = "payments"
    assert group._names_of(frozenset({ORDERS, PAYMENTS})) == {
        ORDERS: "orders",
        PAYMENTS: "payments",
    }
    assert metadata.lookups == 3
    assert group._names_of(frozenset({PAYMENTS})) == {PAYMENTS: "payments"}
    assert metadata.lookups == 3
