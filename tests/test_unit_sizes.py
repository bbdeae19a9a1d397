"""The shipped core stays readable: no class over 600 lines, no engine function over 80.

A class that grows past the limit is split into collaborators (as the classic engine is:
``ClassicHeartbeats`` -> ``ClassicJoin`` -> ``GroupMembership``; and KIP-848's
``ConsumerGroupReconcile`` -> ``ConsumerGroupMembership``), not allowed to grow. Sizes are
read from the source with ``ast``: a unit's lines from its ``def``/``class`` line (or its
first decorator) to its last.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_CLASS_LINES = 600
MAX_ENGINE_FUNCTION_LINES = 80


def units(package: str, kinds: tuple[type[ast.AST], ...]) -> Iterator[tuple[str, int]]:
    """(``path:name``, lines) of every unit of ``kinds`` under ``package``."""
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, kinds):
                assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                last = node.end_lineno or node.lineno
                yield f"{path.relative_to(ROOT)}:{node.name}", last - first + 1


def test_no_class_in_the_shipped_core_is_over_600_lines() -> None:
    too_big = {name: n for name, n in units("coordination", (ast.ClassDef,)) if n > MAX_CLASS_LINES}
    assert not too_big, f"split these classes into collaborators: {too_big}"


def test_no_engine_function_is_over_80_lines() -> None:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    too_big = {
        name: n for name, n in units("coordination/_engine", kinds) if n > MAX_ENGINE_FUNCTION_LINES
    }
    assert not too_big, f"one function per step: split {too_big}"


def test_the_measure_sees_the_biggest_units() -> None:
    """The walk reaches nested packages and methods (a measure that found nothing would
    let every class grow)."""
    classes = dict(units("coordination", (ast.ClassDef,)))
    assert classes["coordination/_engine/membership.py:GroupMembership"] > 300
    functions = dict(units("coordination/_engine", (ast.FunctionDef,)))
    assert functions["coordination/_engine/reconcile.py:_reconcile"] > 40
