"""Resolve Java artifacts from Maven Central into a local cache, with ``mvn``."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import CoordinationError

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>coordination.local</groupId>
  <artifactId>classpath</artifactId>
  <version>1</version>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = (
    "    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
    "<version>{v}</version></dependency>"
)


class MavenError(CoordinationError):
    """Artifacts could not be resolved from Maven Central."""


def cache_dir() -> Path:
    """Where resolved jars live: ``$COORDINATION_CACHE`` or ``~/.cache/coordination``."""
    root = os.environ.get("COORDINATION_CACHE") or Path.home() / ".cache" / "coordination"
    return Path(root)


def resolve_classpath(artifacts: Sequence[str], *, timeout_s: float = 600) -> list[Path]:
    """Download ``group:artifact:version`` coordinates and their runtime dependencies.

    Resolved once per set of coordinates, then served from the cache. Safe to
    call from several processes at once (test sessions, campaign processes,
    the demo): ``mvn`` runs of this function take turns under a lock file in
    the cache (``maven/.lock``), so that two of them never write one Maven
    repository (``~/.m2``) at once, which Maven does not support by default,
    nor replace each other's result; a caller that waited finds the result
    and returns it without running ``mvn``. Other ``mvn`` processes on the
    machine are not covered by the lock.

    Returns:
        The jar files, sorted by name.

    Raises:
        MavenError: ``mvn`` is missing or failed; the message has its output.
    """
    key = hashlib.sha256("\n".join(sorted(artifacts)).encode()).hexdigest()[:16]
    libs = cache_dir() / "maven" / key / "libs"
    marker = libs / ".complete"
    if not marker.exists():
        libs.parent.mkdir(parents=True, exist_ok=True)
        with open(libs.parent.parent / ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
            if not marker.exists():  # not resolved by the process we waited for
                _download(artifacts, libs, timeout_s)
                marker.write_text("\n".join(artifacts) + "\n")
    return sorted(libs.glob("*.jar"))


def _download(artifacts: Sequence[str], libs: Path, timeout_s: float) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(
            "`mvn` is not on PATH: install Maven (and a JDK 17+) to start Kafka locally, or set "
            "KAFKA_BOOTSTRAP_SERVERS to an existing cluster"
        )
    deps = []
    for coordinate in artifacts:
        parts = coordinate.split(":")
        if len(parts) != 3:
            raise MavenError(f"bad Maven coordinate {coordinate!r}: use group:artifact:version")
        deps.append(_DEPENDENCY.format(g=parts[0], a=parts[1], v=parts[2]))
    libs.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=libs.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(dependencies="\n".join(deps)))
        staging = Path(work) / "libs"
        command = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise MavenError(f"mvn took more than {timeout_s}s resolving {artifacts}") from e
        if done.returncode != 0:
            raise MavenError(
                f"mvn could not resolve {list(artifacts)} (exit {done.returncode}):\n"
                f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        if libs.exists():
            shutil.rmtree(libs)
        staging.rename(libs)
