"""The ``avro_orders`` example for real, in a real browser: its run's tab decodes its Avro dead letters (issue #42).

The example DAG runs on ``make ui``'s stack (Spark ``local[2]``, the development Schema
Registry of ``schema_registry_default``): among its Avro orders, every 5th record is in turn
a converter failure (JSON, too short, unknown schema id, truncated), a tombstone or an order
with a negative amount, which ``add_amount_cents`` refuses at ``TRANSFORMATION``. The task
instance's Dead letters tab must count exactly what the run wrote (read back from the DLQ at
the offsets the run recorded), show each negative order decoded as JSON under its "Avro:
subject …" line, and each converter failure with its message. A replay of the run's
``TRANSFORMATION`` dead letters, started from the tab's "Replay these…" (offsets, stage,
registry and value format prefilled; the fix ``repair_amount`` typed in), must put each
repaired order back on ``orders.avro`` exactly once, read ``read_committed`` and decoded by confluent-kafka's own
``AvroDeserializer``, and the same replay run again must put back nothing more. Screenshots
go to ``tests/ui/artifacts/``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import pytest

from airflow_kerr.examples.avro_orders import ORDER_SCHEMA
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.local.broker import ensure_topics
from airflow_kerr.local.orders_example import TOPICS
from airflow_kerr.local.ui import LocalUI
from tests.ui.run_tab import (
    WAIT_MS,
    expect_run_counted,
    open_task_tab,
    read_run_dead_letters,
    run_dead_letters,
    task_xcom,
    trigger,
)

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1200)]

DAG_ID = TASK_ID = "avro_orders"
SOURCE, DLQ = "orders.avro", "orders.avro.dlq"
#: 60 orders, every 5th special: 2 of each kind, so 8 converter failures and 2 negative amounts (all on one page).
CONF = {"orders": 60, "bad_every": 5}
FIX = "airflow_kerr.examples.avro_orders.repair_amount"
#: How long the job run may take on a busy 2-core machine before the test gives up (a bound, not a measure).
RUN_TIMEOUT_S = 900.0
#: The tab shows the newest 20 dead letters: the run must write no more, so every one has its card.
SAMPLES_SHOWN = 20


def test_the_avro_orders_tab_decodes_its_dead_letters_and_a_replay_repairs_them_once(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from playwright.sync_api import expect

    kafka_config = {"bootstrap.servers": kafka_bootstrap}
    # The stack's topics, as make ui creates them on the broker it starts (this stack shares the session's broker).
    ensure_topics(kafka_bootstrap, TOPICS)
    run_id = trigger(local_ui, DAG_ID, CONF)
    local_ui.wait_for_run(DAG_ID, run_id, TASK_ID, RUN_TIMEOUT_S)
    written = run_dead_letters(local_ui, DAG_ID, run_id, TASK_ID)
    metrics = task_xcom(local_ui, DAG_ID, run_id, TASK_ID)
    assert written["topic"] == DLQ, written

    # What the run wrote, read back from the DLQ at the offsets it recorded: the tab must show exactly these.
    letters = read_run_dead_letters(kafka_config, written)
    count = len(letters)
    by_stage = Counter(str(letter.stage) for letter in letters.values())
    assert count == written["records"] == metrics["deadletterqueue-produce-requests"], (written, metrics)
    assert by_stage["TRANSFORMATION"] >= 2 and by_stage["VALUE_CONVERTER"] >= 8, by_stage
    assert count <= SAMPLES_SHOWN, f"the run wrote {count} dead letters, more than the tab shows on its page"

    registry = SchemaRegistryClient({"url": local_ui.schema_registry_url})
    order_schema = registry.get_latest_version(f"{SOURCE}-value")
    assert json.loads(str(order_schema.schema.schema_str)) == json.loads(ORDER_SCHEMA)
    deserializer = AvroDeserializer(registry)
    source_context = SerializationContext(SOURCE, MessageField.VALUE)
    negative = {where: letter for where, letter in letters.items() if str(letter.stage) == "TRANSFORMATION"}
    decoded = {where: deserializer(letter.value, source_context) for where, letter in negative.items()}
    assert all(value["amount"] < 0 for value in decoded.values()), decoded
    # Written with the subject's one version: the schema id in each value's header is that version's.
    schema_id = int(order_schema.schema_id or -1).to_bytes(4, "big", signed=True)
    assert all((letter.value or b"")[1:5] == schema_id for letter in negative.values()), negative

    page = browser_page
    try:
        tab = open_task_tab(page, sign_in, DAG_ID, run_id, TASK_ID)
        expect_run_counted(tab, TASK_ID, run_id, DLQ, count)
        for stage, n in by_stage.items():
            expect(tab.locator(f"#by-stage tr[data-key='{stage}'] td.num")).to_have_text(str(n), timeout=WAIT_MS)
        expect(tab.locator("#samples article")).to_have_count(count, timeout=WAIT_MS)
        _expect_cards(tab, letters, decoded, order_schema)
        card(tab, min(negative)).evaluate("card => card.scrollIntoView({block: 'start'})")
        screenshot(page, "avro_orders_dead_letters_tab.png")

        start = end_offsets(kafka_config, [(SOURCE, 0)])[(SOURCE, 0)]
        replay_run, offsets, replay_group = _replay_from_the_tab(page, tab, len(negative))
    except BaseException:
        screenshot(page, "avro_orders_dead_letters_tab_failure.png")
        raise

    # The replay the form started: the fix got decoded values, re-encoded after it.
    local_ui.wait_for_run("dlq_replay", replay_run, "replay", RUN_TIMEOUT_S)
    summary = task_xcom(local_ui, "dlq_replay", replay_run, "replay")
    assert (summary["dry_run"], summary["selected"], summary["replayed"], summary["parked"]) == (
        False,
        len(negative),
        len(negative),
        0,
    ), summary
    # The same replay again, through the REST API: the replay group's offsets, committed with the records,
    # leave nothing to replay.
    again = _replay(local_ui, offsets, replay_group)
    assert (again["selected"], again["replayed"], again["parked"]) == (0, 0, 0), again

    landed = read_to_end(kafka_config, SOURCE, isolation_level="read_committed")
    repaired = [(m.key(), deserializer(m.value(), source_context)) for m in landed if m.offset() >= start]
    expected = [
        (letter.key, {**decoded[where], "amount": -decoded[where]["amount"]}) for where, letter in negative.items()
    ]
    assert sorted(repaired, key=repr) == sorted(expected, key=repr), (repaired, expected)


def _replay(local_ui: LocalUI, offsets: str, replay_group: str) -> dict[str, Any]:
    """Replay the TRANSFORMATION dead letters at ``offsets`` for real with the fix on decoded values; its summary."""
    replay_run = trigger(
        local_ui,
        "dlq_replay",
        {
            "kafka_config_id": "kafka_default",
            "schema_registry_conn_id": "schema_registry_default",
            "dlq_topic": DLQ,
            "replay_group": replay_group,
            "dlq_offsets": offsets,
            "stages": ["TRANSFORMATION"],
            "fix": FIX,
            "value_format": "avro",
            "dry_run": False,
        },
    )
    local_ui.wait_for_run("dlq_replay", replay_run, "replay", RUN_TIMEOUT_S)
    summary: dict[str, Any] = task_xcom(local_ui, "dlq_replay", replay_run, "replay")
    return summary


def card(tab: Any, where: tuple[int, int]) -> Any:
    """The tab's card of the dead letter at DLQ (partition, offset)."""
    return tab.locator(f"#samples article[data-offset='{where[0]}/{where[1]}']")


