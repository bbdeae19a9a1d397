"""A local file system for a local Spark session that sets permissions without a process.

Without Hadoop's native library (PySpark from PyPI has none), Hadoop's local file system
sets each new file's and directory's permissions by starting a ``chmod`` process. A job
writing three ranges with ``partitionBy`` started 16 of them (each range's directory, its
Parquet file and that file's checksum, the committer's directories); a flight recording
showed a worker's write tasks waiting on them. ``java/PosixLocalFileSystem.java`` is
Hadoop's local file system with ``setPermission`` through ``java.nio`` (the same
permissions); on a quiet machine a job writing twelve ranges took 0.17-0.19 s with it,
0.31-0.32 s without (medians of 25).

It is compiled once per machine with the JDK's ``javac`` into
``$COORDINATION_CACHE/spark-local-fs/<hash>`` (default ``~/.cache/coordination``):
compiled into a temporary directory and renamed into place, so that processes starting
at once on a fresh machine each see the whole directory or none. Without ``javac`` (a
JRE only), or on any failure, the session keeps Hadoop's own, with a log line that says so.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = [
    "CLASS_NAME",
    "FILE_CONTEXT_CLASS_NAME",
    "FILE_CONTEXT_KEY",
    "FILE_SYSTEM_KEY",
    "compiled_classes",
    "local_file_system_conf",
]

log = logging.getLogger("recipes.pipeline")

CLASS_NAME: Final = "coordination.pipeline.PosixLocalFileSystem"
FILE_SYSTEM_KEY: Final = "spark.hadoop.fs.file.impl"
# The same for Hadoop's FileContext (Delta's transaction log, Structured Streaming's checkpoints).
FILE_CONTEXT_CLASS_NAME: Final = CLASS_NAME + "$Fs"
FILE_CONTEXT_KEY: Final = "spark.hadoop.fs.AbstractFileSystem.file.impl"
_FILE_SYSTEMS: Final = {FILE_SYSTEM_KEY: CLASS_NAME, FILE_CONTEXT_KEY: FILE_CONTEXT_CLASS_NAME}
_CLASSPATH_KEY: Final = "spark.driver.extraClassPath"
_SOURCE: Final = Path(__file__).with_name("java") / "PosixLocalFileSystem.java"
# What javac makes of the source: the class and its nested ones.
_CLASS_FILES: Final = tuple(
    f"PosixLocalFileSystem{nested}.class" for nested in ("", "$Fs", "$RawFs", "$Raw")
)
_JAVA_RELEASE: Final = "17"  # the oldest Java Spark 4 runs on
_COMPILE_TIMEOUT_S: Final = 300

# This process's answer (the directory, or None for "Hadoop's own"): asked once.
_compiled: list[Path | None] = []


def local_file_system_conf(
    master: str, settings: Mapping[str, Any], running_jvm: Any | None = None
) -> dict[str, str]:
    """The settings that give a session about to be created on ``master`` the local file
    system above: ``spark.hadoop.fs.file.impl`` and ``spark.hadoop.fs.AbstractFileSystem
    .file.impl`` (each unless ``settings`` name their own), and the compiled class on the
    driver's class path (after any ``spark.driver.extraClassPath`` in ``settings``).

    ``{}`` when it does not apply: a cluster master (its executors would not have the
    class), ``settings`` naming both file systems of their own, a driver class path given
    elsewhere (``--driver-class-path`` or ``--properties-file`` in ``PYSPARK_SUBMIT_ARGS``,
    ``spark.driver.extraClassPath`` in ``spark-defaults.conf``: the one given here would
    replace it), or no class.
    ``running_jvm``: the process's JVM if one runs already (PySpark keeps it after a
    session stops), whose class path is fixed: the file system is named only if that JVM
    can load it, since a class named but not found would fail every file access.
    """
    wanted = {key: name for key, name in _FILE_SYSTEMS.items() if key not in settings}
    if not master.strip().startswith("local") or not wanted:
        return {}
    if running_jvm is not None:
        try:
            running_jvm.java.lang.Class.forName(CLASS_NAME)
        except Exception:
            return {}
        return wanted
    elsewhere = _class_path_given_elsewhere()
    if elsewhere:
        log.info(
            "%s: the Spark session keeps Hadoop's local file system (a chmod process per "
            "file written), since a class path given here would replace that one",
            elsewhere,
        )
        return {}
    classes = compiled_classes()
    if classes is None:
        return {}
    given = str(settings.get(_CLASSPATH_KEY, "")).strip()
    return {
        **wanted,
        _CLASSPATH_KEY: os.pathsep.join([given, str(classes)] if given else [str(classes)]),
    }


def _class_path_given_elsewhere() -> str | None:
    """Where the driver's class path is given outside ``settings``, if it is: what the
    session's own ``spark.driver.extraClassPath`` would replace (Spark takes one value)."""
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    for flag in ("--driver-class-path", "--properties-file"):
        if flag in submit_args:
            return f"{flag} in PYSPARK_SUBMIT_ARGS"
    directory = os.environ.get("SPARK_CONF_DIR") or (
        str(home / "conf") if (home := _spark_home()) else None
    )
    if directory:
        defaults = Path(directory) / "spark-defaults.conf"
        try:
            lines = defaults.read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        if any(line.strip().startswith(_CLASSPATH_KEY) for line in lines):
            return f"{_CLASSPATH_KEY} in {defaults}"
    return None


