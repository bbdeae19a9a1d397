"""The recipes' seeded fault histories: ``python -m devtools.simulation --recipe NAME``.

Examples:
    python -m devtools.simulation --recipe election --seeds 2000
    python -m devtools.simulation --recipe election --seed 41 --trace
"""

from __future__ import annotations

import sys

from coordination.testing.simulation.__main__ import main

from . import RECIPES

if __name__ == "__main__":
    sys.exit(main(recipes=RECIPES, module="devtools.simulation"))
