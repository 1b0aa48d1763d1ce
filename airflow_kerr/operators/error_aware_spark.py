"""``ErrorAwareSparkSubmitOperator``: submit the error-aware PySpark job with Kafka Connect's ``errors.*`` settings."""

from __future__ import annotations

import os
import re
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import AssetAlias

import airflow_kerr
from airflow_kerr.assets.kafka import cluster_of, topic_asset
from airflow_kerr.compat import AirflowFailException
from airflow_kerr.errors.config import show_value
from airflow_kerr.errors.metrics import DLQ_PRODUCE_REQUESTS
from airflow_kerr.formats.registry_settings import FORMATS
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.hooks.schema_registry import SchemaRegistryHook
from airflow_kerr.kafka.metrics_topic import read_run_dead_letters, run_summary
from airflow_kerr.kafka.offset_spans import RUN_DEAD_LETTERS_XCOM, count_offsets, spans_to_fields
from airflow_kerr.operators.settings_check import fail_on_invalid_settings
from airflow_kerr.operators.templating import is_templated
from airflow_kerr.spark import job
from airflow_kerr.spark.spec import InvalidPipelineSpec, PipelineSpec

#: Stands for the registry connection's URL when a DAG is parsed (connections are read at run time only).
PARSE_TIME_REGISTRY = "http://schema-registry.parse-time.invalid"
CLUSTER_MODE_MESSAGE = (
    "ErrorAwareSparkSubmitOperator runs in client deploy mode only, but {where}: the pipeline spec (which may hold "
    "credentials) is handed to the driver as a file readable only on the machine that submits the job, which a "
    "driver started in the cluster cannot read (and Spark standalone has no cluster mode for Python applications). "
    "Remove deploy-mode 'cluster'; the executors still run on the cluster."
)


def _overlay(base: object, top: object) -> object:
    """``base`` updated by ``top`` when both are mappings; a value that is not a mapping stays for the validator.

    Merging never coerces (``dict("x")`` or ``dict([...])`` would raise or accept a wrong
    shape), so :class:`PipelineSpec` sees and reports what the DAG author wrote.
    """
    if top is None:
        return base
    if base is None:
        return top
    if isinstance(base, Mapping) and isinstance(top, Mapping):
        return {**base, **top}
    return base if isinstance(top, Mapping) else top


def _names_registry_format(pipeline: Mapping[str, Any]) -> bool:
    """Whether the pipeline names ``avro``, ``protobuf`` or ``json_schema`` as a converter or a sink kind."""
    sink = pipeline.get("sink")
    named = [pipeline.get("key_converter"), pipeline.get("value_converter")]
    if isinstance(sink, Mapping):
        named.append(sink.get("kind"))
    return any(isinstance(name, str) and name in FORMATS for name in named)


def build_package_zip(directory: Path) -> Path:
    """Zip the installed ``airflow_kerr`` package for ``--py-files``, so executors import the same code."""
    package = Path(airflow_kerr.__file__).parent
    target = directory / "airflow_kerr.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"):
                archive.write(path, path.relative_to(package.parent))
    return target


