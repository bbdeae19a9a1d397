"""Reading a share group's delivery limit (``share.delivery.count.limit``) through the
member, on the model broker of ``test_share_consumer``: the key asked, the coordinator asked,
a transport that cannot ask, a member not joined yet, a closed one. The answers of a real
broker: ``tests/integration/test_share_worker.py``."""

from __future__ import annotations

import pytest

from coordination.errors import CoordinatorStateError
from coordination.share_group import ShareGroupMember
from coordination.transport import CoordinatorNode, TransportError

from .test_share_consumer import Broker, Leaders


class ConfiguredBroker(Broker):
    """The model broker, answering DescribeConfigs of the group."""

    def __init__(self, configs: dict[str, str]) -> None:
        super().__init__()
        self.configs = configs
        self.asked: list[tuple[str, str, CoordinatorNode, float]] = []

    def group_config(
        self, group_id: str, key: str, node: CoordinatorNode, timeout_s: float
    ) -> str | None:
        self.asked.append((group_id, key, node, timeout_s))
        return self.configs.get(key)


def member(broker: Broker) -> ShareGroupMember:
    return ShareGroupMember(
        "g", ["jobs"], transport=broker, leaders=Leaders(), bootstrap_servers="x:1"
    )


def test_the_limit_is_the_groups_config_asked_of_its_coordinator() -> None:
    broker = ConfiguredBroker({"share.delivery.count.limit": "3"})
    with member(broker) as m:
        m.wait_assigned(timeout=5)
        assert m.delivery_count_limit() == 3
        assert m.delivery_count_limit(timeout=2.5) == 3
    (group, key, node, timeout_s), (*_, shorter) = broker.asked
    assert (group, key, timeout_s, shorter) == ("g", "share.delivery.count.limit", 30.0, 2.5)
    assert node == CoordinatorNode(1, "h", 1)  # the model's FindCoordinator answer


def test_a_limit_the_broker_does_not_name_is_none() -> None:
    for broker in (ConfiguredBroker({}), Broker()):  # the second cannot ask at all
        with member(broker) as m:
            m.wait_assigned(timeout=5)
            assert m.delivery_count_limit() is None


def test_before_the_member_joined_there_is_no_coordinator_to_ask() -> None:
    m = member(ConfiguredBroker({"share.delivery.count.limit": "3"}))
    try:
        with pytest.raises(TransportError, match="not known yet"):
            m.delivery_count_limit()
    finally:
        m.close()
    with pytest.raises(CoordinatorStateError):
        m.delivery_count_limit()
