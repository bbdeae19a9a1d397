"""Consumer's group_protocol settings: a wrong one is refused at construction, naming it; and
the fetcher each protocol reads with by default."""

from __future__ import annotations

from typing import Any

import pytest

from coordination.errors import ConfigurationError
from recipes.partitioning import Consumer, RangeAssignor


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"group_protocol": "kip848"}, "group_protocol must be 'classic' or 'consumer'"),
        ({"group_remote_assignor": "uniform"}, "group_remote_assignor is for group_protocol"),
        (
            {"group_protocol": "consumer", "assignors": [RangeAssignor()]},
            "pass group_remote_assignor",
        ),
        ({"group_protocol": "consumer", "group_remote_assignor": ""}, "group_remote_assignor"),
    ],
)
def test_a_wrong_group_protocol_setting_is_refused_by_name(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Consumer("g", topics=["t"], bootstrap_servers="localhost:1", **settings)


@pytest.mark.parametrize(
    ("settings", "lean"),
    [
        # The consumer protocol fetches with the lean fetcher unless the settings rule it out.
        ({"group_protocol": "consumer"}, True),
        ({"group_protocol": "consumer", "client_rack": "r1"}, False),  # fetch from followers
        (
            {
                "group_protocol": "consumer",
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "u",
                "sasl_plain_password": "p",
            },
            False,
        ),
        ({"group_protocol": "consumer", "fetcher": "kafka-python"}, False),
        # The classic protocol keeps kafka-python's unless asked.
        ({}, False),
        ({"fetcher": "lean"}, True),
    ],
)
def test_which_fetcher_a_consumer_uses(settings: dict[str, Any], lean: bool) -> None:
    consumer = Consumer("g", topics=["t"], bootstrap_servers="localhost:1", **settings)
    assert consumer._lean is lean


def test_a_fetcher_named_wrong_is_refused_by_name() -> None:
    with pytest.raises(
        ConfigurationError, match="fetcher= must be a RecordFetcher, 'lean', 'kafka-python' or None"
    ):
        Consumer("g", topics=["t"], bootstrap_servers="localhost:1", fetcher="fast")  # type: ignore[arg-type]
