"""Answer a human-in-the-loop question from outside the UI, as the Required actions page would.

``make demo`` runs the guard with ``dag.test()``, which leaves a question waiting until a
response is recorded in the metadata DB "from outside" (Airflow's words). This records one
through the core API's own response route, called in-process with a simple-auth-manager
user, so the demo's on-call person answers the same way a person in the UI does (validation,
who answered, the task resumed). Local use only: never from an operator.
"""

from __future__ import annotations

import time
from typing import Any


def waiting_run(dag_id: str, task_id: str) -> str | None:
    """The run id whose ``task_id`` waits for an answer (parked, no response yet), or None.

    Parked means ``awaiting_input`` (Airflow 3.3) or ``deferred`` (3.2), not merely asked: on
    SQLite (``make demo``, ``make ui``) the response route and the worker's park take no row
    locks, so an answer recorded while the task is still parking can be missed by both and the
    task waits until its timeout.
    """
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.run_id)
            .join(HITLDetail, HITLDetail.ti_id == TaskInstance.id)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == task_id,
                TaskInstance.state.in_(("awaiting_input", "deferred")),
                HITLDetail.responded_at.is_(None),
            )
        ).first()
    return str(row[0]) if row is not None else None


def answer_question(
    dag_id: str, task_id: str, chosen: str, user: str, timeout_s: float = 240.0, poll_s: float = 0.5
) -> dict[str, Any]:
    """Wait until ``task_id`` asks, then answer ``chosen`` as ``user``; return the recorded response.

    Raises ``TimeoutError`` naming the task when it has not asked within ``timeout_s``, and
    the route's ``HTTPException`` (400 naming the allowed options) for an answer it does not offer.
    """
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
    from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
    from airflow.utils.session import create_session

    deadline = time.monotonic() + timeout_s
    while (run_id := waiting_run(dag_id, task_id)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{dag_id}.{task_id} asked no question within {timeout_s:.0f} s")
        time.sleep(poll_s)
    with create_session() as session:
        response = update_hitl_detail(
            dag_id=dag_id,
            dag_run_id=run_id,
            task_id=task_id,
            update_hitl_detail_payload=UpdateHITLDetailPayload(chosen_options=[chosen], params_input={}),
            user=SimpleAuthManagerUser(username=user, role="op"),
            session=session,
        )
        answered: dict[str, Any] = response.model_dump(mode="json")
    return answered
