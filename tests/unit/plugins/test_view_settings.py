"""A ``[kerr]`` setting the DLQ view cannot use stops its plugin from loading, in real Airflow, naming the setting.

Airflow refuses a bad setting of its own when it starts; the view does the same at plugin load
rather than answer each request with a 500. Each case loads Airflow's plugins in a fresh Python
process (Airflow loads them once per process), with the provider's real entry point; no services.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

#: Loads Airflow's plugins and prints the FastAPI apps the api-server would mount and the import errors kept.
LOAD_PLUGINS = """
import json
from airflow import plugins_manager
mounted = [app["name"] for app in plugins_manager.get_fastapi_plugins()[0]]
print(json.dumps({"mounted": mounted, "errors": list(plugins_manager.get_import_errors().values())}))
"""


def load_plugins(**settings: str) -> dict[str, list[str]]:
    """Airflow's plugins as a fresh process loads them, run outside the source tree.

    ``python -c`` puts its working directory on ``sys.path``; in a checkout that holds the
    editable install's ``airflow_provider_kerr.egg-info``, which Airflow would read as a second
    distribution with the same entry point ("already registered, skipping"), as no deployment has it.
    """
    env = {**os.environ, **{f"AIRFLOW__KERR__{name.upper()}": value for name, value in settings.items()}}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_PLUGINS],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_view_loads_with_its_settings_unset_or_good() -> None:
    loaded = load_plugins(dead_letter_view_max_reads="4", dead_letter_view_queue_seconds="0")
    assert "Kerr dead letters" in loaded["mounted"]
    assert loaded["errors"] == []


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("dead_letter_view_max_reads", "0", "a whole number of reads at once, 1 or more"),
        ("dead_letter_view_queue_seconds", "forever", "seconds to wait, 0 or more"),
    ],
)
def test_a_bad_setting_stops_the_plugin_loading_naming_it(name: str, value: str, accepted: str) -> None:
    loaded = load_plugins(**{name: value})
    assert "Kerr dead letters" not in loaded["mounted"]
    assert loaded["errors"] == [f"[kerr] {name}={value!r}: expected {accepted}"]