def _expect_cards(
    tab: Any, letters: dict[tuple[int, int], Any], decoded: dict[tuple[int, int], Any], order_schema: Any
) -> None:
    """Each dead letter's card names its exception and message; each decoded one shows its order under its schema."""
    from playwright.sync_api import expect

    for where, letter in letters.items():
        expect(card(tab, where).locator(".exception")).to_have_text(letter.exception_class or "", timeout=WAIT_MS)
        expect(card(tab, where).locator(".message")).to_have_text(letter.exception_message or "", timeout=WAIT_MS)
    for where, value in decoded.items():
        order = card(tab, where)
        expect(order).to_contain_text(
            f"Avro: subject {SOURCE}-value, version {order_schema.version}, schema id {order_schema.schema_id}",
            timeout=WAIT_MS,
        )
        shown = order.locator("pre").first
        expect(shown).to_contain_text(f'"id": "{value["id"]}"', timeout=WAIT_MS)
        expect(shown).to_contain_text(f'"amount": {json.dumps(value["amount"])}', timeout=WAIT_MS)
        expect(order.locator(".payload-error")).to_have_count(0, timeout=WAIT_MS)


def _replay_from_the_tab(page: Any, tab: Any, count: int) -> tuple[str, str, str]:
    """Start the real replay of the run's ``count`` TRANSFORMATION dead letters from its tab: (run, offsets, group)."""
    from playwright.sync_api import expect

    # Narrowed to the TRANSFORMATION stage, "Replay these…" hands over the run's offsets, the stage, the
    # registry and the value format its (decoded) samples show; the fix is typed in, the dry run unticked.
    tab.locator("#by-stage tr[data-key='TRANSFORMATION']").click()
    expect(tab.locator("#matched")).to_have_text(str(count), timeout=WAIT_MS)
    expect(tab.locator("#samples article")).to_have_count(count, timeout=WAIT_MS)
    tab.get_by_role("button", name="Replay these…").click()
    form = tab.locator("#replay-dialog")
    expect(form.locator("[name=dlq_topic]")).to_have_value(DLQ, timeout=WAIT_MS)
    expect(form.locator("[name=dlq_offsets]")).to_have_value(re.compile(r"^\d+:\d+"), timeout=WAIT_MS)
    expect(form.locator("[name=stages]")).to_have_value("TRANSFORMATION", timeout=WAIT_MS)
    expect(form.locator("[name=value_format]")).to_have_value("avro", timeout=WAIT_MS)
    expect(form.locator("[name=schema_registry_conn_id]")).to_have_value("schema_registry_default", timeout=WAIT_MS)
    offsets = form.locator("[name=dlq_offsets]").input_value()
    replay_group = form.locator("[name=replay_group]").input_value()
    assert offsets and replay_group, (offsets, replay_group)
    form.locator("[name=fix]").fill(FIX)
    form.locator("[name=dry_run]").uncheck()
    form.get_by_role("button", name="Trigger").click()
    page.wait_for_url(re.compile(r".*/dags/dlq_replay/runs/[^/]+$"), timeout=WAIT_MS)
    replay_run = unquote(page.url.rsplit("/runs/", 1)[1])
    return replay_run, offsets, replay_group
