"""How a status body is read against a target: the rules the waits, the trigger and the sensor share."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kerr.connect.errors import ConnectorNotFound, ConnectServerError, ConnectUnreachable
from airflow_kerr.connect.status import ConnectorTarget, StatusWatch, check_poll, describe, failed_instances, first_line


def status(connector: str, *tasks: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "orders-sink",
        "connector": {"state": connector, "worker_id": "w:8083", **extra},
        "tasks": [
            {"id": i, "state": s, "worker_id": "w:8083", **({"trace": "E: boom\n\tat x"} if s == "FAILED" else {})}
            for i, s in enumerate(tasks)
        ],
        "type": "sink",
        "version": "4.0.0",
    }


def test_every_task_must_match() -> None:
    target = ConnectorTarget("PAUSED")
    assert target.evaluate(status("PAUSED", "PAUSED", "PAUSED")).reached
    verdict = target.evaluate(status("PAUSED", "PAUSED", "RUNNING"))
    assert not verdict.reached and verdict.waiting_on == ("task 1 is RUNNING",)


def test_failed_tasks_are_reported_or_awaited() -> None:
    body = status("PAUSED", "PAUSED", "FAILED")
    reported = ConnectorTarget("PAUSED", failed_tasks="report").evaluate(body)
    assert reported.reached
    assert failed_instances(body) == [{"connector": "orders-sink", "task": 1, "trace": "E: boom\n\tat x"}]
    awaited = ConnectorTarget("PAUSED").evaluate(body)
    assert not awaited.reached and awaited.waiting_on == ("task 1 is FAILED",)


def test_a_failed_connector_is_awaited_reported_or_fatal() -> None:
    body = status("FAILED", "RUNNING", trace="E: bad config")
    assert ConnectorTarget("RUNNING").evaluate(body).waiting_on == ("connector is FAILED",)
    assert ConnectorTarget("RUNNING", failed_connector="report").evaluate(body).reached
    fatal = ConnectorTarget("RUNNING", failed_connector="fail", hint="Restart it.").evaluate(body)
    assert not fatal.reached
    assert fatal.fatal == "connector orders-sink is FAILED and cannot become RUNNING this way. Restart it."


def test_failed_tasks_can_be_fatal_like_the_connector() -> None:
    body = status("RUNNING", "RUNNING", "FAILED", "FAILED")
    fatal = ConnectorTarget("RUNNING", failed_tasks="fail", hint="Restart it.").evaluate(body)
    assert not fatal.reached
    assert (
        fatal.fatal
        == "task 1 of orders-sink, task 2 of orders-sink are FAILED and cannot become RUNNING this way. Restart it."
    )
    both = ConnectorTarget("RUNNING", failed_tasks="fail", failed_connector="fail").evaluate(status("FAILED", "FAILED"))
    assert both.fatal == "connector orders-sink, task 0 of orders-sink are FAILED and cannot become RUNNING this way."
    assert ConnectorTarget("FAILED", failed_tasks="fail").evaluate(status("FAILED", "FAILED")).reached


def test_a_poll_is_done_waiting_or_fatal_and_waits_through_transient_errors() -> None:
    target = ConnectorTarget("PAUSED", failed_connector="fail")
    done = check_poll(target, status("PAUSED", "PAUSED"))
    assert done.done and done.status == status("PAUSED", "PAUSED")
    waiting = check_poll(target, status("RUNNING", "PAUSED"))
    assert waiting.waiting == "connector RUNNING; tasks 0=PAUSED (waiting: connector is RUNNING)"
    assert check_poll(target, status("FAILED", "PAUSED")).fatal is not None
    for error in (
        ConnectServerError("GET", "http://w/connectors/c/status", "Request timed out", http_status=500),
        ConnectUnreachable("GET", "http://w/connectors/c/status", "could not connect: refused"),
    ):
        poll = check_poll(target, error)
        assert not poll.done and poll.status is None and poll.fatal is None
        assert poll.waiting == f"status unavailable: {error}"
    gone = ConnectorNotFound("GET", "http://w/connectors/c/status", "No status found", http_status=404)
    with pytest.raises(ConnectorNotFound):
        check_poll(target, gone)


def test_a_watch_keeps_the_last_seen_state_through_a_failed_poll() -> None:
    watch = StatusWatch({"a": ConnectorTarget("PAUSED"), "b": ConnectorTarget("PAUSED")})
    assert watch.pending == {"a": "not polled yet", "b": "not polled yet"}
    cut = ConnectUnreachable("GET", "http://w/connectors/a/status", "timed out")
    assert watch.record("a", cut) is None
    assert watch.pending["a"] == f"status unavailable: {cut}", "nothing seen yet: only the error"
    watch.record("a", status("RUNNING", "RUNNING"))
    watch.record("a", cut)
    assert watch.pending["a"] == (
        f"connector RUNNING; tasks 0=RUNNING (waiting: connector is RUNNING, task 0 is RUNNING); last poll: {cut}"
    ), "a timeout still says which state the connector was stuck in"
    assert watch.statuses["a"] == status("RUNNING", "RUNNING")
    refused = ConnectUnreachable("GET", "http://w/connectors/b/status", "could not connect: refused")
    watch.record("b", refused)
    watch.record("b", refused)
    assert watch.pending["b"] == f"status unavailable: {refused}", "the same error is not repeated"
    watch.record("b", cut)
    assert watch.pending["b"] == f"status unavailable: {refused}; last poll: {cut}", (
        "a last poll cut by the deadline does not hide why the worker was unreadable before"
    )
    watch.record("a", status("PAUSED", "PAUSED"))
    watch.record("b", status("PAUSED", "PAUSED"))
    assert watch.pending == {} and set(watch.statuses) == {"a", "b"}
    assert watch.record("a", status("FAILED", "PAUSED")) is None, "a FAILED connector is waited on by default"
    assert "connector is FAILED" in watch.pending["a"]
    assert StatusWatch({"a": ConnectorTarget("PAUSED", failed_connector="fail")}).record(
        "a", status("FAILED", "PAUSED")
    )


def test_stopped_means_no_tasks() -> None:
    target = ConnectorTarget("STOPPED")
    assert target.evaluate(status("STOPPED")).reached
    assert not target.evaluate(status("STOPPED", "RUNNING")).reached
    assert ConnectorTarget("STOPPED", include_tasks=False).evaluate(status("STOPPED", "RUNNING")).reached


def test_restarting_is_on_the_way_not_there() -> None:
    assert ConnectorTarget("RUNNING").evaluate(status("RESTARTING", "RUNNING")).waiting_on == (
        "connector is RESTARTING",
    )


def test_task_ids_limit_the_check() -> None:
    target = ConnectorTarget("RUNNING", task_ids=(1,))
    assert target.evaluate(status("RUNNING", "FAILED", "RUNNING")).reached
    assert ConnectorTarget("RUNNING", task_ids=(5,)).evaluate(status("RUNNING", "RUNNING")).waiting_on == (
        "task 5 is not listed",
    )


def test_round_trip_through_trigger_kwargs() -> None:
    target = ConnectorTarget("PAUSED", task_ids=(0, 2), failed_tasks="report", failed_connector="fail", hint="h")
    assert ConnectorTarget.from_dict(target.to_dict()) == target
    assert ConnectorTarget.from_dict({"state": "RUNNING"}) == ConnectorTarget("RUNNING")


def test_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="'SLEEPING' is not a Kafka Connect state"):
        ConnectorTarget("SLEEPING")


def test_describe_and_first_line() -> None:
    assert describe(status("PAUSED", "PAUSED", "FAILED")) == "connector PAUSED; tasks 0=PAUSED 1=FAILED"
    assert describe(status("STOPPED")) == "connector STOPPED; tasks none"
    assert first_line("org.Ex: boom\n\tat a.b") == "org.Ex: boom"
    assert first_line("") == "(no trace)"


def test_a_connector_resumed_from_stopped_is_running_only_once_every_configured_task_is_listed() -> None:
    """Connect lists a resumed connector's tasks one by one as each starts: one RUNNING task of two is not done."""
    target = ConnectorTarget("RUNNING")
    one_of_two = {"name": "sink", "connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}
    verdict = target.evaluate(one_of_two, configured_tasks=[0, 1])
    assert not verdict.reached and verdict.waiting_on == ("task 1 is not listed yet",)
    both = {**one_of_two, "tasks": [{"id": 0, "state": "RUNNING"}, {"id": 1, "state": "RUNNING"}]}
    assert target.evaluate(both, configured_tasks=[0, 1]).reached
    assert target.evaluate(one_of_two).reached, "without the configs a listed task is all there is to judge"
    assert not ConnectorTarget("STOPPED").needs_task_configs
    assert not ConnectorTarget("RUNNING", task_ids=(1,)).needs_task_configs


def test_a_task_listed_before_its_configs_were_read_is_not_done() -> None:
    """Seen on Connect 3.9: resumed from STOPPED, the status listed task 1 RUNNING while the task configs,
    read just before, still named none; the resume is done only once the configs name every listed task."""
    target = ConnectorTarget("RUNNING")
    task_1 = {"name": "sink", "connector": {"state": "RUNNING"}, "tasks": [{"id": 1, "state": "RUNNING"}]}
    verdict = target.evaluate(task_1, configured_tasks=[])
    assert not verdict.reached and verdict.waiting_on == ("task 1 is listed but not in the task configs yet",)
    assert not target.evaluate(task_1, configured_tasks=[0, 1]).reached
    both = {**task_1, "tasks": [{"id": 0, "state": "RUNNING"}, {"id": 1, "state": "RUNNING"}]}
    assert target.evaluate(both, configured_tasks=[0, 1]).reached
