"""Simulation throughput: seeded fault histories per minute, per recipe, on one core.

Each history runs 3 members of a recipe against the simulated cluster (3 brokers running
the group coordinator model), 100 random faults (pauses, crashes and restarts, partitions,
lost requests and answers, slow networks, coordinator moves, broker restarts, slow
callbacks, replaced processes, group deletion), invariant checks after every step, then a
quiet period in which the work must be owned again. One process, one core.

Goal (issue: deterministic simulation): at least 1,000 histories of 100+ faults per minute
on one core, so CI runs thousands and a long run (``--seeds 100000``) far more.

Run::

    python benchmarks/simulation.py                 # 200 histories per recipe
    python benchmarks/simulation.py --seeds 2000 --recipes tasks

The last line is ``name=value`` pairs per recipe.
"""

from __future__ import annotations

import argparse
import sys

from coordination.testing.simulation import HistorySettings, with_fixed_hash_seed
from devtools.simulation import RECIPES, run_seeds

GOAL_PER_MINUTE = 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="histories per recipe")
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--recipes", nargs="*", default=sorted(RECIPES))
    args = parser.parse_args()
    with_fixed_hash_seed(sys.argv)
    print(
        f"{'recipe':<10} {'histories':>9} {'faults/h':>8} {'steps/h':>8} {'us/step':>8} "
        f"{'per min':>8} {'x goal':>7} {'violations':>10}"
    )
    pairs = []
    for recipe in args.recipes:
        s = run_seeds(recipe, range(args.seeds), HistorySettings(faults=args.faults))
        steps_per = s.steps / max(1, s.histories)
        us_per_step = s.seconds / max(1, s.steps) * 1e6
        ratio = s.per_minute / GOAL_PER_MINUTE
        print(
            f"{recipe:<10} {s.histories:>9} {s.faults / max(1, s.histories):>8.1f} "
            f"{steps_per:>8.0f} {us_per_step:>8.1f} {s.per_minute:>8.0f} {ratio:>7.2f} "
            f"{len(s.failures):>10}"
        )
        pairs.append(
            f"{recipe}_per_minute={s.per_minute:.0f} {recipe}_violations={len(s.failures)}"
        )
    print(" ".join(pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
