"""Selection, lineage headers and parking decisions of the DLQ replay, on DLQ records built by the core."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import (
    DeadLetterRecord,
    ErrorContext,
    HeaderFormat,
    SourceRecord,
    Stage,
    TaskId,
    build_dead_letter_record,
    connect_context_headers,
    parse_dead_letter,
    streams_context_headers,
)
from airflow_kerr.errors.record import Header
from airflow_kerr.inspection.selection import Selection
from airflow_kerr.replay.policy import (
    HEADER_PARKED_REASON,
    HEADER_REPLAY_COUNT,
    HEADER_REPLAY_RUN,
    HEADER_REPLAY_SOURCE,
    Action,
    ParkReason,
    ParkRecord,
    ReplayPolicy,
    ReplayRecord,
    StopReplay,
    decide,
    replay_count,
)


class InvalidOrder(ValueError):
    pass


def dead_letter(  # noqa: PLR0913 - a test-record builder: each keyword-only default is a field a test varies
    *,
    topic: str = "orders",
    stage: Stage = Stage.TRANSFORMATION,
    error: Exception | None = None,
    headers: list[Header] | None = None,
    header_format: HeaderFormat = HeaderFormat.CONNECT,
    timestamp: int = 1_795_250_000_000,
    dlq_offset: int = 7,
    key: bytes | None = b"o-1",
    value: bytes | None = b'{"id": "o-1", "amount": -5}',
) -> tuple[DeadLetterRecord, list[Header]]:
    """A DLQ record as the core writes it, read back as the replay reads it: (parsed, raw headers)."""
    record = SourceRecord(topic, 1, 41, timestamp, key=key, value=value, headers=list(headers or [("kind", b"x")]))
    context = ErrorContext(TaskId("orders_pipeline", 0), stage, "mypkg.validate", error or InvalidOrder("neg"), record)
    built = build_dead_letter_record(context, topic="orders.dlq", header_format=header_format)
    letter = parse_dead_letter(
        built.headers, built.key, built.value, topic="orders.dlq", partition=0, offset=dlq_offset, timestamp=timestamp
    )
    return letter, built.headers


def policy(**kwargs: Any) -> ReplayPolicy:
    return ReplayPolicy(
        **{"dlq_topic": "orders.dlq", "run_id": "run-1", "parking_topic": "orders.dlq.parked", **kwargs}
    )


def names(headers: list[Header]) -> list[str]:
    return [name for name, _ in headers]


def test_a_replayed_record_has_the_original_headers_and_fresh_lineage() -> None:
    letter, raw = dead_letter(headers=[("kind", b"invalid"), (HEADER_REPLAY_COUNT, b"1"), ("trace", None)])

    decision = decide(letter, raw, policy())

    assert decision.action is Action.REPLAY and decision.record is not None
    record = decision.record
    assert record.topic == "orders" and record.key == b"o-1" and record.value == letter.value
    assert record.timestamp is None
    assert not any(name.startswith("__connect.errors.") for name in names(record.headers))
    assert record.headers == [
        ("kind", b"invalid"),
        ("trace", None),
        (HEADER_REPLAY_COUNT, b"2"),
        (HEADER_REPLAY_SOURCE, b"orders.dlq/0/7"),
        (HEADER_REPLAY_RUN, b"run-1"),
    ]


@pytest.mark.parametrize("header_format", [HeaderFormat.CONNECT, HeaderFormat.DLQ])
def test_the_target_is_the_source_topic_from_either_header_set(header_format: HeaderFormat) -> None:
    letter, raw = dead_letter(topic="payments", header_format=header_format)
    decision = decide(letter, raw, policy())
    assert decision.record is not None and decision.record.topic == "payments"


def test_a_streams_dlq_record_goes_back_to_its_topic() -> None:
    record = SourceRecord("clicks", 0, 3, 1, key=b"k", value=b"v")
    context = ErrorContext(TaskId("app", 0), Stage.TASK_PUT, "x", RuntimeError("boom"), record)
    headers = streams_context_headers(context)
    letter = parse_dead_letter(headers, b"k", b"v", topic="app.dlq", partition=0, offset=0)
    decision = decide(letter, headers, policy(dlq_topic="app.dlq", parking_topic="app.dlq.parked"))
    assert decision.record is not None and decision.record.topic == "clicks"


def test_the_override_wins_over_the_source_topic() -> None:
    letter, raw = dead_letter()
    decision = decide(letter, raw, policy(target_topic="orders.retry"))
    assert decision.record is not None and decision.record.topic == "orders.retry"


@given(st.integers(min_value=0, max_value=20), st.integers(min_value=1, max_value=20))
def test_loop_protection_parks_exactly_at_max_replays(previous: int, max_replays: int) -> None:
    letter, raw = dead_letter(headers=[(HEADER_REPLAY_COUNT, str(previous).encode())])

    decision = decide(letter, raw, policy(max_replays=max_replays))

    assert decision.record is not None
    if previous >= max_replays:
        assert decision.action is Action.PARK and decision.reason is ParkReason.MAX_REPLAYS
        assert replay_count(decision.record.headers) == previous
    else:
        assert decision.action is Action.REPLAY
        assert replay_count(decision.record.headers) == previous + 1


def reason_of(record: ReplayRecord | None) -> str:
    assert record is not None
    values = [value for name, value in record.headers if name == HEADER_PARKED_REASON]
    assert len(values) == 1 and values[0] is not None
    return values[0].decode()


def test_a_parked_record_keeps_the_error_headers_and_says_why() -> None:
    letter, raw = dead_letter(headers=[(HEADER_REPLAY_COUNT, b"3")])

    decision = decide(letter, raw, policy(max_replays=3))

    assert decision.record is not None and decision.record.topic == "orders.dlq.parked"
    assert decision.record.key == letter.key and decision.record.value == letter.value
    assert "__connect.errors.exception.class.name" in names(decision.record.headers)
    assert reason_of(decision.record) == "max_replays: replayed 3 times already"
    assert dict(decision.record.headers)[HEADER_REPLAY_SOURCE] == b"orders.dlq/0/7"


def test_no_source_topic_and_no_override_parks() -> None:
    context = ErrorContext(TaskId("p", 0), Stage.TASK_POLL, "x", RuntimeError("the record is not known"))
    headers = connect_context_headers(context)
    letter = parse_dead_letter(headers, b"k", b"v", topic="orders.dlq", partition=0, offset=1)

    decision = decide(letter, headers, policy())

    assert decision.action is Action.PARK and decision.reason is ParkReason.NO_SOURCE_TOPIC
    assert reason_of(decision.record).startswith("no_source_topic: ")
    assert decide(letter, headers, policy(target_topic="orders")).action is Action.REPLAY


def test_a_headers_only_kip1191_record_is_parked() -> None:
    letter, raw = dead_letter(header_format=HeaderFormat.DLQ, key=None, value=None)
    decision = decide(letter, raw, policy())
    assert decision.reason is ParkReason.NO_CONTENT


def test_a_fix_that_raises_parks_the_record_with_the_exception() -> None:
    def fix(record: ReplayRecord) -> ReplayRecord:
        raise InvalidOrder("cannot repair o-1")

    letter, raw = dead_letter()
    decision = decide(letter, raw, policy(fix=fix))

    assert decision.action is Action.PARK and decision.reason is ParkReason.FIX_FAILED
    assert reason_of(decision.record) == f"fix_failed: {__name__}.InvalidOrder: cannot repair o-1"


def test_a_step_around_the_fix_parks_with_its_own_reason_and_a_stop_ends_the_run() -> None:
    """The registry step parks ``does_not_fit`` with the serializer's text; an outage is raised, never parked."""

    def does_not_fit(record: ReplayRecord) -> ReplayRecord:
        raise ParkRecord(ParkReason.DOES_NOT_FIT, "Failed to serialize Avro data from topic orders: qty")

    def outage(record: ReplayRecord) -> ReplayRecord:
        raise StopReplay("the Schema Registry is out of reach")

    letter, raw = dead_letter()
    decision = decide(letter, raw, policy(fix=does_not_fit))
    assert decision.action is Action.PARK and decision.reason is ParkReason.DOES_NOT_FIT
    assert reason_of(decision.record) == "does_not_fit: Failed to serialize Avro data from topic orders: qty"
    with pytest.raises(StopReplay, match="out of reach"):
        decide(letter, raw, policy(fix=outage))


