"""The driver's side of a run: check the DLQ topic, plan the offset ranges, run the tasks, publish, commit.

The tasks' code is named by its module path (:data:`PROCESS_BATCHES`), as executors load
it; the driver imports none of it, so the entry point loads with no Arrow or numpy.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import time
from collections.abc import Sequence
from typing import Any

from airflow_kerr.callables import import_callable
from airflow_kerr.errors import (
    ErrorHandlingConfig,
    ErrorMetrics,
    ToleranceExceeded,
    ToleranceType,
    describe_error,
)
from airflow_kerr.errors.config import (
    DLQ_TOPIC_PARTITIONS,
    DLQ_TOPIC_REPLICATION_FACTOR,
    ERRORS_TOLERANCE_LIMIT,
    LONG_MAX,
)
from airflow_kerr.errors.retry import TOLERANCE_EXCEEDED_MESSAGE
from airflow_kerr.spark import kafka_source
from airflow_kerr.spark.kafka_source import OffsetRange, plan_offset_ranges, ranges_to_json, split_ranges
from airflow_kerr.spark.outage import Outage
from airflow_kerr.spark.run_metrics import publish_metrics_record
from airflow_kerr.spark.sinks import ProducerChannel
from airflow_kerr.spark.spec import PipelineSpec

LOG = logging.getLogger("airflow_kerr.spark.driver")
# Fault injection for the at-least-once trials, after the outputs are flushed and before the commit:
# "kill" SIGKILLs the driver (no cleanup runs, as when the machine or the OOM killer takes it), anything else exits 3.
EXIT_BEFORE_COMMIT_ENV = "KERR_EXIT_BEFORE_COMMIT"
SUMMARY_SCHEMA = (
    "topic string, partition int, first_offset long, last_offset long, records_in long, records_out long, "
    "metrics binary, outage string"
)
# The executors' entry points by module path: executors import them, the driver needs no Arrow to name them.
PROCESS_BATCHES = "airflow_kerr.spark.partition.process_batches"
#: What Spark's ``kafka`` format hands its rows to (through ``mapInArrow``), named the same way.
PROCESS_PARTITION = "airflow_kerr.spark.partition.process_partition"


def kerr_kafka_reader(spark: Any, spec: PipelineSpec, ranges: Sequence[OffsetRange]) -> Any:
    """``spark.read`` set up for the planned ranges in the ``kerr_kafka`` format, with the spec's split settings."""
    return (
        spark.read.format(kafka_source.FORMAT_NAME)
        .option("offsetRanges", ranges_to_json(ranges))
        .option("maxRecordsPerPartition", str(split_settings(spark, spec)[0]))
        .option("minPartitions", str(split_settings(spark, spec)[1]))
        .options(**kafka_client_options(spec))
    )


def split_settings(spark: Any, spec: PipelineSpec) -> tuple[int, int]:
    """(records per task at most, tasks at least): with ``errors.outage.enable`` a partition is never split.

    A trip commits its partition up to the last clean batch; a second task further along the
    same partition would already have written records past that point, written again by the rerun.
    """
    if spec.validate().outage_enable:
        return LONG_MAX, 1
    return spec.source.max_records_per_partition, spark.sparkContext.defaultParallelism


def kafka_client_options(spec: PipelineSpec) -> dict[str, str]:
    """The spec's librdkafka settings as source options (``kafka.<key>``), which both source formats read."""
    return {f"kafka.{key}": str(value) for key, value in spec.kafka.items()}


def process_source(spark: Any, spec: PipelineSpec, ranges: Sequence[OffsetRange], run_id: str) -> list[Any]:
    """Run the pipeline over the planned ranges; one summary row per Spark task.

    With ``kerr_kafka`` each read task runs the pipeline itself (:func:`process_batches`);
    Spark's ``kafka`` format hands its rows to ``mapInArrow`` instead.
    """
    spec_json = spec.to_json()
    if spec.source.format == kafka_source.FORMAT_NAME:
        argument = json.dumps({"spec": spec_json, "run_id": run_id})
        reader = kerr_kafka_reader(spark, spec, ranges).schema(SUMMARY_SCHEMA)
        reader = reader.option("processBatches", PROCESS_BATCHES).option("processArgument", argument)
        return list(reader.load().collect())
    return list(
        load_source(spark, spec, ranges)
        .mapInArrow(import_callable(PROCESS_PARTITION)(spec_json, run_id), SUMMARY_SCHEMA)
        .collect()
    )


