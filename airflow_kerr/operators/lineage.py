"""OpenLineage for the operators that move data: Kafka datasets and the run facets of a job and a replay.

Imported only from ``get_openlineage_facets_on_complete``, which Airflow's OpenLineage
provider calls; the provider is an optional extra (``airflow-provider-kerr[openlineage]``),
so nothing else of ours imports this module.

Datasets are named as OpenLineage's naming spec says
(:class:`openlineage.client.naming.dataset.Kafka`): namespace ``kafka://<host>:<port>`` of
the first bootstrap server, name the topic. A sink path is a file dataset: namespace
``file`` and the path, or ``<scheme>://<authority>`` and the path for a URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.openlineage.extractors import OperatorLineage
from attrs import define
from openlineage.client.event_v2 import Dataset, InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet, output_statistics_output_dataset
from openlineage.client.naming.dataset import Kafka, LocalFileSystem

from airflow_kerr.errors.metrics import (
    DLQ_PRODUCE_FAILURES,
    DLQ_PRODUCE_REQUESTS,
    TOTAL_RECORD_ERRORS,
    TOTAL_RECORDS_SKIPPED,
    TOTAL_RETRIES,
)
from airflow_kerr.spark.spec import PipelineSpec

#: Kafka's default port, for a bootstrap server given without one.
DEFAULT_KAFKA_PORT = "9092"
#: The run facets' keys in an event's ``run.facets``.
JOB_FACET_KEY = "kerr_errorHandling"
REPLAY_FACET_KEY = "kerr_dlqReplay"


@define
class ErrorHandlingRunFacet(RunFacet):
    """One error-aware Spark run: what it read, how many records failed for good, where they went.

    ``failedRecords`` is Connect's ``total-record-errors`` (records whose operation failed
    after any retries), ``deadLetters`` the DLQ records written
    (``deadletterqueue-produce-requests``); ``metrics`` is the run's whole metrics record.
    """

    pipeline: str
    runId: str
    errorsTolerance: str
    deadLetterQueueTopic: str | None
    recordsIn: int | None
    failedRecords: int | None
    skippedRecords: int | None
    retries: int | None
    deadLetters: int | None
    deadLetterFailures: int | None
    metrics: dict[str, Any] | None


@define
class DlqReplayRunFacet(RunFacet):
    """One DLQ replay: what it read, replayed, parked and dropped (``would*`` in a dry run), and its status."""

    deadLetterQueueTopic: str
    replayGroup: str
    parkingTopic: str
    dryRun: bool
    status: str
    scanned: int
    selected: int
    replayed: int
    parked: int
    dropped: int
    wouldReplay: int
    wouldPark: int
    wouldDrop: int
    skipped: int
    transactions: int


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://host:port`` of the first bootstrap server (a ``PROTOCOL://`` prefix is dropped, IPv6 kept)."""
    first = str(bootstrap_servers or "").split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    if not first:
        raise ValueError("the Kafka config has no bootstrap.servers")
    if first.startswith("["):  # [::1]:9092
        host, _, rest = first.partition("]")
        host, port = host + "]", rest.lstrip(":") or DEFAULT_KAFKA_PORT
    elif first.count(":") == 1:
        host, port = first.split(":")
    elif ":" in first:  # a bare IPv6 address
        host, port = f"[{first}]", DEFAULT_KAFKA_PORT
    else:
        host, port = first, DEFAULT_KAFKA_PORT
    return Kafka(bootstrap_server_host=host, port=port, topic="-").get_namespace()


def path_dataset(path: str) -> tuple[str, str]:
    """(namespace, name) of a sink path: ``file`` and the path, or ``scheme://authority`` and the path of a URL."""
    parts = urlsplit(path)
    if parts.scheme and parts.scheme != "file":
        return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/") or "/"
    local = LocalFileSystem(path=parts.path if parts.scheme == "file" else path)
    return local.get_namespace(), local.get_name()


def _count(metrics: Mapping[str, Any] | None, key: str) -> int | None:
    value = None if metrics is None else metrics.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _output(namespace: str, name: str, rows: int | None) -> OutputDataset:
    facets: dict[str, Any] = {}
    if rows is not None:
        facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=rows)
    return OutputDataset(namespace=namespace, name=name, outputFacets=facets)


