"""Fixtures of the interop tests: the integration tests' broker, and peers ended after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# The same session-scoped, version-parametrized broker as tests/integration uses.
from tests.integration.conftest import kafka as kafka

from .peers import PeerProcess


@pytest.fixture
def peers(tmp_path: Path) -> Iterator[list[PeerProcess]]:
    """Peers a test starts (append them); each is ended at the test's end, frozen or not."""
    created: list[PeerProcess] = []
    yield created
    for p in created:
        p.close()
