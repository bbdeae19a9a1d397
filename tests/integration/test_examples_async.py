"""The asyncio examples on a real broker: examples/fastapi_leader.py as two real processes
(a follower forwards writes to the leader; a stopped leader is replaced) and
examples/aiokafka_fenced.py (a deposed leader's late write is rejected)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from coordination.testing import free_port

from .members import ROOT, new_group, wait_until

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "examples" / "fastapi_leader.py"


def call(url: str, body: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"content-type": "application/json"} if data else {}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def answers(url: str) -> bool:
    try:
        call(url)
        return True
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture
def instances() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_a_follower_forwards_writes_to_the_leader_and_a_new_leader_takes_over(
    kafka: str, instances: list[subprocess.Popen[bytes]]
) -> None:
    group = new_group()
    timing = ["--bootstrap-servers", kafka, "--session-timeout-ms=6000"]
    timing.append("--heartbeat-interval-ms=500")
    urls = []
    for _ in range(2):
        port = free_port()
        urls.append(f"http://127.0.0.1:{port}")
        instances.append(
            subprocess.Popen(
                [sys.executable, str(EXAMPLE), "--port", str(port), "--group", group, *timing],
                cwd=ROOT,
            )
        )
    wait_until(lambda: all(answers(f"{u}/leader") for u in urls), 60, "both instances up")

    def one_leader_seen_by_both() -> bool:
        # Both name the same leader (a follower that sees none answers a write with 503),
        # and the leader holds its leadership (a leader still taking office answers 503).
        seen = {call(f"{u}/leader")["leader"] for u in urls}
        return len(seen) == 1 and None not in seen and call(f"{seen.pop()}/leader")["is_leader"]

    wait_until(one_leader_seen_by_both, 30, "one leader, seen by both")
    leader_url = call(f"{urls[0]}/leader")["leader"]
    follower_url = next(u for u in urls if u != leader_url)
    applied = call(f"{follower_url}/write", {"key": "a", "value": "1"})
    assert applied["applied_by"] == leader_url  # forwarded
    assert call(f"{leader_url}/store")["a"] == {"value": "1", "token": applied["token"]}
    assert call(f"{follower_url}/store") == {}

    # The leader stops (SIGINT: uvicorn ends the lifespan, the election leaves the group).
    leader = instances[urls.index(leader_url)]
    leader.send_signal(signal.SIGINT)
    assert leader.wait(30) == 0
    wait_until(lambda: call(f"{follower_url}/leader")["is_leader"], 30, "the follower leads")
    again = call(f"{follower_url}/write", {"key": "b", "value": "2"})
    assert again["applied_by"] == follower_url
    assert again["token"] > applied["token"]


def test_a_deposed_leaders_late_write_is_rejected(kafka: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "aiokafka_fenced.py"),
            "--bootstrap-servers",
            kafka,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown = done.stdout.splitlines()
    assert shown == [
        "accepted: ['first: hello', 'second: took over']",
        "rejected: ['first: late write']",
    ]
