"""An election member of the campaign, in its own process.

While it leads, it writes ``{"token", "writer", "seq"}`` records to the campaign's topic
through the leadership's fenced (transactional) producer, checking its leadership before
each commit. It records (see ``_record.py`` for the clock):

* ``elected`` / ``deposed`` ``{token, generation}``;
* ``wrote`` ``{token, seq, checked, acked}``: a committed write; ``checked`` was read just
  before the ``leadership.check()`` that let it through, ``acked`` once the commit returned;
* ``write_failed`` ``{token, error}``: a write that did not commit.

    python -m devtools.campaign._election_member --bootstrap B --group G \
        --name NAME --topic T [--instance-id ID]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import threading
from types import FrameType
from typing import Any

from recipes.election import LeaderElection, Leadership, NotLeaderError

from ._record import Recorder, member_settings, now

record = Recorder()


def write_while_leading(leadership: Leadership, topic: str, writer: str, pace: float) -> None:
    producer: Any = None
    seq = 0
    try:
        while not leadership.lost.is_set():
            if producer is None:
                try:
                    producer = leadership.transactional_producer()
                except NotLeaderError:
                    return
                except Exception as e:  # a broker fault: try again while still leader
                    record("write_failed", token=leadership.token, error=repr(e)[:300])
                    leadership.lost.wait(1.0)
                    continue
            try:
                producer.begin_transaction()
                value = {"token": leadership.token, "writer": writer, "seq": seq}
                producer.send(topic, json.dumps(value).encode())
                checked = now()
                leadership.check()
                producer.commit_transaction()
                record("wrote", token=leadership.token, seq=seq, checked=checked, acked=now())
                seq += 1
            except NotLeaderError:
                with contextlib.suppress(Exception):
                    producer.abort_transaction()
                return
            except Exception as e:
                # Fenced, timed out, broker gone: this producer is done; a new one (if
                # still leader) fences whatever this one left behind.
                record("write_failed", token=leadership.token, seq=seq, error=repr(e)[:300])
                with contextlib.suppress(Exception):
                    producer.close(timeout=1)
                producer = None
                seq += 1
            leadership.lost.wait(pace)
    finally:
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close(timeout=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", required=True, help="name#incarnation")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--pace", type=float, default=0.2)
    args = parser.parse_args()

    def on_elected(leadership: Leadership) -> None:
        record("elected", token=leadership.token, generation=leadership.generation_id)
        threading.Thread(
            target=write_while_leading,
            args=(leadership, args.topic, args.name, args.pace),
            daemon=True,
        ).start()

    def on_deposed(leadership: Leadership) -> None:
        record(
            "deposed",
            token=leadership.token,
            generation=leadership.generation_id,
            reason=str(leadership.reason),
        )

    settings = member_settings(args.session_timeout_ms, args.instance_id)
    election = LeaderElection(
        args.group,
        identity=args.name,
        on_elected=on_elected,
        on_deposed=on_deposed,
        bootstrap_servers=args.bootstrap,
        **settings,
    )
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    election.start()
    record("up", pid=os.getpid())
    stopping.wait()
    election.close()
    record("closed")


if __name__ == "__main__":
    main()
