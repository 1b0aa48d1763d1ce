"""Replay settings: defaults, coercion of rendered form values, and every problem named at once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kerr.errors import Stage
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions


def test_defaults_are_safe_and_derived_from_the_dlq_topic() -> None:
    options = ReplayOptions.build(dlq_topic="orders.dlq")
    assert options.group_id == "kerr-replay.orders.dlq"
    assert options.parking_topic == "orders.dlq.parked"
    assert options.max_replays == 3 and options.batch_size == 1000
    assert options.fix is None and options.target_topic is None and options.max_records_per_second is None


def test_rendered_form_values_are_coerced() -> None:
    options = ReplayOptions.build(
        dlq_topic="orders.dlq",
        source_topics="orders, payments",
        stages=["TRANSFORMATION", "VALUE_CONVERTER"],
        start_time="2026-01-01T00:00:00Z",
        end_time=datetime(2026, 1, 2, tzinfo=UTC),
        start_offset="10",
        end_offset=20.0,
        header_match='{"kind": "invalid"}',
        max_records_per_second="100",
        max_records="None",
        dry_run="true",
        fix="airflow_kerr.examples.orders.repair_order",
        target_topic=123,
    )
    selection = options.selection
    assert selection.source_topics == {"orders", "payments"}
    assert selection.stages == {Stage.TRANSFORMATION, Stage.VALUE_CONVERTER}
    assert selection.start_ms == 1_767_225_600_000 and selection.end_ms == 1_767_312_000_000
    assert (selection.start_offset, selection.end_offset) == (10, 20)
    assert selection.headers == {"kind": "invalid"}
    assert options.max_records_per_second == 100.0 and options.max_records is None and options.dry_run is True
    assert options.fix is not None and options.fix.__name__ == "repair_order"
    assert options.target_topic == "123"


def test_every_problem_is_reported_at_once_with_key_value_and_what_is_accepted() -> None:
    with pytest.raises(InvalidReplayOptions) as caught:
        ReplayOptions.build(
            dlq_topic="orders.dlq",
            exception_class_regex="Invalid(Order",
            target_allowlist="[",
            start_time="2026-02-01T00:00:00+00:00",
            end_time="2026-01-01T00:00:00+00:00",
            start_offset=50,
            end_offset=10,
            stages=["TRANSFORM"],
            target_topic="__consumer_offsets",
            parking_topic="orders.dlq",
            max_records_per_second=0,
            max_records=-1,
            batch_size=10**9,
            dry_run="maybe",
            fix="no.such.module.fix",
            header_match=["kind"],
        )
    problems = caught.value.problems
    message = str(caught.value)
    for expected in (
        "exception_class_regex='Invalid(Order': not a valid regular expression",
        "target_allowlist='[': not a valid regular expression",
        "start_time='2026-02-01T00:00:00+00:00', end_time='2026-01-01T00:00:00+00:00': inverted",
        "start_offset=50, end_offset=10: inverted",
        "stages: 'TRANSFORM' is not a stage; accepted: KEY_CONVERTER, VALUE_CONVERTER",
        "target_topic='__consumer_offsets': internal topics",
        "parking_topic='orders.dlq': must differ from dlq_topic",
        "max_records_per_second=0: expected a positive number",
        "max_records=-1: expected an integer >= 1",
        "batch_size=1000000000: expected an integer between 1 and 100000",
        "dry_run='maybe': expected true or false",
        "fix='no.such.module.fix'",
        "header_match=['kind']: expected an object",
    ):
        assert expected in message, f"{expected!r} not in:\n{message}"
    assert len(problems) == 13


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"dlq_topic": ""}, "dlq_topic='': required"),
        ({"dlq_topic": "bad topic"}, "dlq_topic='bad topic': not a valid topic name"),
        ({"dlq_topic": "d", "target_topic": "t", "target_allowlist": "orders.*"}, "does not match target_allowlist"),
        ({"dlq_topic": "d", "target_topic": "t", "parking_topic": "t"}, "must differ from target_topic"),
        ({"dlq_topic": "d", "start_time": "yesterday"}, "start_time='yesterday': expected an ISO-8601"),
        ({"dlq_topic": "d", "max_replays": 0}, "max_replays=0: expected an integer >= 1"),
        (
            {"dlq_topic": "d", "value_format": "xml"},
            "value_format='xml': expected one of bytes, avro, protobuf, json_schema",
        ),
        ({"dlq_topic": "d", "reencode_with": "newest"}, "reencode_with='newest': expected one of record, latest"),
    ],
)
def test_single_problems(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidReplayOptions, match=r"invalid DLQ replay settings") as caught:
        ReplayOptions.build(**kwargs)
    assert named in str(caught.value)


def test_formats_name_the_parts_the_fix_gets_decoded_and_bytes_means_none() -> None:
    options = ReplayOptions.build(dlq_topic="d", value_format="avro", key_format="bytes", reencode_with="latest")
    assert (options.formats, options.reencode_with) == ({"value": "avro"}, "latest")
    assert ReplayOptions.build(dlq_topic="d").formats == {}


def test_a_naive_time_is_utc_and_epoch_milliseconds_pass_through() -> None:
    options = ReplayOptions.build(dlq_topic="d", start_time="2026-01-01T00:00:00", end_time=1_767_225_600_001)
    assert options.selection.start_ms == 1_767_225_600_000
    assert options.selection.end_ms == 1_767_225_600_001


def test_exact_dlq_offsets_select_a_runs_dead_letters_only() -> None:
    """The run tab's "Replay these…" fills dlq_offsets: only those offsets are replayed, as text or as JSON."""
    from airflow_kerr.errors import parse_dead_letter
    from tests.unit.inspection.connect_records import connect_headers

    options = ReplayOptions.build(dlq_topic="orders.dlq", dlq_offsets="0:10-12, 1:4")
    assert options.selection.dlq_offsets == {0: ((10, 13),), 1: ((4, 5),)}
    assert ReplayOptions.build(dlq_topic="d", dlq_offsets={"0": [[10, 13]]}).selection.dlq_offsets == {0: ((10, 13),)}

    def at(partition: int, offset: int) -> bool:
        letter = parse_dead_letter(connect_headers(), b"k", b"v", partition=partition, offset=offset)
        return options.selection.matches(letter)

    assert [at(0, o) for o in (9, 10, 12, 13)] == [False, True, True, False]
    assert at(1, 4) and not at(1, 10) and not at(2, 10)
    with pytest.raises(InvalidReplayOptions, match=r"dlq_offsets='0:x': '0:x' is not partition:first-last"):
        ReplayOptions.build(dlq_topic="d", dlq_offsets="0:x")
