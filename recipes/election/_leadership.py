"""What an election tells its members: who leads, and this member's own leadership."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from coordination.errors import CoordinationError

from .._recipe import RecipeContext

LEASE_RAN_OUT = "its membership lease ran out: no heartbeat was confirmed in time"


class NotLeaderError(CoordinationError):
    """This member does not lead (any more); whatever it was about to do as leader must not
    happen. Raised by :meth:`Leadership.check` and by leader-only calls."""


class DuplicateIdentityError(CoordinationError):
    """Another member of the group advertises the same identity; this member cannot lead.

    Give every member a unique ``identity`` (e.g. its own host:port)."""


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads the group, as every member learns it.

    Attributes:
        identity: the leader's advertised identity (e.g. the URL to forward requests to).
        member_id: its member id in the group.
        token: its fencing token: grows with every new leadership, never repeats, even
            after every member stopped and the broker forgot the group (see
            :class:`LeaderElection`, "Fencing tokens").
    """

    identity: str
    member_id: str
    token: int


class _Lease(Protocol):
    def holds(self) -> bool: ...


class LeadershipOwner(Protocol):
    """What a :class:`Leadership` asks of the election that made it (``_elector.Elector``).

    Declared here, so that the leadership does not import the election's machinery, which
    imports it."""

    identity: str
    transactional_id: str

    @property
    def ctx(self) -> RecipeContext: ...

    @property
    def lease(self) -> _Lease: ...

    @property
    def group_id(self) -> str: ...

    def depose(
        self, leadership: Leadership, reason: str, *, rejoin: bool = False, expected: bool = False
    ) -> None: ...


class Leadership:
    """This member's leadership, from its election until it is lost.

    Handed to :meth:`LeaderElection.run`'s function and to ``on_elected``. The token
    identifies this leadership: every later leadership has a higher one, so a store that
    remembers the highest token it has seen can reject a deposed leader's writes.

    Example:
        def lead(leadership):
            producer = leadership.transactional_producer()
            while not leadership.lost.wait(5.0):
                producer.begin_transaction()
                producer.send("schedules", f"{leadership.token}: tick".encode())
                leadership.check()          # raises NotLeaderError once deposed
                producer.commit_transaction()   # the broker fences a deposed leader's producer

    Attributes:
        token: the fencing token.
        identity: this member's identity.
        lost: set the moment leadership is lost (wait on it, or poll it); an event of the
            election's clock (``threading.Event``'s interface).
    """

    def __init__(self, elector: LeadershipOwner, token: int, generation_id: int) -> None:
        self._elector = elector
        self.token = token
        self.identity = elector.identity
        self.generation_id = generation_id
        clock = elector.ctx.clock
        self.lost = clock.event()
        self._reason: str | None = None
        self._lock = clock.lock()

    @property
    def reason(self) -> str | None:
        """Why leadership was lost, or None while it holds."""
        return self._reason

    def is_valid(self) -> bool:
        """True while this member leads and its membership lease holds.

        Reads the clock itself instead of trusting a flag set by another thread, so a
        process that resumes from a pause longer than its lease sees False at once.
        """
        if self.lost.is_set():
            return False
        if self._elector.lease.holds():
            return True
        self._elector.depose(self, LEASE_RAN_OUT, rejoin=True)
        return False

    def check(self) -> None:
        """Raise :class:`NotLeaderError` unless this member still leads. Call it before each
        action only the leader may take.

        Raises:
            NotLeaderError: leadership was lost; the message says why.
        """
        if not self.is_valid():
            raise NotLeaderError(
                f"{self.identity} no longer leads group {self._elector.group_id!r} "
                f"(token {self.token}): {self._reason}"
            )

    def transactional_producer(self, **settings: Any) -> Any:
        """A kafka-python ``KafkaProducer`` whose transactions the broker fences by leadership.

        Every leader of the group uses the same ``transactional_id`` (the election's
        ``transactional_id``, by default ``"<group>.leader"``). Creating the producer calls
        ``init_transactions()``, which makes the broker abort the previous leader's open
        transaction and reject anything its producer still tries to send or commit
        (``ProducerFencedError``). Writes made in transactions are therefore safe even from
        a leader that was paused and has not noticed yet. Consumers must read with
        ``isolation_level="read_committed"``. The producer is the caller's: close it when
        leadership is lost (a deposed leader's producer is useless anyway). Only a leader can
        create one, so a deposed member can never fence its successor.

        Args:
            **settings: kafka-python producer settings; the connection settings of the election
                (bootstrap servers, TLS, SASL) are used unless given here.

        Raises:
            NotLeaderError: leadership was lost before the producer was ready (it is closed).
        """
        from kafka import KafkaProducer

        self.check()
        config = {**self._elector.ctx.member.config.client_settings(), **settings}
        config["transactional_id"] = self._elector.transactional_id
        producer = KafkaProducer(**config)
        try:
            producer.init_transactions()
            self.check()
        except BaseException:
            producer.close(timeout=1)
            raise
        return producer

    def _lose(self, reason: str) -> bool:
        """Mark this leadership lost with ``reason``; False if it already was."""
        with self._lock:
            if self.lost.is_set():
                return False
            self._reason = reason
            self.lost.set()
            return True

    def __repr__(self) -> str:
        state = f"lost: {self._reason}" if self.lost.is_set() else "valid"
        return f"<Leadership {self.identity!r} token={self.token} {state}>"
