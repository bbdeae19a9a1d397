"""Fixtures of the integration tests (the broker itself: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .members import EventProcess, Listing


@pytest.fixture
def processes() -> Iterator[list[EventProcess]]:
    """Member processes a test starts (append them); each is closed at the test's end,
    resumed first if it was frozen, killed if it does not close."""
    created: list[EventProcess] = []
    yield created
    for p in created:
        p.close()


@pytest.fixture
def members(kafka: str) -> Iterator[list[Listing]]:
    """Members created by a test (append them); all closed at its end."""
    created: list[Listing] = []
    yield created
    for m in created:
        m.close(timeout=10)
