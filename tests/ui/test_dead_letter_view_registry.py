"""Schema Registry values in the DLQ view, in a real browser (issue #42, points 1 and 5).

Headless Debian chromium on ``make ui``'s stack (``tests/ui/conftest.py``), whose
``schema_registry_default`` connection names the development Schema Registry it started.
The test writes dead letters of Avro records (by confluent-kafka's own ``AvroSerializer``),
a Protobuf and a JSON Schema one, and one whose schema id the registry does not hold
(:mod:`tests.registry_dead_letters`), then reads them as a person does: Browse → Dead
letters, the DLQ, the newest dead letters. The Avro value shows as JSON with its subject,
version and schema id and its secret field hidden; the record whose schema is missing says
so on its card while the counts and the other cards are complete. Screenshots go to
``tests/ui/artifacts/``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kerr.local.ui import LocalUI
from tests.registry_dead_letters import MISSING_SCHEMA_ID, write_registry_dlq

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(420)]

#: How long an assertion waits for the page: the UI refreshes itself slowly on a busy 2-core machine.
WAIT_MS = 60_000


def test_an_avro_dead_letter_shows_decoded_and_a_missing_schema_says_so(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    from playwright.sync_api import expect

    suffix = uuid.uuid4().hex[:8]
    written = write_registry_dlq(
        {"bootstrap.servers": kafka_bootstrap}, local_ui.schema_registry_url, f"ui-sr-{suffix}.dlq", f"ui-sr-{suffix}"
    )
    page = browser_page
    try:
        sign_in(page, "/")
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Dead letters").click()
        page.wait_for_url(re.compile(r".*/plugin/kerr-dead-letters(/.*)?$"))
        view = page.frame_locator("iframe").first
        expect(view.locator("#registry")).to_have_value("schema_registry_default", timeout=WAIT_MS)
        view.locator(f"#topics tr[data-topic='{written.dlq}']").click()

        # The counts read headers only: complete, whatever the registry says about any record.
        expect(view.locator("#progress")).to_have_text(f"All {written.count} records counted.", timeout=WAIT_MS)
        expect(view.locator("#total")).to_have_text(str(written.count), timeout=WAIT_MS)

        def card(topic: str, offset: int) -> Any:
            return view.locator("#samples article", has_text=f"source {topic}/0/{offset} ")

        order = card(written.source, written.avro)
        expect(order).to_contain_text(
            f"Avro: subject {written.source}-value, version 1, schema id {written.avro_schema_id}", timeout=WAIT_MS
        )
        value = order.locator("pre").first
        expect(value).to_contain_text('"item": "pear"', timeout=WAIT_MS)
        expect(value).to_contain_text('"card_token": "[hidden]"', timeout=WAIT_MS)
        expect(order).not_to_contain_text("tok-4111-secret", timeout=WAIT_MS)
        expect(order).to_contain_text(f"Avro: subject {written.source}-key, version 1", timeout=WAIT_MS)
        expect(order.locator(".payload-error")).to_have_count(0, timeout=WAIT_MS)

        lost = card(written.source, written.missing)
        expect(lost.locator(".payload-error")).to_have_text(
            f"schema {MISSING_SCHEMA_ID} not found in the registry at {local_ui.schema_registry_url}", timeout=WAIT_MS
        )
        expect(lost.locator("pre").first).to_contain_text("base64: ", timeout=WAIT_MS)

        refund = card(written.refunds, written.protobuf)
        expect(refund).to_contain_text(f"Protobuf: subject {written.refunds}-value, version 1", timeout=WAIT_MS)
        expect(refund.locator("pre").first).to_contain_text('"reason": "damaged"', timeout=WAIT_MS)
        order.evaluate("card => card.scrollIntoView({block: 'end'})")
        screenshot(page, "dlq_view_registry.png")
        lost.evaluate("card => card.scrollIntoView({block: 'start'})")
        screenshot(page, "dlq_view_registry_missing.png")
    except BaseException:
        screenshot(page, "dlq_view_registry_failure.png")
        raise
