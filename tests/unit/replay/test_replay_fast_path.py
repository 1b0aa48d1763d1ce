"""The replay's fast path writes and counts exactly what parse + decide would, with and without a fix.

:func:`fast_replayer` skips ``parse_dead_letter`` and ``decide`` for the common record (and
hands a fix a record whose DLQ record is parsed only when read); whatever it answers must be
what the slow path gives, a fix must run once per record, and every record the fast path is
not sure of must come back (``None``) before any fix ran, rather than be guessed at.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record, parse_dead_letter
from airflow_kerr.errors.dead_letter import HEADER_PREFIX
from airflow_kerr.errors.dialects import FIELD_HEADERS
from airflow_kerr.errors.record import Header
from airflow_kerr.replay import batch as batch_module
from airflow_kerr.replay.fast_path import fast_replayer
from airflow_kerr.replay.policy import (
    HEADER_REPLAY_COUNT,
    HEADER_REPLAY_RUN,
    HEADER_REPLAY_SOURCE,
    LINEAGE_PREFIX,
    Action,
    BreakdownKey,
    Decision,
    FixFn,
    Outgoing,
    ReplayPolicy,
    ReplayRecord,
    decide,
    outgoing,
)

_KNOWN_ERROR_HEADERS = sorted({name for names in FIELD_HEADERS.values() for name in names})

DLQ = "orders.dlq"
STAMP = 1_795_250_000_000


def policy(**kwargs: Any) -> ReplayPolicy:
    return ReplayPolicy(**{"dlq_topic": DLQ, "run_id": "run-1", "parking_topic": f"{DLQ}.parked", **kwargs})


def slow(
    headers: list[Header], key: bytes | None, value: bytes | None, partition: int, offset: int, rules: ReplayPolicy
) -> tuple[Outgoing | None, BreakdownKey]:
    """What the engine's full path writes and counts for one selected record."""
    letter = parse_dead_letter(headers, key, value, topic=DLQ, partition=partition, offset=offset, timestamp=STAMP)
    return written_and_counted(decide(letter, headers, rules), letter)


def written_and_counted(decision: Decision, letter: Any) -> tuple[Outgoing | None, BreakdownKey]:
    topic = decision.record.topic if decision.record is not None else None
    counted = (decision.action, topic, letter.stage, letter.exception_class, decision.reason)
    return (None if decision.record is None else outgoing(decision.record)), counted


def fast(
    headers: list[Header], key: bytes | None, value: bytes | None, partition: int, offset: int, rules: ReplayPolicy
) -> tuple[Outgoing | None, BreakdownKey] | None:
    """What the fast path writes and counts for one record, in the slow path's terms (``None``: handed back)."""
    done = fast_replayer(rules)(headers, key, value, partition, offset, STAMP)
    if isinstance(done, Decision):
        assert done.record is not None and done.action is Action.PARK
        return written_and_counted(done, done.record.dead_letter)
    return done


def connect_record(headers: list[Header] | None = None, topic: str = "orders") -> list[Header]:
    """The headers of a DLQ record as the core writes it with Connect's header set."""
    try:
        raise ValueError("order has a non-positive amount: -12.5")
    except ValueError as error:
        failed = error
    record = SourceRecord(topic, 1, 41, 1_795_250_000_000, key=b"o-1", value=b"{}", headers=headers or [])
    context = ErrorContext(TaskId("orders_pipeline", 3), Stage.TRANSFORMATION, "mypkg.validate", failed, record)
    return build_dead_letter_record(context, topic=DLQ).headers


@pytest.mark.parametrize("override", [None, "orders.repaired"])
def test_a_connect_record_takes_the_fast_path_and_writes_what_decide_writes(override: str | None) -> None:
    headers = connect_record([("trace-id", b"t-1"), (HEADER_REPLAY_COUNT, b"1"), (HEADER_REPLAY_SOURCE, b"x/0/1")])
    rules = policy(target_topic=override)

    done = fast(headers, b"o-1", b"{}", 1, 12, rules)

    assert done is not None
    assert done == slow(headers, b"o-1", b"{}", 1, 12, rules)
    replayed, _ = done
    assert replayed is not None
    topic, value, key, written, timestamp = replayed
    assert (topic, value, key, timestamp) == (override or "orders", b"{}", b"o-1", None)
    assert written == [
        ("trace-id", b"t-1"),
        (HEADER_REPLAY_COUNT, b"2"),
        (HEADER_REPLAY_SOURCE, f"{DLQ}/1/12".encode()),
        (HEADER_REPLAY_RUN, b"run-1"),
    ]


