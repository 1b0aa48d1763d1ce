"""The on-call path in a real browser: log in, trigger ``dlq_replay`` from its form, see the run succeed.

It drives Debian's chromium (never a browser Playwright downloads) through Playwright
against the same local Airflow ``make ui`` starts: ``airflow standalone`` with the
embedded broker and a real Kafka Connect worker (the ``local_ui`` and ``browser_page``
fixtures of ``tests/ui/conftest.py``). Screenshots go to ``tests/ui/artifacts/`` so a
person can see what the test saw.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

from airflow_kerr.kafka.offsets import end_offsets
from airflow_kerr.local.ui import LocalUI, seed_dead_letters

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(360)]

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
DEAD_LETTERS = 20
RUN_TIMEOUT_S = 180.0


def _screenshot(page: Any, name: str) -> None:
    """Save what the browser shows, with CSS animations finished so an opening section is not caught half-way."""
    page.screenshot(path=str(ARTIFACTS / name), animations="disabled")


def _wait_for_the_run_page(ui: LocalUI, page: Any, dialog: Any) -> None:
    """Wait until the UI opens the new run's page; if it does not, fail with what the dialog and Airflow said."""
    try:
        page.wait_for_url(re.compile(r".*/dags/dlq_replay/runs/[^/]+$"), wait_until="commit", timeout=120_000)
    except Exception as exc:
        shown = dialog.inner_text(timeout=5_000) if dialog.count() else "(no dialog open)"
        pytest.fail(
            f"the UI did not open the new run's page within 120 s of Trigger ({type(exc).__name__}); "
            f"page {page.url}; the dialog shows:\n{shown[-2000:]}\nAirflow log:\n{ui.log_tail(60)}"
        )


def _trigger_from_the_form(ui: LocalUI, page: Any, dlq: str, group: str) -> str:
    """Log in, open dlq_replay, fill the form, trigger; return the new run's id once the UI shows it succeeded."""
    from playwright.sync_api import expect

    page.goto(f"{ui.url}/dags/dlq_replay")
    page.fill("input[name=username]", ui.username)
    page.fill("input[name=password]", ui.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r".*/dags/dlq_replay$"))

    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("Trigger Dag - dlq_replay")).to_be_visible()
    dialog.get_by_role("button", name="Safety").click()
    expect(dialog.get_by_role("checkbox", name="Dry run")).to_be_checked()
    dialog.get_by_role("button", name="Source").click()
    page.fill("input[name=element_dlq_topic]", dlq)
    page.fill("input[name=element_replay_group]", group)
    _screenshot(page, "dlq_replay_form.png")
    dialog.get_by_role("button", name="Trigger").click()
    _wait_for_the_run_page(ui, page, dialog)
    run_id = unquote(page.url.rsplit("/runs/", 1)[1])
    ui.wait_for_run("dlq_replay", run_id, "replay", RUN_TIMEOUT_S)
    # The page refreshes itself while the run is active: wait until it shows the end, not the start.
    # The replay task's row (the run's table also lists the fan-out branch and the skipped mapped tasks).
    replay_row = (
        page.get_by_role("table").get_by_role("row").filter(has=page.get_by_role("link", name="replay", exact=True))
    )
    expect(replay_row.get_by_text("Success", exact=True)).to_be_visible(timeout=60_000)
    expect(page.get_by_text("Running", exact=True)).to_have_count(0, timeout=60_000)
    _screenshot(page, "dlq_replay_run.png")

    page.get_by_role("table").get_by_role("link", name="replay", exact=True).click()
    page.wait_for_url(re.compile(r".*/runs/[^/]+/tasks/replay$"))
    expect(page.get_by_text(f"DRY RUN {dlq}: {DEAD_LETTERS} read")).to_be_visible(timeout=60_000)
    _screenshot(page, "dlq_replay_task_log.png")
    return run_id


