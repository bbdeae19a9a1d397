"""One group member in a process of its own: the program the tests, the campaign and the
benchmarks start when they need to kill, freeze or time a member from outside.

    python -m devtools.member --recipe RECIPE --bootstrap HOSTS --group G [options]

Recipes (``--recipe``):

* ``listing``: a bare :class:`coordination.Coordinator` whose leader hands every member the
  sorted list of member ids (:class:`Listing`);
* ``election``: a :class:`recipes.election.LeaderElection` member named ``--name``; with
  ``--topic`` it writes records there through the leadership's transactional producer while
  it leads (``--on-write-error`` says what a failed write does);
* ``tasks``: a :class:`recipes.tasks.TaskDistribution` worker (worker id: the
  ``--group-instance-id`` if given, else ``--name``) whose every task is a thread doing a
  unit of work every ``--tick`` seconds, after ``owns()`` said yes (:class:`TaskRecorder`);
* ``consumer`` / ``consumer-async``: a :class:`recipes.partitioning.Consumer` (``poll``) or
  :class:`~recipes.partitioning.AsyncConsumer` (``getone``/``getmany``, some cancelled by a
  short ``asyncio.wait_for``) committing after each batch: the arguments and events of the
  interoperability peers (``tests/interop/peers.py``), which Java and librdkafka peers share;
* ``kazoo-election``: a kazoo ``Election`` contender (``--bootstrap`` is the ZooKeeper hosts,
  ``--group`` the election path), the baseline of ``benchmarks/election_failover.py``;
* ``share``: a :class:`recipes.queues.ShareConsumer` of ``--topics`` (explicit
  acknowledgement) accepting each record, but releasing at its first delivery every record
  whose offset is 1 modulo ``--release-every`` and rejecting (poison) every record whose
  offset is -1 modulo ``--reject-every`` (0: none), and releasing at every delivery every
  record whose offset is 2 modulo ``--bounce-every`` (it ends archived at the delivery
  limit): deterministic for a checker; with ``--stall-chance`` P, a batch is acknowledged
  only ``--stall-ms`` after it came, with probability P (a slow handler); with
  ``--fetch-ahead``, ``ShareConsumer(fetch_ahead=True)``;
* ``shares``: a pool of members (``RangeShares``), each given a contiguous share of
  ``--topic``'s ``--partitions``, started and stopped by commands that name the group
  (no ``--group``): ``benchmarks/join_latency.py`` keeps the processes across groups.

Group settings are passed through only when given (``--session-timeout-ms``,
``--heartbeat-interval-ms``, ``--rebalance-timeout-ms`` alias ``--max-poll-interval-ms``,
``--retry-backoff-ms``, ``--group-instance-id``, ``--client-id``): the library's defaults
otherwise. Callers state the timings they rely on.

**Output.** One JSON object a line on stdout, flushed at once (a SIGKILL loses at most a
line): ``{"event": KIND, ...fields, "t": TIME}``, ``t`` read from ``--clock``: ``wall``
(``time.time()``, the default), ``wall-ms`` (milliseconds, the peers' unit) or ``boot``
(``CLOCK_BOOTTIME``, the campaign's; see :func:`boot_time`) or ``perf``
(``time.perf_counter()``, the system's monotonic clock on Linux). All comparable between
processes on one host. The events:

* every recipe: ``up {pid}`` once the member started (``started {topics}`` for the
  consumers, as the peers say it), ``closed`` once it closed;
* listing: ``prepare {generation, member_id}``, ``joined {generation, member_id, members}``;
* election: ``elected``/``deposed {token, generation[, reason]}``, ``leader {identity,
  token}`` on every change of leader; with ``--views``, ``view {leader, members}`` whenever
  either changes (polled every 20 ms). Writing: ``producer_ready``/``producer_failed``,
  ``wrote {token, seq, checked_at, acked}`` (``checked_at`` read just before the
  ``leadership.check()`` that let the write through, ``acked`` once committed),
  ``check_failed``, ``write_rejected {error, detail}``, ``zombie_write_accepted``. Each
  record written is ``{"token", "identity", "seq", "t"}``;
* tasks: ``started {task, config}`` before the task's first unit, ``stopped {task}`` when
  ``stop_task`` begins (the task worked in between), ``tick {task, checked_at}`` a unit of
  work (``checked_at`` read before the ``owns()`` check), ``error {task, error}``; all with
  ``worker``; with ``--views``, ``view {generation, complete, workers, held}``;
* consumers: ``led {members, assignor}`` when its assignor runs (on the leader),
  ``assigned``/``revoked``/``lost {partitions, generation, member_id}``, ``records
  {partitions: [[topic, partition, first, last, count]...]}``, ``committed {offsets}``,
  ``commit_failed {error}``;
* kazoo-election: ``elected`` when it leads;
* share: ``acquired {topic, partition, offset, delivery_count, value, polled_at}`` each
  record a poll returned (``polled_at`` read before that poll, or with ``--fetch-ahead``
  before the poll before it, ``t`` after: the broker acquired it in between),
  ``acknowledging {topic, partition, offset, delivery_count, kind}`` read before each
  ``acknowledge()``, the broker's answers ``acknowledged {topic,
  partition, acks: [[offset, kind]...]}`` (took effect) and ``ack_failed {..., error}``,
  ``failed {error, detail}`` a poll or commit that raised, ``stalling {seconds}``; with
  ``--fetch-ahead``, ``unseen {reason, records}`` when deliveries may have been spent
  unseen (``expired``: a poll dropped records whose lock ran out; ``closed``: after close);
* shares: ``assigned {member, generation}`` (``t`` read in ``on_join_complete``), and the
  answers to its commands: ``started``, ``t0``, ``stopped`` (``_shares.run_shares``).

**Input and signals.** SIGTERM or SIGINT closes the member (it leaves its group) and the
process exits 0. So does a line ``close`` on stdin, or the end of stdin, unless
``--no-stdin`` (for a process started with stdin on ``/dev/null``); other lines are a
recipe's commands (only ``shares`` takes any). SIGSTOP/SIGCONT freeze
and resume it, SIGKILL is a crash: nothing is done about them, that is what tests use them
for. Once the process that started it is gone (a killed test run), it exits 3 at once,
without closing (``devtools.orphans``).

``--log PATH`` appends a debug log there, wall-clock stamped and named by ``--name``, to see
where a handoff's or a rebalance's time goes.

The parent's side is :class:`MemberProcess`: it starts the program, collects its events and
closes it.
"""

from __future__ import annotations

from ._io import CLOCKS, Output, Stopping, boot_time, group_settings
from ._listing import Listing
from ._process import ROOT, MemberProcess
from ._shares import RangeShares, range_split
from ._tasks import TaskRecorder

__all__ = [
    "CLOCKS",
    "ROOT",
    "Listing",
    "MemberProcess",
    "Output",
    "RangeShares",
    "Stopping",
    "TaskRecorder",
    "boot_time",
    "group_settings",
    "range_split",
]
