"""The Dead letters tab of a real job run, in a real browser: that run's dead letters, and no others.

The example DAG ``error_aware_pipeline`` runs the error-aware PySpark job (Spark ``local[2]``
of ``make ui``'s stack) over generated orders with poison in them. Other dead letters sit in
the same DLQ: some written before the run, some after it with timestamps inside the run's
time, as another writer would leave them, so neither the topic nor a time window tells them
apart; only the offsets the run recorded do. The tab on the task instance (and on the DAG
run) must count exactly the run's dead letters, show none of the others, and prefill
"Replay these…" so a dry-run replay selects exactly them. Screenshots go to ``tests/ui/artifacts/``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import pytest

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.local.dead_letters import Failure, write_dead_letters
from airflow_kerr.local.ui import LocalUI
from tests.ui.run_tab import WAIT_MS, expect_run_counted, open_task_tab, run_dead_letters, task_xcom, trigger

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1200)]

DAG_ID = "error_aware_pipeline"
TASK_ID = "orders_pipeline"
DLQ = "orders.dlq"
#: How long the job run may take on a busy 2-core machine before the test gives up (a bound, not a measure).
RUN_TIMEOUT_S = 900.0
#: Orders the run generates: every 10th malformed, every 7th invalid: a few dozen dead letters.
CONF = {"orders": 300, "malformed_every": 10, "invalid_every": 7, "flaky_every": 0}


def _foreign(kafka_bootstrap: str, marker: str, count: int, at_ms: int) -> None:
    """Dead letters another writer leaves in the same DLQ, named by ``marker`` in their exception message."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    # The DLQ as the job creates it (one partition) when no run has yet; there already, it is used as it is.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept: its futures die with it
    for future in admin.create_topics([NewTopic(DLQ, 1, 1)]).values():
        try:
            future.result(30)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    failures = [
        Failure(
            SourceRecord("orders", 0, 10_000_000 + i, at_ms + i, key=b"foreign", value=b'{"id": "foreign"}'),
            Stage.TRANSFORMATION,
            ValueError(f"{marker} #{i}"),
        )
        for i in range(count)
    ]
    assert write_dead_letters({"bootstrap.servers": kafka_bootstrap}, DLQ, failures) == count


def test_a_task_instances_tab_shows_its_own_dead_letters_and_no_others(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    from playwright.sync_api import expect

    marker = f"foreign-{uuid.uuid4().hex[:8]}"
    _foreign(kafka_bootstrap, marker, 5, int(time.time() * 1000))
    run_id = trigger(local_ui, DAG_ID, CONF)
    local_ui.wait_for_run(DAG_ID, run_id, TASK_ID, RUN_TIMEOUT_S)
    written = run_dead_letters(local_ui, DAG_ID, run_id, TASK_ID)
    summary = task_xcom(local_ui, DAG_ID, run_id, TASK_ID)
    # Two accounts of the run agree: its delivery reports (the offsets) and its metrics (the DLQ writes it counted).
    count = written["records"]
    assert written["topic"] == DLQ, written
    assert count == summary["deadletterqueue-produce-requests"] > 0, (written, summary)
    # Then more of the other writer's, stamped inside the run's time: no time window tells them apart.
    _foreign(kafka_bootstrap, marker, 5, int(time.time() * 1000) - 30_000)

    page = browser_page
    try:
        tab = open_task_tab(page, sign_in, DAG_ID, run_id, TASK_ID)
        expect_run_counted(tab, TASK_ID, run_id, DLQ, count)
        expect(tab.locator("#by-pipeline tr td.num").first).to_have_text(str(count), timeout=WAIT_MS)
        expect(tab.locator("#samples article").first).to_be_visible(timeout=WAIT_MS)
        expect(tab.locator("#samples")).not_to_contain_text(marker)
        expect(tab.locator("#topics-section")).to_be_hidden()
        screenshot(page, "run_dead_letters_tab.png")

        tab.get_by_role("button", name="Replay these…").click()
        form = tab.locator("#replay-dialog")
        expect(form.locator("[name=dlq_topic]")).to_have_value(DLQ, timeout=WAIT_MS)
        expect(form.locator("[name=dlq_offsets]")).to_have_value(re.compile(r"^\d+:\d+"), timeout=WAIT_MS)
        expect(form.locator("[name=replay_group]")).to_have_value(
            re.compile(r"^kerr-replay\.orders\.dlq\.error_aware_pipeline\."), timeout=WAIT_MS
        )
        expect(form.locator("[name=dry_run]")).to_be_checked()
        screenshot(page, "run_dead_letters_replay_form.png")
        form.get_by_role("button", name="Trigger").click()
        page.wait_for_url(re.compile(r".*/dags/dlq_replay/runs/[^/]+$"), timeout=WAIT_MS)
        replay_run = unquote(page.url.rsplit("/runs/", 1)[1])
        local_ui.wait_for_run("dlq_replay", replay_run, "replay", 300)
        replayed = task_xcom(local_ui, "dlq_replay", replay_run, "replay")
        assert replayed["dry_run"] is True
        assert replayed["selected"] == count, replayed

        # The DAG run's tab says the same: its one error-aware task wrote them.
        page.goto(f"{local_ui.url}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/plugin/kerr-run-dead-letters")
        run_tab = page.frame_locator("iframe").first
        expect(run_tab.locator("#run-note")).to_contain_text(
            f"Run {run_id} wrote {count} dead letters to {DLQ}", timeout=WAIT_MS
        )
        expect(run_tab.locator("#matched")).to_have_text(str(count), timeout=WAIT_MS)
        screenshot(page, "run_dead_letters_dag_run_tab.png")
    except BaseException:
        screenshot(page, "run_dead_letters_failure.png")
        raise
