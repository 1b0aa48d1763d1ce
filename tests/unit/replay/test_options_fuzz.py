"""``ReplayOptions.build`` on any value of any key: valid options, or ``InvalidReplayOptions`` naming the key.

Fuzzed settings used to escape as ValueError / OverflowError / TypeError / RecursionError from
deep inside (an integer past Python's 4,300-digit limit, ``inf`` as a time, a list of lists as
stages, a regular expression nested too deep), or to be accepted as if unset (``[""]`` as
source topics, which then replayed every topic). The property holds for every key.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions

KEYS = [
    "replay_group",
    "source_topics",
    "stages",
    "exception_class_regex",
    "start_time",
    "end_time",
    "start_offset",
    "end_offset",
    "header_match",
    "dlq_offsets",
    "fix",
    "target_topic",
    "target_allowlist",
    "max_replays",
    "parking_topic",
    "max_records_per_second",
    "max_records",
    "dry_run",
    "batch_size",
    "progress_interval_s",
    "transaction_timeout_s",
]
INT64_MAX = 2**63 - 1
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

# Built when drawn (a strategy holding such an integer could not even be printed by hypothesis).
huge_ints = st.one_of(
    st.integers(4301, 6000).map(lambda digits: 10**digits),
    st.integers(4301, 6000).map(lambda digits: -(10**digits)),
    st.integers(63, 70).map(lambda bits: 2**bits),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    huge_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.text(alphabet="0123456789", min_size=1, max_size=6000),
    st.text(alphabet="\u0660\u0663\u00b2 -.eE+", max_size=6),
    st.sampled_from(["", " ", "None", "null", "true", "nan", "inf", "-1", "1e400", "2026-01-01", "(" * 5000]),
    st.binary(max_size=8),
    st.datetimes(timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=23, minutes=59))])),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.frozensets(scalars.filter(lambda v: not isinstance(v, float) or not math.isnan(v)), max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(), st.none()), inner, max_size=3),
    ),
    max_leaves=6,
)


def check_valid(options: ReplayOptions) -> None:
    """What ``build`` returns holds only usable values."""
    for name in (options.dlq_topic, options.parking_topic, options.target_topic, *options.selection.source_topics):
        assert name is None or TOPIC_NAME.fullmatch(name)
    assert isinstance(options.group_id, str) and options.group_id
    for number in (options.max_replays, options.batch_size, options.max_records):
        assert number is None or (type(number) is int and 1 <= number <= INT64_MAX)
    selection = options.selection
    for bound in (selection.start_offset, selection.end_offset, selection.start_ms, selection.end_ms):
        assert bound is None or (type(bound) is int and 0 <= bound <= INT64_MAX)
    for seconds in (options.max_records_per_second, options.progress_interval_s, options.transaction_timeout_s):
        assert seconds is None or (isinstance(seconds, float) and 0 < seconds < math.inf)
    assert 1 <= options.transaction_timeout_s <= 900
    assert isinstance(options.dry_run, bool)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in selection.headers.items())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), value=values)
def test_any_value_of_any_key_is_accepted_or_named_in_the_documented_error(key: str, value: Any) -> None:
    try:
        options = ReplayOptions.build(dlq_topic="orders.dlq", **{key: value})
    except InvalidReplayOptions as error:
        assert error.problems and all(isinstance(problem, str) for problem in error.problems)
        assert key in str(error), f"{key} not named in {error}"
        assert all(len(problem) < 1200 for problem in error.problems)
    else:
        check_valid(options)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
def test_any_combination_of_values_is_accepted_or_rejected_with_the_documented_error(settings_: Any) -> None:
    try:
        options = ReplayOptions.build(dlq_topic="orders.dlq", **settings_)
    except InvalidReplayOptions as error:
        assert error.problems
    else:
        check_valid(options)


@settings(max_examples=100, deadline=None)
@given(values)
def test_any_dlq_topic_is_accepted_or_named(value: Any) -> None:
    try:
        check_valid(ReplayOptions.build(dlq_topic=value))
    except InvalidReplayOptions as error:
        assert "dlq_topic" in str(error)


BAD_VALUES: list[tuple[str, Any, str]] = [
    ("replay_group", ["g"], "replay_group=['g']: expected a string"),
    ("replay_group", "\ud800", "replay_group='\\ud800': expected text that UTF-8 can encode"),
    ("replay_group", "g" * 40_000, "longer than Kafka's 32767 bytes"),
    ("source_topics", [""], "source_topics=['']: an item is empty"),
    ("source_topics", "orders,", "source_topics='orders,': an item is empty"),
    ("source_topics", [None], "source_topics=[None]: an item is empty"),
    ("stages", [""], "stages=['']: an item is empty"),
    ("stages", [["TRANSFORMATION"]], "stages: ['TRANSFORMATION'] is not a stage"),
    ("stages", [1], "stages: 1 is not a stage"),
    ("start_time", "abc", "start_time='abc': expected an ISO-8601 date-time"),
    ("start_time", float("inf"), "start_time=inf: expected"),
    ("start_time", float("nan"), "start_time=nan: expected"),
    ("start_time", 1.5, "start_time=1.5: expected"),
    ("start_time", -1, "start_time=-1: expected"),
    ("start_time", 10**5000, "start_time=<an integer of about"),
    ("start_time", "1" * 5000, "start_time='11111"),
    ("start_time", "\u0661\u0662", "start_time='\u0661\u0662': expected"),
    ("start_time", "9999-12-31T23:59:59-23:59", "start_time='9999-12-31T23:59:59-23:59': expected"),
    ("start_time", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), "start_time=datetime.datetime(1, 1"),
    ("start_time", True, "start_time=True: expected"),
    ("start_offset", "1" * 5000, "start_offset='11111"),
    ("start_offset", 10**5000, "start_offset=<an integer of about"),
    ("start_offset", 2**63, "start_offset=9223372036854775808: expected an integer >= 0"),
    ("start_offset", "\u0663", "start_offset='\u0663': expected an integer"),
    ("end_offset", float("inf"), "end_offset=inf: expected an integer"),
    ("batch_size", True, "batch_size=True: expected an integer between 1 and 100000"),
    ("batch_size", "1_000", "batch_size='1_000': expected an integer"),
    ("max_records_per_second", 10**400, "max_records_per_second=<an integer of about"),
    ("max_records_per_second", "1e400", "max_records_per_second='1e400': expected a positive number"),
    ("max_records_per_second", b"5", "max_records_per_second=b'5': expected a positive number"),
    ("max_records_per_second", float("nan"), "max_records_per_second=nan: expected a positive number"),
    ("progress_interval_s", [1], "progress_interval_s=[1]: expected a positive number"),
    ("transaction_timeout_s", 0.5, "transaction_timeout_s=0.5: expected a number of seconds between 1 and 900"),
    ("transaction_timeout_s", 901, "transaction_timeout_s=901: expected a number of seconds between 1 and 900"),
    ("exception_class_regex", "(" * 5000, "exception_class_regex='((((("),
    ("exception_class_regex", "a{99999999999}", "not a valid regular expression (OverflowError"),
    ("target_allowlist", "a{4294967296}", "target_allowlist='a{4294967296}': not a valid regular expression"),
    ("header_match", "[" * 100_000, "header_match='[[[[["),
    ("header_match", {"kind": 10**5000}, "header 'kind' has value <an integer of about"),
    ("header_match", {"kind": True}, "header 'kind' has value True"),
    ("header_match", {1: "a", "b": "c"}, "header_match={1: 'a', 'b': 'c'}: expected an object"),
    ("header_match", {"kind": float("inf")}, "header 'kind' has value inf"),
    ("fix", ".relative.fix", "fix='.relative.fix': TypeError"),
    ("fix", "os.path.", "fix='os.path.'"),
    ("target_topic", 10**300, "target_topic=100000000000000000"),
    ("target_topic", float("nan"), "target_topic=nan: expected a string"),
    ("dry_run", None, "dry_run=None: expected true or false"),
]


# Explicit ids: pytest would print each value, and an integer of 5,000 digits cannot be printed.
@pytest.mark.parametrize(
    ("key", "value", "named"), BAD_VALUES, ids=[f"{n}-{k}" for n, (k, _, _) in enumerate(BAD_VALUES)]
)
def test_each_bad_value_is_named_with_what_is_accepted(key: str, value: Any, named: str) -> None:
    with pytest.raises(InvalidReplayOptions) as caught:
        ReplayOptions.build(dlq_topic="orders.dlq", **{key: value})

    assert named in str(caught.value)


def test_the_transaction_budget_defaults_to_a_minute_and_takes_form_values() -> None:
    assert ReplayOptions.build(dlq_topic="d").transaction_timeout_s == 60.0
    assert ReplayOptions.build(dlq_topic="d", transaction_timeout_s="5").transaction_timeout_s == 5.0
    assert ReplayOptions.build(dlq_topic="d", transaction_timeout_s=900).transaction_timeout_s == 900.0