@pytest.mark.parametrize(
    "change",
    [
        [(HEADER_REPLAY_COUNT, b"3")],  # replayed too often: parked
        [(HEADER_PREFIX + "partition", b"-1")],  # not plain digits
        [(HEADER_PREFIX + "topic", b"no topic!")],  # malformed: parked
        [(HEADER_PREFIX + "topic", b"\xff")],  # not UTF-8
        [("__dlq.errors.delivery.count", b"2")],  # a second header set
        [("kind", 5)],  # neither bytes nor text
    ],
)
def test_a_record_that_needs_a_closer_look_is_handed_back(change: list[tuple[str, Any]]) -> None:
    headers: list[Any] = connect_record() + change

    assert fast(headers, b"k", b"v", 0, 1, policy()) is None


def test_a_forbidden_target_or_a_record_without_content_is_handed_back() -> None:
    headers = connect_record(topic=DLQ)  # would write into the DLQ itself

    assert fast(headers, b"k", b"v", 0, 1, policy()) is None
    assert fast(connect_record(), None, None, 0, 1, policy()) is None


names = st.sampled_from(
    [
        *_KNOWN_ERROR_HEADERS,
        HEADER_PREFIX + "other",
        HEADER_REPLAY_COUNT,
        LINEAGE_PREFIX + "source",
        "__other",
        "kind",
        "trace-id",
    ]
)
values = st.one_of(
    st.none(),
    st.binary(max_size=12),
    st.sampled_from([b"0", b"7", b"0042", b"2147483648", b" 3", b"-1", b"orders", b"orders.dlq", b"__x", b"a b"]),
    st.sampled_from([name.encode() for name in Stage.__members__]),
    st.text(alphabet="0123456789", min_size=1, max_size=25).map(str.encode),
)
#: Few extra headers, so that many records still take the fast path.
extra_headers = st.lists(st.tuples(names, values), max_size=3)


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([True, True, True, False]),
    extra_headers,
    st.sampled_from([(b"k", b"v"), (b"k", b"v"), (None, b"v"), (b"k", None), (None, None)]),
    st.sampled_from([None, None, "orders.repaired", "orders.repaired", "__internal", DLQ]),
    st.integers(min_value=1, max_value=3),
)
def test_whatever_the_fast_path_answers_is_what_parse_and_decide_give(
    base: bool,
    extra: list[Header],
    content: tuple[bytes | None, bytes | None],
    override: str | None,
    max_replays: int,
) -> None:
    key, value = content
    headers = (connect_record() if base else []) + extra
    rules = policy(target_topic=override, max_replays=max_replays)

    done = fast(headers, key, value, 2, 99, rules)

    if done is not None:
        assert done == slow(headers, key, value, 2, 99, rules)


class Message:
    """A consumed DLQ record, as much of confluent-kafka's ``Message`` as the replay reads."""

    def __init__(self, offset: int, headers: list[Header]) -> None:
        self._offset, self._headers = offset, headers

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[Header]:
        return list(self._headers)

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_795_250_000_000)

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v%d" % self._offset


def test_a_batch_writes_and_counts_the_same_with_and_without_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kerr.replay.engine import DlqReplay
    from airflow_kerr.replay.options import ReplayOptions

    batch = [
        Message(0, connect_record([("trace-id", b"t0")])),
        Message(1, connect_record([(HEADER_REPLAY_COUNT, b"3")])),  # parked: max replays
        Message(2, connect_record(topic="no topic!")),  # parked: malformed
        Message(3, connect_record(topic=DLQ)),  # parked: forbidden target
        Message(4, [("kind", b"no error headers")]),  # parked: no source topic
        Message(5, connect_record([(HEADER_REPLAY_COUNT, b"1")])),
    ]
    engine = DlqReplay({}, ReplayOptions.build(dlq_topic=DLQ), run_id="run-1")

    def run() -> tuple[list[Outgoing], Any, dict[int, int]]:
        outputs, counts, positions = engine._decider.decide(batch, {0: 0}, {0: 10}, policy(), None)
        return outputs, (counts.scanned, counts.selected, counts.breakdown, counts.park_examples), positions

    fast = run()
    monkeypatch.setattr(batch_module, "fast_replayer", lambda rules: lambda *record: None)
    assert run() == fast
    assert len(fast[0]) == 6 and fast[2] == {0: 6}


def repaired(record: ReplayRecord) -> ReplayRecord:
    record.value = b"fixed:" + (record.value or b"")
    return record


def raising(record: ReplayRecord) -> ReplayRecord:
    raise ValueError(f"cannot repair {record.value!r}")


