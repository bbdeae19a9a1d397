"""The scheduler example (examples/scheduler_service.py) as three real processes.

Checks what its docstring promises: a follower forwards a POSTed job to the leader, the
leader runs it and its schedule (records in the topic, read committed, tagged with its
token), and when the leader is killed another instance takes over the schedule.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from coordination.testing import free_port

from .members import ROOT, new_group, wait_until

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "examples" / "scheduler_service.py"
# Short timeouts keep the test fast: the kill is noticed after about 3 s.
TIMINGS = ["--session-timeout-ms=3000", "--heartbeat-interval-ms=300", "--interval=0.5"]


class Instance:
    def __init__(self, kafka: str, group: str, logs: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = logs / f"instance-{self.port}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(EXAMPLE), "--bootstrap-servers", kafka,
                 "--port", str(self.port), "--group", group, *TIMINGS],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip

    def status(self) -> dict[str, Any] | None:
        """The instance's /status, or None while it does not answer (yet)."""
        try:
            with urllib.request.urlopen(f"{self.url}/status", timeout=2) as response:
                answer: dict[str, Any] = json.load(response)
                return answer
        except OSError:
            return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def instances() -> Iterator[list[Instance]]:
    created: list[Instance] = []
    yield created
    for i in created:
        i.stop()
    for i in created:
        # Shown only when the test fails: the end of what each instance logged.
        print(f"--- {i.url} ---\n{i.log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def topic(kafka: str) -> str:
    name = f"{new_group()}.jobs"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    return name


@pytest.fixture
def records(kafka: str, topic: str) -> Iterator[Records]:
    reader = Records(kafka, topic)
    yield reader
    reader.close()


def leader_of(instances: list[Instance]) -> Instance | None:
    """The instance all running ones name as leader, if it knows it leads."""
    statuses = [(i, i.status()) for i in instances if i.process.poll() is None]
    if not statuses or any(s is None for _, s in statuses):
        return None
    named = {s["leader"] for _, s in statuses if s is not None}
    leaders = [i for i, s in statuses if s is not None and s["is_leader"]]
    if len(named) != 1 or len(leaders) != 1 or leaders[0].url not in named:
        return None
    return leaders[0]


def post_job(instance: Instance, job: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{instance.url}/jobs", data=json.dumps(job).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


class Records:
    """Reads the example's topic as its consumers would: committed records only."""

    def __init__(self, kafka: str, topic: str) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=kafka,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self.consumer.assign([TopicPartition(topic, 0)])
        self.seen: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        for batch in self.consumer.poll(timeout_ms=100).values():
            self.seen.extend(json.loads(r.value) for r in batch)
        return self.seen

    def close(self) -> None:
        self.consumer.close()


def test_followers_forward_jobs_and_a_new_leader_takes_over_the_schedule(
    kafka: str, topic: str, logs: Path, instances: list[Instance], records: Records
) -> None:
    group = topic.removesuffix(".jobs")
    instances.extend(Instance(kafka, group, logs) for _ in range(3))
    wait_until(lambda: leader_of(instances) is not None, 20, "the instances to agree on a leader")
    first = leader_of(instances)
    assert first is not None
    follower = next(i for i in instances if i is not first)

    # A job POSTed to a follower reaches the leader, which runs it.
    status, answer = post_job(follower, {"id": "job-1"})
    assert (status, answer["accepted_by"]) == (202, first.url)
    first_status = first.status()
    assert first_status is not None and first_status["accepted"] == ["job-1"]
    token = answer["token"]

    def written(kind: str, leader: str, **fields: Any) -> bool:
        return any(
            r["kind"] == kind and r["leader"] == leader and fields.items() <= r.items()
            for r in records.poll()
        )

    wait_until(lambda: written("job", first.url, job={"id": "job-1"}, token=token), 10, "job-1")
    wait_until(lambda: written("tick", first.url, token=token), 10, "the first leader's tick")

    # Killed, the leader leaves no LeaveGroup behind: the others take over after the
    # session timeout, with a higher token.
    first.process.send_signal(signal.SIGKILL)
    first.process.wait()
    wait_until(lambda: leader_of(instances) is not None, 15, "a new leader")
    second = leader_of(instances)
    assert second is not None and second is not first
    wait_until(lambda: written("tick", second.url), 10, "the new leader's tick")
    new_ticks = [r for r in records.seen if r["kind"] == "tick" and r["leader"] == second.url]
    assert all(r["token"] > token for r in new_ticks)
    # Every committed record came from a leader holding the token it names: one writer
    # per token, tokens never going back.
    tokens = [r["token"] for r in records.seen]
    assert tokens == sorted(tokens)

    # The new leader takes jobs too, whoever receives them.
    remaining = next(i for i in instances if i is not second and i is not first)
    status, answer = post_job(remaining, {"id": "job-2"})
    assert (status, answer["accepted_by"]) == (202, second.url)
    wait_until(lambda: written("job", second.url, job={"id": "job-2"}), 10, "job-2")
