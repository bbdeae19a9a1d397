"""Kafka's jars resolved by ``mvn``: processes starting at once on an empty cache run it once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Stands in for mvn: records each run, notes a run that overlaps another, takes a second as a
# download would, and writes one jar where dependency:copy-dependencies writes them.
_FAKE_MVN = """#!/bin/sh
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
[ -e "$MVN_RUNS.busy" ] && echo overlap >> "$MVN_RUNS"
echo run >> "$MVN_RUNS"
touch "$MVN_RUNS.busy"
sleep 1
rm -f "$MVN_RUNS.busy"
mkdir -p "$out" && echo jar > "$out/kafka_2.13-4.3.1.jar"
"""

_RESOLVE = """
from coordination.testing._maven import resolve_classpath
print([p.name for p in resolve_classpath(["org.apache.kafka:kafka_2.13:4.3.1"])])
"""


def test_processes_resolving_at_once_into_an_empty_cache_run_mvn_once(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(_FAKE_MVN)
    mvn.chmod(0o755)
    runs = tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "COORDINATION_CACHE": str(tmp_path / "cache"),
        "MVN_RUNS": str(runs),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RESOLVE], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outputs == ["['kafka_2.13-4.3.1.jar']\n"] * 3
    assert runs.read_text() == "run\n"  # once, and never two at a time
