"""Fixtures of the interop tests: peers ended after each test (the broker: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .peers import PeerProcess


@pytest.fixture
def peers(tmp_path: Path) -> Iterator[list[PeerProcess]]:
    """Peers a test starts (append them); each is ended at the test's end, frozen or not."""
    created: list[PeerProcess] = []
    yield created
    for p in created:
        p.close()
