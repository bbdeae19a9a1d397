"""A scheduler service: one instance leads and runs the schedule, the others forward to it.

Run two or three instances against one Kafka cluster, each on its own port::

    python examples/scheduler_service.py --bootstrap-servers localhost:9092 --port 8001
    python examples/scheduler_service.py --bootstrap-servers localhost:9092 --port 8002
    curl -X POST -d '{"id": "report-42"}' localhost:8002/jobs     # any instance will do
    curl localhost:8001/status

Each instance is a ``LeaderElection`` member whose identity is its own URL, so every
instance knows where the leader is (``election.leader().identity``). The leader

* runs a scheduled job every ``--interval`` seconds: it writes a ``tick`` record to the
  topic ``<group>.jobs``;
* runs the jobs POSTed to ``/jobs`` (forwarded by the followers): it writes a ``job`` record.

Every record carries the leader's fencing token and is written in a transaction of the
election's transactional producer, so the broker refuses the writes of a deposed leader
(one that was paused, say, and has not noticed yet); readers use
``isolation_level="read_committed"``. Kill the leader and another instance takes over the
schedule after the session timeout; stop it with Ctrl-C (or SIGTERM) and the handover
takes about a heartbeat interval.

What this example leaves out: jobs are queued in the leader's memory, so the jobs a leader
accepted but had not yet run when it died are lost (a real service would write them to
Kafka before answering 202), and a scheduled run can be missed or repeated around a
failover (the token in each record tells a reader which leader wrote it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.errors import KafkaError

from coordination.errors import CoordinationError, CoordinatorStateError
from recipes.election import LeaderElection, Leadership, NotLeaderError

log = logging.getLogger("scheduler")

# A request forwarded by a follower carries this header; the receiver never forwards it
# again, so two instances that briefly disagree about the leader cannot bounce it forever.
FORWARDED_BY = "X-Forwarded-By"
FORWARD_TIMEOUT_S = 5.0


class Scheduler:
    """One instance: the election, the leader's work loop, and what the HTTP side needs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.identity = f"http://{args.host}:{args.port}"
        self.topic = args.topic or f"{args.group}.jobs"
        self.interval_s = args.interval
        self.election = LeaderElection(
            args.group,
            identity=self.identity,
            bootstrap_servers=args.bootstrap_servers,
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
        )
        self.stopping = threading.Event()
        # Jobs the leader accepted and has not written yet. A deque under a condition, not
        # a queue.Queue: a failed write puts its jobs back at the front, in order.
        self._jobs: collections.deque[dict[str, Any]] = collections.deque()
        self._jobs_changed = threading.Condition()
        self._lock = threading.Lock()
        self.accepted: list[str] = []  # ids of the jobs accepted while leading
        self.ticks = 0  # scheduled runs written while leading

    # ------------------------------------------------------------------ leader side

    def campaign(self) -> None:
        """Stand for election until the instance stops; lead whenever elected.

        ``run`` returns when ``lead`` does (leadership lost, or a write failed and this
        instance stepped down); then it stands again.
        """
        while not self.stopping.is_set():
            try:
                self.election.run(self.lead)
            except CoordinatorStateError:
                return  # closed: the instance is stopping
            except CoordinationError:
                log.exception("election failed; standing again in a second")
                self.stopping.wait(1.0)

    def lead(self, leadership: Leadership) -> None:
        log.info("%s leads (token %d)", self.identity, leadership.token)
        try:
            producer = leadership.transactional_producer()
        except (NotLeaderError, KafkaError) as e:
            log.warning("no transactional producer, stepping down: %r", e)
            return
        try:
            next_tick = time.monotonic()
            while not leadership.lost.is_set() and not self.stopping.is_set():
                jobs = self._take_jobs(timeout=max(0.0, next_tick - time.monotonic()))
                tick = time.monotonic() >= next_tick
                if not jobs and not tick:
                    continue
                records = [self._record(leadership, "job", job=job) for job in jobs]
                if tick:
                    records.append(self._record(leadership, "tick", seq=self.ticks))
                if not self._write(producer, leadership, records):
                    self._put_back(jobs)
                    return  # deposed or fenced: leave the schedule to the next leader
                if tick:
                    with self._lock:
                        self.ticks += 1
                    next_tick += self.interval_s
        finally:
            producer.close(timeout=5)
            log.info(
                "%s stops leading (token %d): %s",
                self.identity,
                leadership.token,
                leadership.reason or "stepped down",
            )

    def _record(self, leadership: Leadership, kind: str, **fields: Any) -> bytes:
        record = {"kind": kind, "token": leadership.token, "leader": self.identity}
        return json.dumps({**record, **fields, "t": time.time()}).encode()

    def _write(self, producer: Any, leadership: Leadership, records: list[bytes]) -> bool:
        """Write ``records`` in one transaction; False if this instance may no longer lead."""
        try:
            producer.begin_transaction()
            for value in records:
                producer.send(self.topic, value)
            # The check stops a leader that knows it is deposed; the broker fences one that
            # does not know yet (init_transactions by the successor).
            leadership.check()
            producer.commit_transaction()
            return True
        except (NotLeaderError, KafkaError) as e:
            log.warning("write refused, stepping down: %r", e)
            # A fenced producer cannot abort either; the broker already did.
            with contextlib.suppress(KafkaError):
                producer.abort_transaction()
            return False

    def _take_jobs(self, timeout: float) -> list[dict[str, Any]]:
        with self._jobs_changed:
            if not self._jobs:
                # Short waits, so that a lost leadership or a stop is noticed promptly.
                self._jobs_changed.wait(min(timeout, 0.2))
            jobs = list(self._jobs)
            self._jobs.clear()
        return jobs

    def _put_back(self, jobs: list[dict[str, Any]]) -> None:
        with self._jobs_changed:
            self._jobs.extendleft(reversed(jobs))

    # ------------------------------------------------------------------ HTTP side

    def enqueue(self, job: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        """Accept ``job`` if this instance leads."""
        leadership = self.election.leadership()
        if leadership is None:
            return HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"{self.identity} does not lead"}
        with self._jobs_changed:
            self._jobs.append(job)
            self._jobs_changed.notify_all()
        with self._lock:
            self.accepted.append(str(job.get("id")))
        return HTTPStatus.ACCEPTED, {"accepted_by": self.identity, "token": leadership.token}

    def forward(self, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` to the leader's ``/jobs``; its status and answer, or 503."""
        info = self.election.leader()
        if info is None or info.identity == self.identity:
            # No leader right now, or this instance was just named leader and its
            # leadership is not ready (or already lost): the client retries.
            answer = {"error": "no leader right now; retry shortly"}
            return HTTPStatus.SERVICE_UNAVAILABLE, json.dumps(answer).encode()
        request = urllib.request.Request(
            f"{info.identity}/jobs",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", FORWARDED_BY: self.identity},
        )
        try:
            with urllib.request.urlopen(request, timeout=FORWARD_TIMEOUT_S) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError as e:
            answer = {"error": f"leader {info.identity} unreachable: {e}"}
            return HTTPStatus.BAD_GATEWAY, json.dumps(answer).encode()

    def status(self) -> dict[str, Any]:
        info = self.election.leader()
        leadership = self.election.leadership()
        with self._lock:
            return {
                "identity": self.identity,
                "leader": info.identity if info else None,
                "leader_token": info.token if info else None,
                "is_leader": leadership is not None,
                "accepted": list(self.accepted),
                "ticks": self.ticks,
            }


def make_handler(scheduler: Scheduler) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/status":
                self._answer(HTTPStatus.OK, json.dumps(scheduler.status()).encode())
            else:
                self._answer(HTTPStatus.NOT_FOUND, b'{"error": "not found"}')

        def do_POST(self) -> None:
            if self.path != "/jobs":
                self._answer(HTTPStatus.NOT_FOUND, b'{"error": "not found"}')
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                job = json.loads(body or b"{}")
                if not isinstance(job, dict):
                    raise ValueError("a job is a JSON object")
            except ValueError as e:
                self._answer(HTTPStatus.BAD_REQUEST, json.dumps({"error": str(e)}).encode())
                return
            status, answer = scheduler.enqueue(job)
            if status == HTTPStatus.ACCEPTED or self.headers.get(FORWARDED_BY):
                self._answer(status, json.dumps(answer).encode())
            else:
                self._answer(*scheduler.forward(body))

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s: " + format, self.address_string(), *args)

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--port", type=int, required=True, help="this instance's HTTP port")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve and advertise")
    parser.add_argument("--group", default="scheduler", help="the election's group id")
    parser.add_argument("--topic", help="where the leader writes (default <group>.jobs)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between ticks")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kafka").setLevel(logging.WARNING)
    scheduler = Scheduler(args)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(scheduler))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()

    def stop(signum: int, frame: FrameType | None) -> None:
        scheduler.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    campaign = threading.Thread(target=scheduler.campaign, name="campaign")
    campaign.start()
    log.info("%s serving; group %r, topic %r", scheduler.identity, args.group, scheduler.topic)
    while not scheduler.stopping.wait(0.5):
        pass  # waits in short steps, so the signal handler runs promptly
    # close() deposes this instance (lead() returns) and leaves the group, so the others
    # elect a new leader at once instead of after the session timeout.
    scheduler.election.close()
    campaign.join(10)
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
