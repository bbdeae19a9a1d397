"""A FastAPI service whose instances elect a leader; writes go to the leader, wherever
they arrive.

Run two instances against one Kafka cluster, each on its own port::

    python examples/fastapi_leader.py --port 8001 --bootstrap-servers localhost:9092
    python examples/fastapi_leader.py --port 8002 --bootstrap-servers localhost:9092
    curl -X POST localhost:8002/write -H 'content-type: application/json' \\
         -d '{"key": "a", "value": "1"}'       # either instance will do
    curl localhost:8001/leader

Each instance is an ``AsyncLeaderElection`` member (started and closed in the app's
lifespan) whose identity is its own base URL, so a follower knows where to forward a
write. The leader applies writes to its store with its fencing token; a follower forwards
them with httpx. Stop the leader (Ctrl-C) and the other instance leads within tens of
milliseconds (it announces its leave); kill it and the other leads after the session
timeout. The store lives in the leader's memory: a real service would write to a store
that checks the token (see examples/aiokafka_fenced.py).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from recipes.election import AsyncLeaderElection


class Write(BaseModel):
    key: str
    value: str


def make_app(url: str, group: str, bootstrap_servers: str, **settings: Any) -> FastAPI:
    """The service of the instance reachable at ``url``."""
    election = AsyncLeaderElection(
        group, identity=url, bootstrap_servers=bootstrap_servers, **settings
    )
    store: dict[str, dict[str, Any]] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with election, httpx.AsyncClient(timeout=10) as client:
            app.state.client = client
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/leader")
    async def leader() -> dict[str, Any]:
        found = election.leader()
        return {
            "me": url,
            "is_leader": election.is_leader,
            "leader": found.identity if found else None,
            "token": found.token if found else None,
        }

    @app.post("/write")
    async def write(item: Write) -> dict[str, Any]:
        leadership = election.leadership()
        if leadership is not None and not leadership.lost.is_set():
            store[item.key] = {"value": item.value, "token": leadership.token}
            return {"applied_by": url, "token": leadership.token}
        found = election.leader()
        if found is None or found.identity == url:
            raise HTTPException(503, "no leader right now; retry")
        answer = await app.state.client.post(f"{found.identity}/write", json=item.model_dump())
        if answer.status_code != 200:
            raise HTTPException(answer.status_code, answer.text)
        result: dict[str, Any] = answer.json()
        return result

    @app.get("/store")
    async def read_store() -> dict[str, dict[str, Any]]:
        return store

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--group", default="fastapi-leader")
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    args = parser.parse_args()
    app = make_app(
        f"http://{args.host}:{args.port}",
        args.group,
        args.bootstrap_servers,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
