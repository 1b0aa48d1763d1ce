"""The DLQ view in a real browser: see why records failed, what they contain, and replay exactly that selection.

Headless Debian chromium (through Playwright) on the local Airflow ``make ui`` starts,
sharing the session's embedded broker. The test writes dead letters the way the
error-aware job writes them, then reads them back through Airflow's UI: Browse → Dead
letters (the provider's plugin, in an iframe), the counts, a decoded sample, the
replay form prefilled from a selection, the triggered dry run, and the run's Replay
summary tab. Screenshots go to ``tests/ui/artifacts/``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from confluent_kafka import Producer

from airflow_kerr.local.ui import LocalUI, seed_dead_letters

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(420)]

DEAD_LETTERS = 20
INVALID_ORDER = "airflow_kerr.examples.orders.InvalidOrder"
JSON_ERROR = "json.decoder.JSONDecodeError"
RUN_TIMEOUT_S = 180.0
#: How long an assertion waits for the page: the UI refreshes itself slowly on a busy 2-core machine.
WAIT_MS = 60_000


def _count_row(view: Any, dimension: str, key: str) -> Any:
    return view.locator(f"#by-{dimension} tr", has=view.get_by_text(key, exact=True))


def test_the_view_needs_an_airflow_session(local_ui: LocalUI) -> None:
    """Nobody reads dead letters without signing in to Airflow: the plugin's routes answer 401 without a session."""
    for path in ("/kerr/dead-letters", "/kerr/api/topics", "/kerr/api/topics/orders.dlq/samples"):
        answer = httpx.get(f"{local_ui.url}{path}", timeout=30)
        assert answer.status_code == 401, f"{path} answered {answer.status_code} without a session"
    signed_in = httpx.get(
        f"{local_ui.url}/kerr/api/topics", headers={"Authorization": f"Bearer {local_ui.token()}"}, timeout=60
    )
    assert signed_in.status_code == 200, signed_in.text


def test_a_user_who_may_not_read_the_kafka_connection_may_not_read_its_dead_letters(local_ui: LocalUI) -> None:
    """Airflow's viewer role may not read connections, so the view refuses it the topics (403) and says why."""
    passwords = json.loads((local_ui.airflow_home / "simple_auth_manager_passwords.json").read_text())
    login = httpx.post(
        f"{local_ui.url}/auth/token", json={"username": "viewer", "password": passwords["viewer"]}, timeout=60
    )
    login.raise_for_status()
    answer = httpx.get(
        f"{local_ui.url}/kerr/api/topics",
        headers={"Authorization": f"Bearer {login.json()['access_token']}"},
        timeout=60,
    )
    assert answer.status_code == 403, answer.text
    assert "kafka_default" in answer.json()["detail"]


