"""``airflow_kerr.errors`` must import where neither Airflow nor PySpark exists (Spark executors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

BLOCKED_IMPORT = """
import importlib.abc
import sys

BLOCKED = {"airflow", "pyspark", "confluent_kafka"}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed here")
        return None


sys.meta_path.insert(0, Blocker())
for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED:
        del sys.modules[name]

try:
    import airflow  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("the blocker does not work")

import airflow_kerr.errors as errors

config = errors.ErrorHandlingConfig.from_properties({"errors.tolerance": "all"})
operator = errors.RetryWithTolerance(config, task=errors.TaskId("p", 0))
assert operator.execute(errors.Stage.TRANSFORMATION, int, None, "x") is errors.SKIPPED
leaked = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
assert not leaked, leaked
print("imported without airflow, pyspark or confluent_kafka")
"""


def test_errors_package_imports_without_airflow_or_pyspark() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "imported without airflow, pyspark or confluent_kafka" in result.stdout