def load_source(spark: Any, spec: PipelineSpec, ranges: Sequence[OffsetRange]) -> Any:
    """The planned ranges as a DataFrame in the ``kerr_kafka`` schema, from either source format.

    ``kerr_kafka`` splits the ranges itself, so it gets them unsplit with the spec's split
    settings: handing it split ranges would split them again with its own defaults.
    """
    max_records, min_partitions = split_settings(spark, spec)
    if spec.source.format == kafka_source.FORMAT_NAME:
        return kerr_kafka_reader(spark, spec, ranges).load()
    pieces = split_ranges(ranges, max_records, min_partitions)
    starting: dict[str, dict[str, int]] = {r.topic: {} for r in ranges}
    ending: dict[str, dict[str, int]] = {r.topic: {} for r in ranges}
    for r in ranges:
        starting[r.topic][str(r.partition)] = r.start
        ending[r.topic][str(r.partition)] = r.end
    reader = (
        spark.read.format("kafka")
        .option("subscribe", ",".join(spec.source.topics))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .option("minPartitions", str(len(pieces)))
        .options(**kafka_client_options(spec))
    )
    try:
        frame = reader.load()
    except Exception as exc:
        if "Failed to find data source: kafka" in str(exc):
            raise RuntimeError(
                "source.format='kafka' needs Spark's Kafka connector on the classpath "
                "(spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>); "
                "use source.format='kerr_kafka' to read without it"
            ) from exc
        raise
    return frame.selectExpr(
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType as timestamp_type", "headers"
    )


def commit_offsets(spec: PipelineSpec, ranges: Sequence[OffsetRange]) -> None:
    """Commit the planned end offsets for the pipeline's consumer group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**spec.kafka, "group.id": spec.source.group_id, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(r.topic, r.partition, r.end) for r in ranges], asynchronous=False)
    finally:
        consumer.close()


def publish_run_metrics(
    channel: ProducerChannel, spec: PipelineSpec, run_id: str, metrics: ErrorMetrics, started_ms: int, state: str
) -> None:
    """Write the whole run's metrics record (``scope="run"``) and wait until Kafka has it."""
    publish_metrics_record(
        channel,
        spec,
        metrics,
        task=None,
        run_id=run_id,
        started_ms=started_ms,
        scope="run",
        state=state,
    )


def check_run_limits(config: ErrorHandlingConfig, metrics: ErrorMetrics) -> None:
    """errors.tolerance.limit counts failed records across the whole run, not per task."""
    if config.tolerance is ToleranceType.ALL and 0 <= config.tolerance_limit < metrics.total_records_skipped:
        raise ToleranceExceeded(
            f"{TOLERANCE_EXCEEDED_MESSAGE}: {metrics.total_records_skipped} records failed in this run, "
            f"more than {ERRORS_TOLERANCE_LIMIT}={config.tolerance_limit}",
            limit=ERRORS_TOLERANCE_LIMIT,
        )


class OutageDetected(RuntimeError):
    """A task's batch tripped ``errors.outage.*``: the run committed its clean batches and fails."""

    def __init__(self, outages: Sequence[Outage]) -> None:
        self.outages = list(outages)
        more = f" (and {len(outages) - 1} more partitions)" if len(outages) > 1 else ""
        super().__init__(f"{outages[0].describe()}{more}")


def outage_commits(ranges: Sequence[OffsetRange], outages: Sequence[Outage]) -> list[OffsetRange]:
    """The planned ranges cut at each tripped partition's resume offset: what a run with an outage commits."""
    resume = {(o.topic, o.partition): o.resume_offset for o in outages}
    return [OffsetRange(r.topic, r.partition, r.start, resume.get((r.topic, r.partition), r.end)) for r in ranges]


