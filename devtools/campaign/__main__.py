"""``python -m devtools.campaign``: run a fault campaign, or check a finished one.

    python -m devtools.campaign --faults 120 [--seed 7] [--duration 600]
    python -m devtools.campaign --quick          # what CI runs (~5 min)
    python -m devtools.campaign --workload share --faults 120   # a share group (KIP-932)
    python -m devtools.campaign --check RUN_DIR  # re-run the checker only

The last line printed is ``name=value`` figures; the exit status is 1 if the checker found
any violation (or the liveness bound given with ``--max-unowned`` was exceeded), 2 if the
campaign could not run.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ._campaign import Campaign, CampaignError, Settings
from ._checker import Report, check
from ._load import load, load_share, workload_of
from ._share import ShareCampaign
from ._share_checker import ShareReport, check_share

QUICK = {"faults": 110, "spacing": 2.4}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.campaign")
    parser.add_argument("--faults", type=int, help="inject this many faults")
    parser.add_argument("--duration", type=float, help="inject faults for this many seconds")
    parser.add_argument("--seed", type=int, help="chooses the faults (default: random)")
    parser.add_argument("--spacing", type=float, default=2.5, help="seconds between faults")
    parser.add_argument("--quick", action="store_true", help="the CI campaign: 110 faults")
    parser.add_argument(
        "--workload",
        choices=("groups", "share"),
        default="groups",
        help="groups: election, tasks, two consumer groups; share: a share group",
    )
    parser.add_argument("--run-dir", type=Path, help="where events go (default: ./campaign-*)")
    parser.add_argument("--max-unowned", type=float, help="fail if work stayed unowned longer")
    parser.add_argument("--check", type=Path, metavar="RUN_DIR", help="only check this run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    report: Report | ShareReport
    if args.check is not None:
        if workload_of(args.check) == "share":
            report = check_share(load_share(args.check))
        else:
            report = check(load(args.check))
    else:
        faults, spacing = args.faults, args.spacing
        if args.quick:
            faults, spacing = QUICK["faults"], QUICK["spacing"]
        if faults is None and args.duration is None:
            parser.error("give --faults, --duration or --quick")
        seed = args.seed if args.seed is not None else random.randrange(2**31)
        print(f"campaign seed={seed}", flush=True)
        settings = Settings(
            seed=seed,
            faults=int(faults) if faults is not None else None,
            duration=args.duration,
            spacing=float(spacing),
            run_dir=args.run_dir,
            # The share workload waits for its records to settle instead.
            settle_s=5.0 if args.workload == "share" else Settings.settle_s,
        )
        kind = ShareCampaign if args.workload == "share" else Campaign
        try:
            report = kind(settings).run()
        except CampaignError as e:
            print(f"campaign failed: {e}", file=sys.stderr)
            return 2
    return print_report(report, time.monotonic() - started, args.max_unowned)


def print_report(report: Report | ShareReport, elapsed: float, max_unowned: float | None) -> int:
    print(report.summary())
    figures = {**report.figures(), "elapsed_s": round(elapsed, 1)}
    print(" ".join(f"{k}={v}" for k, v in figures.items()), flush=True)
    too_slow = max_unowned is not None and report.max_unowned_s > max_unowned
    return 1 if report.violations or too_slow else 0


if __name__ == "__main__":
    sys.exit(main())
