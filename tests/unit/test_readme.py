"""The DAG file the README opens with loads as Airflow loads a DAG file, so what a user copies works."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def first_python_block(text: str) -> str:
    match = re.search(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert match is not None, "README.md has no ```python block"
    return match.group(1)


def test_the_readme_opens_with_its_dag_file() -> None:
    text = README.read_text()
    first_fence = text.index("```")
    assert text.startswith("```python\n", first_fence), "the README's first code block should be the DAG file"


def test_the_readme_dag_file_loads_in_a_dagbag(tmp_path: Path) -> None:
    from airflow_kerr.compat import DagBag

    dag_file = tmp_path / "readme_dag.py"
    dag_file.write_text(first_python_block(README.read_text()))

    bag = DagBag(dag_folder=str(dag_file))

    assert bag.import_errors == {}
    assert bag.dag_ids, "the README's DAG file defines no DAG"


def test_the_readme_event_driven_dag_file_loads_in_a_dagbag(tmp_path: Path) -> None:
    """The complete event-driven DAG file under "Event-driven DAGs" (parsed with tests' kafka_default connection)."""
    from airflow_kerr.compat import DagBag

    section = README.read_text().split("## Event-driven DAGs", 1)[1]
    dag_file = tmp_path / "readme_event_dag.py"
    dag_file.write_text(first_python_block(section))

    bag = DagBag(dag_folder=str(dag_file))

    assert bag.import_errors == {}
    assert bag.dag_ids == ["orders_on_breach"]
    watcher = bag.dags["orders_on_breach"].timetable.asset_condition
    assert "event=breach" in str(watcher)


def test_the_readme_message_queue_snippet_builds_our_dlq_watch() -> None:
    """The ``MessageQueueTrigger(scheme="kerr+dlq")`` snippet under "Event-driven DAGs" runs and builds our trigger."""
    section = README.read_text().split("**Through common.messaging's `MessageQueueTrigger`.**", 1)[1]
    namespace: dict[str, Any] = {}
    exec(first_python_block(section), namespace)
    classpath, kwargs = namespace["DLQ_GREW"].watchers[0].trigger.serialize()
    assert classpath == "airflow_kerr.triggers.dead_letter_queue_events.DeadLetterQueueEventTrigger"
    assert (kwargs["topic"], kwargs["min_records"]) == ("orders.dlq", 10)
