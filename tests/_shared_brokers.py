"""One broker per Kafka version for all the test processes of a parallel run.

``scripts/test.sh`` runs the suite in several pytest-xdist worker processes. Each of them
would otherwise start its own brokers (two JVMs per worker, each taking seconds of both
cores to start). Instead, the first worker to need a version starts it in a process of its
own (``python -m tests._shared_brokers``), detached, and writes its address into a state
file; the others read it under the same file lock. That process stops the broker when the
run's controller process (the workers' parent) is gone, so a broker outlives no run, even
one that was killed.

Tests that stop, kill or reconfigure brokers start clusters of their own; the shared broker
is only ever used as an ordinary broker, and every test names its groups and topics
uniquely.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

_START_TIMEOUT = 300.0  # a first run downloads Kafka's jars from Maven Central
# The servers this process started: they outlive its tests (a Popen dropped while its process
# runs warns, and warnings are errors in this suite).
_started: list[subprocess.Popen[bytes]] = []


@atexit.register
def _leave_running() -> None:
    # They stop by themselves once the run's controller is gone; not waited for here.
    for server in _started:
        if server.poll() is None:
            server.returncode = 0  # Popen warns at exit about a child it thinks still runs


def _state_dir() -> Path:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getppid()}")
    path = Path(tempfile.gettempdir()) / f"coordination-test-brokers-{run}"
    path.mkdir(exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shared_bootstrap(version: str) -> str:
    """The bootstrap servers of this run's broker of ``version``, started on first use."""
    directory = _state_dir()
    state = directory / f"{version}.json"
    with _locked(directory / f"{version}.lock"):
        if state.exists():
            found: dict[str, object] = json.loads(state.read_text())
            if _alive(int(str(found["pid"]))):
                return str(found["bootstrap_servers"])
            state.unlink()  # its server died: start another (the tests that ran on it failed)
        log = directory / f"{version}.log"
        with log.open("ab") as out:
            server = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests._shared_brokers",
                    "--version",
                    version,
                    "--owner",
                    str(os.getppid()),
                    "--state",
                    str(state),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a worker's Ctrl-C is the controller's to handle
                cwd=Path(__file__).resolve().parent.parent,
            )
        _started.append(server)
        deadline = time.monotonic() + _START_TIMEOUT
        while not state.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(
                    f"the shared Kafka {version} broker did not start; its log: {log}\n"
                    + log.read_text(errors="replace")[-4000:]
                )
            time.sleep(0.2)
        started: dict[str, object] = json.loads(state.read_text())
        return str(started["bootstrap_servers"])


def _serve(version: str, owner: int, state: Path) -> None:
    from coordination.testing import KafkaCluster

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # Four test processes use it at once for the whole run: more heap than a one-test broker.
    with KafkaCluster(brokers=1, version=version, heap="768m") as cluster:
        written = state.with_suffix(".tmp")
        written.write_text(
            json.dumps({"bootstrap_servers": cluster.bootstrap_servers, "pid": os.getpid()})
        )
        written.replace(state)  # whole or absent: a reader never sees half of it
        print(f"Kafka {version} at {cluster.bootstrap_servers} for run of pid {owner}", flush=True)
        while not stopping and _alive(owner):
            time.sleep(0.5)
    state.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--version", required=True)
    parser.add_argument("--owner", type=int, required=True, help="stop when this pid is gone")
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    _serve(args.version, args.owner, args.state)


if __name__ == "__main__":
    main()