class DeadLetterTopicUnavailable(RuntimeError):
    """The DLQ topic does not exist and may not be created, or creating it failed."""


def ensure_dead_letter_topic(spec: PipelineSpec, config: ErrorHandlingConfig, timeout_s: float = 30.0) -> None:
    """Create the DLQ topic as Connect does (partitions and replication factor from ``errors.*``), or insist it exists.

    Checked before any record is read, so a DLQ that cannot be written stops the run
    before it starts rather than after the first bad record.
    """
    name = config.dlq_topic_name
    if not name:
        return
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(spec.kafka)
    existing = admin.list_topics(timeout=timeout_s).topics
    if name in existing and existing[name].error is None:
        return
    if not config.dlq_auto_create_topics_enable:
        raise DeadLetterTopicUnavailable(
            f"errors.deadletterqueue.topic.name={name!r} does not exist and "
            "errors.deadletterqueue.auto.create.topics.enable=false: create the topic first"
        )
    try:
        topic = NewTopic(name, config.dlq_topic_partitions, config.dlq_topic_replication_factor)
        admin.create_topics([topic])[name].result(timeout_s)
    except Exception as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        # As in Connect, the replication factor is judged here, by the client and the broker, not at parse time.
        raise DeadLetterTopicUnavailable(
            f"could not create the DLQ topic {name!r} with {DLQ_TOPIC_PARTITIONS}={config.dlq_topic_partitions} "
            f"and {DLQ_TOPIC_REPLICATION_FACTOR}={config.dlq_topic_replication_factor}: {describe_error(exc)}"
        ) from exc
    LOG.info(
        "created DLQ topic %s (%d partitions, replication factor %d)",
        name,
        config.dlq_topic_partitions,
        config.dlq_topic_replication_factor,
    )


def run_job(spark: Any, spec: PipelineSpec, run_id: str) -> dict[str, Any]:
    """Plan, process and commit one bounded batch; return the run summary. Raises when the run failed."""
    config = spec.validate()
    started_ms = int(time.time() * 1000)
    # Made now, used at the end: an idempotent producer's first delivery waits about 0.5 s for its
    # producer id (librdkafka's start-up timer), which then overlaps the whole run instead of adding to it.
    metrics_channel = ProducerChannel(spec.kafka)
    ensure_dead_letter_topic(spec, config)
    kafka_source.register(spark)
    ranges = plan_offset_ranges(
        spec.kafka,
        spec.source.topics,
        starting_offsets=spec.source.starting_offsets,
        group_id=spec.source.group_id,
        starting_timestamp_ms=spec.source.starting_timestamp_ms,
    )
    planned = sum(r.count for r in ranges)
    LOG.info("planned %d records in %d partitions for run %s", planned, len(ranges), run_id)
    summaries = process_source(spark, spec, ranges, run_id) if planned else []
    metrics = ErrorMetrics.zero()
    for row in summaries:
        metrics = metrics.merge(pickle.loads(row["metrics"]))
    check_run_limits(config, metrics)
    outages = [Outage.from_json(row["outage"]) for row in summaries if row["outage"]]
    if outages:
        publish_run_metrics(metrics_channel, spec, run_id, metrics, started_ms, "outage")
        commit_offsets(spec, outage_commits(ranges, outages))
        raise OutageDetected(outages)
    publish_run_metrics(metrics_channel, spec, run_id, metrics, started_ms, "success")
    if os.environ.get(EXIT_BEFORE_COMMIT_ENV):
        LOG.error(
            "%s is set: stopping after the outputs were flushed, before the offset commit", EXIT_BEFORE_COMMIT_ENV
        )
        if os.environ[EXIT_BEFORE_COMMIT_ENV] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    commit_offsets(spec, ranges)
    records_out = sum(int(row["records_out"]) for row in summaries)
    return {
        "pipeline": spec.name,
        "run_id": run_id,
        "planned": planned,
        "records_out": records_out,
        "committed": {f"{r.topic}-{r.partition}": r.end for r in ranges},
        "metrics": metrics.as_connect_metrics() | {"records_in": metrics.records_in},
    }