class ErrorAwareSparkSubmitOperator(SparkSubmitOperator):
    """Run a :class:`PipelineSpec` with the error-aware job; push the run's metrics summary to XCom.

    ``pipeline`` is the spec as a dict (templated); ``errors`` adds or overrides its
    ``errors.*`` properties. Both are validated when the DAG is parsed, so a bad key
    fails the import with a message naming every bad key. The Kafka settings come
    from the ``kafka`` connection ``kafka_config_id`` (entries in the spec's own
    ``kafka`` win). The spec goes to the job as a file readable only by this user
    (it may hold credentials), never as a shell-quoted argument. Unless
    ``ship_package=False`` (the cluster has the provider installed), the installed
    ``airflow_kerr`` package is shipped to the executors with ``--py-files``.

    With ``emit_assets=True`` the task's ``outlets`` get an :class:`~airflow.sdk.AssetAlias`
    named ``kerr.<pipeline name>.outputs`` (the task id when the name is templated), and a
    successful run adds asset events through it, each with ``extra`` holding ``pipeline``,
    ``run_id``, ``role`` (``sink`` or ``dead_letter_queue``), ``topic`` and every metric of
    the run's summary (``"metrics": None`` instead when the summary was not found): one for
    a Kafka sink topic (:func:`~airflow_kerr.assets.kafka.topic_asset` of ``kafka_config_id``,
    or of ``asset_server`` when given, as the watched assets name it) on every successful
    run, and one for the DLQ topic only when the run wrote dead letters
    (``deadletterqueue-produce-requests`` > 0). The DLQ asset is the one
    :func:`~airflow_kerr.assets.watched.dead_letter_queue_asset` watches, and a DAG scheduled
    on it is there to handle dead letters: it should start for a run that fed the DLQ,
    never for a clean run. Without a summary it is unknown whether dead letters were
    written, so no DLQ event is added (a watcher on the topic still sees it grow).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "pipeline", "errors")
    template_fields_renderers = {"pipeline": "json", "errors": "json"}

    def __init__(  # noqa: PLR0913 - keyword-only operator arguments, each a setting a DAG author names
        self,
        *,
        pipeline: Mapping[str, Any],
        errors: Mapping[str, Any] | None = None,
        kafka_config_id: str = "kafka_default",
        schema_registry_conn_id: str | None = "schema_registry_default",
        ship_package: bool = True,
        conn_id: str = "spark_default",
        name: str | None = None,
        emit_assets: bool = False,
        asset_server: str | None = None,
        **kwargs: Any,
    ) -> None:
        pipeline_name = pipeline.get("name") if isinstance(pipeline, Mapping) else None
        plain_name = pipeline_name if isinstance(pipeline_name, str) and not is_templated(pipeline_name) else None
        super().__init__(
            application=job.__file__,
            conn_id=conn_id,
            name=name or f"kerr-{pipeline_name if isinstance(pipeline_name, str) else 'pipeline'}",
            **kwargs,
        )
        self.pipeline: Any = dict(pipeline) if isinstance(pipeline, Mapping) else pipeline
        self.errors: Any = dict(errors) if isinstance(errors, Mapping) else ({} if errors is None else errors)
        self.kafka_config_id = kafka_config_id
        self.schema_registry_conn_id = schema_registry_conn_id
        self.ship_package = ship_package
        self.emit_assets = emit_assets
        self.asset_server = asset_server
        #: The outlet alias the run's asset events go through; None unless ``emit_assets``.
        self.outputs_alias: AssetAlias | None = None
        if emit_assets:
            cluster_of(kafka_config_id, asset_server)  # a bad server fails the parse, not the run
            self.outputs_alias = AssetAlias(name=f"kerr.{plain_name or self.task_id}.outputs")
            self.outlets = [*self.outlets, self.outputs_alias]
        #: What the OpenLineage facets report, set by ``execute``: the rendered spec, the run id, the
        #: bootstrap servers, the metrics summary and whether the job finished.
        self._lineage: dict[str, Any] | None = None
        if self._deploy_mode == "cluster":
            raise ValueError(CLUSTER_MODE_MESSAGE.format(where="deploy_mode='cluster'"))
        if not is_templated(self.pipeline) and not is_templated(self.errors):
            # The registry connection is read at run time; here it stands as a URL, so only a spec that names a
            # registry format with neither a connection nor its own schema_registry fails the parse.
            self.spec(kafka_config={}, registry_config={"url": PARSE_TIME_REGISTRY} if schema_registry_conn_id else {})

    def spec(self, kafka_config: Mapping[str, Any], registry_config: Mapping[str, Any] | None = None) -> PipelineSpec:
        """The rendered, validated spec with the connections' Kafka and Schema Registry settings under the spec's own.

        ``registry_config`` (from ``schema_registry_conn_id``) is used only by a spec that names
        a registry format (``avro``, ``protobuf``, ``json_schema``) as a converter or sink kind.

        Raises :class:`InvalidPipelineSpec` listing every problem of ``pipeline`` and ``errors``.
        """
        problems: list[str] = []
        if not isinstance(self.errors, Mapping):
            problems.append(
                f"errors (operator argument)={show_value(self.errors)}: expected a mapping of errors.* keys to values"
            )
        if not isinstance(self.pipeline, Mapping):
            problems.append(f"pipeline={show_value(self.pipeline)}: expected a mapping, the pipeline spec as a dict")
            raise InvalidPipelineSpec(problems)
        data = dict(self.pipeline)
        base_errors = {} if data.get("errors") is None else data["errors"]
        data["errors"] = _overlay(base_errors, self.errors if isinstance(self.errors, Mapping) else None)
        data["kafka"] = _overlay(dict(kafka_config), data.get("kafka"))
        if registry_config and _names_registry_format(data):
            data["schema_registry"] = _overlay(dict(registry_config), data.get("schema_registry"))
        try:
            spec = PipelineSpec.from_dict(data)
        except InvalidPipelineSpec as exc:
            raise InvalidPipelineSpec([*problems, *exc.problems]) from None
        if problems:
            raise InvalidPipelineSpec(problems)
        return spec

    def run_id(self, context: Mapping[str, Any]) -> str:
        ti = context.get("ti") or context.get("task_instance")
        dag_run = context.get("dag_run")
        parts = [self.dag_id, getattr(dag_run, "run_id", "manual"), self.task_id, str(getattr(ti, "try_number", 1))]
        return re.sub(r"[^A-Za-z0-9._-]+", "_", ".".join(str(p) for p in parts))

    def execute(self, context: Any) -> dict[str, Any] | None:  # type: ignore[override]
        if self._get_hook()._connection.get("deploy_mode") == "cluster":
            raise AirflowFailException(
                CLUSTER_MODE_MESSAGE.format(where=f"the connection {self._conn_id!r} sets deploy-mode 'cluster'")
            )
        kafka_config = KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config()
        registry_config: dict[str, Any] = {}
        if (
            self.schema_registry_conn_id
            and isinstance(self.pipeline, Mapping)
            and _names_registry_format(self.pipeline)
        ):
            registry_config = SchemaRegistryHook(self.schema_registry_conn_id).client_config()
        try:
            spec = self.spec(kafka_config, registry_config)
        except InvalidPipelineSpec as error:  # rendered templates, or the connection's settings, are bad
            fail_on_invalid_settings(self.log, "pipeline settings", error.problems, str(error))
        run_id = self.run_id(context)
        started_ms = int(time.time() * 1000)
        self._lineage = {"spec": spec, "run_id": run_id, "servers": kafka_config.get("bootstrap.servers", "")}
        with tempfile.TemporaryDirectory(prefix="kerr-job-") as workdir:
            spec_path = Path(workdir) / "pipeline.json"
            descriptor = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(spec.to_json())
            self.application_args = ["--spec-file", str(spec_path), "--run-id", run_id]
            if self.ship_package:
                shipped = str(build_package_zip(Path(workdir)))
                self.py_files = f"{self.py_files},{shipped}" if self.py_files else shipped
            self._hook = None
            self.log.info("pipeline %s, run %s, errors.* = %s", spec.name, run_id, spec.errors)
            self.push_dead_letters(context, kafka_config, spec, run_id, started_ms, running=True)
            try:
                super().execute(context)
            finally:  # a failed run's dead letters are the ones the on-call person wants to see
                self.push_dead_letters(context, kafka_config, spec, run_id, started_ms)
        summary = run_summary(kafka_config, spec.metrics_topic, spec.name, run_id, started_ms - 60_000)
        if summary is None:
            self.log.warning("the job finished but its metrics record for run %s was not found", run_id)
        else:
            self.log.info("run metrics: %s", summary)
        self._lineage.update(summary=summary, finished=True)
        if self.outputs_alias is not None:
            self.add_asset_events(context["outlet_events"], spec, run_id, summary)
        return summary

    def push_dead_letters(
        self,
        context: Any,
        kafka_config: Mapping[str, Any],
        spec: PipelineSpec,
        run_id: str,
        started_ms: int,
        *,
        running: bool = False,
    ) -> dict[str, Any] | None:
        """Leave the run's dead letters (DLQ topic and offsets, from its task records) in XCom for the view's tab.

        Pushed when the job starts (``running``: no offsets yet, so the tab says the task runs,
        and the guard's alert can link to it), then again when it ends, failed runs too. Exact:
        the offsets are the DLQ producer's delivery reports, so records other runs wrote to the
        same DLQ meanwhile are not among them. A lookup that fails is logged and never hides
        the run's own outcome. Returns what was pushed (None without a DLQ topic or on failure).
        """
        dlq_topic = spec.validate().dlq_topic_name
        if not dlq_topic:
            return None
        value: dict[str, Any] = {
            "topic": dlq_topic,
            "kafka_config_id": self.kafka_config_id,
            "pipeline": spec.name,
            "job_run_id": run_id,
            "state": "running" if running else "finished",
        }
        try:
            if not running:
                written = read_run_dead_letters(
                    kafka_config, spec.metrics_topic, spec.name, run_id, started_ms - 60_000
                )
                value.update(
                    topic=written.topic or dlq_topic,
                    records=count_offsets(written.spans),
                    offsets=spans_to_fields(written.spans),
                    task_attempts=written.attempts,
                )
            context["ti"].xcom_push(key=RUN_DEAD_LETTERS_XCOM, value=value)
        except Exception as error:  # the run's outcome matters more than its tab
            self.log.warning("could not record which dead letters run %s wrote: %s", run_id, error)
            return None
        if not running:
            self.log.info("run %s wrote %d dead letters to %s", run_id, value["records"], value["topic"])
        return value

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the source topics in; the sink and the DLQ topic out, with the failed-record count.

        Called by Airflow's OpenLineage provider (the ``openlineage`` extra) after the run, and
        after a failed one too, which reports its inputs only. None before ``execute`` ran.
        """
        if self._lineage is None:
            return None
        from airflow_kerr.operators.lineage import job_lineage

        return job_lineage(
            self._lineage["spec"],
            bootstrap_servers=self._lineage["servers"],
            run_id=self._lineage["run_id"],
            summary=self._lineage.get("summary"),
            finished=bool(self._lineage.get("finished")),
        )

    def add_asset_events(
        self,
        outlet_events: Any,
        spec: PipelineSpec,
        run_id: str,
        summary: Mapping[str, Any] | None,
    ) -> list[tuple[str, str]]:
        """Add the successful run's asset events through the outputs alias; return (role, topic) of each.

        The Kafka sink topic always has one; the DLQ topic only when the summary counts
        dead letters written, so a DAG scheduled on the DLQ asset does not start for a clean run.
        """
        if self.outputs_alias is None:
            return []
        outputs: list[tuple[str, str]] = []
        if spec.sink.kind == "kafka" and spec.sink.topic:
            outputs.append(("sink", spec.sink.topic))
        dlq_topic = spec.validate().dlq_topic_name
        if dlq_topic and summary is None:
            self.log.warning(
                "no asset event for the DLQ topic %s: without the metrics record of run %s "
                "it is unknown whether the run wrote dead letters",
                dlq_topic,
                run_id,
            )
        elif dlq_topic and summary is not None:
            dead_letters = summary.get(DLQ_PRODUCE_REQUESTS)
            if isinstance(dead_letters, (int, float)) and dead_letters > 0:
                outputs.append(("dead_letter_queue", dlq_topic))
        if not outputs:
            return []
        metrics: dict[str, Any] = dict(summary) if summary is not None else {"metrics": None}
        events = outlet_events[self.outputs_alias]
        for role, topic in outputs:
            extra = {**metrics, "pipeline": spec.name, "run_id": run_id, "role": role, "topic": topic}
            events.add(topic_asset(topic, kafka_config_id=self.kafka_config_id, server=self.asset_server), extra=extra)
            self.log.info("asset event for %s topic %s through %s", role, topic, self.outputs_alias.name)
        return outputs
