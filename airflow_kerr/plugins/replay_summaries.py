"""A DAG run's replays as one summary each: a fanned-out replay's mapped tasks added up, in the api-server.

The *Replay summary* tab shows a replay, not its pieces: the summaries the
:class:`~airflow_kerr.operators.dlq_replay.DeadLetterQueueReplayOperator` tasks of the run
pushed (XCom ``return_value``, one per map index) are added up per task id by
:func:`airflow_kerr.replay.fanout.merge_summaries`, and each task instance is listed beside
it with its state, try and partitions. XCom keeps a task's latest try only (Airflow clears it
when a try starts), so a retried task counts what its last try read; the records an earlier,
killed try committed are behind the committed offsets and are not read again.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from airflow_kerr.replay.fanout import merge_summaries

REPLAY_OPERATOR = "DeadLetterQueueReplayOperator"
#: States of a task instance that will not write a summary: a skipped branch of the fan-out, say.
_NEVER_RAN = frozenset({"skipped", "removed", "upstream_failed"})


def replays_of_run(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Each replay task of the run (mapped or not) with its task instances and its whole summary (None before any).

    A task whose instances were all skipped (the branch the fan-out did not follow) is left out.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        instances = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state, TaskInstance.try_number)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.operator == REPLAY_OPERATOR,
            )
            .order_by(TaskInstance.task_id, TaskInstance.map_index)
        ).all()
        task_ids = sorted({row.task_id for row in instances})
        rows = session.execute(
            select(XComModel.task_id, XComModel.map_index, XComModel.value).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.key == "return_value",
                XComModel.task_id.in_(task_ids),
            )
        ).all()
        values = {(row.task_id, row.map_index): XComModel.deserialize_value(row) for row in rows}
    by_task: dict[str, list[Any]] = defaultdict(list)
    for row in instances:
        by_task[row.task_id].append(row)
    replays = []
    for task_id, rows_of_task in by_task.items():
        if all(str(row.state) in _NEVER_RAN for row in rows_of_task):
            continue
        tasks, pieces = [], []
        for row in rows_of_task:
            value = values.get((task_id, row.map_index))
            summary = value if isinstance(value, dict) and "dlq_topic" in value else None
            if summary is not None:
                pieces.append(summary)
            tasks.append(
                {
                    "map_index": row.map_index,
                    "state": None if row.state is None else str(row.state),
                    "try_number": row.try_number,
                    "partitions": sorted(int(p) for p in (summary or {}).get("start_offsets", {})),
                    "status": None if summary is None else summary.get("status"),
                }
            )
        replays.append({"task_id": task_id, "tasks": tasks, "summary": merge_summaries(pieces) if pieces else None})
    return replays
