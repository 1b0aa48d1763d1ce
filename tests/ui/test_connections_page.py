"""The on-call person can see and edit the stack's connections: ``make ui`` keeps them in Airflow's metadata DB.

Headless Debian chromium on the shared local UI stack (``tests/ui/conftest.py``); a
connection that only an ``AIRFLOW_CONN_*`` variable defines never shows on this page.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_kerr.local.ui import LocalUI

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(420)]

STACK_CONNECTIONS = ("kafka_default", "kafka_connect_default", "spark_default", "schema_registry_default")


def test_the_connections_page_lists_the_stacks_connections(local_ui: LocalUI, browser_page: Any) -> None:
    from playwright.sync_api import expect

    page = browser_page
    page.goto(f"{local_ui.url}/connections")
    page.fill("input[name=username]", local_ui.username)
    page.fill("input[name=password]", local_ui.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r".*/connections$"))
    for conn_id in STACK_CONNECTIONS:
        expect(page.get_by_text(conn_id, exact=True)).to_be_visible(timeout=60_000)
    expect(page.get_by_text(local_ui.bootstrap_servers.split(",")[0].split(":")[0]).first).to_be_visible()
