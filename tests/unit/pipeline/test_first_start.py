"""Spark sessions starting at once resolve their packages one at a time while the cache is cold.

No JVM here: a stand-in builder records when sessions are created. The real thing, three
worker processes from empty caches, is tests/integration/test_pipeline.py.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from recipes.pipeline import _spark


@pytest.fixture(autouse=True)
def no_running_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a worker's first start: no JVM yet. (A Spark test that ran before in this
    process leaves its context active, and with one running nothing is resolved at all.)"""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)


class Builder:
    """Stands in for SparkSession.builder: getOrCreate takes a while and records overlaps."""

    def __init__(self, fail: bool = False) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.created = 0
        self.created_before: list[int] = []  # per start: sessions already created then
        self.fail = fail

    def getOrCreate(self) -> Any:  # Spark's name
        with self.lock:
            self.running += 1
            self.created_before.append(self.created)
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.2)
        with self.lock:
            self.running -= 1
            self.created += 1
        if self.fail:
            raise RuntimeError("unresolved dependency")
        return "session"


def settings(ivy: Path) -> dict[str, str]:
    return {"spark.jars.packages": "org.example:kafka:1", "spark.jars.ivy": str(ivy)}


def start_at_once(builder: Builder, conf: dict[str, str], n: int = 3) -> list[Any]:
    results: list[Any] = []

    def start() -> None:
        try:
            results.append(_spark._get_or_create(builder, conf))  # type: ignore[arg-type]
        except RuntimeError as e:
            results.append(e)

    threads = [threading.Thread(target=start) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_starts_into_a_cold_cache_take_turns_then_run_at_once(tmp_path: Path) -> None:
    builder = Builder()
    assert start_at_once(builder, settings(tmp_path / "ivy")) == ["session"] * 3
    # The first resolved alone; the others waited for it, then started together.
    assert sorted(builder.created_before) == [0, 1, 1]
    marks = list((tmp_path / "ivy").glob(".coordination-resolved-*"))
    assert len(marks) == 1

    warm = Builder()
    with open(tmp_path / "ivy" / ".coordination-resolve.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # the lock is not even asked for now
        assert start_at_once(warm, settings(tmp_path / "ivy")) == ["session"] * 3
    assert warm.most_at_once == 3


def test_a_failed_start_leaves_the_cache_cold(tmp_path: Path) -> None:
    failing = Builder(fail=True)
    results = start_at_once(failing, settings(tmp_path / "ivy"), n=2)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert failing.most_at_once == 1
    assert not list((tmp_path / "ivy").glob(".coordination-resolved-*"))


def test_other_packages_resolve_under_the_lock_again(tmp_path: Path) -> None:
    start_at_once(Builder(), settings(tmp_path / "ivy"), n=1)
    builder = Builder()
    other = {**settings(tmp_path / "ivy"), "spark.jars.packages": "org.example:delta:2"}
    start_at_once(builder, other)
    assert sorted(builder.created_before) == [0, 1, 1]


def test_the_default_ivy_directory_is_the_jvms(monkeypatch: pytest.MonkeyPatch) -> None:
    # The JVM's user.home comes from the password database, whatever $HOME says.
    monkeypatch.setenv("HOME", "/nonexistent")
    for variable in ("_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS"):
        monkeypatch.delenv(variable, raising=False)
    home = pwd.getpwuid(os.getuid()).pw_dir
    assert _spark._ivy_dir({}) == Path(home) / ".ivy2.5.2"
    assert _spark._ivy_dir({"spark.jars.ivy": "/data/ivy"}) == Path("/data/ivy")
    # ... unless the JVM is told otherwise through the environment.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xss1m -Duser.home=/fresh")
    assert _spark._ivy_dir({}) == Path("/fresh/.ivy2.5.2")
    monkeypatch.setenv("_JAVA_OPTIONS", "-Duser.home=/last")
    assert _spark._ivy_dir({}) == Path("/last/.ivy2.5.2")


def test_a_running_jvm_resolves_nothing_and_marks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # getOrCreate returns the process's session: no JVM starts, so no packages are
    # resolved, and marking the cache warm for these packages would be a lie.
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    assert start_at_once(Builder(), settings(tmp_path / "ivy"), n=1) == ["session"]
    assert not (tmp_path / "ivy").exists()
