"""Assignor speed: our sticky assignors against Kafka's Java ones on Kafka's scale test.

The inputs are those of Kafka's ``AbstractStickyAssignorTest``:

* ``uniform`` (``testLargeAssignmentAndGroupWithUniformSubscription``): 2,000 members,
  each subscribed to 500 topics of 2,000 partitions, one million partitions in all;
* ``nonequal`` (``testLargeAssignmentAndGroupWithNonEqualSubscription``): the same, except
  that the last member subscribes to the first topic only, which takes the general
  (non-uniform) path of the algorithm.

Each run makes a fresh assignment, then a reassignment in which every member but the first
claims what it got (generation 1; in the user data for the eager ``sticky``, as owned
partitions for ``cooperative-sticky``), exactly as the Kafka test does. Both are timed.

What is timed is ``assign()`` alone, as Java's side times ``assign()`` alone. Our inputs are
what a leader has in hand: every subscription is written with ``encode_subscription`` and
read back with ``decode_subscription`` before the clock starts (untimed, as Java's
deserialization is). The encoding of every member's assignment for SyncGroup, which a
leader must also do (``encode_assignment``), is timed apart and reported as "enc"; Java's
figure has no counterpart to it.

* ``ours``: ``recipes.partitioning.assignors``, each (assignor, scenario) in a child
  Python process so that its peak RSS (``VmHWM``) is its own;
* ``java``: Kafka's ``CooperativeStickyAssignor`` / ``StickyAssignor`` from kafka-clients
  4.3.1 (Maven Central), one JVM per (assignor, scenario), driven by
  ``benchmarks/java/AssignorBench.java`` (compiled with ``javac`` at run time). The JVM's
  first run includes JIT compilation; the report gives it apart ("cold").

Times are medians over the runs. Peak memory is the process's peak RSS, inputs included
(Java also reports its peak heap).

Run (JDK 17+ and Maven needed for the Java side)::

    python benchmarks/assignors.py --quick     # 100 topics x 1,000 partitions, 1,000 members
    python benchmarks/assignors.py             # Kafka's 1M-partition case, 3 runs each
    python benchmarks/assignors.py --no-java   # ours only

The last line of the output holds the headline figures as ``name=value`` pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _java import compile_java

from recipes.partitioning.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    StickyAssignor,
)
from recipes.partitioning.protocol import (
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
    encode_subscription,
)

JAVA_ARTIFACTS = ("org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36")
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "AssignorBench.java"
ASSIGNORS = ("cooperative-sticky", "sticky")
SCENARIOS = ("uniform", "nonequal")
# (topics, partitions per topic, members)
FULL = (500, 2000, 2000)
QUICK = (100, 1000, 1000)
CHILD_TIMEOUT_S = 1800


class BenchmarkError(Exception):
    """A child process or the JVM failed."""


def _name(prefix: str, i: int, top: int) -> str:
    return f"{prefix}{i:0{len(str(top))}d}"


def _peak_rss_kb() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def child(assignor_name: str, scenario: str, scale: Sequence[int], repeats: int) -> None:
    """Time one assignor on one scenario; print one JSON line per run, then the peak RSS."""
    topic_count, partition_count, member_count = scale
    topics = tuple(_name("t", i, topic_count) for i in range(topic_count))
    partitions_per_topic = dict.fromkeys(topics, partition_count)
    members = [_name("c", i, member_count) for i in range(member_count)]

    def topics_of(i: int) -> tuple[str, ...]:
        return topics[:1] if scenario == "nonequal" and i == member_count - 1 else topics

    def as_received(subscription: Subscription) -> Subscription:
        # What the leader decodes from JoinGroup (untimed, like Java's deserialization).
        return decode_subscription(encode_subscription(subscription))

    def encode_all(plan: Mapping[str, Any]) -> float:
        start = time.perf_counter()
        for assignment in plan.values():
            encode_assignment(assignment)
        return (time.perf_counter() - start) * 1000

    for run in range(repeats):
        subscriptions = {m: as_received(Subscription(topics_of(i))) for i, m in enumerate(members)}
        assignor: PartitionAssignor = (
            CooperativeStickyAssignor()
            if assignor_name == "cooperative-sticky"
            else StickyAssignor()
        )
        start = time.perf_counter()
        first = assignor.assign(partitions_per_topic, subscriptions)
        fresh_ms = (time.perf_counter() - start) * 1000
        fresh_encode_ms = encode_all(first)
        for i, member in enumerate(members[1:], 1):
            owned = first[member].partitions
            if assignor_name == "sticky":
                claim = Subscription(topics_of(i), encode_sticky_user_data(owned, 1))
            else:
                claim = Subscription(
                    topics_of(i), encode_cooperative_sticky_user_data(-1), owned, 1
                )
            subscriptions[member] = as_received(claim)
        start = time.perf_counter()
        second = assignor.assign(partitions_per_topic, subscriptions)
        reassign_ms = (time.perf_counter() - start) * 1000
        reassign_encode_ms = encode_all(second)
        sizes = [len(a.partitions) for a in second.values()]
        # Both sorted, so equal bytes mean equal sets; no TopicPartition objects are made,
        # which would add their memory to the peak RSS reported for the assignor.
        moved = sum(
            1 for m in members[1:] if encode_assignment(first[m]) != encode_assignment(second[m])
        )
        print(
            json.dumps(
                {
                    "run": run,
                    "fresh_ms": fresh_ms,
                    "reassign_ms": reassign_ms,
                    "fresh_encode_ms": fresh_encode_ms,
                    "reassign_encode_ms": reassign_encode_ms,
                    "min": min(sizes),
                    "max": max(sizes),
                    "members_changed": moved,
                }
            ),
            flush=True,
        )
        del first, second, subscriptions
    print(json.dumps({"peak_rss_kb": _peak_rss_kb()}), flush=True)


def run_ours(assignor: str, scenario: str, scale: Sequence[int], repeats: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", assignor, scenario]
    command += ["--scale", ",".join(map(str, scale)), "--repeats", str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if done.returncode != 0:
        raise BenchmarkError(f"child {assignor} {scenario} failed:\n{done.stderr[-3000:]}")
    runs: list[dict[str, Any]] = []
    peak = -1
    for line in done.stdout.splitlines():
        record = json.loads(line)
        if "peak_rss_kb" in record:
            peak = record["peak_rss_kb"]
        else:
            runs.append(record)
    return {"runs": runs, "peak_rss_kb": peak}


def run_java(
    classpath: Sequence[str], assignor: str, scenario: str, scale: Sequence[int], repeats: int
) -> dict[str, Any]:
    command = ["java", "-Xmx6g", "-cp", os.pathsep.join(classpath), "AssignorBench"]
    command += [assignor, scenario, *map(str, scale), str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if done.returncode != 0:
        raise BenchmarkError(f"JVM {assignor} {scenario} failed:\n{done.stderr[-3000:]}")
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {"runs": runs}
    for line in done.stdout.splitlines():
        words = line.split()
        if words[:1] == ["run"]:
            runs.append(
                {
                    "fresh_ms": float(words[2]),
                    "reassign_ms": float(words[3]),
                    "min": int(words[4]),
                    "max": int(words[5]),
                }
            )
        elif words[:1] == ["memory"]:
            result["peak_heap_bytes"] = int(words[1])
            result["peak_rss_kb"] = int(words[2])
    return result


def median(result: Mapping[str, Any], field: str) -> float:
    return float(statistics.median(run[field] for run in result["runs"]))


def report(
    ours: Mapping[tuple[str, str], Mapping[str, Any]],
    java: Mapping[tuple[str, str], Mapping[str, Any]],
    scale: Sequence[int],
    repeats: int,
) -> None:
    topic_count, partition_count, member_count = scale
    print()
    print(
        f"Sticky assignors: {member_count} members, {topic_count} topics x {partition_count} "
        f"partitions = {topic_count * partition_count:,} partitions; median of {repeats} runs (ms)"
    )
    header = (
        f"{'assignor':<19} {'scenario':<9} | {'ours fresh':>10} {'java fresh':>10} "
        f"{'cold':>7} {'ratio':>6} | {'ours re':>8} {'java re':>8} {'cold':>7} {'ratio':>6} | "
        f"{'ours MB':>7} {'java MB':>7} {'heap MB':>7} | {'enc f/r':>9}"
    )
    print(header)
    print("-" * len(header))
    headline: list[str] = []
    for assignor in ASSIGNORS:
        for scenario in SCENARIOS:
            mine = ours.get((assignor, scenario))
            theirs = java.get((assignor, scenario))
            if mine is None:
                continue
            of, orr = median(mine, "fresh_ms"), median(mine, "reassign_ms")
            cells = [f"{assignor:<19} {scenario:<9} | {of:10.0f}"]
            prefix = ("" if assignor == "cooperative-sticky" else "sticky_") + (
                "" if scenario == "uniform" else "nonequal_"
            )
            headline.append(f"{prefix}ours_fresh_ms={of:.0f}")
            if theirs is not None:
                jf, jr = median(theirs, "fresh_ms"), median(theirs, "reassign_ms")
                cold_f, cold_r = theirs["runs"][0]["fresh_ms"], theirs["runs"][0]["reassign_ms"]
                cells.append(f"{jf:10.0f} {cold_f:7.0f} {of / jf:6.2f} | {orr:8.0f}")
                cells.append(f"{jr:8.0f} {cold_r:7.0f} {orr / jr:6.2f} |")
                headline += [
                    f"{prefix}java_fresh_ms={jf:.0f}",
                    f"{prefix}java_cold_fresh_ms={cold_f:.0f}",
                    f"{prefix}ratio_fresh={of / jf:.2f}",
                    f"{prefix}ours_reassign_ms={orr:.0f}",
                    f"{prefix}java_reassign_ms={jr:.0f}",
                    f"{prefix}java_cold_reassign_ms={cold_r:.0f}",
                    f"{prefix}ratio_reassign={orr / jr:.2f}",
                ]
            else:
                cells.append(
                    f"{'-':>10} {'-':>7} {'-':>6} | {orr:8.0f} {'-':>8} {'-':>7} {'-':>6} |"
                )
                headline.append(f"{prefix}ours_reassign_ms={orr:.0f}")
            ours_mb = mine["peak_rss_kb"] / 1024
            headline.append(f"{prefix}ours_peak_rss_mb={ours_mb:.0f}")
            if theirs is not None:
                java_mb = theirs.get("peak_rss_kb", -1) / 1024
                heap_mb = theirs.get("peak_heap_bytes", -1) / 2**20
                cells.append(f"{ours_mb:7.0f} {java_mb:7.0f} {heap_mb:7.0f}")
                headline.append(f"{prefix}java_peak_rss_mb={java_mb:.0f}")
            else:
                cells.append(f"{ours_mb:7.0f} {'-':>7} {'-':>7}")
            ef, er = median(mine, "fresh_encode_ms"), median(mine, "reassign_encode_ms")
            cells.append(f"| {ef:4.0f}/{er:<4.0f}")
            headline += [
                f"{prefix}ours_encode_fresh_ms={ef:.0f}",
                f"{prefix}ours_encode_reassign_ms={er:.0f}",
            ]
            print(" ".join(cells))
            runs = mine["runs"]
            if any(r["max"] - r["min"] > 1 for r in runs):
                print(f"  WARNING: ours unbalanced: {runs}")
    print("(ratio = ours / java median; below 1: ours is faster. cold = the JVM's first run)")
    print("(enc f/r: ours, encode_assignment of every member after the fresh / re assignment;")
    print(" not in the timed figures, and Java's side has no counterpart to it)")
    print(" ".join(headline))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a scaled-down input")
    parser.add_argument("--repeats", type=int, help="runs per cell (default 3, quick 3)")
    parser.add_argument("--no-java", action="store_true", help="skip the Java side")
    parser.add_argument("--assignors", default=",".join(ASSIGNORS), help="comma-separated subset")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    parser.add_argument("--scale", help="TOPICS,PARTITIONS,MEMBERS (overrides --quick)")
    parser.add_argument(
        "--child", nargs=2, metavar=("ASSIGNOR", "SCENARIO"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    args.repeats = args.repeats or 3
    if args.scale:
        args.scale = tuple(int(x) for x in args.scale.split(","))
    else:
        args.scale = QUICK if args.quick else FULL
    args.assignors = [a for a in args.assignors.split(",") if a]
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    if set(args.assignors) - set(ASSIGNORS) or set(args.scenarios) - set(SCENARIOS):
        parser.error(f"choose assignors from {ASSIGNORS} and scenarios from {SCENARIOS}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.scale, args.repeats)
        return 0
    ours: dict[tuple[str, str], dict[str, Any]] = {}
    java: dict[tuple[str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="assignor-bench-") as work:
        classpath = (
            None
            if args.no_java
            else compile_java(
                JAVA_SOURCE, JAVA_ARTIFACTS, Path(work), BenchmarkError, hint=" or use --no-java"
            )
        )
        for assignor in args.assignors:
            for scenario in args.scenarios:
                key = (assignor, scenario)
                ours[key] = run_ours(assignor, scenario, args.scale, args.repeats)
                times = [f"{r['fresh_ms']:.0f}/{r['reassign_ms']:.0f}" for r in ours[key]["runs"]]
                print(f"  ours {assignor:>18} {scenario:<8} fresh/reassign ms: {times}", flush=True)
                if classpath is not None:
                    java[key] = run_java(classpath, assignor, scenario, args.scale, args.repeats)
                    times = [
                        f"{r['fresh_ms']:.0f}/{r['reassign_ms']:.0f}" for r in java[key]["runs"]
                    ]
                    print(
                        f"  java {assignor:>18} {scenario:<8} fresh/reassign ms: {times}",
                        flush=True,
                    )
    report(ours, java, args.scale, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
