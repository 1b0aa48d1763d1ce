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

If the broker stops answering, a transaction gives up after *Transaction timeout* seconds:
the run fails saying what it committed, and the next run continues from there.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param

from airflow_kerr.errors import Stage
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

SOURCE = "Source"
SELECTION = "Selection"
FIX = "Fix"
SAFETY = "Safety"
PACING = "Pacing"
STAGES = list(Stage.__members__)


def _optional_text(title: str, description: str, section: str, **schema: Any) -> Param:
    return Param(None, type=["null", "string"], title=title, description=description, section=section, **schema)


PARAMS = {
    "dlq_topic": Param(
        "orders.dlq",
        type="string",
        minLength=1,
        title="DLQ topic",
        description="The dead letter queue to replay (Kafka Connect, KIP-1191 or Kafka Streams headers).",
        section=SOURCE,
    ),
    "kafka_config_id": Param(
        "kafka_default",
        type="string",
        title="Kafka connection",
        description="A `kafka` connection; its extra JSON is the librdkafka configuration.",
        section=SOURCE,
    ),
    "replay_group": _optional_text(
        "Replay consumer group",
        "Default kerr-replay.<DLQ topic>. The run starts at this group's committed offsets and commits "
        "past every record it reads, selected or not; use a new group to read the DLQ from the start.",
        SOURCE,
    ),
    "source_topics": Param(
        [],
        type="array",
        items={"type": "string"},
        title="Source topics",
        description="Only records that failed on these topics (one per line). Empty: any topic.",
        section=SELECTION,
    ),
    "stages": Param(
        [],
        type="array",
        items={"type": "string", "enum": STAGES},
        examples=STAGES,
        title="Failed stages",
        description="Only records that failed in these stages. Empty: any stage.",
        section=SELECTION,
    ),
    "exception_class_regex": _optional_text(
        "Exception class (regex)",
        "Only records whose exception class matches this regular expression (searched), e.g. InvalidOrder or ^json\\..",
        SELECTION,
    ),
    "start_time": _optional_text(
        "From time",
        "Only records whose timestamp (the failed record's own, kept by the DLQ) is at or after this.",
        SELECTION,
        format="date-time",
    ),
    "end_time": _optional_text(
        "Until time", "Only records whose timestamp is before this.", SELECTION, format="date-time"
    ),
    "start_offset": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        title="From DLQ offset",
        description="Read each DLQ partition from this offset (inclusive).",
        section=SELECTION,
    ),
    "end_offset": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        title="Until DLQ offset",
        description="Read each DLQ partition up to this offset (exclusive); later records wait for another run.",
        section=SELECTION,
    ),
    "header_match": Param(
        {},
        type="object",
        title="Header match",
        description='Only records carrying all these headers with these values, e.g. {"kind": "invalid"}.',
        section=SELECTION,
    ),
    "fix": _optional_text(
        "Fix function",
        "Dotted path of fn(ReplayRecord) -> ReplayRecord or None. None drops the record; an exception parks it "
        "with the exception as the reason. Empty: replay the records unchanged.",
        FIX,
        examples=["airflow_kerr.examples.orders.repair_order"],
    ),
    "dry_run": Param(
        True,
        type="boolean",
        title="Dry run",
        description="Write and commit nothing; report what would be replayed. Untick to replay.",
        section=SAFETY,
    ),
    "target_topic": _optional_text(
        "Target topic override",
        "Write every record here instead of the source topic named in its DLQ headers.",
        SAFETY,
    ),
    "target_allowlist": _optional_text(
        "Allowed targets (regex)",
        "Park any record whose target topic does not fully match this regular expression. Internal topics "
        "(starting with __) and the DLQ itself are never written to, whatever this says.",
        SAFETY,
    ),
    "max_replays": Param(
        3,
        type="integer",
        minimum=1,
        maximum=100,
        title="Max replays per record",
        description="A record that came back to the DLQ after this many replays is parked instead of looping.",
        section=SAFETY,
    ),
    "parking_topic": _optional_text(
        "Parking topic",
        "Where records that must not go back are written, with a reason header. Default <DLQ topic>.parked "
        "(created with the DLQ's partition count if missing).",
        SAFETY,
    ),
    "max_records_per_second": Param(
        500,
        type=["null", "number"],
        exclusiveMinimum=0,
        title="Max records per second",
        description="Write rate limit. Empty: as fast as the cluster takes them.",
        section=PACING,
    ),
    "max_records": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        title="Max records",
        description="Stop after this many selected records; the next run continues from there. Empty: no limit.",
        section=PACING,
    ),
    "batch_size": Param(
        1000,
        type="integer",
        enum=[50, 100, 500, 1000, 5000],
        title="Records per transaction",
        description="Larger batches commit less often; with a rate limit a batch holds at most one second's worth.",
        section=PACING,
    ),
    "transaction_timeout_s": Param(
        60,
        type="integer",
        minimum=1,
        maximum=900,
        title="Transaction timeout (seconds)",
        description="The longest one transaction may take, retries included. If the broker does not answer "
        "within it, the open transaction is aborted and the run fails saying what was committed; the next run "
        "continues from there.",
        section=SAFETY,
    ),
    "progress_interval_s": Param(
        5,
        type="integer",
        enum=[2, 5, 10, 30, 60],
        title="Progress every (seconds)",
        description="How often the task log shows done / total / rate / ETA.",
        section=PACING,
    ),
}

with DAG(
    dag_id="dlq_replay",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["kerr", "dlq", "replay"],
    doc_md=__doc__,
    params=PARAMS,
) as dag:
    DeadLetterQueueReplayOperator(
        task_id="replay",
        kafka_config_id="{{ params.kafka_config_id }}",
        dlq_topic="{{ params.dlq_topic }}",
        replay_group="{{ params.replay_group }}",
        source_topics="{{ params.source_topics }}",
        stages="{{ params.stages }}",
        exception_class_regex="{{ params.exception_class_regex }}",
        start_time="{{ params.start_time }}",
        end_time="{{ params.end_time }}",
        start_offset="{{ params.start_offset }}",
        end_offset="{{ params.end_offset }}",
        header_match="{{ params.header_match }}",
        fix="{{ params.fix }}",
        dry_run="{{ params.dry_run }}",
        target_topic="{{ params.target_topic }}",
        target_allowlist="{{ params.target_allowlist }}",
        max_replays="{{ params.max_replays }}",
        parking_topic="{{ params.parking_topic }}",
        max_records_per_second="{{ params.max_records_per_second }}",
        max_records="{{ params.max_records }}",
        batch_size="{{ params.batch_size }}",
        progress_interval_s="{{ params.progress_interval_s }}",
        transaction_timeout_s="{{ params.transaction_timeout_s }}",
    )