def test_a_fix_returning_none_drops_and_one_returning_garbage_parks() -> None:
    letter, raw = dead_letter()
    assert decide(letter, raw, policy(fix=lambda record: None)).action is Action.DROP
    decision = decide(letter, raw, policy(fix=lambda record: b"bytes"))
    assert decision.reason is ParkReason.FIX_FAILED and "returned bytes" in reason_of(decision.record)


def test_a_fix_can_change_value_topic_and_timestamp_but_not_the_lineage() -> None:
    def fix(record: ReplayRecord) -> ReplayRecord:
        record.value = b"fixed"
        record.topic = "orders.v2"
        record.timestamp = record.dead_letter.timestamp
        record.headers.append((HEADER_REPLAY_COUNT, b"99"))
        return record

    letter, raw = dead_letter()
    decision = decide(letter, raw, policy(fix=fix))

    assert decision.record is not None
    assert (decision.record.topic, decision.record.value, decision.record.timestamp) == (
        "orders.v2",
        b"fixed",
        1_795_250_000_000,
    )
    assert replay_count(decision.record.headers) == 1


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("__consumer_offsets", ParkReason.FORBIDDEN_TARGET),
        ("orders.dlq", ParkReason.FORBIDDEN_TARGET),
        ("orders.dlq.parked", ParkReason.FORBIDDEN_TARGET),
        ("payments", ParkReason.TARGET_NOT_ALLOWED),
        ("orders.gone", ParkReason.UNKNOWN_TARGET),
    ],
)
def test_unsafe_targets_are_parked(target: str, reason: ParkReason) -> None:
    letter, raw = dead_letter(topic=target)
    rules = policy(target_allowlist=re.compile(r"orders.*|__.*"), topic_exists=lambda topic: topic != "orders.gone")

    decision = decide(letter, raw, rules)

    assert decision.action is Action.PARK and decision.reason is reason
    assert repr(target) in reason_of(decision.record)


