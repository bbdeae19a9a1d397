"""Group members for the integration tests: in-process, or as a separate process to kill
(``devtools.member``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from devtools import member

FAST = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 300,
    "rebalance_timeout_ms": 10000,
    "retry_backoff_ms": 50,
}


def new_group() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


class Listing(member.Listing):
    """The leader hands every member the sorted list of member ids and its own position;
    the test settings (``FAST``) unless told otherwise."""

    def __init__(self, group_id: str, **settings: Any) -> None:
        super().__init__(group_id, **{**FAST, **settings})


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def settled(members: Sequence[Listing], size: int) -> bool:
    """All members completed the same generation, whose assignment lists ``size`` members."""
    lasts = []
    for m in members:
        with m.lock:
            if not m.completed:
                return False
            lasts.append(m.completed[-1])
    return (
        len({g for g, *_ in lasts}) == 1
        and all(len(a["members"]) == size for *_, a in lasts)
        and all(m.generation_if_stable() is not None for m in members)
    )


ROOT = Path(__file__).resolve().parents[2]


def fast_args(**overrides: int) -> list[str]:
    """``FAST`` (with ``overrides``) as ``devtools.member`` options."""
    settings = {**FAST, **overrides}
    return [f"--{key.replace('_', '-')}={value}" for key, value in settings.items()]


class EventProcess(member.MemberProcess):
    """A member process (``python -m devtools.member ARGS``, whose docstring lists the
    options and events): killable, freezable, closable (``close`` on its stdin)."""

    def joined(self) -> list[dict[str, Any]]:
        return self.of("joined")
