"""The ``dlq_replay`` DAG fanned out: 4 mapped replay tasks over an 8-partition DLQ, one SIGKILLed and retried.

The example DAG runs in real Airflow (``dag.test``, as the other DAG tests run it) in a child
process: the "worker". Map index 1 commits two transactions and holds its third one open
(records and offsets sent, commit not asked for) until the test SIGKILLs the worker, so the kill
lands inside an open transaction on any machine load. Airflow's scheduler would find that task
instance without a heartbeat and put it up for retry (the DAG gives mapped replay tasks retries);
the test does what the scheduler does at that point, with Airflow's own ``is_eligible_to_retry``,
rather than wait out the 5-minute heartbeat timeout, then carries the same DAG run on with ``dag.test``'s own
task runner: the retry (try 2, same map index, same ``transactional.id``) fences the killed
try's producer, whose open transaction is aborted, and continues from its partitions'
committed offsets; the tasks the worker never started run too.

Positive evidence of exactly once: every DLQ record's coordinates appear exactly once, read
with ``isolation.level=read_committed``, on the source topic (replayed) or the parking topic
(parked), while a read_uncommitted reader sees the killed try's aborted records as well. Then
the Replay summary API adds the four tasks' summaries up to the whole replay. Marked
``transactions``: noida-db (the default broker) aborts a fenced producer's transaction as
Apache Kafka does.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_kerr.replay.policy import HEADER_REPLAY_SOURCE
from tests.integration.test_dead_letter_view_requests import client  # noqa: F401 - the plugin app, as a fixture
from tests.integration.test_dlq_replay import committed, ends, header, read_all, write_dlq
from tests.integration.test_dlq_replay_dag import kafka_connection  # noqa: F401 - a fixture

pytestmark = pytest.mark.airflow

PARTITIONS = 8
TASKS = 4
REPLAYED, PARKED = 480, 160
BATCH = 50
#: Map index 1's third transaction is held open until the kill.
KILLED_INDEX = 1

#: The worker: the example DAG in dag.test(), with the killed task's third commit held (a test-only hook).
WORKER = """
import json, os, sys, time
from airflow.dag_processing.dagbag import DagBag
from airflow_kerr.replay import preflight, transactions

conf, held = json.loads(sys.argv[1]), sys.argv[2]
writer_of, commit = preflight.Preflight.writer, transactions.TransactionalWriter._commit

def writer(self, partitions):
    made = writer_of(self, partitions)
    made.kerr_hold = self.transactional_id(partitions).startswith(held)
    return made

def commit_twice_then_hold(writer):
    if getattr(writer, "kerr_hold", False) and writer.commits == 2:
        writer.producer.flush(30)
        print("transaction open", flush=True)
        time.sleep(600)
    commit(writer)

