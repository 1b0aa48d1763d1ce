"""The DLQ replay fanned out: 4 mapped tasks, each over its group of the DLQ's partitions, exactly once."""

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator, DlqPartitionGroupsOperator

with DAG(
    dag_id="docs_replay_fanout",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    # One dict per task: its partitions, and its share of the rate limit and of max_records.
    groups = DlqPartitionGroupsOperator(
        task_id="partition_groups", dlq_topic="orders.dlq", replay_tasks=4, max_records_per_second=2000
    )
    DeadLetterQueueReplayOperator.partial(
        task_id="replay",
        dlq_topic="orders.dlq",
        fix="airflow_kerr.examples.orders.repair_order",
        dry_run=False,
        retries=2,  # a retry fences the killed try and resumes from its partitions' committed offsets
        retry_delay=timedelta(seconds=5),
    ).expand_kwargs(groups.output)
