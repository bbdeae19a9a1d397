"""The layering rules of the public surface, read from the source with ``ast``.

1. Recipes and examples are written as a user would write them: on the public surface
   only. No module under ``recipes/`` or ``examples/`` imports a private module of
   ``coordination`` (``coordination._x``, ``coordination.testing._x``, ``from coordination
   import _x``, ``importlib.import_module("coordination._x")``), nor reads the private
   ``_engine`` attribute of a member.
2. The core does not depend on the recipes: nothing under ``coordination/`` imports
   ``recipes`` (nor names a recipes module to import it by its name; the recipes register
   their describe decoders through entry points, and their simulator drivers and the fault
   campaign live in ``devtools/``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Attributes of core objects that a recipe must not read: the member's engine. (Telling
# every private attribute of a core object from a recipe's own needs types; this one is
# the reach the recipes used to make.)
FORBIDDEN_ATTRIBUTES = frozenset({"_engine"})

# A dotted module name of the recipes package (a bare "recipes" is a logger's name).
_RECIPES_MODULE = re.compile(r"recipes(\.\w+)+")
_IMPORTERS = frozenset({"import_module", "__import__"})


def _is_private_core_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "coordination" and any(p.startswith("_") for p in parts[1:])


def _imported_by_name(node: ast.Call) -> str | None:
    """The module a call such as ``importlib.import_module("x")`` imports, if a literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in _IMPORTERS and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def private_reaches(source: str) -> Iterator[tuple[int, str]]:
    """Each line of ``source`` that reaches into the core's private parts, and what it reaches."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_private_core_module(alias.name):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if _is_private_core_module(node.module):
                yield node.lineno, f"from {node.module} import ..."
            elif node.module.split(".")[0] == "coordination":
                for alias in node.names:
                    if alias.name.startswith("_"):
                        yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            yield node.lineno, f".{node.attr}"
        elif isinstance(node, ast.Call):
            module = _imported_by_name(node)
            if module is not None and _is_private_core_module(module):
                yield node.lineno, f"import_module({module!r})"


def recipes_imports(source: str) -> Iterator[str]:
    """Each module of the recipes package that ``source`` imports, or names to import."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "recipes":
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module.split(".")[0] == "recipes":
                yield node.module
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _RECIPES_MODULE.fullmatch(node.value)
        ):
            yield node.value


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_recipes_and_examples_use_only_the_public_surface() -> None:
    files = _python_files("recipes", "examples")
    assert len(files) > 20, "the scan found too few files: has the layout moved?"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in private_reaches(path.read_text())
    ]
    assert not found, "reaches into coordination's private parts:\n" + "\n".join(found)


def test_the_core_imports_no_recipe() -> None:
    found = sorted(
        f"{path.relative_to(ROOT)}: {module}"
        for path in _python_files("coordination")
        for module in recipes_imports(path.read_text())
    )
    assert not found, "the core must not import the recipes:\n" + "\n".join(found)


# The checks themselves, on sources that break each rule or keep it.


@pytest.mark.parametrize(
    "source",
    [
        "from coordination._engine.clock import Clock",
        "from coordination._lease import LeaseGuard",
        "import coordination._transport.base",
        "import coordination._config as config",
        "from coordination import _config",
        "from coordination.testing._scripted import ManualClock",
        "from coordination.testing.simulation import _history",
        "import importlib\nimportlib.import_module('coordination._engine.membership')",
        "def f(member):\n    return member._engine.clock",
    ],
)
def test_a_reach_into_the_core_is_found(source: str) -> None:
    assert list(private_reaches(source)), source


@pytest.mark.parametrize(
    "source",
    [
        "from coordination import Coordinator, ProtocolMetadata",
        "from coordination.clock import SYSTEM_CLOCK, Clock",
        "from coordination.lease import LeaseGuard",
        "from coordination.transport import Transport",
        "from . import _wire\nfrom ._recipe import RecipeMember",
        "import coordination.testing",
        "def f(self):\n    return self._guard, self.clock",
    ],
)
def test_a_public_import_is_not_a_reach(source: str) -> None:
    assert not list(private_reaches(source)), source


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from recipes.tasks import TaskDistribution", "recipes.tasks"),
        ("import recipes.election", "recipes.election"),
        ("DECODERS = {'tasks': 'recipes.tasks._describe'}", "recipes.tasks._describe"),
    ],
)
def test_an_import_of_the_recipes_is_found(source: str, module: str) -> None:
    assert list(recipes_imports(source)) == [module]


def test_a_logger_named_recipes_is_not_an_import() -> None:
    assert not list(recipes_imports("logging.getLogger('recipes')"))
