"""The example semaphore (examples/semaphore.py) on a real broker: a user's recipe, written
on the public surface alone, does what its docstring promises."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from examples.semaphore import Semaphore
from tests._versions import ON_ONE_KAFKA_VERSION

from .members import new_group, wait_until

# The example uses nothing that differs between Kafka versions.
pytestmark = [pytest.mark.integration, ON_ONE_KAFKA_VERSION]

TIMINGS: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


@pytest.fixture
def semaphores() -> Iterator[list[Semaphore]]:
    created: list[Semaphore] = []
    yield created
    for s in created:
        s.close(timeout=10)


def test_two_permits_go_to_two_of_three_members_and_move_when_one_is_released(
    kafka: str, semaphores: list[Semaphore]
) -> None:
    group = new_group()
    calls: dict[int, list[str]] = {i: [] for i in range(3)}

    def record(i: int, what: str) -> Callable[[], None]:
        return lambda: calls[i].append(what)

    for i in range(3):
        semaphores.append(
            Semaphore(
                group,
                permits=2,
                on_granted=record(i, "granted"),
                on_revoked=record(i, "revoked"),
                bootstrap_servers=kafka,
                **TIMINGS,
            )
        )
    for s in semaphores:
        s.start()

    def holders() -> list[int]:
        return [i for i, s in enumerate(semaphores) if s.holds()]

    def settled_on(n: int) -> bool:
        stable = all(s.generation_if_stable() is not None for s in semaphores)
        generations = {s.generation().generation_id for s in semaphores}
        return stable and len(generations) == 1 and len(holders()) == n

    wait_until(lambda: settled_on(2), 60, "two holders in one stable generation")
    first = holders()
    (waiting,) = set(range(3)) - set(first)
    assert not semaphores[waiting].wait_for_permit(timeout=0.5)

    # A holder gives its permit up: on_revoked at once, and the waiting member gets it.
    giver = first[0]
    semaphores[giver].release()
    assert not semaphores[giver].holds()
    assert calls[giver][-1] == "revoked"
    assert semaphores[waiting].wait_for_permit(timeout=30)
    wait_until(lambda: settled_on(2), 30, "two holders again")
    assert sorted(holders()) == sorted({first[1], waiting})

    # It asks again: it waits, as the two permits are held (the holders keep theirs).
    before = semaphores[giver].generation().generation_id
    semaphores[giver].acquire()
    wait_until(
        lambda: settled_on(2) and semaphores[giver].generation().generation_id > before,
        30,
        "the group to settle after the renewed ask",
    )
    assert not semaphores[giver].holds()
    assert sorted(holders()) == sorted({first[1], waiting})

    # A holder leaves the group: its permit goes to the member that asked. The rebalance
    # is eager, so the other holder gives its permit up too until the generation completes.
    semaphores[waiting].close(timeout=10)
    assert semaphores[giver].wait_for_permit(timeout=30)
    remaining = [semaphores[giver], semaphores[first[1]]]
    wait_until(lambda: all(s.holds() for s in remaining), 30, "both members left to hold one")

    # Callbacks alternate, starting with a grant, on every member.
    for seen in calls.values():
        assert all(a != b for a, b in itertools.pairwise(seen)), seen
        assert not seen or seen[0] == "granted", seen
