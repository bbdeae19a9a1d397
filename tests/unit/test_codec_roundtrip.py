"""Every wire format round-trips: what a member writes, every other member reads back as it
was, over generated values (hypothesis) rather than a few hand-picked ones.

The other direction (whatever bytes arrive, only the typed error escapes) is the fuzzer's:
tests/fuzzing.py and test_hostile_input.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from recipes.election._wire import (
    Candidate,
    Outcome,
    decode_candidate,
    decode_outcome,
    encode_candidate,
    encode_outcome,
)
from recipes.partitioning.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from recipes.pipeline._output import OffsetRange, _parse
from recipes.tasks._assignor import AssignmentStatus, WorkerAssignment, WorkerState
from recipes.tasks._wire import (
    decode_assignment as decode_task_assignment,
)
from recipes.tasks._wire import (
    decode_worker_metadata,
    encode_worker_metadata,
)
from recipes.tasks._wire import (
    encode_assignment as encode_task_assignment,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Kafka topic names: up to 249 of [a-zA-Z0-9._-].
TOPICS = st.text("abcxyzABC0123456789._-", min_size=1, max_size=40)
PARTITION = st.integers(0, 2**31 - 1)
# Any text a member may put in a string field (no lone surrogates: they are not UTF-8).
UNICODE = st.characters(exclude_categories=["Cs"])
TEXT = st.text(UNICODE, max_size=60)
BLOB = st.none() | st.binary(max_size=200)
# Derandomized and without a database: every run tries the same examples, so a run fails
# only for a change in the code, never for the luck of the draw.
EXAMPLES = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def _partitions(max_topics: int = 4) -> st.SearchStrategy[list[TopicPartition]]:
    """Distinct partitions, grouped by topic in order of first appearance."""
    groups = st.dictionaries(TOPICS, st.sets(PARTITION, max_size=8), max_size=max_topics)
    return groups.map(lambda g: [TopicPartition(t, p) for t, ps in g.items() for p in sorted(ps)])


# -- the consumer protocol (Kafka's, shared with Java and librdkafka) ------------------------


@EXAMPLES
@given(
    topics=st.sets(TOPICS, max_size=6),
    user_data=BLOB,
    owned=_partitions(),
    generation=INT32,
    rack=st.none() | TEXT,
    version=st.integers(0, 3),
)
def test_a_subscription_round_trips_in_every_version(
    topics: set[str],
    user_data: bytes | None,
    owned: list[TopicPartition],
    generation: int,
    rack: str | None,
    version: int,
) -> None:
    sub = Subscription(tuple(sorted(topics)), user_data, tuple(owned), generation, rack)
    back = decode_subscription(encode_subscription(sub, version))
    assert back.topics == sub.topics
    assert back.user_data == user_data
    # Fields newer than the version are left out, and read back as their defaults.
    assert sorted(back.owned_partitions) == (sorted(owned) if version >= 1 else [])
    assert back.generation_id == (generation if version >= 2 else -1)
    # An empty rack is no rack, as Java's client.rack="" is.
    assert back.rack_id == (rack or None if version >= 3 else None)


@EXAMPLES
@given(partitions=_partitions(), user_data=BLOB, version=st.integers(0, 3))
def test_an_assignment_round_trips_in_order(
    partitions: list[TopicPartition], user_data: bytes | None, version: int
) -> None:
    assignment = Assignment(tuple(partitions), user_data)
    assert decode_assignment(encode_assignment(assignment, version)) == assignment


@EXAMPLES
@given(partitions=_partitions(), generation=st.none() | INT32)
def test_sticky_user_data_round_trips(
    partitions: list[TopicPartition], generation: int | None
) -> None:
    back = decode_sticky_user_data(encode_sticky_user_data(partitions, generation))
    assert sorted(back.partitions) == sorted(partitions)
    assert back.generation == generation


@EXAMPLES
@given(generation=INT32)
def test_cooperative_sticky_user_data_round_trips(generation: int) -> None:
    assert (
        decode_cooperative_sticky_user_data(encode_cooperative_sticky_user_data(generation))
        == generation
    )


# -- the election's JSON -------------------------------------------------------------------

TOKEN = st.integers(-1, 2**63 - 2)  # below int64's maximum, so a higher one still exists


@EXAMPLES
@given(
    identity=TEXT.filter(bool),
    eligible=st.booleans(),
    priority=INT64,
    leading=st.none() | TOKEN,
    highest=TOKEN,
    member_id=TEXT,
    declined=TOKEN,
    generation=INT64,
)
def test_an_election_candidate_round_trips(
    identity: str,
    eligible: bool,
    priority: int,
    leading: int | None,
    highest: int,
    member_id: str,
    declined: int,
    generation: int,
) -> None:
    candidate = Candidate(
        identity, eligible, priority, leading, highest, member_id, declined, generation
    )
    assert decode_candidate(encode_candidate(candidate)) == candidate


@EXAMPLES
@given(
    leader=st.none() | TEXT,
    leader_identity=st.none() | TEXT,
    token=st.none() | TOKEN,
    members=st.dictionaries(TEXT, TEXT, max_size=8),
    problems=st.lists(TEXT, max_size=3),
    duplicates=st.lists(TEXT, max_size=3),
    stored_token=st.none() | TOKEN,
    stored_token_exists=st.booleans(),
)
def test_an_election_outcome_round_trips(
    leader: str | None,
    leader_identity: str | None,
    token: int | None,
    members: dict[str, str],
    problems: list[str],
    duplicates: list[str],
    stored_token: int | None,
    stored_token_exists: bool,
) -> None:
    outcome = Outcome(
        leader,
        leader_identity,
        token,
        members,
        tuple(problems),
        tuple(duplicates),
        stored_token,
        stored_token_exists,
    )
    assert decode_outcome(encode_outcome(outcome)) == outcome


# -- the task distribution's binary format ------------------------------------------------

TASK = st.text(UNICODE, min_size=1, max_size=30)


@EXAMPLES
@given(
    worker_id=TASK,
    owned=st.frozensets(TASK, max_size=10),
    capacity=st.none() | st.floats(0, 1e12, allow_nan=False, allow_infinity=False),
    config_version=st.integers(0, 2**63 - 1),
)
def test_task_worker_metadata_round_trips(
    worker_id: str, owned: frozenset[str], capacity: float | None, config_version: int
) -> None:
    state = WorkerState(
        member_id="m-1",
        worker_id=worker_id,
        owned=owned,
        capacity=capacity,
        config_version=config_version,
    )
    assert decode_worker_metadata("m-1", encode_worker_metadata(state)) == state


@EXAMPLES
@given(
    tasks=st.sets(TASK, max_size=12),
    split=st.integers(0, 12),
    delay_ms=st.integers(0, 2**31 - 1),
    leader_id=TEXT,
    leader_worker_id=TEXT,
    config_version=st.integers(0, 2**63 - 1),
    status=st.sampled_from(AssignmentStatus),
)
def test_a_task_assignment_round_trips(
    tasks: set[str],
    split: int,
    delay_ms: int,
    leader_id: str,
    leader_worker_id: str,
    config_version: int,
    status: AssignmentStatus,
) -> None:
    ordered = sorted(tasks)
    assignment = WorkerAssignment(
        assigned=tuple(ordered[:split]),
        revoked=tuple(ordered[split:]),
        delay_ms=delay_ms,
        leader_id=leader_id,
        leader_worker_id=leader_worker_id,
        config_version=config_version,
        status=status,
    )
    assert decode_task_assignment(encode_task_assignment(assignment)) == assignment


# -- the pipeline's commit metadata (a staging directory's name) ---------------------------


@EXAMPLES
@given(
    # Kafka topic names; "." and ".." are not (Kafka refuses them, so does OffsetRange).
    topic=st.text("abcxyz0123456789._-", min_size=1, max_size=160).filter(
        lambda t: t not in (".", "..")
    ),
    partition=st.integers(0, 2**31 - 1),
    start=st.integers(0, 2**62),
    length=st.integers(0, 2**40),
)
def test_a_published_name_parses_back_to_its_range(
    topic: str, partition: int, start: int, length: int
) -> None:
    offsets = OffsetRange(
        topic=topic, partition=partition, start_offset=start, end_offset=start + length
    )
    parsed = _parse(offsets.name)
    assert parsed is not None and parsed[0] == offsets and parsed[1] is None