def test_see_the_dead_letters_and_replay_that_selection(  # noqa: PLR0915 - one walk through the page in a real browser, step after step
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    from playwright.sync_api import expect

    suffix = uuid.uuid4().hex[:8]
    source, dlq, group = f"ui-view-{suffix}", f"ui-view-{suffix}.dlq", f"kerr-replay.ui-view-{suffix}"
    seed_dead_letters(kafka_bootstrap, dlq, source_topic=source, count=DEAD_LETTERS)
    # One more dead letter whose original record carried a credential in a header: the view must not show it.
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        dlq,
        value=b'{"id": "o-secret"}',
        headers=[
            ("sasl.password", b"hunter2"),
            ("__connect.errors.topic", source.encode()),
            ("__connect.errors.exception.class.name", b"java.lang.IllegalStateException"),
            ("__connect.errors.exception.message", b"connect failed with ssl.key.password=hunter2"),
            ("__connect.errors.stage", b"TASK_PUT"),
        ],
    )
    assert producer.flush(30) == 0
    page = browser_page
    try:
        sign_in(page, "/")
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Dead letters").click()
        page.wait_for_url(re.compile(r".*/plugin/kerr-dead-letters(/.*)?$"))
        view = page.frame_locator("iframe").first
        view.locator(f"#topics tr[data-topic='{dlq}']").click()

        expect(view.locator("#progress")).to_have_text(f"All {DEAD_LETTERS + 1} records counted.", timeout=60_000)
        expect(view.locator("#total")).to_have_text(str(DEAD_LETTERS + 1), timeout=WAIT_MS)
        for key in (INVALID_ORDER, JSON_ERROR):
            expect(_count_row(view, "exception_class", key).locator("td.num")).to_have_text(
                str(DEAD_LETTERS // 2), timeout=WAIT_MS
            )
        expect(_count_row(view, "stage", "VALUE_CONVERTER").locator("td.num")).to_have_text(
            str(DEAD_LETTERS // 2), timeout=WAIT_MS
        )
        expect(_count_row(view, "source_topic", source).locator("td.num")).to_have_text(
            str(DEAD_LETTERS + 1), timeout=WAIT_MS
        )
        expect(view.locator("#timeline rect").first).to_be_visible(timeout=WAIT_MS)

        newest = view.locator("#samples article").first
        expect(newest.locator(".exception")).to_have_text("java.lang.IllegalStateException", timeout=WAIT_MS)
        expect(newest).to_contain_text("ssl.key.password=[hidden]", timeout=WAIT_MS)
        expect(newest).not_to_contain_text("hunter2", timeout=WAIT_MS)
        second = view.locator("#samples article").nth(1)
        expect(second.locator(".exception")).to_have_text(JSON_ERROR, timeout=WAIT_MS)
        expect(second.locator("pre").first).to_have_text(f'{{"id": "o-{DEAD_LETTERS - 1}", "amount": ', timeout=WAIT_MS)
        expect(second).to_contain_text(f"source {source}/0/{DEAD_LETTERS - 1}", timeout=WAIT_MS)
        second.get_by_text("Stack trace").click()
        expect(second.locator("details pre")).to_contain_text("JSONDecodeError", timeout=WAIT_MS)
        screenshot(page, "dlq_view.png")

        # Narrow to one exception class; the counts and samples follow, and the replay form takes the selection.
        view.locator("#group").fill(group)
        _count_row(view, "exception_class", INVALID_ORDER).click()
        expect(view.locator("#progress")).to_have_text(f"All {DEAD_LETTERS + 1} records counted.", timeout=60_000)
        expect(view.locator("#matched")).to_have_text(str(DEAD_LETTERS // 2), timeout=WAIT_MS)
        expect(view.locator("#samples article .exception").first).to_have_text(INVALID_ORDER, timeout=WAIT_MS)
        view.get_by_role("button", name="Replay this selection…").click()
        form = view.locator("#replay-dialog")
        expect(form.locator("[name=dlq_topic]")).to_have_value(dlq, timeout=WAIT_MS)
        expect(form.locator("[name=replay_group]")).to_have_value(group, timeout=WAIT_MS)
        expect(form.locator("[name=exception_class_regex]")).to_have_value(
            "^" + re.escape(INVALID_ORDER).replace("\\_", "_") + "$", timeout=WAIT_MS
        )
        expect(form.locator("[name=dry_run]")).to_be_checked(timeout=WAIT_MS)
        screenshot(page, "dlq_view_replay_form.png")
        form.get_by_role("button", name="Trigger").click()

        page.wait_for_url(re.compile(r".*/dags/dlq_replay/runs/[^/]+$"), timeout=60_000)
        run_id = unquote(page.url.rsplit("/runs/", 1)[1])
        local_ui.wait_for_run("dlq_replay", run_id, "replay", RUN_TIMEOUT_S)
        with local_ui.api() as api:
            summary = (
                api.get(f"/dags/dlq_replay/dagRuns/{run_id}/taskInstances/replay/xcomEntries/return_value")
                .raise_for_status()
                .json()["value"]
            )
        assert summary["dry_run"] is True
        assert summary["scanned"] == DEAD_LETTERS + 1
        assert summary["selected"] == DEAD_LETTERS // 2, summary

        page.goto(f"{local_ui.url}/dags/dlq_replay/runs/{run_id}/plugin/kerr-replay-summary")
        tab = page.frame_locator("iframe").first
        expect(tab.get_by_role("heading", level=2)).to_contain_text("dry run", timeout=WAIT_MS)
        row = tab.locator("tbody tr", has=tab.get_by_text(INVALID_ORDER, exact=True))
        expect(row.first).to_contain_text("would", timeout=WAIT_MS)
        screenshot(page, "replay_summary_tab.png")
    except BaseException:
        screenshot(page, "dlq_view_failure.png")
        raise
