"""A local Spark session's file system sets the permissions Hadoop's sets, without starting a
``chmod`` process per file; it is compiled once per machine, safely when processes start at
once, and a session without it keeps Hadoop's (recipes/pipeline/_local_fs.py)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from recipes.pipeline import _local_fs
from recipes.pipeline._local_fs import (
    CLASS_NAME,
    FILE_CONTEXT_CLASS_NAME,
    FILE_CONTEXT_KEY,
    FILE_SYSTEM_KEY,
    local_file_system_conf,
)

BOTH = {FILE_SYSTEM_KEY: CLASS_NAME, FILE_CONTEXT_KEY: FILE_CONTEXT_CLASS_NAME}

ROOT = Path(__file__).resolve().parents[3]

# Run in a process of its own: the class path of a JVM is set when it starts, and the
# `chmod` on PATH (a stand-in that logs each call, then runs the real one) must be the JVM's.
SESSION = r"""
import json, os, sys
from recipes.pipeline._spark import spark_session

out = sys.argv[1]
spark = spark_session("local[1]", app_name="local-fs-test")
jvm = spark._jvm
conf = spark._jsc.hadoopConfiguration()
uri = jvm.java.net.URI("file:///")
used = jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName()
# FileContext's: Delta's transaction log and Structured Streaming's checkpoints.
used_by_context = jvm.org.apache.hadoop.fs.AbstractFileSystem.get(uri, conf).getClass().getName()
log = os.environ["CHMOD_LOG"]
def logged():
    return open(log).read() if os.path.exists(log) else ""
