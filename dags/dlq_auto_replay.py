"""Opt-in, always on: replay dead letters that failed on a transient error, as soon as they land in ``orders.dlq``.

Paused when it first appears: unpause it to opt in. The watched DLQ asset starts it
whenever ``orders.dlq`` grows (its watcher reads the topic's end offsets every 5 s on the
triggerer). It replays only records whose exception class is one of ``RETRIABLE`` (a
timeout or a dropped connection that a later try may get past), exactly, never by
prefix; everything else stays for a person and the ``dlq_replay`` form. It reads with its
own replay group, so ``dlq_replay`` still sees every record, and writes in Kafka
transactions with the group's offsets: a record is replayed once even when a run is
killed and the next one starts. At most 500 records per second, so a burst of dead
letters does not flood the source topic.

Triggered by hand (Trigger in the UI, no asset event), it replays the retriable dead
letters waiting now, exactly as a run started by the asset does (the run reads no event:
its replay group knows where it stopped). The trigger dialog's "Unpause dlq_auto_replay on
trigger" box is ticked by default, so triggering it also opts in; untick it to replay once
while it stays paused (Airflow starts that run only once the DAG is unpaused).
"""

from __future__ import annotations

import re

import pendulum
from airflow.sdk import DAG

from airflow_kerr.assets.watched import dead_letter_queue_asset
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

DLQ_TOPIC = "orders.dlq"
RETRIABLE = (
    "airflow_kerr.errors.exceptions.RetriableError",
    "TimeoutError",
    "ConnectionError",
)
DLQ = dead_letter_queue_asset(DLQ_TOPIC, min_records=1, poll_interval=5.0)

with DAG(
    dag_id="dlq_auto_replay",
    schedule=[DLQ],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    tags=["kerr", "example", "dlq", "replay"],
    doc_md=__doc__,
) as dag:
    DeadLetterQueueReplayOperator(
        task_id="replay_retriable",
        dlq_topic=DLQ_TOPIC,
        replay_group=f"kerr-auto-replay.{DLQ_TOPIC}",
        exception_class_regex="^(?:" + "|".join(re.escape(name) for name in RETRIABLE) + ")$",
        dry_run=False,
        max_records_per_second=500,
    )
