"""kafka-python, made safe to share between threads before any thread of ours uses it.

kafka-python (3.0) makes the class of a message's version the first time that version is
used, and registers it, by weak reference, as the class that decodes that API's answers.
Two threads using a version for the first time at once each make a class; the registered
one may be the one not kept, and once it is collected every answer of that API fails to
decode in the process ("weakly-referenced object no longer exists") for the rest of its
life: its members cannot bootstrap, heartbeat or fetch. Seen in processes of four members
starting together on a loaded machine (benchmarks/rebalance_cost.py at N = 200). Every
version of every answer is made here, once, on the thread importing ``coordination``, so
that none is left to make later.
"""

from __future__ import annotations

import logging

import kafka  # noqa: F401  (its clients' modules define every message kafka-python has)
from kafka.protocol.api_header import ResponseClassRegistry

log = logging.getLogger("coordination")


def make_every_version() -> int:
    """Make the class of every version of every answer kafka-python decodes; the count."""
    made = 0
    for message in list(ResponseClassRegistry._response_class_registry.values()):
        for version in range(message.min_version, message.max_version + 1):
            message[version]  # made and kept by kafka-python, if not made yet
            made += 1
    return made


try:
    make_every_version()
except Exception:  # another kafka-python's internals: nothing to make ahead, nothing lost
    log.debug("kafka-python's message versions could not be made ahead", exc_info=True)
