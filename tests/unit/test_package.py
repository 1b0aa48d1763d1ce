"""The package as a user installs it: provider registration, import boundaries, pinned Spark."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

BLOCK_AIRFLOW_AND_SPARK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('airflow', 'pyspark'):
            raise ImportError(f'{name} is blocked: executors have no Airflow')
        return None
sys.meta_path.insert(0, Block())
"""


def test_providers_manager_discovers_the_provider() -> None:
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-provider-kerr" in providers
    info = providers["airflow-provider-kerr"]
    assert info.data["package-name"] == "airflow-provider-kerr"
    assert info.data["versions"][0] == info.version


def test_every_module_the_provider_lists_imports() -> None:
    import importlib

    from airflow_kerr.get_provider_info import get_provider_info

    info = get_provider_info()
    modules = [
        m for role in ("hooks", "operators", "sensors", "triggers") for e in info[role] for m in e["python-modules"]
    ]
    classes = [*info["notifications"], *info["queues"], *(c["hook-class-name"] for c in info["connection-types"])]
    for path in classes:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path
    for module in modules:
        importlib.import_module(module)


def test_airflow_loads_the_dead_letter_view_plugin() -> None:
    """Airflow's api-server mounts the DLQ view and shows it under Browse, with a Replay summary tab on DAG runs and a
    Dead letters tab on DAG runs and task instances."""
    code = (
        "import json\n"
        "from airflow import plugins_manager\n"
        "apps, _ = plugins_manager.get_fastapi_plugins()\n"
        "views, _ = plugins_manager._get_ui_plugins()\n"
        "print(json.dumps({'apps': [a['url_prefix'] for a in apps],"
        " 'views': [(v['url_route'], v['destination']) for v in views]}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert "/kerr" in loaded["apps"], loaded
    assert ["kerr-dead-letters", "nav"] in loaded["views"], loaded
    assert ["kerr-replay-summary", "dag_run"] in loaded["views"], loaded
    assert ["kerr-run-dead-letters", "dag_run"] in loaded["views"], loaded
    assert ["kerr-task-dead-letters", "task_instance"] in loaded["views"], loaded


def test_airflow_providers_list_shows_the_provider() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "airflow-provider-kerr" in result.stdout


@pytest.mark.parametrize(
    "module", ["airflow_kerr", "airflow_kerr.errors", "airflow_kerr.kafka.offsets", "airflow_kerr.replay.engine"]
)
def test_executor_side_modules_import_without_airflow_or_spark(module: str) -> None:
    code = BLOCK_AIRFLOW_AND_SPARK + f"import {module}\nprint('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_spark_package_imports_without_airflow() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'airflow':\n"
        "            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import airflow_kerr.spark, airflow_kerr.spark.kafka_source, airflow_kerr.spark.smoke\n"
        "print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_pyspark_python_files_match_its_jars() -> None:
    """pyspark and pyspark-client both write pyspark/: the Python side and the jars must be one release."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    utils = sorted(jars.glob("spark-common-utils_*.jar"))
    assert utils, f"no spark-common-utils jar under {jars}: pyspark is installed without its jars"
    with zipfile.ZipFile(utils[0]) as jar:
        props = dict(
            line.split("=", 1)
            for line in jar.read("spark-version-info.properties").decode().splitlines()
            if "=" in line
        )
    assert props["version"] == pyspark.__version__, (
        f"pyspark Python files are {pyspark.__version__} but its jars are {props['version']}: "
        "pin pyspark and pyspark-client to the same release"
    )
