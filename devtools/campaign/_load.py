"""Reads a campaign's run directory into a :class:`History` for the checker.

Layout: ``meta.json`` (the clock offset), ``campaign.jsonl`` (processes and faults), one
``<group>/<name>.<incarnation>.jsonl`` per process, and ``final/`` (the topics read back at
the end). The consumer peers stamp events in epoch milliseconds; they are converted here to
the campaign's clock with the offset measured when the campaign began. Each consumer group
(:data:`CONSUMER_GROUPS`, a directory each) goes to the checker on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ._checker import CLASSIC_CONSUMERS, KIP848_CONSUMERS, Event, History
from ._share_checker import ShareHistory

CONSUMER_GROUPS: Final = (CLASSIC_CONSUMERS, KIP848_CONSUMERS)
"""The consumer groups' names (and directories): the classic protocol's and KIP-848's."""
SHARE_CONSUMERS: Final = "share"
"""The share workload's group (and directory)."""


def read_events(path: Path) -> Iterator[Event]:
    """The events of one file; a line cut short by a SIGKILL is skipped."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event: Any = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event:
            yield event


def process_name(path: Path) -> str:
    name, _, incarnation = path.name.removesuffix(".jsonl").rpartition(".")
    return f"{name}#{incarnation}"


def load(run_dir: Path) -> History:
    meta = json.loads((run_dir / "meta.json").read_text())
    offset = float(meta["epoch_offset"])
    history = History()
    for e in read_events(run_dir / "campaign.jsonl"):
        if e["event"] == "exit":
            history.exits[str(e["process"])] = float(e["t"])
        elif e["event"] == "fault":
            history.faults.append(e)
            history.last_fault_at = max(history.last_fault_at, float(e["end"]))
        elif e["event"] == "stopping":
            history.stopping_at = float(e["t"])
    for path in sorted((run_dir / "election").glob("*.jsonl")):
        history.election[process_name(path)] = list(read_events(path))
    for path in sorted((run_dir / "tasks").glob("*.jsonl")):
        history.tasks[process_name(path)] = list(read_events(path))
    for group in CONSUMER_GROUPS:
        directory = run_dir / group
        if not directory.is_dir():
            continue  # a run made before the group was added
        processes = history.consumer_groups.setdefault(group, {})
        for path in sorted(directory.glob("*.jsonl")):
            events = []
            for e in read_events(path):
                e["t"] = float(e.get("t", 0.0)) / 1000.0 - offset
                events.append(e)
            processes[process_name(path)] = events
    for path in sorted((run_dir / "producer").glob("*.jsonl")):
        history.produced += [e for e in read_events(path) if e["event"] == "acked"]
    final = run_dir / "final"
    if (final / "election-log.jsonl").exists():
        history.election_log = list(read_events(final / "election-log.jsonl"))
    if (final / "stream-log.jsonl").exists():
        history.stream_log = {
            (str(e["topic"]), int(e["partition"]), int(e["offset"])): str(e["value"])
            for e in read_events(final / "stream-log.jsonl")
        }
    return history


def load_share(run_dir: Path) -> ShareHistory:
    """A share workload's run (its consumers stamp the campaign's clock)."""
    history = ShareHistory()
    for e in read_events(run_dir / "campaign.jsonl"):
        if e["event"] == "fault":
            history.faults.append(e)
        elif e["event"] == "exit" and e.get("how") == "killed":
            history.kills.append(float(e["t"]))
        elif e["event"] == "share_config":
            history.delivery_limit = int(e["delivery_limit"])
            history.lock_s = int(e["share.record.lock.duration.ms"]) / 1000
        elif e["event"] == "share_state":
            history.final_state = dict(e["partitions"])
        elif e["event"] == "share_state_settled":
            history.settled_state = dict(e["partitions"])
    for path in sorted((run_dir / SHARE_CONSUMERS).glob("*.jsonl")):
        history.consumers[process_name(path)] = list(read_events(path))
    for path in sorted((run_dir / "producer").glob("*.jsonl")):
        history.produced += [e for e in read_events(path) if e["event"] == "acked"]
    return history


def workload_of(run_dir: Path) -> str:
    """The workload a run directory holds (``groups`` for runs made before there were two)."""
    return str(json.loads((run_dir / "meta.json").read_text()).get("workload", "groups"))
