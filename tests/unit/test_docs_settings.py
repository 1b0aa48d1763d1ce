"""The DLQ view's page lists the ``[kerr]`` settings the plugin reads, with their defaults, and each one works.

The table in ``docs/guides/dlq-view.md`` is checked against the plugin itself: the settings its source
reads from ``[kerr]`` are the table's rows, and each row's environment variable, set or unset, changes
what ``ViewSettings.from_airflow()`` returns as the table says. Airflow's configuration is real; no services.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "guides" / "dlq-view.md"
PLUGIN = REPO / "airflow_kerr" / "plugins" / "dead_letter_view.py"
#: The ViewSettings field each setting fills.
FIELDS = {
    "dead_letter_topics": "dead_letter_topics",
    "dead_letter_view_conn_id": "kafka_config_id",
    "dead_letter_view_registry_conn_id": "schema_registry_conn_id",
    "replay_dag_id": "replay_dag_id",
    "dead_letter_view_max_reads": "max_reads",
    "dead_letter_view_queue_seconds": "queue_seconds",
}


def table() -> dict[str, tuple[str, str]]:
    """``setting: (environment variable, default as written)`` from the page's settings table."""
    rows = re.findall(r"^\| `([a-z_]+)` \| `(AIRFLOW__KERR__[A-Z_]+)` \| ([^|]+?) \|", PAGE.read_text(), re.MULTILINE)
    return {name: (env, default.strip()) for name, env, default in rows}


def test_the_table_lists_exactly_the_settings_the_plugin_reads() -> None:
    read = set(re.findall(r'(?:conf\.get\(CONFIG_SECTION, |_setting\(\s*)"([a-z_]+)"', PLUGIN.read_text()))
    assert read == set(FIELDS)
    assert set(table()) == read
    for name, (env, _) in table().items():
        assert env == f"AIRFLOW__KERR__{name.upper()}"


def test_each_default_on_the_page_is_what_the_view_uses_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kerr.plugins.dead_letter_view import ViewSettings

    for env, _ in table().values():
        monkeypatch.delenv(env, raising=False)
    settings = ViewSettings.from_airflow()
    for name, (_, default) in table().items():
        value = getattr(settings, FIELDS[name])
        expected = () if default == "none" else type(value)(default.strip("`"))
        assert value == expected, f"{name}: the page says {default}"


def test_each_environment_variable_on_the_page_changes_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kerr.plugins.dead_letter_view import ViewSettings

    rows = table()
    monkeypatch.setenv(rows["dead_letter_topics"][0], "orders.dlq, payments.dlq")
    monkeypatch.setenv(rows["dead_letter_view_conn_id"][0], "kafka_prod")
    monkeypatch.setenv(rows["replay_dag_id"][0], "my_replay")
    monkeypatch.setenv(rows["dead_letter_view_registry_conn_id"][0], "registry_prod")
    settings = ViewSettings.from_airflow()
    assert settings.dead_letter_topics == ("orders.dlq", "payments.dlq")
    assert (settings.kafka_config_id, settings.replay_dag_id) == ("kafka_prod", "my_replay")
    assert settings.schema_registry_conn_id == "registry_prod"
    monkeypatch.setenv(rows["dead_letter_view_max_reads"][0], "6")
    monkeypatch.setenv(rows["dead_letter_view_queue_seconds"][0], "2.5")
    settings = ViewSettings.from_airflow()
    assert (settings.max_reads, settings.queue_seconds) == (6, 2.5)