def test_trigger_a_dry_run_replay_from_the_form(local_ui: LocalUI, browser_page: Any, kafka_bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, dlq = f"ui-orders-{suffix}", f"ui-orders-{suffix}.dlq"
    group = f"kerr-replay.ui-{suffix}"
    seed_dead_letters(kafka_bootstrap, dlq, source_topic=source, count=DEAD_LETTERS)
    ARTIFACTS.mkdir(exist_ok=True)
    for old in ARTIFACTS.glob("dlq_replay_*.png"):
        old.unlink()
    try:
        run_id = _trigger_from_the_form(local_ui, browser_page, dlq, group)
    except BaseException:
        _screenshot(browser_page, "dlq_replay_failure.png")
        raise

    with local_ui.api() as api:
        run = api.get(f"/dags/dlq_replay/dagRuns/{run_id}").raise_for_status().json()
        summary = (
            api.get(f"/dags/dlq_replay/dagRuns/{run_id}/taskInstances/replay/xcomEntries/return_value")
            .raise_for_status()
            .json()["value"]
        )
    assert run["conf"]["dlq_topic"] == dlq and run["conf"]["replay_group"] == group
    assert run["conf"]["dry_run"] is True
    assert summary["dry_run"] is True and summary["status"] == "completed"
    assert summary["scanned"] == summary["selected"] == DEAD_LETTERS
    assert summary["would_replay"] == DEAD_LETTERS and summary["replayed"] == 0, "a dry run says what it would do"
    assert summary["transactions"] == 0 and summary["committed_offsets"] == {}
    assert end_offsets({"bootstrap.servers": kafka_bootstrap}, [(source, 0)])[(source, 0)] == 0


def test_a_fanned_out_replay_shows_as_one_replay_in_the_summary_tab(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
) -> None:
    """Two mapped replay tasks over a 4-partition DLQ: the Replay summary tab adds them up, then lists them."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from playwright.sync_api import expect

    suffix = uuid.uuid4().hex[:8]
    source, dlq = f"ui-fanout-{suffix}", f"ui-fanout-{suffix}.dlq"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(dlq, 4, 1), NewTopic(source, 1, 1)]).values():
        future.result(30)
    seed_dead_letters(kafka_bootstrap, dlq, source_topic=source, count=DEAD_LETTERS)
    conf = {"dlq_topic": dlq, "replay_group": f"kerr-replay.ui-fanout-{suffix}", "dry_run": True, "replay_tasks": 2}
    with local_ui.api() as api:
        run = api.post("/dags/dlq_replay/dagRuns", json={"logical_date": None, "conf": conf}).raise_for_status().json()
    run_id = run["dag_run_id"]
    local_ui.wait_for_run("dlq_replay", run_id, "replay_partitions", RUN_TIMEOUT_S)

    page = browser_page
    try:
        sign_in(page, "/")
        page.get_by_role("button", name="Browse").wait_for(timeout=60_000)  # signed in: Airflow's menu shows
        page.goto(f"{local_ui.url}/kerr/replay-summary?dag_id=dlq_replay&run_id={quote(run_id)}")
        expect(page.get_by_role("heading", level=2)).to_have_text(
            f"replay_partitions: dry run of {dlq} (completed): nothing was written", timeout=60_000
        )
        expect(page.get_by_role("heading", level=2)).to_have_count(1)  # one replay, not two pieces
        would_replay = page.locator(".totals > div", has=page.get_by_text("would replay", exact=True))
        expect(would_replay).to_contain_text(str(DEAD_LETTERS))
        tasks = page.get_by_role("table", name="Mapped replay tasks").locator("tbody tr")
        expect(tasks).to_have_count(2)
        expect(tasks.nth(0)).to_contain_text("replay_partitions[0]0, 1success1completed")
        expect(tasks.nth(1)).to_contain_text("replay_partitions[1]2, 3success1completed")
        _screenshot(page, "dlq_replay_fanout_summary.png")
    except BaseException:
        _screenshot(page, "dlq_replay_fanout_failure.png")
        raise
