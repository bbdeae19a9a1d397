"""The test brokers' harness (``coordination.testing``): when a broker counts as started."""

from __future__ import annotations

import socket
from pathlib import Path

from coordination.testing._broker import KafkaCluster

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
