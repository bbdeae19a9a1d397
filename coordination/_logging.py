"""Log records that say which member wrote them."""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

from ._types import Generation


class MemberLogAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose records carry the member's group, member id and generation as
    ``extra`` fields (``record.group_id``, ``record.member_id``, ``record.generation``), for
    log pipelines that index them.

    ``generation`` is read at every record without a lock (a Generation is immutable), so
    logging never waits for the member.
    """

    def __init__(
        self, logger: logging.Logger, group_id: str, generation: Callable[[], Generation]
    ) -> None:
        super().__init__(logger, {})
        self._group_id = group_id
        self._generation = generation

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        generation = self._generation()
        kwargs["extra"] = {
            "group_id": self._group_id,
            "member_id": generation.member_id,
            "generation": generation.generation_id,
            **kwargs.get("extra", {}),
        }
        return msg, kwargs
