"""The DLQ view in a real browser on Spring Kafka's dead letters next to Connect's (issue #25, point 2).

The dead letters are written as their writers write them: Spring Kafka's
``DeadLetterPublishingRecoverer`` by :func:`tests.dead_letter_writers.spring_dlt`, which follows
``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``
(the original partition, offset and timestamp as 4- and 8-byte big-endian integers), and
Kafka Connect's ``DeadLetterQueueReporter``
(``connect/runtime/src/main/java/org/apache/kafka/connect/runtime/errors/DeadLetterQueueReporter.java``)
as the error-aware job writes it (:func:`airflow_kerr.local.ui.seed_dead_letters`). Headless
Debian chromium on ``make ui``'s stack (``tests/ui/conftest.py``) then shows what a person
sees: the count by dialect, the dialect filter, a Spring record's source and its numbers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.local.ui import LocalUI, seed_dead_letters
from tests.clock import RECENT_MS
from tests.dead_letter_writers import SPRING_LISTENER_FAILED, Original, spring_dlt

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(420)]

#: How long an assertion waits for the page: the UI refreshes itself slowly on a busy 2-core machine.
WAIT_MS = 60_000
SPRING_CAUSE = "java.lang.IllegalStateException"
SPRING_DESERIALIZATION = "org.springframework.kafka.support.serializer.DeserializationException"
#: Spring keeps the original's partition: the DLQ needs at least this many plus one.
SPRING_PARTITION = 2
#: Past 2**32, so an offset read from the wrong bytes (or shown as raw bytes) cannot pass for it.
SPRING_OFFSET = 123_456_789_012
WRAPPED, UNWRAPPED, CONNECT = 4, 2, 2


def _write_dlq(bootstrap: str, suffix: str) -> tuple[str, str, list[Original]]:
    """A DLQ of Spring dead letters and two Connect ones; its name, the source topic and Spring's originals."""
    source, dlq = f"ui-dialects-{suffix}", f"ui-dialects-{suffix}-dlt"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(dlq, SPRING_PARTITION + 1, 1)]).values():
        future.result(timeout=30)
    originals = [
        Original(
            topic=source,
            partition=SPRING_PARTITION,
            offset=SPRING_OFFSET + i,
            timestamp=RECENT_MS + i * 1000,
            key=f"order-{i}".encode(),
            value=f'{{"id": "order-{i}"}}'.encode(),
        )
        for i in range(WRAPPED + UNWRAPPED)
    ]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, original in enumerate(originals):
        if i < WRAPPED:  # the listener threw: Spring's handler wraps it, and its root cause is the listener's
            producer.produce(**spring_dlt(original, dlt_topic=dlq))
        else:  # the value deserializer failed: no cause
            producer.produce(**spring_dlt(original, dlt_topic=dlq, exception=SPRING_DESERIALIZATION, cause=None))
    assert producer.flush(30) == 0
    seed_dead_letters(bootstrap, dlq, source_topic=f"{source}-connect", count=CONNECT)
    return dlq, source, originals


def _count_row(view: Any, dimension: str, shown: str) -> Any:
    """The row of a count table whose first cell shows exactly ``shown``."""
    return view.locator(f"#by-{dimension} tr", has=view.get_by_text(shown, exact=True))


def test_a_dialect_outside_the_list_is_a_400_naming_it(local_ui: LocalUI) -> None:
    """The routes refuse an unknown dialect saying which key, which value and what is accepted, never a 5xx."""
    headers = {"Authorization": f"Bearer {local_ui.token()}"}
    for route in ("summary", "samples"):
        answer = httpx.get(
            f"{local_ui.url}/kerr/api/topics/orders.dlq/{route}",
            params={"header_set": "kafka-connect"},
            headers=headers,
            timeout=60,
        )
        assert answer.status_code == 400, answer.text
        detail = answer.json()["detail"]
        assert detail.startswith("header_set=") and "kafka-connect" in detail, detail
        assert "connect, dlq, streams, spring, schema_registry, none" in detail, detail


