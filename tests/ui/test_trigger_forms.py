"""Every example DAG triggers from Airflow's form with its defaults, and bad form input reads as what it is.

One local UI stack for the module (``make ui``'s, on the session's broker; see
``conftest.py``) and one signed-in chromium page. For each DAG in ``dags/`` the test
opens the trigger form, checks that only the fields that need a value carry Airflow's
required star and that Trigger is enabled, triggers with the defaults and checks the run
was created with them. Runs that would start Spark (``avro_orders``, ``error_aware_pipeline``,
``smoke_spark_kafka``) or wait for a breach (``tolerance_guard``) are marked failed at
once through the REST API, so they leave the two cores to the rest. Then two mistakes an
on-call person makes: a negative rate (the form's number input raises it to the minimum
the field's description states, before anything is sent) and a regular expression that
does not compile (the run fails and the first lines of its task log name the key).
Screenshots go to ``tests/ui/artifacts/trigger_*.png``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_kerr.local.ui import LocalUI
from airflow_kerr.replay.form import MIN_RECORDS_PER_SECOND

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(420)]

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
#: Runs that would take the CPU for minutes (Spark) or wait for a breach that never comes: marked failed at once.
STOP_AT_ONCE = {"avro_orders", "error_aware_pipeline", "smoke_spark_kafka", "tolerance_guard"}
BAD_REGEX = "Invalid(Order"
#: Task log events before ours: the log's source group, the bundle and DagBag loading, the task start.
TOP_OF_THE_LOG = 15


@pytest.fixture(scope="module")
def page(module_page: Any, local_ui: LocalUI) -> Any:
    """The module's chromium page, signed in once; old screenshots of this module are removed first."""
    ARTIFACTS.mkdir(exist_ok=True)
    for old in ARTIFACTS.glob("trigger_*.png"):
        old.unlink()
    module_page.goto(f"{local_ui.url}/dags")
    module_page.fill("input[name=username]", local_ui.username)
    module_page.fill("input[name=password]", local_ui.password)
    module_page.get_by_role("button", name="Sign in").click()
    module_page.wait_for_url(re.compile(r".*/dags$"))
    return module_page


def _screenshot(page: Any, name: str) -> None:
    """Save what the browser shows, with CSS animations finished so an opening section is not caught half-way."""
    page.screenshot(path=str(ARTIFACTS / name), animations="disabled")


def required_in_the_form(schema: dict[str, Any]) -> bool:
    """Airflow 3.3's rule (``isRequired`` in the UI's FlexibleForm): a type is set and does not include null."""
    kind = schema.get("type")
    return bool(kind) and (not isinstance(kind, list) or "null" not in kind)


def _params(ui: LocalUI, dag_id: str) -> dict[str, dict[str, Any]]:
    """The DAG's Params as the API server holds them: name -> {"value", "schema", "description"}."""
    with ui.api() as api:
        details = api.get(f"/dags/{dag_id}/details").raise_for_status().json()
    params: dict[str, dict[str, Any]] = details.get("params") or {}
    return params


