"""Fixtures of the integration tests (the broker itself: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .members import EventProcess


@pytest.fixture
def processes() -> Iterator[list[EventProcess]]:
    """Member processes a test starts (append them); each is closed at the test's end,
    resumed first if it was frozen, killed if it does not close."""
    created: list[EventProcess] = []
    yield created
    for p in created:
        p.close()
