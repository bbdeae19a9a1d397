"""Decoders of bytes from other members raise only their typed error, whatever the bytes.

The fuzzer is tests/fuzzing.py (see there for the long run); CI runs each decoder on the
hand-made hostile inputs and 10,000 seeded mutations of valid encodings.
"""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from coordination._inspection import decode_timeline_record
from coordination.errors import ProtocolCodecError
from recipes.election._wire import decode_candidate, decode_outcome

from ..fuzzing import CASES, Case, _hostile_binary, check, fuzz

INPUTS_PER_DECODER = 10_000
TIME_BUDGET_S = 10.0  # per decoder; a few seconds is typical on a shared core


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decoder_raises_only_its_typed_error(case: Case) -> None:
    started = time.monotonic()
    figures = fuzz(case, INPUTS_PER_DECODER)
    assert figures.inputs >= INPUTS_PER_DECODER
    assert figures.refused > 0 and figures.decoded > 0  # the mutations reach both ways
    assert time.monotonic() - started < TIME_BUDGET_S


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_declared_huge_lengths_do_not_allocate(case: Case) -> None:
    inputs = (
        [b'{"v":1,"identity":"a","x":' + b"[" * 200_000] if case.json_like else _hostile_binary()
    )
    tracemalloc.start()
    try:
        for data in inputs:
            tracemalloc.reset_peak()
            check(case.decoder, data, case.allowed)
            _, peak = tracemalloc.get_traced_memory()
            assert peak < 16 * len(data) + (1 << 20), (data[:40], peak)
    finally:
        tracemalloc.stop()


def test_election_numbers_must_be_in_range_integers() -> None:
    ok = json.dumps({"v": 1, "identity": "a", "priority": -(2**63), "highest_token": 2**63 - 2})
    assert decode_candidate(ok.encode()).highest_token == 2**63 - 2
    cases: list[tuple[str, object]] = [
        ("priority", 2**63),
        ("priority", 1.0),
        ("priority", True),
        ("leading_token", 2**63 - 1),  # leaves no room for a higher token
        ("highest_token", -(2**63) - 1),
        ("eligible", 1),
        ("generation", 2**63),
        ("generation", "7"),
    ]
    for field, value in cases:
        doc = json.dumps({"v": 1, "identity": "a", field: value}).encode()
        with pytest.raises(ProtocolCodecError, match=field):
            decode_candidate(doc)
    for field, value in [
        ("token", 2**63),
        ("token", "1"),
        ("leader", 1),
        ("members", []),
        ("stored_token_exists", 1),
        ("stored_token_exists", "true"),
    ]:
        doc = json.dumps({"v": 1, field: value}).encode()
        with pytest.raises(ProtocolCodecError, match=field):
            decode_outcome(doc)


def test_timeline_records_must_have_typed_finite_bounded_fields() -> None:
    good = {
        "started_at": 1_760_000_000.5,
        "reason": "r",
        "duration_s": 0,
        "generation": -1,
        "member_id": "m",
        "is_leader": False,
        "failed_attempts": 0,
        "sender": "ignored",
        "from_a_newer_member": [1],
    }
    record = decode_timeline_record(json.dumps(good).encode())
    assert (record.started_at, record.duration_s, record.moved, record.client_id) == (
        1_760_000_000.5,
        0.0,
        "",
        "",
    )
    assert isinstance(record.duration_s, float)
    cases: list[tuple[str, object]] = [
        ("started_at", "2026-01-01"),
        ("started_at", 1e300),
        ("started_at", float("nan")),
        ("started_at", float("inf")),
        ("started_at", -1),
        ("started_at", 10**400),
        ("started_at", True),
        ("started_at", None),
        ("duration_s", float("-inf")),
        ("duration_s", -0.5),
        ("duration_s", 10**12),
        ("generation", 2**31),
        ("generation", -2),
        ("generation", 1.0),
        ("generation", False),
        ("failed_attempts", -1),
        ("is_leader", 1),
        ("is_leader", "true"),
        ("member_id", 7),
        ("member_id", "\ud800"),
        ("reason", "x" * 32_768),
        ("reason", ["a"]),
        ("moved", None),
        ("group_instance_id", 5),
        ("client_id", {}),
    ]
    for field, value in cases:
        doc = json.dumps({**good, field: value}).encode()
        with pytest.raises(ProtocolCodecError, match=field):
            decode_timeline_record(doc)
    for field in ("started_at", "reason", "duration_s", "generation", "member_id", "is_leader"):
        doc = json.dumps({k: v for k, v in good.items() if k != field}).encode()
        with pytest.raises(ProtocolCodecError, match=f"no '{field}'"):
            decode_timeline_record(doc)
    for doc in (b"", b"[]", b'"x"', b"\xff", b"{" * 100_000, b" " * (2 << 20)):
        with pytest.raises(ProtocolCodecError, match="timeline record"):
            decode_timeline_record(doc)
