"""The test brokers' harness (``coordination.testing``): when a broker counts as started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from coordination.testing._broker import KafkaCluster
from coordination.testing._ports import free_port
from devtools.orphans import ended

RUNNING = "[2026-12-05 01:00:00,000] INFO Transitioning from RECOVERY to RUNNING (kafka)\n"


def test_a_restarted_broker_serves_only_once_its_own_start_says_so(tmp_path: Path) -> None:
    # A restart appends to the broker's log: the earlier start's "running" line is there
    # before the new JVM has done anything, and the port may already accept (a test
    # restarting a broker must not go on before it registered again).
    cluster = KafkaCluster(1, directory=tmp_path)
    (node,) = cluster._nodes
    node.directory.mkdir(parents=True)
    node.log_file.write_text("an earlier start\n" + RUNNING)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", node.port))
        listener.listen()
        cluster._note_log_start(node)  # what a start does before launching the JVM
        assert not cluster._serving(node)
        with node.log_file.open("a") as log:
            log.write("the new start\n" + RUNNING)
        assert cluster._serving(node)


# Starts a cluster, prints its brokers' directory and pid, and waits to be killed.
_OWNER = """
import time
from coordination.testing import KafkaCluster
cluster = KafkaCluster(1).start()
(node,) = cluster._nodes
print(cluster._root, node.process.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_owner_s_brokers_stop_and_their_directory_goes() -> None:
    # The brokers run in sessions of their own: without the reaper, a test process killed
    # outright left its brokers' JVMs running (each a heap, ports and a data directory).
    with subprocess.Popen(
        [sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True
    ) as owner:
        assert owner.stdout is not None
        root, pid = owner.stdout.readline().split()
        broker = int(pid)
        try:
            assert not ended(broker) and Path(root).is_dir()
            owner.kill()
            owner.wait()
            deadline = time.monotonic() + 15
            while (not ended(broker) or Path(root).exists()) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ended(broker), "the broker outlived its killed owner by 15 s"
            assert not Path(root).exists(), "the cluster's directory outlived its owner"
        finally:
            owner.kill()
            with contextlib.suppress(ProcessLookupError):
                os.kill(broker, signal.SIGKILL)


def test_a_stopped_cluster_leaves_no_reaper(tmp_path: Path) -> None:
    with KafkaCluster(1, directory=tmp_path) as cluster:
        reaper = cluster._reaper
        assert reaper is not None and reaper.poll() is None
    assert reaper.poll() is not None and cluster._reaper is None
    assert tmp_path.is_dir()  # the caller's directory: its brokers' data goes, it stays


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_the_broker_command_ends_with_an_error_when_its_broker_dies() -> None:
    # It used to go on printing nothing, its "ready" line still the last word, while the
    # port refused every connection.
    port = free_port()
    command = [sys.executable, "-m", "coordination", "broker", "--port", str(port)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as cli:
        assert cli.stdout is not None and cli.stderr is not None
        try:
            for line in cli.stdout:
                if line.startswith("ready:"):
                    break
            jvms = [p for p in _children(cli.pid) if b"kafka.Kafka" in _cmdline(p)]
            assert len(jvms) == 1, jvms
            os.kill(jvms[0], signal.SIGKILL)
            assert cli.wait(timeout=30) == 1
            assert "broker 1 exited; the end of its log:" in cli.stderr.read()
        finally:
            cli.kill()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
