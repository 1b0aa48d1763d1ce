"""Which dead letters a DAG run's error-aware tasks wrote: read from the XCom the operator leaves, in the api-server.

:class:`~airflow_kerr.operators.error_aware_spark.ErrorAwareSparkSubmitOperator` pushes, after
each run (failed ones too), the DLQ topic and the exact offsets the job's DLQ producer was
told its records landed at (XCom key :data:`~airflow_kerr.kafka.offset_spans.RUN_DEAD_LETTERS_XCOM`).
The DLQ view's *Dead letters* tab on a task instance or a DAG run reads that here and
selects exactly those offsets: no time window, so another run's dead letters in the same
DLQ never show. XCom keeps the latest try's value (Airflow clears a task's XCom when a try
starts), so a task instance's tab shows its latest try.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_kerr.kafka.offset_spans import (
    RUN_DEAD_LETTERS_XCOM,
    OffsetSpans,
    merge_spans,
    spans_from_fields,
    spans_text,
)


@dataclass(frozen=True)
class TaskDeadLetters:
    """One task instance's record of what its run wrote to the DLQ."""

    task_id: str
    map_index: int
    topic: str
    kafka_config_id: str
    pipeline: str | None
    job_run_id: str | None
    spans: OffsetSpans
    task_attempts: int
    #: Whether the job was still running when the value was pushed (no offsets yet: they come when it ends).
    running: bool = False

    @property
    def records(self) -> int:
        return sum(end - start for items in self.spans.values() for start, end in items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "map_index": self.map_index,
            "topic": self.topic,
            "kafka_config_id": self.kafka_config_id,
            "pipeline": self.pipeline,
            "job_run_id": self.job_run_id,
            "records": self.records,
            "offsets": spans_text(self.spans),
            "task_attempts": self.task_attempts,
            "running": self.running,
        }

    @classmethod
    def of(cls, task_id: str, map_index: int, value: Any) -> TaskDeadLetters | None:
        """From the XCom value; None when it is not the operator's shape (another writer used the key)."""
        if not isinstance(value, dict) or not isinstance(value.get("topic"), str):
            return None
        spans = spans_from_fields(value.get("offsets") or {})
        if spans is None:
            return None
        attempts = value.get("task_attempts")
        return cls(
            task_id=task_id,
            map_index=map_index,
            topic=value["topic"],
            kafka_config_id=str(value.get("kafka_config_id") or ""),
            pipeline=value.get("pipeline") if isinstance(value.get("pipeline"), str) else None,
            job_run_id=value.get("job_run_id") if isinstance(value.get("job_run_id"), str) else None,
            spans=spans,
            task_attempts=attempts if isinstance(attempts, int) else 0,
            running=value.get("state") == "running",
        )


def dead_letters_of_run(
    dag_id: str, run_id: str, task_id: str | None = None, map_index: int | None = None
) -> list[TaskDeadLetters]:
    """Each error-aware task instance of the DAG run (or only ``task_id`` / ``map_index``) with what it wrote."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(XComModel.task_id, XComModel.map_index, XComModel.value).where(
        XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == RUN_DEAD_LETTERS_XCOM
    )
    if task_id is not None:
        query = query.where(XComModel.task_id == task_id)
    if map_index is not None:
        query = query.where(XComModel.map_index == map_index)
    with create_session() as session:
        rows = session.execute(query.order_by(XComModel.task_id, XComModel.map_index)).all()
    found = [TaskDeadLetters.of(row.task_id, row.map_index, XComModel.deserialize_value(row)) for row in rows]
    return [task for task in found if task is not None]


def task_of_job_run(job_run_id: str) -> tuple[str, str, str, int] | None:
    """The task instance (dag id, run id, task id, map index) whose job ran as ``job_run_id``, or None.

    A job run id is ``<dag id>.<run id>.<task id>.<try>`` with characters outside
    ``[A-Za-z0-9._-]`` replaced; DAG ids use only those, so the DAG is one of the id's dotted
    prefixes, and the XCom rows of those DAGs are compared by the ``job_run_id`` they hold.
    """
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    parts = job_run_id.split(".")
    candidates = {".".join(parts[:i]) for i in range(1, len(parts))}
    query = select(XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index, XComModel.value).where(
        XComModel.key == RUN_DEAD_LETTERS_XCOM, XComModel.dag_id.in_(candidates)
    )
    with create_session() as session:
        for row in session.execute(query):
            value = XComModel.deserialize_value(row)
            if isinstance(value, dict) and value.get("job_run_id") == job_run_id:
                return row.dag_id, row.run_id, row.task_id, row.map_index
    return None


def offsets_on(tasks: list[TaskDeadLetters], topic: str) -> OffsetSpans:
    """The offsets the tasks wrote to ``topic``, joined (a DAG run's tasks may share one DLQ)."""
    return merge_spans(*(task.spans for task in tasks if task.topic == topic))
