"""kafka-python, made safe to share between threads before any thread of ours uses it.

kafka-python (3.0) makes two things for a message the first time one of its versions is
used, and neither is safe when two threads do it at once:

- the class of that version, which it registers, by weak reference, as the class that
  decodes the API's answers: two threads each make one, the registered one may be the one
  not kept, and once it is collected no answer of that API decodes in the process again
  ("weakly-referenced object no longer exists");
- the compiled decoder of that version, made with the message's class swapped into a
  shared field and back: a thread compiling meanwhile may compile against the weak proxy
  instead, and its cached decoder then fails on every answer ("object.__new__(X): X is not
  a type object").

Either leaves a process's members unable to bootstrap, heartbeat or fetch for the rest of
its life. Both were seen in processes of four members starting together on a loaded
machine (benchmarks/rebalance_cost.py at N = 200). Every version of every answer and its
decoder are made here, once, on the thread importing ``coordination`` (about 0.2 s), so
that none is left to make later.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import kafka  # noqa: F401  (its clients' modules define every message kafka-python has)
from kafka.protocol.api_header import ResponseClassRegistry

log = logging.getLogger("coordination")


def make_every_decoder() -> int:
    """Make the class and the compiled decoder of every version of every answer
    kafka-python decodes, as its first decode would; the number of versions."""
    made = 0
    for registered in list(ResponseClassRegistry._response_class_registry.values()):
        message = registered[None]  # the message's own class, not a version's
        for version in range(message.min_version, message.max_version + 1):
            message[version]
            flexible = message.flexible_version_q(version)
            message._struct.compiled_decode_from(
                version, compact=flexible, tagged=flexible, data_class=message
            )
            made += 1
    return made


def open_admin_client(config: Mapping[str, Any]) -> Any:
    """A kafka-python ``KafkaAdminClient`` for ``config``, bootstrapped.

    kafka-python starts the client's I/O thread before it bootstraps and does not stop it
    when the bootstrap fails (its ``close()`` then does nothing): each failed attempt would
    leave a thread behind, so a member retrying against an unreachable cluster would gather
    them. Here the thread is stopped before the error is raised.

    Raises:
        Exception: kafka-python's (``KafkaTimeoutError``: the cluster not reached in
            ``bootstrap_timeout_ms``, ...), as ``KafkaAdminClient`` raises it.
    """
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient.__new__(KafkaAdminClient)
    try:
        admin.__init__(**config)
    except BaseException:
        net = getattr(admin, "_net", None)
        if net is not None:
            with contextlib.suppress(Exception):
                net.stop(timeout_ms=1000)
        client = getattr(admin, "_client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        raise
    return admin


try:
    make_every_decoder()
except Exception:  # another kafka-python's internals: nothing to make ahead, nothing lost
    log.debug("kafka-python's message versions could not be made ahead", exc_info=True)
