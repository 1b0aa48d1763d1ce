"""Shared steps of the browser tests of a job run's Dead letters tab: trigger a run, read its XCom, open its tab.

A test of the tab triggers an example DAG for real on ``make ui``'s stack, reads what the
run recorded (the ``kerr_dead_letters`` XCom: its DLQ topic and offsets) through Airflow's
REST API, and opens the task instance's tab in chromium. Each step waits on evidence (the
run's state, the text the tab shows), never on a clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from airflow_kerr.errors import DeadLetterRecord, parse_dead_letter
from airflow_kerr.kafka.offset_spans import RUN_DEAD_LETTERS_XCOM, in_spans, spans_from_fields
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.local.ui import LocalUI

#: How long an assertion waits for the tab: it reads the DLQ and refreshes itself slowly on a busy 2-core machine.
WAIT_MS = 90_000


def trigger(local_ui: LocalUI, dag_id: str, conf: dict[str, Any]) -> str:
    """Trigger ``dag_id`` with ``conf`` through the REST API; return the new run's id."""
    with local_ui.api() as api:
        run = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf}).raise_for_status().json()
    return str(run["dag_run_id"])


def task_xcom(local_ui: LocalUI, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    """The value of one XCom of a task instance, read through the REST API."""
    path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/xcomEntries/{key}"
    with local_ui.api() as api:
        return api.get(path).raise_for_status().json()["value"]


def run_dead_letters(local_ui: LocalUI, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    """What the task's job run recorded it wrote to its DLQ (topic, offsets, records), checked to be finished."""
    written: dict[str, Any] = task_xcom(local_ui, dag_id, run_id, task_id, RUN_DEAD_LETTERS_XCOM)
    assert written["state"] == "finished", written
    return written


def read_run_dead_letters(
    kafka_config: dict[str, Any], written: dict[str, Any]
) -> dict[tuple[int, int], DeadLetterRecord]:
    """The dead letters at the offsets the run recorded (:func:`run_dead_letters`), by (partition, offset)."""
    spans = spans_from_fields(written["offsets"])
    assert spans is not None, written
    return {
        (message.partition(), message.offset()): parse_dead_letter(message.headers(), message.key(), message.value())
        for message in read_to_end(kafka_config, written["topic"])
        if in_spans(spans.get(message.partition(), ()), message.offset())
    }


def open_task_tab(page: Any, sign_in: Callable[[Any, str], None], dag_id: str, run_id: str, task_id: str) -> Any:
    """Sign in on the task instance's Dead letters tab; return the frame the tab's view lives in."""
    sign_in(page, f"/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/{task_id}/plugin/kerr-task-dead-letters")
    page.wait_for_url(re.compile(r".*/plugin/kerr-task-dead-letters(/.*)?$"))
    return page.frame_locator("iframe").first


def expect_run_counted(tab: Any, task_id: str, run_id: str, topic: str, count: int) -> None:
    """The tab names the run and counts exactly the ``count`` dead letters it wrote to ``topic``."""
    from playwright.sync_api import expect

    expect(tab.locator("#run-note")).to_contain_text(
        f"Task {task_id} of run {run_id} wrote {count} dead letters to {topic}", timeout=WAIT_MS
    )
    expect(tab.locator("#progress")).to_have_text(
        f"All {count} records the run wrote counted (offsets as it recorded them).", timeout=WAIT_MS
    )
    expect(tab.locator("#total")).to_have_text(str(count), timeout=WAIT_MS)
    expect(tab.locator("#matched")).to_have_text(str(count), timeout=WAIT_MS)