def test_see_springs_dead_letters_by_dialect_with_their_numbers(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    from playwright.sync_api import expect

    dlq, source, originals = _write_dlq(kafka_bootstrap, uuid.uuid4().hex[:8])
    total = WRAPPED + UNWRAPPED + CONNECT
    page = browser_page
    try:
        sign_in(page, "/plugin/kerr-dead-letters")
        page.wait_for_url(re.compile(r".*/plugin/kerr-dead-letters(/.*)?$"))
        view = page.frame_locator("iframe").first
        view.locator(f"#topics tr[data-topic='{dlq}']").click()

        # The counts: by dialect, and Spring's under their root cause rather than Spring's wrapper.
        expect(view.locator("#progress")).to_have_text(f"All {total} records counted.", timeout=WAIT_MS)
        expect(_count_row(view, "header_set", "Spring Kafka").locator("td.num")).to_have_text(
            str(WRAPPED + UNWRAPPED), timeout=WAIT_MS
        )
        expect(_count_row(view, "header_set", "Kafka Connect").locator("td.num")).to_have_text(
            str(CONNECT), timeout=WAIT_MS
        )
        expect(_count_row(view, "exception_class", SPRING_CAUSE).locator("td.num")).to_have_text(
            str(WRAPPED), timeout=WAIT_MS
        )
        expect(_count_row(view, "exception_class", SPRING_DESERIALIZATION).locator("td.num")).to_have_text(
            str(UNWRAPPED), timeout=WAIT_MS
        )

        # A Spring record as a person reads it: its dialect, its cause, where it came from, in numbers.
        newest = originals[WRAPPED - 1]
        card = view.locator("#samples article", has_text=f"source {source}/{SPRING_PARTITION}/{newest.offset}")
        expect(card.locator(".dialect")).to_have_text("Spring Kafka", timeout=WAIT_MS)
        expect(card.locator(".exception")).to_have_text(SPRING_CAUSE, timeout=WAIT_MS)
        facts = card.locator("dl.facts")
        expect(facts.locator("dt")).to_have_text(
            ["Error handler received", "Consumer group", "Original record's time"], timeout=WAIT_MS
        )
        expect(facts.locator("dd")).to_have_text(
            [SPRING_LISTENER_FAILED, "orders-service", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")],
            timeout=WAIT_MS,
        )
        screenshot(page, "dlq_view_dialects.png")
        card.get_by_text("Headers (").click()
        for name, value in (
            ("kafka_dlt-original-topic", source),
            ("kafka_dlt-original-partition", str(SPRING_PARTITION)),
            ("kafka_dlt-original-offset", str(newest.offset)),
            ("kafka_dlt-original-timestamp", str(newest.timestamp)),
        ):
            header = card.locator("details tr", has=view.get_by_text(name, exact=True))
            expect(header.locator("td").nth(1)).to_have_text(value, timeout=WAIT_MS)
        expect(view.locator("#samples article .dialect", has_text="Kafka Connect")).to_have_count(
            CONNECT, timeout=WAIT_MS
        )
        screenshot(page, "dlq_view_dialects_spring_headers.png")

        # The dialect filter narrows the counts to Spring's records.
        dialect = view.get_by_role("combobox", name=re.compile(r"^Dialect\b"))
        dialect.select_option(label="Spring Kafka")
        expect(view.locator("#matched")).to_have_text(str(WRAPPED + UNWRAPPED), timeout=WAIT_MS)
        expect(view.locator("#progress")).to_have_text(f"All {total} records counted.", timeout=WAIT_MS)
        expect(view.locator("#by-header_set tr")).to_have_count(1, timeout=WAIT_MS)
        expect(view.locator("#by-header_set tr.selected")).to_contain_text("Spring Kafka", timeout=WAIT_MS)
        expect(view.locator("#by-exception_class tr td:first-child")).to_have_text(
            [SPRING_CAUSE, SPRING_DESERIALIZATION], timeout=WAIT_MS
        )
        screenshot(page, "dlq_view_dialect_filter.png")

        # Clicking a dialect's count selects it, as the other count tables do.
        dialect.select_option(label="any")
        _count_row(view, "header_set", "Kafka Connect").click()
        expect(dialect).to_have_value("connect", timeout=WAIT_MS)
        expect(view.locator("#matched")).to_have_text(str(CONNECT), timeout=WAIT_MS)
        expect(view.locator("#by-header_set tr.selected")).to_contain_text("Kafka Connect", timeout=WAIT_MS)
    except BaseException:
        screenshot(page, "dlq_view_dialects_failure.png")
        raise
