"""Helper processes of tests, benchmarks and campaigns end with the process that started them.

Peers and members run in sessions of their own (a Ctrl-C of the run is their parent's to
pass on), so nothing else stops them when their parent dies without stopping them (a killed
test run): they would keep their groups busy and the machine's cores with them. Each one
watches its parent instead. Not ``PR_SET_PDEATHSIG``: it fires when the *thread* that
started the child ends, and the campaign starts members from short-lived fault threads.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

# The exit status of a process that ended because its parent was gone.
ORPHANED_EXIT = 3


def exit_when_orphaned(interval_s: float = 0.5) -> None:
    """End this process (at once: nobody reads its output or waits for a clean leave) once
    its parent is gone, which shows as a new parent (the one it was handed to)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def ended(pid: int) -> bool:
    """Whether process ``pid`` ended: gone, or a zombie its (new) parent has not reaped yet
    (Linux: reads ``/proc``). For tests that check a process did not outlive its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"
