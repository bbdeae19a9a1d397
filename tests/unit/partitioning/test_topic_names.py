"""A KIP-848 member names the topics of its assignments (the broker sends topic ids): each
id is looked up once it is first seen, and never again once found."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping

import pytest

from coordination.errors import CoordinationError
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


def test_a_lookup_that_cannot_reach_the_cluster_raises_the_librarys_error_and_keeps_nothing() -> (
    None
):
    # The member's reconciliation retries after a CoordinationError; an admin client is made
    # per lookup and closed (none lingers with its I/O thread).
    from recipes.partitioning._broker_assigned import _ClusterTopicIds

    before = {t.name for t in threading.enumerate()}
    names = _ClusterTopicIds({"bootstrap_servers": "127.0.0.1:1", "bootstrap_timeout_ms": 300})
    with pytest.raises(CoordinationError, match="looking up the names of topic ids"):
        names.names_of([ORDERS])
    time.sleep(0.2)
    assert {t.name for t in threading.enumerate()} <= before
