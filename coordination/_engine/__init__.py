"""The group membership engine: Kafka's AbstractCoordinator, in Python.

Internal, no compatibility guarantee; users reach it through
``coordination.Coordinator``.

Start reading at ``membership.py`` (the four phases, the threads and the locking rules
are in its docstring). The modules, from the bottom up (each imports only those above
it in this list):

- ``clock.py``, ``backoff.py``, ``heartbeat.py``, ``classify.py``: time, backoff, the
  heartbeat timers, the error policy.
- ``lease.py``, ``stats.py``, ``wakeplan.py``: small state objects (the membership
  lease, the rebalance statistics and timeline, the wake-up plan) that return verdicts
  and never call the engine.
- ``core.py``: ``MemberCore``, the state every membership protocol shares, finding the
  coordinator (phase 1), user callbacks, failures and what to do about them.
- ``offsets.py``: offset commit and fetch, fenced by the member's generation.
- ``heartbeats.py``, ``classic.py``: the classic protocol's Heartbeat (phase 4) and its
  JoinGroup/SyncGroup steps (phases 2-3), one method per step.
- ``membership.py``: ``GroupMembership``, the threads, the lifecycle (start, close,
  leave) and the public surface the library uses.
"""