def event_time(record: ReplayRecord) -> ReplayRecord:
    """Reads the parsed DLQ record: the fast path must parse it on demand, to the same fields."""
    record.timestamp = record.dead_letter.timestamp
    record.headers.append(("failed-at", str(record.dead_letter.stage).encode()))
    return record


def relabelled(**changes: Any) -> FixFn:
    def fix(record: ReplayRecord) -> ReplayRecord:
        for name, value in changes.items():
            setattr(record, name, value)
        return record

    return fix


FIXES: list[FixFn] = [
    lambda record: record,
    repaired,
    lambda record: None,
    raising,
    event_time,
    relabelled(topic="orders.repaired"),
    relabelled(topic=DLQ),  # forbidden: parked
    relabelled(topic="no topic!"),  # invalid: parked
    relabelled(value=12),  # unproducible: parked
    relabelled(headers=[("kept", b"1"), (HEADER_REPLAY_COUNT, b"9")]),  # its lineage header is stripped
]


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([True, True, True, False]),
    extra_headers,
    st.sampled_from([(b"k", b"v"), (None, b"v"), (b"k", None), (None, None)]),
    st.sampled_from([None, "orders.repaired", DLQ]),
    st.sampled_from(FIXES),
)
def test_with_a_fix_the_fast_path_writes_and_counts_what_parse_and_decide_give(
    base: bool,
    extra: list[Header],
    content: tuple[bytes | None, bytes | None],
    override: str | None,
    fix: FixFn,
) -> None:
    key, value = content
    headers = (connect_record() if base else []) + extra
    rules = policy(target_topic=override, fix=fix)

    done = fast(headers, key, value, 2, 99, rules)

    if done is not None:
        assert done == slow(headers, key, value, 2, 99, rules)


def test_a_fix_that_reads_only_the_value_never_parses_the_dead_letter(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kerr.replay import policy as policy_module

    parsed: list[int] = []
    real_parse = policy_module.parse_dead_letter

    def counting_parse(*args: Any, **kwargs: Any) -> Any:
        parsed.append(kwargs["offset"])
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(policy_module, "parse_dead_letter", counting_parse)
    headers = connect_record([("trace-id", b"t-1")])

    done = fast_replayer(policy(fix=repaired))(headers, b"o-1", b"{}", 1, 12, STAMP)
    assert parsed == []
    assert isinstance(done, tuple) and done[0] is not None and done[0][1] == b"fixed:{}"

    read = fast_replayer(policy(fix=event_time))(headers, b"o-1", b"{}", 1, 13, STAMP)
    assert parsed == [13]  # once, though the fix read it twice
    assert isinstance(read, tuple) and read[0] is not None and read[0][4] == STAMP


def test_a_batch_with_a_fix_writes_and_counts_the_same_and_runs_the_fix_once_per_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_kerr.replay.engine import DlqReplay
    from airflow_kerr.replay.options import ReplayOptions

    batch = [
        Message(0, connect_record([("trace-id", b"t0")])),
        Message(1, connect_record([(HEADER_REPLAY_COUNT, b"3")])),  # parked before the fix: max replays
        Message(2, connect_record()),  # the fix raises: parked
        Message(3, connect_record()),  # the fix drops it
        Message(4, [("kind", b"no error headers")]),  # parked: no source topic
        Message(5, connect_record([(HEADER_REPLAY_COUNT, b"1")])),
    ]
    calls: list[bytes | None] = []

    def fix(record: ReplayRecord) -> ReplayRecord | None:
        calls.append(record.value)
        if record.value == b"v2":
            raise ValueError("cannot repair v2")
        return None if record.value == b"v3" else repaired(record)

    engine = DlqReplay({}, ReplayOptions.build(dlq_topic=DLQ), run_id="run-1")

    def run() -> tuple[list[Outgoing], Any, dict[int, int]]:
        calls.clear()
        outputs, counts, positions = engine._decider.decide(batch, {0: 0}, {0: 10}, policy(fix=fix), None)
        return outputs, (counts.scanned, counts.selected, counts.breakdown, counts.park_examples), positions

    done = run()
    assert calls == [b"v0", b"v2", b"v3", b"v5"]
    monkeypatch.setattr(batch_module, "fast_replayer", lambda rules: lambda *record: None)
    assert run() == done
    assert calls == [b"v0", b"v2", b"v3", b"v5"]
    outputs, (_, selected, breakdown, examples), positions = done
    assert [value for _, value, *_ in outputs] == [b"fixed:v0", b"v1", b"v2", b"v4", b"fixed:v5"]
    assert selected == 6 and positions == {0: 6}
    assert sum(n for (action, *_), n in breakdown.items() if action is Action.PARK) == 3
    assert any("cannot repair v2" in example for example in examples)
