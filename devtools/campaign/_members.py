"""The campaign's member processes: start, kill, freeze, thaw, restart and stop them.

Every process writes its events to its own file, ``<run>/<group>/<name>.<incarnation>.jsonl``
(its stdout), and is known to the checker as ``<name>#<incarnation>``; a restart is a new
incarnation with a new file. The campaign's own log (``campaign.jsonl``) records when each
process started and ended, so the checker knows that a killed process owned nothing after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._record import Recorder

# A member's command line, given the name the process records under.
CommandLine = Callable[[str], Sequence[str]]


@dataclass
class Member:
    """One member slot of a group: the same name (and instance id, if static) across restarts."""

    group: str
    name: str
    kind: str
    static: bool
    command: CommandLine
    incarnation: int = 0
    process: subprocess.Popen[bytes] | None = None
    busy: bool = False
    files: list[Path] = field(default_factory=list)

    @property
    def process_name(self) -> str:
        return f"{self.name}#{self.incarnation}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Members:
    """Every member process of a campaign; all methods may be called from any thread."""

    def __init__(self, run_dir: Path, log: Recorder, env: dict[str, str], cwd: Path) -> None:
        self.run_dir = run_dir
        self.log = log
        self.env = env
        self.cwd = cwd
        self.all: list[Member] = []
        self._lock = threading.Lock()

    def add(self, member: Member) -> Member:
        self.all.append(member)
        return member

    def of(self, group: str) -> list[Member]:
        return [m for m in self.all if m.group == group]

    def spawn(self, member: Member) -> None:
        member.incarnation += 1
        directory = self.run_dir / member.group
        directory.mkdir(parents=True, exist_ok=True)
        events = directory / f"{member.name}.{member.incarnation}.jsonl"
        member.files.append(events)
        with open(events, "wb") as out, open(events.with_suffix(".stderr"), "wb") as err:
            member.process = subprocess.Popen(
                list(member.command(member.process_name)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        self.log(
            "spawn",
            process=member.process_name,
            group=member.group,
            kind=member.kind,
            static=member.static,
            pid=member.process.pid,
            file=str(events.relative_to(self.run_dir)),
        )

    def kill(self, member: Member) -> None:
        """SIGKILL, as a crash; the process is reaped before this returns."""
        process = member.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
        process.wait()
        self.log("exit", process=member.process_name, how="killed", code=process.returncode)
        member.process = None

    def freeze(self, member: Member) -> None:
        if member.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member.process.pid, signal.SIGSTOP)

    def thaw(self, member: Member) -> None:
        if member.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member.process.pid, signal.SIGCONT)

    def stop(self, members: Sequence[Member], timeout: float = 45.0) -> None:
        """Close ``members`` cleanly (SIGTERM, all at once), SIGKILL those that overrun."""
        for m in members:
            if m.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.process.pid, signal.SIGCONT)
                    m.process.send_signal(signal.SIGTERM)
        for m in members:
            process = m.process
            if process is None:
                continue
            how = "closed"
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                how = "killed at the end"
                process.kill()
                process.wait()
            self.log("exit", process=m.process_name, how=how, code=process.returncode)
            m.process = None

    def kill_all(self) -> None:
        """The last resort on the way out: nothing the campaign started may outlive it."""
        for m in self.all:
            if m.process is not None and m.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    m.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    m.process.wait(10)
