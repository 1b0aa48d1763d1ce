"""Replay repaired records from a dead letter queue back to their source topics.

Trigger it from the UI with **Trigger DAG → the form**. It starts as a **dry run**: it
reads the DLQ with the replay group, writes and commits nothing, and reports what would be
replayed, counted by target topic, stage and exception class (task log and XCom). Untick
*Dry run* to replay for real: each batch is written together with the replay group's
offsets in one Kafka transaction, so a record is replayed once even when the task is
killed and run again.

Bad settings (an invalid regular expression, an inverted time or offset range, a topic
that does not exist) fail the task with a message naming each one, before any record is
read. Records that must not go back (replayed `max_replays` times already, no source
topic, malformed error headers, a fix that raised, a forbidden target) go to the parking
topic with a reason header; a dry run lists the first of them as "would park".

A fix on Schema Registry values: set *Value format* (avro, protobuf or json_schema) and the
*Schema Registry connection*; the fix gets decoded values, the replay re-encodes them, and a
repaired value that no longer fits its schema is parked with the serializer's reason.

A large DLQ replays faster in parallel: set *Parallel replay tasks* (Pacing) and its partitions are split
over that many mapped `replay_partitions` tasks, each with its own transaction and its partitions' offsets, so the
executor runs them side by side; the rate limit and *Max records* are shared out between them. A killed task's
retry fences its open transaction and continues from its partitions' committed offsets.

If the broker stops answering, a transaction gives up after *Transaction timeout* seconds:
the run fails saying what it committed, and the next run continues from there.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_kerr.operators.dlq_replay import (
    DeadLetterQueueReplayOperator,
    DlqPartitionGroupsOperator,
    arguments_from_the_form,
    fan_out_branch,
    replay_form_params,
)

#: Retries of each mapped replay task: a retry continues from its partitions' committed offsets, exactly once.
MAPPED_RETRIES = 2
#: What each mapped replay task gets from the split: its partitions and its share of the rate and of Max records.
PER_TASK = ("partitions", "max_records_per_second", "max_records")

with DAG(
    dag_id="dlq_replay",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["kerr", "dlq", "replay"],
    doc_md=__doc__,
    # The form: the Kafka connection and every replay setting, with safe defaults (a dry run, 500 records/s).
    params=replay_form_params(),
) as dag:
    # One replay task, or (with "Parallel replay tasks" above 1) the DLQ's partitions split over mapped ones.
    fan_out = task.branch(task_id="fan_out")(fan_out_branch)(
        "{{ params.replay_tasks }}", single_task_id="replay", split_task_id="partition_groups"
    )
    # Each argument renders the form field of the same name: kafka_config_id="{{ params.kafka_config_id }}", ...
    one = DeadLetterQueueReplayOperator(task_id="replay", **arguments_from_the_form())
    split = DlqPartitionGroupsOperator(
        task_id="partition_groups",
        dlq_topic="{{ params.dlq_topic }}",
        replay_tasks="{{ params.replay_tasks }}",
        partitions="{{ params.partitions }}",
        max_records_per_second="{{ params.max_records_per_second }}",
        max_records="{{ params.max_records }}",
        kafka_config_id="{{ params.kafka_config_id }}",
    )
    # One mapped task per group: its partitions and its share of the rate and of Max records come from the split.
    # A task killed with its worker is retried: the retry fences the killed try and resumes from its offsets.
    many = DeadLetterQueueReplayOperator.partial(
        task_id="replay_partitions",
        retries=MAPPED_RETRIES,
        retry_delay=timedelta(seconds=5),
        **arguments_from_the_form(exclude=PER_TASK),
    ).expand_kwargs(split.output)
    fan_out >> [one, split]
