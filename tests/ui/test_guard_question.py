"""The guard's question answered in the real UI: the sink paused by a breach runs again on "Resume now".

The example ``tolerance_guard`` DAG on ``make ui``'s stack (``local_ui``: ``airflow standalone``
with a real Kafka Connect worker on the session's broker). The test gives the stack the orders
example's topics and its ``orders-sink`` connector, triggers the guard, writes one task metrics
record that breaches the limit (25 % of 200 records failed), and waits until the guard pauses
the sink and asks. Then, in Debian's chromium, it opens the link the alert carries, signs in
and clicks "Resume now". The guard resumes the sink: read back through Connect's REST API,
and the run records the answer and who gave it. Screenshots: ``tests/ui/artifacts/guard_*.png``.

The event-driven pair (``on_tolerance_breach``/``on_tolerance_recovery``) watches the same
pipeline; they are paused while this test runs so only the guard acts on this breach.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from airflow_kerr.local.broker import ensure_topics
from airflow_kerr.local.dead_letters import write_task_metrics
from airflow_kerr.local.orders_example import CONNECTOR, TOPICS, add_sink_connector
from airflow_kerr.local.ui import LocalUI

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(600)]

GROUP = "tolerance_guard"
EVENT_DRIVEN = ("on_tolerance_breach", "on_tolerance_recovery")


def _connector_state(ui: LocalUI) -> str:
    assert ui.connect is not None
    status = httpx.get(f"{ui.connect.url}/connectors/{CONNECTOR}/status", timeout=30).json()
    return str(status.get("connector", {}).get("state"))


def _wait(what: str, check: Callable[[], Any], timeout_s: float, ui: LocalUI) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what`` with the end of Airflow's log."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s:.0f} s\nAirflow log:\n{ui.log_tail(40)}")
        time.sleep(1)


@pytest.fixture
def orders_sink(local_ui: LocalUI, kafka_bootstrap: str) -> Iterator[None]:
    """The orders example's topics and ``orders-sink`` on the stack's Connect worker; the event-driven pair paused."""
    assert local_ui.connect is not None
    ensure_topics(kafka_bootstrap, TOPICS)
    add_sink_connector(local_ui.connect)
    with local_ui.api() as api:
        for dag_id in EVENT_DRIVEN:
            api.patch(f"/dags/{dag_id}", json={"is_paused": True}).raise_for_status()
    try:
        yield
    finally:
        httpx.delete(f"{local_ui.connect.url}/connectors/{CONNECTOR}", timeout=30)
        with local_ui.api() as api:
            for dag_id in EVENT_DRIVEN:
                api.patch(f"/dags/{dag_id}", json={"is_paused": False})


def test_resume_now_in_the_required_actions_page_resumes_the_sink(
    local_ui: LocalUI,
    orders_sink: None,
    browser_page: Any,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
    kafka_bootstrap: str,
) -> None:
    from playwright.sync_api import expect

    with local_ui.api() as api:
        run = api.post(f"/dags/{GROUP}/dagRuns", json={"logical_date": None, "conf": {}}).raise_for_status().json()
    run_id = run["dag_run_id"]
    write_task_metrics({"bootstrap.servers": kafka_bootstrap}, "kerr.metrics", "orders_pipeline", 200, 50)

    def ti(task: str) -> dict[str, Any]:
        with local_ui.api() as api:
            found: dict[str, Any] = (
                api.get(f"/dags/{GROUP}/dagRuns/{run_id}/taskInstances/{GROUP}.{task}").raise_for_status().json()
            )
        return found

    def xcom(task: str, key: str = "return_value") -> Any:
        with local_ui.api() as api:
            answer = api.get(f"/dags/{GROUP}/dagRuns/{run_id}/taskInstances/{GROUP}.{task}/xcomEntries/{key}")
        return answer.json()["value"] if answer.status_code == 200 else None

    _wait("the guard asking", lambda: ti("ask_on_call")["state"] in ("awaiting_input", "deferred"), 300, local_ui)
    # Airflow 3.3.2 fails a question answered before the scheduler has handled the exit of the worker that
    # parked it (the exit's "success" then looks like the resumed try's): wait for the scheduler's line first.
    parked = f"task_id={GROUP}.ask_on_call, run_id={run_id}, map_index=-1"
    _wait(
        "the scheduler to handle the parked question's worker exit",
        lambda: any(
            parked in line and "state=awaiting_input" in line
            for line in local_ui.log_path.read_text(errors="replace").splitlines()
        ),
        120,
        local_ui,
    )
    assert _connector_state(local_ui) == "PAUSED"
    alert = xcom("notify")
    link = alert["question_link"]
    assert link.startswith(f"{local_ui.url}/dags/{GROUP}/runs/"), link
    assert alert["dlq_link"] == f"{local_ui.url}/kerr/dead-letters?topic=orders.dlq&kafka_config_id=kafka_default"

    page = browser_page
    try:
        sign_in(page, link.removeprefix(local_ui.url))
        button = page.get_by_role("button", name="Resume now")
        expect(button).to_be_visible(timeout=120_000)
        expect(page.get_by_text("Resume the paused sink of orders_pipeline?").first).to_be_visible()
        screenshot(page, "guard_question.png")
        button.click()
        _wait("the run's success", lambda: ti("verify_running")["state"] == "success", 300, local_ui)
        page.reload()
        # The question's page now shows that it was answered, and by whom ("Response received at <time> from admin").
        received = page.get_by_text("Response received at", exact=False).first
        expect(received).to_be_visible(timeout=120_000)
        expect(received).to_contain_text(f"from {local_ui.username}")
        screenshot(page, "guard_answered.png")
    except BaseException:
        screenshot(page, "guard_failure.png")
        raise

    assert _connector_state(local_ui) == "RUNNING", "the guard resumed orders-sink, read back through Connect"
    answer = xcom("ask_on_call", "answer")
    assert answer["chosen"] == "Resume now" and answer["responded_by"] == local_ui.username, answer
    assert answer["timed_out"] is False
    assert ti("wait_for_recovery")["state"] == "skipped" and ti("keep_paused")["state"] == "skipped"
    resolved = _wait("the resolved message", lambda: xcom("resolve_alert"), 120, local_ui)
    assert resolved["episode_key"] == alert["episode_key"]
    assert resolved["answer"]["responded_by"] == local_ui.username
    assert resolved["figures"]["records_failed"] >= 50, resolved["figures"]
