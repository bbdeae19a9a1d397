"""What a user meets when things go wrong: typed errors that say why, never a raw one.

Commits whose answer was lost, an authentication failure during a commit, an
assignment too large for the broker to store, an unreachable cluster, and settings
that could never work.
"""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from coordination import CoordinatorConfig, OffsetAndMetadata, errors
from coordination._engine import offsets
from coordination._protocol.error_codes import ErrorCode as E
from coordination._transport.kafka import diagnose
from coordination.testing import TransportError
from coordination.testing import messages as m

from .test_engine import NODE, OFFSETS, Harness, committed, joined


def stable_leader(**settings: object) -> Harness:
    h = Harness(**settings)
    h.join_as_leader()
    # Keep the coordinator across a lost answer: no membership thread looks for it here.
    h.engine.forget_coordinator = lambda reason: None  # type: ignore[method-assign]
    return h


def fetched(values: dict[tuple[str, int], OffsetAndMetadata]) -> m.OffsetFetchResponse:
    return m.OffsetFetchResponse(
        error_code=0,
        partitions=tuple((t, p, om.offset, om.metadata, 0) for (t, p), om in values.items()),
    )


# ------------------------------------------------------------------ commits with a lost answer


def test_a_commit_whose_answer_was_lost_but_which_landed_is_a_success() -> None:
    """The first attempt was applied, its answer lost; the retry meets the next generation."""
    h = stable_leader()
    h.prepare(TransportError("connection reset"), response_type=m.OffsetCommitResponse)
    h.prepare(committed(E.ILLEGAL_GENERATION, E.ILLEGAL_GENERATION))
    h.prepare(fetched(OFFSETS))  # the group holds exactly what was sent
    offsets.commit(h.engine, OFFSETS, None, 5)  # no CommitFailedError
    assert len(h.transport.requests(m.OffsetFetchRequest)) == 1


def test_a_commit_whose_answer_was_lost_and_which_did_not_land_fails() -> None:
    h = stable_leader()
    h.prepare(TransportError("connection reset"), response_type=m.OffsetCommitResponse)
    h.prepare(committed(E.ILLEGAL_GENERATION, E.ILLEGAL_GENERATION))
    h.prepare(fetched({("t", 0): OffsetAndMetadata(3, "older"), ("t", 1): OffsetAndMetadata(20)}))
    with pytest.raises(errors.CommitFailedError, match="earlier attempt got no answer"):
        offsets.commit(h.engine, OFFSETS, None, 5)


def test_an_authentication_failure_during_a_commit_is_a_typed_error() -> None:
    h = stable_leader()
    h.prepare(
        TransportError("authentication failed: bad password", fatal=True),
        response_type=m.OffsetCommitResponse,
    )
    with pytest.raises(errors.ConnectionFailedError, match="authentication failed"):
        offsets.commit(h.engine, OFFSETS, None, 5)


# ------------------------------------------------------------------ oversized assignments


def test_an_assignment_the_broker_cannot_store_stops_the_leader_with_a_clear_error() -> None:
    h = Harness(max_assignment_bytes=1000)
    h.member.perform_assignment = lambda leader, protocol, members: {  # type: ignore[method-assign,assignment]
        x.member_id: b"x" * 2000 for x in members
    }
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-1"),
        joined("m-1", 1, leader="m-1"),
    )
    with pytest.raises(errors.AssignmentError, match="max_assignment_bytes=1000"):
        h.engine.join_group_if_needed(deadline=None)
    assert h.transport.requests(m.SyncGroupRequest) == []  # never sent, never retried
    assert h.engine.fatal_error is not None


def test_an_assignment_within_the_limit_is_sent() -> None:
    h = Harness(max_assignment_bytes=5000)
    h.member.perform_assignment = lambda leader, protocol, members: {  # type: ignore[method-assign,assignment]
        x.member_id: b"x" * 2000 for x in members
    }
    h.join_as_leader()
    assert len(h.transport.requests(m.SyncGroupRequest)) == 1


# ------------------------------------------------------------------ an unreachable cluster