def test_selection_by_each_criterion() -> None:
    letter, _ = dead_letter(topic="orders", stage=Stage.VALUE_CONVERTER, error=ValueError("x"), dlq_offset=10)
    assert Selection().matches(letter)
    cases: dict[str, tuple[Any, Any]] = {
        "source_topics": (frozenset({"orders"}), frozenset({"payments"})),
        "stages": (frozenset({Stage.VALUE_CONVERTER}), frozenset({Stage.TRANSFORMATION})),
        "exception_pattern": (re.compile("^Value"), re.compile("InvalidOrder")),
        "start_ms": (1_795_250_000_000, 1_795_250_000_001),
        "end_ms": (1_795_250_000_001, 1_795_250_000_000),
        "start_offset": (10, 11),
        "end_offset": (11, 10),
        "headers": ({"kind": "x", "__connect.errors.stage": "VALUE_CONVERTER"}, {"kind": "y"}),
    }
    for name, (accepted, refused) in cases.items():
        assert Selection(**{name: accepted}).matches(letter), name
        assert not Selection(**{name: refused}).matches(letter), name


def test_a_record_without_timestamp_is_outside_any_time_range() -> None:
    letter, _ = dead_letter()
    undated = parse_dead_letter(list(letter.error_headers.items()), b"k", b"v", topic="d", partition=0, offset=0)
    assert not Selection(start_ms=0).matches(undated)


def test_garbage_replay_counts_read_as_zero() -> None:
    assert replay_count([(HEADER_REPLAY_COUNT, b"two")]) == 0
    assert replay_count([(HEADER_REPLAY_COUNT, b"1"), (HEADER_REPLAY_COUNT, b"4")]) == 4
    assert replay_count([]) == 0