def job_lineage(
    spec: PipelineSpec, *, bootstrap_servers: str, run_id: str, summary: Mapping[str, Any] | None, finished: bool
) -> OperatorLineage:
    """An error-aware Spark run: inputs the source topics; outputs the sink and the DLQ topic, once it finished.

    A run that did not finish reports its inputs only: what it wrote is unknown. The DLQ
    topic is an output of every finished run that has one, with its dead letters as
    ``outputStatistics.rowCount`` (0 for a clean run), and the error-handling facet carries
    the failed-record count; without the run's metrics record the counts are left out.
    """
    config = spec.validate()
    source_topics, sink_kind, dlq_topic = spec.source.topics, spec.sink.kind, config.dlq_topic_name
    sink_target = spec.sink.topic if sink_kind == "kafka" else spec.sink.path
    namespace = kafka_namespace(bootstrap_servers)
    inputs = [InputDataset(namespace=namespace, name=topic) for topic in source_topics]
    outputs: list[Dataset] = []
    run_facets: dict[str, RunFacet] = {}
    if finished:
        if sink_kind == "kafka" and sink_target:
            outputs.append(_output(namespace, sink_target, None))
        elif sink_kind in ("parquet", "jsonl") and sink_target:
            outputs.append(_output(*path_dataset(sink_target), None))
        if dlq_topic:
            outputs.append(_output(namespace, dlq_topic, _count(summary, DLQ_PRODUCE_REQUESTS)))
        run_facets[JOB_FACET_KEY] = ErrorHandlingRunFacet(
            pipeline=spec.name,
            runId=run_id,
            errorsTolerance=config.tolerance.value,
            deadLetterQueueTopic=dlq_topic or None,
            recordsIn=_count(summary, "records_in"),
            failedRecords=_count(summary, TOTAL_RECORD_ERRORS),
            skippedRecords=_count(summary, TOTAL_RECORDS_SKIPPED),
            retries=_count(summary, TOTAL_RETRIES),
            deadLetters=_count(summary, DLQ_PRODUCE_REQUESTS),
            deadLetterFailures=_count(summary, DLQ_PRODUCE_FAILURES),
            metrics=dict(summary) if summary is not None else None,
        )
    return OperatorLineage(inputs=list(inputs), outputs=outputs, run_facets=run_facets)


def replay_lineage(
    *,
    bootstrap_servers: str,
    dlq_topic: str,
    parking_topic: str,
    summary: Mapping[str, Any] | None,
) -> OperatorLineage:
    """A DLQ replay: input the DLQ topic; outputs each topic it replayed to and the parking topic.

    ``summary`` is the operator's XCom (:meth:`ReplaySummary.to_dict`), None when the run did
    not finish (inputs only). A replay target is an output when records were replayed to it,
    with their count as ``outputStatistics.rowCount``; the parking topic is an output of
    every real run, with the parked count (0 when nothing was parked). A dry run writes
    nothing, so it has no outputs.
    """
    namespace = kafka_namespace(bootstrap_servers)
    inputs = [InputDataset(namespace=namespace, name=dlq_topic)]
    if summary is None:
        return OperatorLineage(inputs=list(inputs))
    outputs: list[Dataset] = []
    dry_run = bool(summary.get("dry_run"))
    if not dry_run:
        replayed: dict[str, int] = {}
        for row in summary.get("breakdown", []):
            if row.get("action") == "replay" and row.get("topic"):
                replayed[row["topic"]] = replayed.get(row["topic"], 0) + int(row.get("count", 0))
        outputs = [_output(namespace, topic, rows) for topic, rows in sorted(replayed.items())]
        outputs.append(_output(namespace, parking_topic, int(summary.get("parked", 0))))
    facet = DlqReplayRunFacet(
        deadLetterQueueTopic=dlq_topic,
        replayGroup=str(summary.get("group_id", "")),
        parkingTopic=parking_topic,
        dryRun=dry_run,
        status=str(summary.get("status", "")),
        scanned=int(summary.get("scanned", 0)),
        selected=int(summary.get("selected", 0)),
        replayed=int(summary.get("replayed", 0)),
        parked=int(summary.get("parked", 0)),
        dropped=int(summary.get("dropped", 0)),
        wouldReplay=int(summary.get("would_replay", 0)),
        wouldPark=int(summary.get("would_park", 0)),
        wouldDrop=int(summary.get("would_drop", 0)),
        skipped=int(summary.get("skipped", 0)),
        transactions=int(summary.get("transactions", 0)),
    )
    return OperatorLineage(inputs=list(inputs), outputs=outputs, run_facets={REPLAY_FACET_KEY: facet})