def test_an_unreachable_cluster_is_a_warning_and_the_timeout_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    cause = "cannot reach bootstrap servers ['x:1']: x:1: connection refused"
    for _ in range(50):  # more than fit in the deadline
        h.prepare(TransportError(cause), response_type=m.FindCoordinatorResponse)
    with caplog.at_level(logging.INFO, logger="coordination.member"):
        assert not h.engine.ensure_coordinator_ready(deadline=h.clock.now + 2)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and "x:1" in warnings[0].getMessage()
    assert "connection refused" in warnings[0].getMessage()
    with pytest.raises(errors.CoordinationTimeoutError) as raised:
        h.engine.wait_stable(0)
    assert "bootstrap servers x:1 could not be reached" in str(raised.value)
    assert "connection refused" in str(raised.value)


def test_diagnosis_names_a_closed_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        finding = diagnose(f"127.0.0.1:{port}", None)
        assert "connection refused" in finding.message
        assert not finding.settings_problem  # a broker may be restarting: retried


def test_diagnosis_names_a_failed_dns_lookup() -> None:
    finding = diagnose("no-such-host.invalid:9092", None)
    assert "DNS lookup" in finding.message and not finding.settings_problem


def test_diagnosis_of_a_port_that_hangs_up_on_tls_and_is_no_broker_is_retried() -> None:
    # A real broker's PLAINTEXT port answers the probe's ApiVersions and is a settings
    # problem (tests/integration/test_security.py); a server that hangs up on anything
    # may be a broker going down, so the member keeps trying.
    import ssl

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def hangs_up() -> None:
        for _ in range(2):  # the handshake, then the plaintext probe
            conn, _ = server.accept()
            conn.recv(1024)
            conn.close()

    thread = threading.Thread(target=hangs_up, daemon=True)
    thread.start()
    try:
        finding = diagnose(f"127.0.0.1:{port}", ssl.create_default_context())
    finally:
        thread.join(5)
        server.close()
    assert "TLS handshake failed" in finding.message
    assert not finding.settings_problem


# ------------------------------------------------------------------ settings that cannot work


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        (9092, "must be a 'host:port' string or a list of them, got 9092 (int)"),
        ("host:notaport", "'host:notaport' is not host:port"),
        ("host:70000", "'host:70000' is not host:port"),
        ("a:1,,b:2", "empty entry"),
        ([9092], "must be a 'host:port' string"),
    ],
)
def test_bad_bootstrap_servers_are_a_configuration_error(servers: object, message: str) -> None:
    with pytest.raises(
        errors.ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        CoordinatorConfig.from_settings("g", {"bootstrap_servers": servers})


def test_good_bootstrap_servers_pass() -> None:
    for servers in ("h:9092", "h1:1,h2:2", ["h1:1", "h2:2"], "[::1]:9092", "kafka"):
        CoordinatorConfig.from_settings("g", {"bootstrap_servers": servers})


def test_a_group_id_longer_than_the_protocol_allows_is_a_configuration_error() -> None:
    with pytest.raises(errors.ConfigurationError, match="group_id is 32768 bytes long"):
        CoordinatorConfig.from_settings("g" * 32768, {"bootstrap_servers": "h:1"})
    CoordinatorConfig.from_settings("g" * 32767, {"bootstrap_servers": "h:1"})


def test_an_unreadable_tls_file_is_a_configuration_error(tmp_path: object) -> None:
    with pytest.raises(errors.ConfigurationError, match=r"ssl_cafile='/no/such/ca\.pem'"):
        CoordinatorConfig.from_settings(
            "g", {"bootstrap_servers": "h:1", "ssl_cafile": "/no/such/ca.pem"}
        )


def test_an_offset_request_finds_a_lost_coordinator_itself() -> None:
    """A callback that commits runs on the membership thread, which then cannot look for the
    coordinator: the commit must find it, not wait for a lookup that never comes."""
    h = Harness()
    h.join_as_leader()
    h.prepare(TransportError("connection reset"), response_type=m.OffsetCommitResponse)
    h.prepare(NODE)  # FindCoordinator, sent by the commit itself
    h.prepare(committed(0, 0))
    offsets.commit(h.engine, OFFSETS, None, 5)
    assert len(h.transport.requests(m.FindCoordinatorRequest)) == 2  # the join's, the commit's
    assert h.engine.coordinator is not None