def compiled_classes() -> Path | None:
    """The directory holding the compiled class (compiling it on a machine's first use),
    or None when it cannot be had; asked once per process."""
    if not _compiled:
        _compiled.append(_compile())
    return _compiled[0]


def cache_root() -> Path:
    """``$COORDINATION_CACHE``, or ``~/.cache/coordination``."""
    return Path(os.environ.get("COORDINATION_CACHE") or Path.home() / ".cache" / "coordination")


def _compile() -> Path | None:
    javac = _javac()
    if javac is None:
        log.info(
            "no javac (a JRE only?): the Spark session keeps Hadoop's local file system, "
            "which starts a chmod process per file written; install a JDK to avoid it"
        )
        return None
    hadoop = _hadoop_jar()
    if hadoop is None:
        log.info("no Hadoop jar beside Spark's: the session keeps Hadoop's local file system")
        return None
    try:
        source = _SOURCE.read_bytes()
    except OSError as e:  # an install without it: the session runs on without
        log.warning("cannot read the Spark session's local file system's source: %s", e)
        return None
    key = hashlib.sha256(source + hadoop.name.encode()).hexdigest()[:16]
    target = cache_root() / "spark-local-fs" / key
    if target.is_dir():
        return _whole(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".compiling-", dir=target.parent))
    except OSError as e:
        log.warning("cannot compile the Spark session's local file system: %s", e)
        return None
    try:
        command = [javac, "--release", _JAVA_RELEASE, "-nowarn", "-cp", str(hadoop)]
        done = subprocess.run(
            [*command, "-d", str(scratch), str(_SOURCE)],
            capture_output=True,
            text=True,
            timeout=_COMPILE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            log.warning(
                "%s could not compile %s (exit %s): the Spark session keeps Hadoop's local "
                "file system. %s",
                javac,
                _SOURCE.name,
                done.returncode,
                (done.stderr or done.stdout).strip()[-2000:],
            )
            return None
        try:
            # Atomic: another process sees the whole directory or none. If one renamed its
            # own into place first, this one's is not needed.
            os.rename(scratch, target)
        except OSError:
            if not target.is_dir():
                raise
        return _whole(target)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("cannot compile the Spark session's local file system: %s", e)
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _whole(classes: Path) -> Path | None:
    """``classes`` if it holds every class of the source: a class named but missing (a
    cache someone pruned) would fail every file access of the session."""
    package = classes / "coordination" / "pipeline"
    missing = [name for name in _CLASS_FILES if not (package / name).is_file()]
    if missing:
        log.warning(
            "%s lacks %s: the Spark session keeps Hadoop's local file system; delete the "
            "directory to have it compiled again",
            classes,
            ", ".join(missing),
        )
        return None
    return classes


def _javac() -> str | None:
    """The javac of the Java Spark starts: ``$JAVA_HOME``'s, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "javac"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("javac")


def _spark_home() -> Path | None:
    """The Spark that the session starts (PySpark's own unless ``SPARK_HOME`` says)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        return Path(_find_spark_home())
    except (ImportError, SystemExit):  # it exits when it finds no Spark: so would the start
        return None


def _hadoop_jar() -> Path | None:
    """Hadoop's client API jar of the Spark that the session starts."""
    home = _spark_home()
    if home is None:
        return None
    jars = home / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar")) or sorted(jars.glob("hadoop-common-*.jar"))
    return found[-1] if found else None
