"""The public surface is exactly what the packages export, and all of it is documented."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import coordination
import coordination.errors


def public_names(module: object) -> list[str]:
    return sorted(n for n in vars(module) if not n.startswith("_") and n != "annotations")


MODULES = [
    "coordination",
    "coordination.clock",
    "coordination.errors",
    "coordination.fetching",
    "coordination.lease",
    "coordination.parts",
    "coordination.share_group",
    "coordination.testing",
    "recipes.election",
    "recipes.partitioning",
    "recipes.partitioning.assignors",
    "recipes.partitioning.protocol",
    "recipes.queues",
    "recipes.tasks",
    "coordination.transport",
]


# Packages whose __init__ re-exports a curated surface (a plain module also shows its imports).
PLAIN_MODULES = {
    "coordination.clock",
    "coordination.fetching",
    "coordination.lease",
    "coordination.parts",
    "coordination.share_group",
    "coordination.transport",
    "recipes.partitioning.protocol",
}
PACKAGES = [m for m in MODULES if m not in PLAIN_MODULES]


@pytest.mark.parametrize("module_name", sorted(PLAIN_MODULES - {"recipes.partitioning.protocol"}))
def test_a_public_module_exports_what_it_defines_or_names_in_its_docs(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert hasattr(module, name), (module_name, name)
    defined = {
        n
        for n, obj in vars(module).items()
        if not n.startswith("_") and getattr(obj, "__module__", None) == module_name
    }
    assert defined <= set(module.__all__) | {"R"}, (module_name, defined - set(module.__all__))


@pytest.mark.parametrize("module_name", PACKAGES)
def test_all_is_exactly_the_public_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(module.__all__)
    # Submodules imported as a side effect of loading the package are not API.
    visible = {
        n for n in public_names(module) if not inspect.ismodule(getattr(module, n)) or n in exported
    }
    visible -= {"TypeVar", "ClassVar", "annotations"}
    assert exported - {"__version__"} == visible


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_is_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{module_name}.{name} has no docstring"


def test_public_classes_show_the_package_name() -> None:
    assert coordination.Coordinator.__module__ == "coordination"
    assert repr(coordination.MemberState.STABLE).startswith("<MemberState.STABLE")


@pytest.mark.parametrize(
    "recipe", ["recipes.election.LeaderElection", "recipes.tasks.TaskDistribution"]
)
def test_recipes_take_the_transport_and_clock_a_coordinator_takes(recipe: str) -> None:
    module_name, _, name = recipe.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    expected = inspect.signature(coordination.Coordinator).parameters
    params = inspect.signature(cls).parameters
    for arg in ("transport", "clock"):
        assert params[arg].kind is inspect.Parameter.KEYWORD_ONLY, (recipe, arg)
        assert params[arg].default is None, (recipe, arg)
        assert params[arg].annotation == expected[arg].annotation, (recipe, arg)
        assert f"{arg}:" in (inspect.getdoc(cls.__init__) or ""), (recipe, arg)


@pytest.mark.parametrize(
    "member",
    [
        "coordination.Coordinator",
        "recipes.election.LeaderElection",
        "recipes.tasks.TaskDistribution",
        "recipes.partitioning.ConsumerPartitioning",
        "recipes.partitioning.Consumer",
    ],
)
def test_the_transport_and_clock_parameters_name_the_public_types(member: str) -> None:
    import coordination.clock
    import coordination.transport

    module_name, _, name = member.rpartition(".")
    init = getattr(importlib.import_module(module_name), name).__init__
    params = inspect.signature(init).parameters
    for arg, public in (
        ("transport", coordination.transport.Transport),
        ("clock", coordination.clock.Clock),
    ):
        annotation = eval(params[arg].annotation, init.__globals__)
        assert annotation == public | None, (member, arg, annotation)
        assert public.__module__ == f"coordination.{arg}"


def _make(kind: str, **parts: object) -> object:
    from recipes.election import LeaderElection
    from recipes.partitioning import Consumer, ConsumerPartitioning
    from recipes.tasks import TaskDistribution

    common: dict[str, Any] = {"bootstrap_servers": "localhost:9092", **parts}
    if kind == "Coordinator":

        class Member(coordination.Coordinator):
            def protocol_type(self) -> str:
                return "t"

            def metadata(self) -> Sequence[coordination.ProtocolMetadata]:
                return []

            def perform_assignment(
                self, leader_id: str, protocol: str, members: Sequence[coordination.Member]
            ) -> Mapping[str, bytes]:
                return {}

            def on_join_complete(
                self, generation: int, member_id: str, protocol: str, assignment: bytes
            ) -> None:
                pass

        return Member("g", **common)
    if kind == "LeaderElection":
        return LeaderElection("g", identity="a", **common)
    if kind == "TaskDistribution":
        return TaskDistribution(
            "g", worker_id="w", start_task=print, stop_task=print, tasks={"t": 1.0}, **common
        )
    if kind == "ConsumerPartitioning":
        return ConsumerPartitioning("g", topics=["t"], **common)
    return Consumer("g", topics=["t"], **common)


@pytest.mark.parametrize(
    "kind",
    ["Coordinator", "LeaderElection", "TaskDistribution", "ConsumerPartitioning", "Consumer"],
)
@pytest.mark.parametrize("part", ["clock", "transport"])
def test_a_clock_or_transport_that_is_not_one_is_refused_at_construction_by_name(
    kind: str, part: str
) -> None:
    with pytest.raises(coordination.errors.ConfigurationError, match=rf"^{part}= must be a .*"):
        _make(kind, **{part: object()})


@pytest.mark.parametrize(
    ("kind", "part"), [("ConsumerPartitioning", "topic_metadata"), ("Consumer", "fetcher")]
)
def test_a_metadata_source_or_fetcher_that_is_not_one_is_refused_by_name(
    kind: str, part: str
) -> None:
    with pytest.raises(coordination.errors.ConfigurationError, match=rf"^{part}= must be a .*"):
        _make(kind, **{part: "localhost"})