def _open_trigger_form(ui: LocalUI, page: Any, dag_id: str) -> Any:
    """Open the DAG's page and its Trigger dialog; the dialog."""
    from playwright.sync_api import expect

    page.goto(f"{ui.url}/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(f"Trigger Dag - {dag_id}")).to_be_visible()
    return dialog


def _open_section(dialog: Any, section: str) -> Any:
    """Expand one section of the form (an accordion that keeps one open); the region holding its fields."""
    button = dialog.get_by_role("button", name=section, exact=True)
    if button.get_attribute("aria-expanded") != "true":
        button.click()
    return dialog.get_by_role("region", name=section)


def _starred_titles(scope: Any) -> set[str]:
    """Titles of the field rows whose label carries Airflow's required star."""
    texts = scope.locator("label").all_inner_texts()
    return {text.strip().removesuffix("*").strip() for text in texts if text.strip().endswith("*")}


def _check_the_stars(dialog: Any, params: dict[str, dict[str, Any]]) -> None:
    """Section by section, each field is shown, and only the fields that need a value carry the required star."""
    from playwright.sync_api import expect

    by_section: dict[str | None, dict[str, dict[str, Any]]] = {}
    for name, param in params.items():
        by_section.setdefault(param["schema"].get("section"), {})[name] = param
    for section, group in by_section.items():
        # Fields without a section are in the form's default section, open from the start.
        scope = dialog if section is None else _open_section(dialog, section)
        titles = {name: param["schema"].get("title") or name for name, param in group.items()}
        for title in titles.values():
            expect(scope.locator("label", has_text=title).first).to_be_visible()
        required = {titles[name] for name, param in group.items() if required_in_the_form(param["schema"])}
        assert _starred_titles(scope) & set(titles.values()) == required, section


def _run_ids(ui: LocalUI, dag_id: str) -> set[str]:
    """The ids of the DAG's runs, from the REST API."""
    with ui.api() as api:
        runs = api.get(f"/dags/{dag_id}/dagRuns", params={"limit": 100}).raise_for_status().json()["dag_runs"]
    return {run["dag_run_id"] for run in runs}


def _new_run(ui: LocalUI, page: Any, dag_id: str, before: set[str]) -> str:
    """The run a Trigger click created, found through the REST API.

    The UI opens the new run's page only after refreshing every query of the DAG, which
    took over a minute on a busy 2-core machine; the run exists as soon as the POST is answered.
    """
    deadline = time.monotonic() + 120
    while not (new := _run_ids(ui, dag_id) - before):
        if time.monotonic() > deadline:
            _screenshot(page, f"trigger_{dag_id}_failure.png")
            pytest.fail(f"{dag_id}: no run was created within 120 s of Trigger\nAirflow log:\n{ui.log_tail(40)}")
        time.sleep(1)
    (run_id,) = new
    return run_id


def _wait_for(ui: LocalUI, path: str, done: set[str], timeout_s: float) -> dict[str, Any]:
    """Poll a run or task instance of the REST API until its state is one of ``done``."""
    deadline = time.monotonic() + timeout_s
    with ui.api() as api:
        while True:
            found: dict[str, Any] = api.get(path).raise_for_status().json()
            if found.get("state") in done:
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"{path} is {found.get('state')} after {timeout_s:.0f} s\n{ui.log_tail(40)}")
            time.sleep(2)


def _task_log(ui: LocalUI, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
    """The task's first try's log as structured events (``event``, ``level``...), oldest first."""
    with ui.api() as api:
        response = api.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
            headers={"Accept": "application/json"},
        ).raise_for_status()
    content = response.json().get("content") or []
    return [item if isinstance(item, dict) else {"event": str(item)} for item in content]


