"""How ``describe_group`` finds the decoder of a group's protocol type: named by the package
that owns the protocol (entry points), or registered in the process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from coordination import _inspection


def test_each_recipe_names_the_decoder_of_its_protocol_type() -> None:
    import recipes.election._describe
    import recipes.partitioning._describe
    import recipes.tasks._describe

    assert _inspection._decoder("consumer") is recipes.partitioning._describe
    assert _inspection._decoder("election") is recipes.election._describe
    assert _inspection._decoder("tasks") is recipes.tasks._describe
    assert _inspection._decoder("no-such-type") is None


def test_a_registered_decoder_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_inspection, "_registered", {})

    class Mine:
        def describe_member(
            self, protocol: str, metadata: bytes, assignment: bytes
        ) -> dict[str, Any]:
            return {"mine": True}

        def summarize(self, members: Sequence[dict[str, Any]]) -> dict[str, Any]:
            return {}

    mine = Mine()
    _inspection.register_decoder("election", mine)
    assert _inspection._decoder("election") is mine


def test_the_core_imports_no_recipe_by_name() -> None:
    # The decoders are named in the recipes' package metadata, not in the core's code.
    import inspect

    assert "recipes." not in inspect.getsource(_inspection)
