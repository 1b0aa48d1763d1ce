"""Bad settings fail a task before it reads anything: one readable log line per problem, then no retry.

An on-call person reads the task log in a narrow pane; the problems must be the first
lines the task writes, each short and on its own, and the failure must not be retried
or carry the validator's traceback. These run without Kafka: the settings are checked
before any client is opened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from airflow_kerr.compat import AirflowFailException
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator
from airflow_kerr.operators.settings_check import PROBLEM_PREFIX, fail_on_invalid_settings

#: Wider than this and the line wraps in the task log pane of a laptop screen.
READABLE_WIDTH = 200


def rendered_replay(**rendered: Any) -> DeadLetterQueueReplayOperator:
    """A replay operator as the form builds it (templated, so not checked when parsed), then rendered."""
    operator = DeadLetterQueueReplayOperator(task_id="replay", dlq_topic="{{ params.dlq_topic }}")
    operator.dlq_topic = "orders.dlq"
    for name, value in rendered.items():
        setattr(operator, name, value)
    return operator


def failed_execute(operator: Any) -> tuple[AirflowFailException, list[MutableMapping[str, Any]]]:
    """Run ``execute`` outside a task runner; the exception and what the operator logged."""
    with capture_logs() as logs, pytest.raises(AirflowFailException) as caught:
        operator.execute({})
    return caught.value, [entry for entry in logs if entry["log_level"] == "error"]


def problem_lines(logs: list[MutableMapping[str, Any]]) -> list[str]:
    return [str(entry["event"]) for entry in logs if str(entry["event"]).startswith(PROBLEM_PREFIX)]


def test_each_bad_replay_setting_is_one_short_line_before_anything_else() -> None:
    operator = rendered_replay(exception_class_regex="Invalid(Order", start_offset=10, end_offset=5)

    error, logs = failed_execute(operator)

    header, *rest = [str(entry["event"]) for entry in logs]
    assert header == "invalid DLQ replay settings: 2 problems, one line each below; nothing read or written, no retry"
    assert rest == problem_lines(logs)
    assert sorted(rest) == sorted(
        [
            "invalid setting: exception_class_regex='Invalid(Order': not a valid regular expression "
            "(missing ), unterminated subpattern at position 7)",
            "invalid setting: start_offset=10, end_offset=5: inverted or empty range; expected start < end",
        ]
    )
    assert all("\n" not in line and len(line) <= READABLE_WIDTH for line in [header, *rest])
    # No retry, and no chained validation traceback: the only frames left are the task runner's and execute's.
    assert error.__cause__ is None and error.__suppress_context__
    assert "exception_class_regex='Invalid(Order'" in str(error) and "start_offset=10" in str(error)


@pytest.mark.parametrize(
    ("rendered", "key"),
    [
        ({"start_time": "2026-02-01T00:00:00+00:00", "end_time": "2026-01-01T00:00:00+00:00"}, "start_time="),
        ({"max_records_per_second": -5}, "max_records_per_second=-5"),
        ({"stages": ["PUT"]}, "stages: 'PUT' is not a stage"),
        ({"source_topics": ["orders", ""]}, "source_topics="),
        ({"target_allowlist": "(", "target_topic": "orders"}, "target_allowlist='('"),
        ({"header_match": "{not json"}, "header_match="),
        ({"dry_run_only": None}, "dry_run=None"),  # the attribute of dry_run: BaseOperator.dry_run is a method
        ({"dlq_topic": "no spaces allowed"}, "dlq_topic='no spaces allowed'"),
        ({"fix": "no.such.module.fn"}, "fix='no.such.module.fn'"),
    ],
)
def test_every_kind_of_bad_setting_names_its_key_in_one_line(rendered: dict[str, Any], key: str) -> None:
    _, logs = failed_execute(rendered_replay(**rendered))

    lines = problem_lines(logs)
    assert len(lines) == 1 and lines[0].startswith(PROBLEM_PREFIX + key), lines
    assert len(lines[0]) <= READABLE_WIDTH


def test_a_bad_rendered_pipeline_fails_the_spark_task_the_same_way() -> None:
    pipeline = {
        "name": "{{ params.name }}",
        "source": {"topics": ["orders"], "group_id": "g"},
        "sink": {"kind": "kafka", "topic": "orders.clean"},
    }
    operator = ErrorAwareSparkSubmitOperator(
        task_id="orders_pipeline", pipeline=pipeline, errors={"errors.tolerance": "{{ params.tolerance }}"}
    )
    operator.pipeline = {**pipeline, "name": "orders"}
    operator.errors = {"errors.tolerance": "sometimes"}

    error, logs = failed_execute(operator)

    assert str(logs[0]["event"]).startswith("invalid pipeline settings: 1 problem, one line each below")
    (line,) = problem_lines(logs)
    assert line.startswith("invalid setting: errors.tolerance='sometimes'") and len(line) <= READABLE_WIDTH
    assert error.__cause__ is None and error.__suppress_context__


def test_the_helper_logs_through_a_standard_logger_too(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("kerr.test.settings")
    with caplog.at_level(logging.ERROR, logger="kerr.test.settings"), pytest.raises(AirflowFailException) as caught:
        fail_on_invalid_settings(log, "things", ["a=1: no", "b=2: no"], "2 bad things")
    assert [record.getMessage() for record in caplog.records] == [
        "invalid things: 2 problems, one line each below; nothing read or written, no retry",
        "invalid setting: a=1: no",
        "invalid setting: b=2: no",
    ]
    assert str(caught.value) == "2 bad things"


def test_an_exception_raised_while_handling_is_not_chained() -> None:
    """Raised inside an ``except`` block (as the operators do), the validator's error is not shown as its context."""
    raise_it: Callable[[], None] = lambda: fail_on_invalid_settings(logging.getLogger("x"), "s", ["p"], "m")  # noqa: E731
    try:
        try:
            raise ValueError("the validator's own error")
        except ValueError:
            raise_it()
    except AirflowFailException as error:
        assert error.__suppress_context__ and error.__cause__ is None
