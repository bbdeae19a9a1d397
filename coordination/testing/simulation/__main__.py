"""Run seeded fault histories of your own driver: ``python -m coordination.testing.simulation``.

Examples:
    python -m coordination.testing.simulation --driver myservice.simulation:ShardsDriver
    python -m coordination.testing.simulation --driver myservice.simulation:ShardsDriver \\
        --seed 42 --trace

A violation prints the seed, what was violated, and the command that replays it with the
members' log in the trace. Histories replay exactly under the same PYTHONHASHSEED (the
command sets it to 0 unless it is set). This library's own recipes run with
``python -m devtools.simulation --recipe NAME`` from a checkout.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping

from ._history import HistorySettings
from ._runner import DriverFactory, replay, run_seeds, with_fixed_hash_seed


def main(
    argv: list[str] | None = None,
    *,
    recipes: Mapping[str, DriverFactory] | None = None,
    module: str = "coordination.testing.simulation",
) -> int:
    """The command line; ``recipes`` adds ``--recipe NAME`` for drivers known by name."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    choose = parser.add_mutually_exclusive_group(required=recipes is None)
    choose.add_argument("--driver", help="module:attribute of a Driver factory (a class)")
    if recipes is not None:
        choose.add_argument("--recipe", choices=sorted(recipes), default="engine")
    parser.add_argument("--seeds", type=int, default=100, help="how many histories")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, help="run this one history and print its trace")
    parser.add_argument("--faults", type=int, default=100, help="faults per history")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--trace", action="store_true", help="with --seed: the whole trace")
    args = parser.parse_args(argv)
    with_fixed_hash_seed(["-m", module, *(sys.argv[1:] if argv is None else argv)])
    if args.driver is not None:
        driver, chosen = _load(parser, args.driver), f"--driver {args.driver}"
    else:
        assert recipes is not None
        driver, chosen = recipes[args.recipe], f"--recipe {args.recipe}"
    settings = HistorySettings(faults=args.faults, members=args.members)
    if args.seed is not None:
        result = replay(driver, args.seed, settings)
        print("\n".join(result.trace if args.trace else result.trace[-60:]))
        print(
            f"seed={args.seed} faults={result.faults} ok={result.ok} violation={result.violation!r}"
        )
        return 0 if result.ok else 1
    summary = run_seeds(driver, range(args.first_seed, args.first_seed + args.seeds), settings)
    for failure in summary.failures:
        print(f"VIOLATION seed={failure.seed}: {failure.violation}")
        print("  last events:")
        for line in failure.trace[-25:]:
            print(f"    {line}")
        print(
            f"  replay: PYTHONHASHSEED={os.environ['PYTHONHASHSEED']} python -m {module} "
            f"{chosen} --seed {failure.seed} --faults {args.faults} --members {args.members}"
        )
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.fault_kinds.items()))
    print(f"faults by kind: {kinds}")
    print(summary.line())
    return 1 if summary.failures else 0


def _load(parser: argparse.ArgumentParser, where: str) -> DriverFactory:
    module_name, _, attribute = where.partition(":")
    if not module_name or not attribute:
        parser.error(
            f"--driver takes module:attribute (e.g. myservice.sim:MyDriver), got {where!r}"
        )
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        parser.error(f"--driver {where}: {e}")
    if not callable(factory):
        parser.error(f"--driver {where} is not a Driver factory (a class taking HistorySettings)")
    return factory  # type: ignore[no-any-return]


if __name__ == "__main__":
    sys.exit(main())