preflight.Preflight.writer = writer
transactions.TransactionalWriter._commit = commit_twice_then_hold
DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag("dlq_replay").test(run_conf=conf)
"""


def run_worker_until_held(conf: dict[str, Any], env: dict[str, str]) -> None:
    """Start the worker, wait until the held task says its transaction is open, SIGKILL the worker."""
    held = f"kerr-replay.dlq_replay.replay_partitions.{KILLED_INDEX}.{conf['dlq_topic']}.p"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(conf), held],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seen: list[str] = []
    try:
        assert worker.stdout is not None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            ready, _, _ = select.select([worker.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = worker.stdout.readline() if ready else ""
            if not line:
                break
            seen.append(line)
            if line.strip() == "transaction open":
                break
        assert seen and seen[-1].strip() == "transaction open", "the held task never opened its transaction:\n" + (
            "".join(seen[-40:])
        )
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    assert worker.returncode == -signal.SIGKILL


def carry_on_after_the_worker_died(dag: Any) -> tuple[str, str, dict[tuple[str, int], tuple[str, int]]]:
    """The scheduler's part after a task's process died (up for retry while tries remain), then ``dag.test``'s loop.

    Airflow finds the killed task instance without a heartbeat after a timeout and sends it
    up for retry if ``is_eligible_to_retry`` (or fails it); that decision is made here at
    once. The rest is ``dag.test``'s own loop on the same DAG run: schedule what is ready,
    run each task with ``dag.test``'s task runner, until the run ends. Returns the run's id,
    its state and each task instance's state and try number.
    """
    from airflow.models.dagrun import DagRun
    from airflow.sdk import timezone
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select as query

    with create_session() as session:
        run = session.scalar(query(DagRun).where(DagRun.dag_id == dag.dag_id).order_by(DagRun.id.desc()).limit(1))
        assert run is not None
        run.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        for ti in run.get_task_instances(state=[TaskInstanceState.RUNNING], session=session):
            ti.state = TaskInstanceState.UP_FOR_RETRY if ti.is_eligible_to_retry() else TaskInstanceState.FAILED
            ti.end_date = timezone.utcnow()  # the retry waits out the task's retry_delay from here
        session.commit()
        while run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = run.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = run.get_task_instances(state=[TaskInstanceState.SCHEDULED], session=session)
            for ti in scheduled:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id])
            if not scheduled:
                time.sleep(0.5)  # the killed task's retry_delay
        session.expire_all()
        tis = {
            (ti.task_id, ti.map_index): (str(ti.state), ti.try_number) for ti in run.get_task_instances(session=session)
        }
        return run.run_id, str(run.state), tis


@pytest.mark.transactions
def test_four_mapped_tasks_one_killed_and_retried_replay_or_park_every_record_exactly_once(
    kafka_config: dict[str, Any],
    kafka_connection: None,  # noqa: F811 - the fixture imported above
    create_topic: Callable[..., str],
    unique_topic: str,
    load_dag: Callable[[str], Any],
    client: TestClient,  # noqa: F811 - the fixture imported above
) -> None:
    source, other = create_topic(unique_topic, 2), create_topic(f"{unique_topic}-other", 2)
    dlq = create_topic(f"{unique_topic}.dlq", PARTITIONS)
    write_dlq(kafka_config, dlq, source, REPLAYED)
    write_dlq(kafka_config, dlq, other, PARKED, start=REPLAYED)  # their target is not allowed: parked
    dlq_ends = ends(kafka_config, dlq, PARTITIONS)
    assert all(dlq_ends.values()), f"every DLQ partition holds records: {dlq_ends}"
    conf = {
        "dlq_topic": dlq,
        "dry_run": False,
        "replay_tasks": TASKS,
        "target_allowlist": source,
        "batch_size": BATCH,
        "max_records_per_second": None,
    }

    run_worker_until_held(conf, {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    at_the_kill = committed(kafka_config, f"kerr-replay.{dlq}", dlq, PARTITIONS)
    dag = load_dag("dlq_replay")
    run_id, state, tis = carry_on_after_the_worker_died(dag)

    assert state == "success", tis
    assert tis[("replay", -1)][0] == "skipped", "the branch followed the split, not the single task"
    mapped = {index: ti for (task_id, index), ti in tis.items() if task_id == "replay_partitions"}
    assert sorted(mapped) == list(range(TASKS)) and {ti_state for ti_state, _ in mapped.values()} == {"success"}
    assert mapped[KILLED_INDEX][1] == 2, "the killed task ran again as its retry"
    killed_partitions = [2 * KILLED_INDEX, 2 * KILLED_INDEX + 1]
    held_at = sum(max(at_the_kill[p], 0) for p in killed_partitions)
    assert 0 < held_at < sum(dlq_ends[p] for p in killed_partitions), "killed after two commits, mid-run"

    landed = read_all(kafka_config, source)
    parked = read_all(kafka_config, f"{dlq}.parked")
    every = {f"{dlq}/{p}/{o}".encode() for p, end in dlq_ends.items() for o in range(end)}
    seen = Counter(header(m, HEADER_REPLAY_SOURCE) for m in [*landed, *parked])
    assert set(seen) == every and set(seen.values()) == {1}, "each DLQ record replayed or parked exactly once"
    assert (len(landed), len(parked)) == (REPLAYED, PARKED)
    dirty = read_all(kafka_config, source, isolation="read_uncommitted")
    assert len(dirty) > len(landed), "the killed try's aborted records are in the log, hidden from read_committed"
    assert committed(kafka_config, f"kerr-replay.{dlq}", dlq, PARTITIONS) == dlq_ends

    answer = client.get("/api/replay-summary", params={"dag_id": "dlq_replay", "run_id": run_id})
    assert answer.status_code == 200, answer.text
    (whole,) = answer.json()["replays"]
    assert whole["task_id"] == "replay_partitions" and len(whole["tasks"]) == TASKS
    summary = whole["summary"]
    # XCom keeps a task's last try: the retry reports what it read after the killed try's two commits.
    assert summary["status"] == "completed" and summary["tasks"] == TASKS
    assert summary["replayed"] + summary["parked"] == summary["scanned"] == REPLAYED + PARKED - held_at
    assert summary["committed_offsets"] == {str(p): o for p, o in dlq_ends.items()}
    assert {row["action"] for row in summary["breakdown"]} == {"replay", "park"}
    assert [task["try_number"] for task in whole["tasks"]] == [2 if i == KILLED_INDEX else 1 for i in range(TASKS)]
    assert [task["partitions"] for task in whole["tasks"]] == [[2 * i, 2 * i + 1] for i in range(TASKS)]


def test_partitions_the_dlq_does_not_have_are_refused_before_any_record_is_read(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    from airflow_kerr.replay.engine import DlqReplay
    from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions

    dlq = create_topic(f"{unique_topic}.dlq", 2)
    options = ReplayOptions.build(dlq_topic=dlq, partitions="1-3")

    with pytest.raises(InvalidReplayOptions, match=rf"partitions='1-3': {dlq} has no partition 2-3; it has 0-1"):
        DlqReplay(kafka_config, options, run_id="r").run()
    assert committed(kafka_config, f"kerr-replay.{dlq}", dlq, 2) == {0: -1001, 1: -1001}, "nothing committed"
