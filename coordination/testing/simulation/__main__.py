"""Run seeded fault histories: ``python -m coordination.testing.simulation``.

Examples:
    python -m coordination.testing.simulation --recipe engine --seeds 2000
    python -m coordination.testing.simulation --recipe engine --seed 42 --trace

A violation prints the seed, what was violated, and the command that replays it with the
members' log in the trace. Histories replay exactly under the same PYTHONHASHSEED (the
command sets it to 0 unless it is set).
"""

from __future__ import annotations

import argparse
import os
import sys

from ._history import HistorySettings
from ._runner import RECIPES, replay, run_seeds, with_fixed_hash_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordination.testing.simulation")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="engine")
    parser.add_argument("--seeds", type=int, default=100, help="how many histories")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, help="run this one history and print its trace")
    parser.add_argument("--faults", type=int, default=100, help="faults per history")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--trace", action="store_true", help="with --seed: the whole trace")
    args = parser.parse_args(argv)
    with_fixed_hash_seed(
        ["-m", "coordination.testing.simulation", *(sys.argv[1:] if argv is None else argv)]
    )
    settings = HistorySettings(faults=args.faults, members=args.members)
    if args.seed is not None:
        result = replay(args.recipe, args.seed, settings)
        print("\n".join(result.trace if args.trace else result.trace[-60:]))
        print(
            f"seed={args.seed} faults={result.faults} ok={result.ok} violation={result.violation!r}"
        )
        return 0 if result.ok else 1
    summary = run_seeds(args.recipe, range(args.first_seed, args.first_seed + args.seeds), settings)
    for failure in summary.failures:
        print(f"VIOLATION seed={failure.seed}: {failure.violation}")
        print("  last events:")
        for line in failure.trace[-25:]:
            print(f"    {line}")
        print(
            f"  replay: PYTHONHASHSEED={os.environ['PYTHONHASHSEED']} python -m "
            f"coordination.testing.simulation --recipe {args.recipe} --seed {failure.seed} "
            f"--faults {args.faults} --members {args.members}"
        )
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.fault_kinds.items()))
    print(f"faults by kind: {kinds}")
    print(summary.line())
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