def test_every_example_dag_triggers_from_its_form_with_the_defaults(
    local_ui: LocalUI, page: Any, example_dags: tuple[str, ...]
) -> None:
    from playwright.sync_api import expect

    created: dict[str, str] = {}
    for dag_id in example_dags:
        params = _params(local_ui, dag_id)
        before = _run_ids(local_ui, dag_id)
        dialog = _open_trigger_form(local_ui, page, dag_id)
        _check_the_stars(dialog, params)
        trigger = dialog.get_by_role("button", name="Trigger")
        expect(trigger).to_be_enabled()
        if dag_id == "dlq_replay":  # the section with the optional list and object fields the user found starred
            _open_section(dialog, "Selection")
        _screenshot(page, f"trigger_{dag_id}_form.png")
        trigger.click()
        run_id = _new_run(local_ui, page, dag_id, before)
        created[dag_id] = run_id
        with local_ui.api() as api:
            if dag_id in STOP_AT_ONCE:
                api.patch(f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"}).raise_for_status()
            run = api.get(f"/dags/{dag_id}/dagRuns/{run_id}").raise_for_status().json()
        assert run["run_type"] == "manual"
        assert run["conf"] == {name: param["value"] for name, param in params.items()}, dag_id

    # The breach DAG by hand: the pause runs as asked (and fails here: this stack has no orders-sink), the alert is
    # skipped with a line saying the run was started by hand.
    run_id = created["on_tolerance_breach"]
    alert = f"/dags/on_tolerance_breach/dagRuns/{run_id}/taskInstances/alert"
    assert _wait_for(local_ui, alert, {"skipped", "success", "failed", "upstream_failed"}, 180)["state"] == "skipped"
    events = [str(item.get("event", "")) for item in _task_log(local_ui, "on_tolerance_breach", run_id, "alert")]
    assert any("on_tolerance_breach was triggered by hand: no breach event came with this run" in e for e in events)
    # The tasks reported to the execution API's own api-server, never to the UI's (see start_execution_api).
    execution_log = local_ui.log_path.with_name("execution-api.log").read_text(errors="replace")
    assert "path=/execution/task-instances/" in execution_log
    assert "path=/execution/" not in local_ui.log_path.read_text(errors="replace")
    page.goto(f"{local_ui.url}/dags")
    expect(page.get_by_text("error_aware_pipeline", exact=True).first).to_be_visible()
    _screenshot(page, "trigger_dags_after.png")


def test_a_negative_rate_is_raised_to_the_minimum_before_anything_is_sent(local_ui: LocalUI, page: Any) -> None:
    from playwright.sync_api import expect

    dialog = _open_trigger_form(local_ui, page, "dlq_replay")
    _open_section(dialog, "Pacing")
    rate = dialog.locator("input[name=element_max_records_per_second]")
    expect(rate).to_have_value("500")

    rate.fill("-5")
    rate.press("Tab")

    expect(rate).to_have_value(str(MIN_RECORDS_PER_SECOND))
    expect(dialog.get_by_text(f"Write rate limit, at least {MIN_RECORDS_PER_SECOND}")).to_be_visible()
    expect(dialog.get_by_role("button", name="Trigger")).to_be_enabled()
    _screenshot(page, "trigger_dlq_replay_negative_rate.png")
    page.keyboard.press("Escape")


def test_a_regex_that_does_not_compile_fails_the_run_naming_the_key_at_the_top_of_the_log(
    local_ui: LocalUI, page: Any
) -> None:
    from playwright.sync_api import expect

    before = _run_ids(local_ui, "dlq_replay")
    dialog = _open_trigger_form(local_ui, page, "dlq_replay")
    _open_section(dialog, "Selection")
    dialog.locator("input[name=element_exception_class_regex]").fill(BAD_REGEX)
    _screenshot(page, "trigger_dlq_replay_bad_regex_form.png")
    dialog.get_by_role("button", name="Trigger").click()
    run_id = _new_run(local_ui, page, "dlq_replay", before)

    run = _wait_for(local_ui, f"/dags/dlq_replay/dagRuns/{run_id}", {"success", "failed"}, 180)
    assert run["state"] == "failed" and run["conf"]["exception_class_regex"] == BAD_REGEX

    events = _task_log(local_ui, "dlq_replay", run_id, "replay")
    texts = [str(item.get("event", "")) for item in events]
    problem = f"invalid setting: exception_class_regex={BAD_REGEX!r}: not a valid regular expression"
    ours = [index for index, text in enumerate(texts) if text.startswith(problem)]
    assert ours, "no line names the key; the log starts:\n" + "\n".join(texts[:TOP_OF_THE_LOG])
    first_error = next(index for index, item in enumerate(events) if str(item.get("level", "")).lower() == "error")
    assert ours[0] < TOP_OF_THE_LOG and first_error == ours[0] - 1, "\n".join(texts[: ours[0] + 1])
    assert texts[first_error].startswith("invalid DLQ replay settings: 1 problem, one line each below")
    assert len(texts[ours[0]]) < 200 and "\n" not in texts[ours[0]]
    failed = [index for index, text in enumerate(texts) if "Task failed with exception" in text]
    assert failed and failed[0] > ours[0], "the problem comes before the failure's traceback"
    with local_ui.api() as api:
        ti = api.get(f"/dags/dlq_replay/dagRuns/{run_id}/taskInstances/replay").raise_for_status().json()
    assert ti["try_number"] == 1 and ti["state"] == "failed", "failed at once, not retried"

    page.goto(f"{local_ui.url}/dags/dlq_replay/runs/{quote(run_id, safe='')}/tasks/replay")
    expect(page.get_by_text(problem).first).to_be_visible(timeout=60_000)
    _screenshot(page, "trigger_dlq_replay_bad_regex_log.png")
