"""Consumer's group_protocol settings: a wrong one is refused at construction, naming it."""

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
