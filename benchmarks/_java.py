"""Compiling a benchmark's Java peer at run time, against jars from Maven Central."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from coordination.testing import resolve_classpath


def compile_java(
    source: Path,
    artifacts: Sequence[str],
    workdir: Path,
    error: type[Exception],
    *,
    hint: str = "",
) -> list[str]:
    """Compile ``source`` into ``workdir/classes``; the classpath to run it with.

    Raises ``error`` (the benchmark's own) without a JDK or when javac fails; ``hint`` is
    added to the message of a missing JDK (e.g. a flag that skips the Java side).
    """
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise error(f"`{tool}` is not on PATH: install a JDK (17+){hint}")
    jars = [str(p) for p in resolve_classpath(list(artifacts))]
    classes = workdir / "classes"
    compiled = subprocess.run(
        ["javac", "-d", str(classes), "-cp", os.pathsep.join(jars), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if compiled.returncode != 0:
        raise error(f"javac failed:\n{compiled.stdout}{compiled.stderr}")
    return [str(classes), *jars]
