"""Whatever a DLQ record carries, or a fix returns, the replay decides; it never raises.

The policy here answers ``topic_exists`` the way librdkafka does: a name that is not a
Kafka topic name raises (``RuntimeError: Unable to create topic object``), as it did when a
600-byte ``__connect.errors.topic`` header ended every replay run.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.errors.dialects import FIELD_HEADERS
from airflow_kerr.replay.policy import (
    HEADER_PARKED_REASON,
    HEADER_REPLAY_COUNT,
    Action,
    Decision,
    ParkReason,
    ReplayPolicy,
    ReplayRecord,
    decide,
)

_KNOWN_ERROR_HEADERS = sorted({name for names in FIELD_HEADERS.values() for name in names})

TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def librdkafka_topic_exists(topic: str) -> bool:
    """Metadata for ``topic`` as confluent-kafka answers it: an invalid name cannot even be asked about."""
    if not TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise RuntimeError(f'Unable to create topic object for "{topic}": Local: Invalid argument or configuration')
    return True


def policy(**kwargs: Any) -> ReplayPolicy:
    return ReplayPolicy(
        "orders.dlq", "run-1", "orders.dlq.parked", **{"topic_exists": librdkafka_topic_exists, **kwargs}
    )


def reason(decision: Decision) -> str:
    assert decision.record is not None
    (value,) = [raw for name, raw in decision.record.headers if name == HEADER_PARKED_REASON]
    assert value is not None
    return value.decode()


header_values = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.text(alphabet="0123456789", min_size=1, max_size=5000).map(str.encode),
    st.text(alphabet="abc._-/ ", min_size=0, max_size=600).map(str.encode),
)
header_lists = st.lists(
    st.tuples(st.sampled_from([*_KNOWN_ERROR_HEADERS, HEADER_REPLAY_COUNT, "kind"]), header_values), max_size=10
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(header_lists, st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=8)))
def test_any_dlq_record_gets_a_decision_and_a_parked_one_says_why(
    headers: list[tuple[str, bytes | None]], key: bytes | None, value: bytes | None
) -> None:
    letter = parse_dead_letter(headers, key, value, topic="orders.dlq", partition=0, offset=3)

    decision = decide(letter, headers, policy())

    assert decision.action in (Action.REPLAY, Action.PARK)
    assert decision.record is not None
    assert TOPIC_NAME.fullmatch(decision.record.topic)
    if letter.malformed_headers:
        assert decision.reason is ParkReason.MALFORMED_HEADERS
    if decision.action is Action.PARK:
        text = reason(decision)
        assert text.startswith(f"{decision.reason}: ") and len(text) <= 1100


def test_a_record_with_a_malformed_header_is_parked_naming_the_header_and_the_value_cut_short() -> None:
    headers = [("__connect.errors.topic", b"x" * 600), ("__connect.errors.offset", b"1" * 5000)]
    letter = parse_dead_letter(headers, b"k", b"v", topic="orders.dlq", partition=0, offset=3)

    decision = decide(letter, headers, policy(target_topic="orders"))

    assert decision.action is Action.PARK and decision.reason is ParkReason.MALFORMED_HEADERS
    text = reason(decision)
    assert text.startswith("malformed_headers: __connect.errors.topic: 'xxxxx")
    assert "(600 characters) is not a topic name" in text
    assert "__connect.errors.offset: '11111" in text and "(5,000 characters) is not an integer" in text
    assert len(text) < 400
    assert decision.detail is not None and decision.detail in text


def fixed_to(**changes: Any) -> Any:
    def fix(record: ReplayRecord) -> ReplayRecord:
        for name, value in changes.items():
            setattr(record, name, value)
        return record

    return fix


GOOD = [("__connect.errors.topic", b"orders"), ("__connect.errors.exception.class.name", b"ValueError")]


def decide_with_fix(fix: Any) -> Decision:
    letter = parse_dead_letter(GOOD, b"k", b"v", topic="orders.dlq", partition=0, offset=3)
    return decide(letter, GOOD, policy(fix=fix))


def test_a_fix_that_names_an_invalid_topic_parks_the_record_instead_of_failing_the_run() -> None:
    decision = decide_with_fix(fixed_to(topic="orders/" + "x" * 600))

    assert decision.reason is ParkReason.INVALID_TARGET
    assert "is not a topic name" in reason(decision) and len(reason(decision)) < 300


def test_a_fix_that_returns_unproducible_fields_parks_the_record() -> None:
    for changes, said in (
        ({"value": 12}, "a value of type int"),
        ({"key": ["k"]}, "a key of type list"),
        ({"value": "\ud800"}, "a value that is not UTF-8 text"),
        ({"topic": None}, "a topic of type NoneType"),
        ({"timestamp": 10**5000}, "timestamp=<an integer of about"),
        ({"timestamp": -5}, "timestamp=-5"),
        ({"timestamp": 1.5}, "timestamp=1.5"),
        ({"headers": [("a", "text")]}, "headers=[('a', 'text')]"),
        ({"headers": [(1, b"x")]}, "headers="),
        ({"headers": "kind"}, "headers='kind'"),
    ):
        decision = decide_with_fix(fixed_to(**changes))
        assert decision.reason is ParkReason.FIX_FAILED, changes
        assert said in reason(decision), (changes, reason(decision))


def test_a_fix_returning_text_gets_it_encoded() -> None:
    decision = decide_with_fix(fixed_to(key="o-1", value='{"amount": 5}'))

    assert decision.action is Action.REPLAY and decision.record is not None
    assert (decision.record.key, decision.record.value) == (b"o-1", b'{"amount": 5}')


def test_a_fix_failing_with_a_huge_or_unencodable_message_still_parks_with_a_bounded_reason() -> None:
    def fix(record: ReplayRecord) -> ReplayRecord:
        raise ValueError("\ud800 " + "x" * 2_000_000)

    decision = decide_with_fix(fix)

    assert decision.reason is ParkReason.FIX_FAILED
    text = reason(decision)
    assert text.startswith("fix_failed: ValueError: \\ud800 xxx") and len(text) < 1100


class UnreadableHeaders:
    """A consumed message whose header names are not UTF-8: confluent-kafka raises when asked for them."""

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 4

    def headers(self) -> Any:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_795_250_000_000

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"


def test_a_record_whose_headers_cannot_be_read_is_parked_and_the_replay_moves_past_it() -> None:
    from airflow_kerr.replay.engine import DlqReplay
    from airflow_kerr.replay.options import ReplayOptions

    engine = DlqReplay({}, ReplayOptions.build(dlq_topic="orders.dlq"), run_id="run-1")

    outputs, counts, positions = engine._decider.decide([UnreadableHeaders()], {0: 4}, {0: 10}, policy(), None)

    ((topic, value, key, _, _),) = outputs
    assert topic == "orders.dlq.parked" and (key, value) == (b"k", b"v")
    assert positions == {0: 5} and counts.selected == 1
    (example,) = counts.park_examples
    assert example.startswith("orders.dlq/0/4: malformed_headers: headers: the record's headers cannot be read")