# (Spark's start chmods the packages' jars it copies, once: not a job's.)
before_job = logged()
rows = spark.range(30).selectExpr("id % 3 AS r", "id AS v")
rows.write.partitionBy("r").parquet(out + "/job")
rows.write.format("delta").save(out + "/delta")
during_job = logged()[len(before_job):]
# The same kind of write through Hadoop's own local file system, in the same JVM.
hadoops = jvm.org.apache.hadoop.fs.LocalFileSystem()
hadoops.initialize(uri, conf)
hadoops.create(jvm.org.apache.hadoop.fs.Path(out + "/hadoops")).close()
print(json.dumps(
    {"file_system": used, "file_context": used_by_context, "chmods_during_job": during_job}
))
spark.stop()
"""


def logging_chmod(directory: Path) -> Path:
    """A ``chmod`` in ``directory`` that appends its arguments to $CHMOD_LOG, then chmods."""
    real = shutil.which("chmod")
    assert real is not None
    directory.mkdir()
    script = directory / "chmod"
    script.write_text(f'#!/bin/sh\necho "$@" >> "$CHMOD_LOG"\nexec {real} "$@"\n')
    script.chmod(0o755)
    return directory


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.spark
def test_a_local_sessions_jobs_write_with_hadoops_permissions_and_no_chmod_process(
    tmp_path: Path,
) -> None:
    log = tmp_path / "chmod.log"
    env = {
        **os.environ,
        "PATH": f"{logging_chmod(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "CHMOD_LOG": str(log),
        "COORDINATION_CACHE": str(tmp_path / "cache"),  # compiled here, on this first use
        "PYTHONPATH": str(ROOT),
    }
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", SESSION, str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert (seen["file_system"], seen["file_context"]) == (CLASS_NAME, FILE_CONTEXT_CLASS_NAME)
    assert seen["chmods_during_job"] == ""  # the Parquet job's, and the Delta table's
    # The test sees what it guards against: Hadoop's own started chmod for its file.
    assert "hadoops" in log.read_text()
    directories = [out / "job", *(out / "job").glob("r=*")]
    files = [p for p in (out / "job").rglob("*") if p.is_file()]
    assert len(directories) == 4 and len(files) >= 7  # _SUCCESS, a part and its .crc per range
    # Hadoop's permissions under its umask (022), as its own file system set them.
    assert {mode(d) for d in directories} == {0o755}
    assert {mode(f) for f in files} == {mode(out / "hadoops")} == {0o644}
    commits = list((out / "delta" / "_delta_log").glob("*.json"))
    assert commits and {mode(f) for f in commits} == {0o644}


CLASS_FILES = [
    "PosixLocalFileSystem.class",
    "PosixLocalFileSystem$Fs.class",
    "PosixLocalFileSystem$RawFs.class",
    "PosixLocalFileSystem$Raw.class",
]

FAKE_JAVAC = """#!/bin/sh
# A slow compiler: one class now, the other a second later (a real javac writes them as it goes).
while [ "$1" != "-d" ]; do shift; done
mkdir -p "$2/coordination/pipeline"
cd "$2/coordination/pipeline"
touch PosixLocalFileSystem.class
sleep 1
for nested in Fs RawFs Raw; do touch "PosixLocalFileSystem\\$$nested.class"; done
"""

ASK = (
    "import os; from recipes.pipeline._local_fs import compiled_classes; "
    "d = compiled_classes(); "
    "print(d, sorted(str(p.relative_to(d)) for p in d.rglob('*.class')) if d else None)"
)


def fake_jdk(directory: Path, javac: str) -> Path:
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / "javac").write_text(javac)
    (directory / "bin" / "javac").chmod(0o755)
    return directory


def test_processes_starting_at_once_each_get_the_whole_compiled_directory(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "JAVA_HOME": str(fake_jdk(tmp_path / "jdk", FAKE_JAVAC)),
        "COORDINATION_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    processes = []
    for _ in range(3):
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", ASK], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
            )
        )
        time.sleep(0.4)  # the later ones start while the first one compiles
    answers = [p.communicate(timeout=60)[0].strip() for p in processes]
    assert all(p.returncode == 0 for p in processes)
    whole = str(sorted(f"coordination/pipeline/{name}" for name in CLASS_FILES))
    directories = {answer.split(" ", 1)[0] for answer in answers}
    assert len(directories) == 1, answers
    assert all(answer.endswith(whole) for answer in answers), answers
    # Nothing half-made is left beside it.
    assert [p.name for p in Path(directories.pop()).parent.iterdir()] == [
        Path(answers[0].split(" ", 1)[0]).name
    ]


@pytest.fixture
def ask_anew(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_local_fs, "_compiled", [])
    monkeypatch.setenv("COORDINATION_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf


@pytest.mark.usefixtures("ask_anew")
def test_without_javac_the_session_keeps_hadoops_file_system_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "jre" / "bin").mkdir(parents=True)  # a JRE: java, no javac
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jre"))
    with caplog.at_level(logging.INFO, logger="recipes.pipeline"):
        assert local_file_system_conf("local[2]", {}) == {}
    assert "no javac" in caplog.text and "install a JDK" in caplog.text


@pytest.mark.usefixtures("ask_anew")
def test_a_failed_compilation_keeps_hadoops_file_system_with_the_compilers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    failing = "#!/bin/sh\necho 'error: cannot access org.apache.hadoop.fs' >&2\nexit 2\n"
    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "jdk", failing)))
    with caplog.at_level(logging.WARNING, logger="recipes.pipeline"):
        assert local_file_system_conf("local[2]", {}) == {}
    assert "exit 2" in caplog.text and "cannot access org.apache.hadoop.fs" in caplog.text
    assert list((tmp_path / "cache" / "spark-local-fs").iterdir()) == []  # no half-made class


@pytest.mark.usefixtures("ask_anew")
def test_an_install_without_the_source_keeps_hadoops_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "jdk", FAKE_JAVAC)))
    monkeypatch.setattr(_local_fs, "_SOURCE", tmp_path / "PosixLocalFileSystem.java")
    with caplog.at_level(logging.WARNING, logger="recipes.pipeline"):
        assert local_file_system_conf("local[2]", {}) == {}
    assert "cannot read the Spark session's local file system's source" in caplog.text


@pytest.mark.usefixtures("ask_anew")
def test_a_cached_directory_missing_a_class_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "jdk", FAKE_JAVAC)))
    classes = _local_fs.compiled_classes()
    assert classes is not None
    (classes / "coordination" / "pipeline" / "PosixLocalFileSystem$RawFs.class").unlink()
    monkeypatch.setattr(_local_fs, "_compiled", [])  # the next process's first ask
    with caplog.at_level(logging.WARNING, logger="recipes.pipeline"):
        assert local_file_system_conf("local[2]", {}) == {}
    assert "lacks PosixLocalFileSystem$RawFs.class" in caplog.text


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(_local_fs, "_compiled", [tmp_path / "classes"])
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    (tmp_path / "conf").mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))  # no spark-defaults.conf
    return tmp_path / "classes"


def test_a_local_session_gets_the_file_system_and_its_class_after_the_users(
    compiled: Path,
) -> None:
    assert local_file_system_conf("local[1]", {}) == {
        **BOTH,
        "spark.driver.extraClassPath": str(compiled),
    }
    given = {"spark.driver.extraClassPath": "/opt/mine.jar"}
    assert local_file_system_conf("local", given)["spark.driver.extraClassPath"] == (
        f"/opt/mine.jar{os.pathsep}{compiled}"
    )


@pytest.mark.usefixtures("compiled")
@pytest.mark.parametrize(
    ("master", "settings", "submit_args"),
    [
        ("spark://host:7077", {}, ""),
        ("yarn", {}, ""),
        (
            "local[2]",
            {
                FILE_SYSTEM_KEY: "org.apache.hadoop.fs.LocalFileSystem",
                FILE_CONTEXT_KEY: "org.apache.hadoop.fs.local.LocalFs",
            },
            "",
        ),
        ("local[2]", {}, "--driver-class-path /opt/x.jar pyspark-shell"),
        ("local[2]", {}, "--properties-file /opt/spark.conf pyspark-shell"),
    ],
    ids=["cluster", "yarn", "users-own", "driver-class-path", "properties-file"],
)
def test_the_file_system_is_left_alone_where_it_cannot_or_should_not_apply(
    master: str, settings: dict[str, str], submit_args: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit_args)
    assert local_file_system_conf(master, settings) == {}


def test_a_class_path_in_spark_defaults_is_not_replaced(
    compiled: Path, caplog: pytest.LogCaptureFixture
) -> None:
    defaults = Path(os.environ["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    defaults.write_text("spark.driver.memory 1g\n")
    assert local_file_system_conf("local[2]", {})  # other settings there change nothing
    defaults.write_text("spark.driver.extraClassPath  /opt/drivers/*\n")
    with caplog.at_level(logging.INFO, logger="recipes.pipeline"):
        assert local_file_system_conf("local[2]", {}) == {}
    assert f"spark.driver.extraClassPath in {defaults}" in caplog.text


@pytest.mark.usefixtures("compiled")
def test_a_file_system_the_user_names_is_kept_and_the_other_one_set() -> None:
    own = {FILE_SYSTEM_KEY: "org.apache.hadoop.fs.LocalFileSystem"}
    got = local_file_system_conf("local[2]", own)
    assert FILE_SYSTEM_KEY not in got and got[FILE_CONTEXT_KEY] == FILE_CONTEXT_CLASS_NAME


class _Jvm:
    """A running JVM's ``java.lang.Class.forName``, finding the classes it is given."""

    def __init__(self, loadable: set[str]) -> None:
        self.java = self
        self.lang = self
        self.Class = self
        self.loadable = loadable

    def forName(self, name: str) -> Any:  # Java's name
        if name not in self.loadable:
            raise RuntimeError(f"java.lang.ClassNotFoundException: {name}")
        return name


@pytest.mark.usefixtures("compiled")
def test_a_jvm_running_already_gets_the_file_system_only_if_it_can_load_it() -> None:
    assert local_file_system_conf("local[2]", {}, _Jvm({CLASS_NAME})) == BOTH
    assert local_file_system_conf("local[2]", {}, _Jvm(set())) == {}
