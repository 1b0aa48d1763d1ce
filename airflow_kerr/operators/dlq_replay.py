"""``DeadLetterQueueReplayOperator``: put repaired DLQ records back on their source topics, exactly once.

A thin shell around :class:`airflow_kerr.replay.engine.DlqReplay`: it validates the
settings (when the DAG is parsed if nothing is templated, and again once rendered),
reads the Kafka settings from the apache-kafka provider's ``kafka`` connection, logs
progress and a summary, pushes the summary to XCom, and turns ``on_kill`` into a
graceful stop (the open transaction is aborted, nothing is half-committed).

Bad settings (a regular expression that does not compile, an inverted range, a topic that
does not exist...) fail the task before any record is read: each problem is one
``invalid setting: <key>=<value>: <why>`` line at the top of the task log, and the task
fails without retrying (:mod:`airflow_kerr.operators.settings_check`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NoReturn

from airflow.sdk import BaseOperator, Context, Param

from airflow_kerr.compat import AirflowException
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.operators.settings_check import fail_on_invalid_settings
from airflow_kerr.operators.templating import is_templated
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.fanout import replay_tasks_of, task_arguments
from airflow_kerr.replay.form import DAG_ONLY, MAX_REPLAY_TASKS, REPLAY_SETTINGS, TRIGGER_FORM
from airflow_kerr.replay.options import DEFAULT_BATCH_SIZE, InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.policy import DEFAULT_MAX_REPLAYS, Action
from airflow_kerr.replay.summary import DONE, ReplaySummary
from airflow_kerr.replay.transactions import DEFAULT_TRANSACTION_TIMEOUT_S

log = logging.getLogger(__name__)

#: The operator's attribute for each replay setting: the setting's own name, except ``dry_run``, kept as
#: ``dry_run_only`` because ``BaseOperator.dry_run`` is a method.
ATTRIBUTES: dict[str, str] = {name: "dry_run_only" if name == "dry_run" else name for name in REPLAY_SETTINGS}


def verb(action: Action, dry_run: bool) -> str:
    """How the log names a decision: what was done (``replayed``), or in a dry run what would be (``would replay``)."""
    return f"would {action.value}" if dry_run else DONE[action]


def replay_form_params() -> dict[str, Param]:
    """The trigger form of a replay DAG: the two connections, then one Param per replay setting."""
    return {
        form_field.name: Param(
            form_field.default,
            title=form_field.title,
            description=form_field.description,
            section=form_field.section,
            **form_field.schema,
        )
        for form_field in TRIGGER_FORM
    }


def arguments_from_the_form(exclude: Collection[str] = ()) -> dict[str, str]:
    """The operator's arguments, each rendered from the form field of the same name (``{{ params.<name> }}``).

    The DAG's own fields (the number of replay tasks) are not arguments; ``exclude`` leaves out more, such as
    the settings a fanned-out replay gives each mapped task (:func:`fanned_out_arguments`).
    """
    return {
        form_field.name: f"{{{{ params.{form_field.name} }}}}"
        for form_field in TRIGGER_FORM
        if form_field.name not in DAG_ONLY and form_field.name not in exclude
    }


class DeadLetterQueueReplayOperator(BaseOperator):
    """Replay a DLQ topic (Connect, KIP-1191 or Kafka Streams headers) to the records' source topics.

    Every setting is templated. Render Params as native objects
    (``render_template_as_native_obj=True``) so lists, numbers and ``None`` keep their types.

    Returns (and so pushes to XCom as ``return_value``) :meth:`ReplaySummary.to_dict`. Its
    counts never say a dry run wrote anything: a real run reports ``replayed``, ``parked``
    and ``dropped`` with ``would_replay``, ``would_park`` and ``would_drop`` at 0; a dry run
    reports the ``would_*`` counts with ``replayed``, ``parked`` and ``dropped`` at 0 (and
    ``transactions`` 0, ``committed_offsets`` empty). Both carry ``dry_run``, ``status``,
    ``scanned``, ``selected``, ``skipped`` and the ``breakdown`` rows (``action`` —
    ``replay``, ``park`` or ``drop``, the decision either way —, ``topic``, ``stage``,
    ``exception_class``, ``reason``, ``count``). The log says the same: "replayed 20" after a
    real run, "would replay 20" after a dry run.

    :param dlq_topic: the DLQ topic to read.
    :param kafka_config_id: the apache-kafka provider's ``kafka`` connection.
    :param replay_group: consumer group whose offsets the transactions commit; default
        ``kerr-replay.<dlq_topic>``. Records before its committed offsets are not read again.
    :param source_topics: take only records that failed on these topics.
    :param stages: take only records that failed in these stages (``TRANSFORMATION``...).
    :param exception_class_regex: take only records whose exception class matches (``re.search``).
    :param start_time: take only records with a timestamp at or after this (ISO-8601 or epoch ms).
    :param end_time: ... and before this.
    :param start_offset: read each DLQ partition from this offset (inclusive).
    :param end_offset: ... up to this offset (exclusive).
    :param header_match: take only records carrying all these headers with these UTF-8 values.
    :param dlq_offsets: take only the records at these DLQ offsets: ``partition:first-last`` text (last
        included, e.g. ``"0:10-19, 1:5"``) or ``{partition: [[start, end], ...]}`` (end excluded).
    :param fix: dotted path of ``fn(ReplayRecord) -> ReplayRecord | None``; None drops the record,
        an exception parks it with the exception as the reason.
    :param value_format: with a fix, ``avro``, ``protobuf`` or ``json_schema`` hands it the decoded value and
        re-encodes what it returns (``bytes``, the default: the fix gets and returns bytes).
    :param key_format: the same for the key.
    :param reencode_with: ``record`` (the schema the record was written with, by id) or ``latest`` (the latest
        schema of the target topic's subject); a fixed value that does not fit is parked ``does_not_fit``.
    :param schema_registry_conn_id: the ``schema_registry`` connection, needed only with a fix and a format.
    :param target_topic: write here instead of the source topic named by the DLQ headers.
    :param target_allowlist: a record whose target does not fully match this regex is parked.
    :param max_replays: a record already replayed this many times is parked instead.
    :param parking_topic: where parked records go; default ``<dlq_topic>.parked`` (created if missing).
    :param max_records_per_second: write at most this many records per second.
    :param max_records: stop after this many selected records (the rest waits for the next run).
    :param dry_run: write and commit nothing; report what would be replayed (attribute ``dry_run_only``).
    :param batch_size: records per transaction (capped at one second's worth when rate-limited).
    :param progress_interval_s: seconds between progress lines in the log.
    :param partitions: read and commit only these DLQ partitions (a list, or ``0-3,7`` text; default all). A
        fanned-out replay maps this operator over groups of partitions (:class:`DlqPartitionGroupsOperator`); a
        mapped task's ``transactional.id`` carries its map index, so its retry fences its killed try.
    :param transaction_timeout_s: the budget of one transaction (begin to commit, retries included; 1-900 s,
        default 60), also set as the producer's ``transaction.timeout.ms``. Every transactional call waits at
        most the time left of it; when it runs out the broker is taken as unreachable, the open transaction is
        aborted and the task fails saying what was committed, instead of retrying for minutes.
    """

    template_fields: Sequence[str] = (*ATTRIBUTES.values(), "kafka_config_id", "schema_registry_conn_id")
    template_fields_renderers = {"header_match": "json"}
    ui_color = "#f6e7db"

    def __init__(  # noqa: PLR0913 - an operator's keyword arguments, written by DAG authors (the replay form's settings)
        self,
        *,
        dlq_topic: str,
        kafka_config_id: str = "kafka_default",
        replay_group: str | None = None,
        source_topics: Sequence[str] | str | None = None,
        stages: Sequence[str] | str | None = None,
        exception_class_regex: str | None = None,
        start_time: Any = None,
        end_time: Any = None,
        start_offset: int | str | None = None,
        end_offset: int | str | None = None,
        header_match: Mapping[str, str] | str | None = None,
        dlq_offsets: Mapping[str, Any] | str | None = None,
        fix: str | None = None,
        value_format: str = "bytes",
        key_format: str = "bytes",
        reencode_with: str = "record",
        schema_registry_conn_id: str | None = None,
        target_topic: str | None = None,
        target_allowlist: str | None = None,
        max_replays: int | str = DEFAULT_MAX_REPLAYS,
        parking_topic: str | None = None,
        max_records_per_second: float | str | None = None,
        max_records: int | str | None = None,
        dry_run: bool | str = False,
        batch_size: int | str = DEFAULT_BATCH_SIZE,
        progress_interval_s: float | str = 5.0,
        transaction_timeout_s: float | str = DEFAULT_TRANSACTION_TIMEOUT_S,
        partitions: Sequence[int] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dlq_topic = dlq_topic
        self.kafka_config_id = kafka_config_id
        self.replay_group = replay_group
        self.source_topics = source_topics
        self.stages = stages
        self.exception_class_regex = exception_class_regex
        self.start_time = start_time
        self.end_time = end_time
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.header_match = header_match
        self.dlq_offsets = dlq_offsets
        self.fix = fix
        self.value_format = value_format
        self.key_format = key_format
        self.reencode_with = reencode_with
        self.schema_registry_conn_id = schema_registry_conn_id
        self.target_topic = target_topic
        self.target_allowlist = target_allowlist
        self.max_replays = max_replays
        self.parking_topic = parking_topic
        self.max_records_per_second = max_records_per_second
        self.max_records = max_records
        self.dry_run_only = dry_run
        self.batch_size = batch_size
        self.progress_interval_s = progress_interval_s
        self.transaction_timeout_s = transaction_timeout_s
        self.partitions = partitions
        self._engine: DlqReplay | None = None
        #: What the OpenLineage facets report, set by ``execute``: bootstrap servers, topics and the summary.
        self._lineage: dict[str, Any] | None = None
        if not any(is_templated(getattr(self, attribute)) for attribute in ATTRIBUTES.values()):
            self.options()

    def options(self) -> ReplayOptions:
        """The validated settings; raises :class:`InvalidReplayOptions` naming every bad key and value."""
        return ReplayOptions.build(**{name: getattr(self, attribute) for name, attribute in ATTRIBUTES.items()})

    def lineage_run_id(self, context: Context) -> str:
        """``dag/run/task/try``: written to ``__kerr.replay.run`` so a replayed record names the run that wrote it."""
        dag_run = context.get("dag_run")
        ti = context.get("ti")
        return f"{self.dag_id}/{getattr(dag_run, 'run_id', 'manual')}/{self.task_id}/{getattr(ti, 'try_number', 1)}"

    def transactional_id_prefix(self, context: Context) -> str:
        """``kerr-replay.<dag>.<task>``, and ``.<map index>`` for a mapped task: the same for every try of it.

        The engine appends the DLQ topic and the partitions, so each mapped task has its own id and its
        retry, with the same id, fences the try before it (whose open transaction is then aborted).
        """
        ti = context.get("ti")
        map_index = getattr(ti, "map_index", -1)
        mapped = f".{map_index}" if isinstance(map_index, int) and map_index >= 0 else ""
        return f"kerr-replay.{self.dag_id}.{self.task_id}{mapped}"

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            options = self.options()
        except InvalidReplayOptions as error:
            self._fail(error)
        config = KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config()
        self._lineage = {"servers": config.get("bootstrap.servers", ""), "options": options, "summary": None}
        try:
            self._engine = DlqReplay(
                config,
                options,
                run_id=self.lineage_run_id(context),
                transactional_id_prefix=self.transactional_id_prefix(context),
                log=self.log,
                schema_registry=self._registry_settings(options),
            )
            summary = self._engine.run()
        except InvalidReplayOptions as error:  # a topic that does not exist: found before any record is read
            self._fail(error)
        self._log_summary(summary)
        self._lineage["summary"] = summary.to_dict()
        if summary.status == "stopped":
            raise AirflowException(
                f"replay of {options.dlq_topic} stopped on request after {summary.selected} selected records; "
                f"the open transaction was aborted and the replay group is at {summary.committed_offsets}"
            )
        return summary.to_dict()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the DLQ topic in; the topics replayed to and the parking topic out, with the counts.

        Called by Airflow's OpenLineage provider (the ``openlineage`` extra) after the run; a
        run that ended before its summary reports its input only, a dry run no outputs.
        """
        if self._lineage is None:
            return None
        from airflow_kerr.operators.lineage import replay_lineage

        options: ReplayOptions = self._lineage["options"]
        return replay_lineage(
            bootstrap_servers=self._lineage["servers"],
            dlq_topic=options.dlq_topic,
            parking_topic=options.parking_topic,
            summary=self._lineage["summary"],
        )

    def _registry_settings(self, options: ReplayOptions) -> dict[str, Any] | None:
        """The ``schema_registry`` connection's client settings, read only when a fix works on decoded values."""
        if options.fix is None or not options.formats or not self.schema_registry_conn_id:
            return None
        from airflow_kerr.hooks.schema_registry import SchemaRegistryHook

        return SchemaRegistryHook(self.schema_registry_conn_id).client_config()

    def on_kill(self) -> None:
        """Stop gracefully: the engine aborts its open transaction and commits nothing more."""
        if self._engine is not None:
            self._engine.stop()

    def _fail(self, error: InvalidReplayOptions) -> NoReturn:
        """One log line per bad setting, then fail without retrying (the message still lists them all)."""
        fail_on_invalid_settings(self.log, "DLQ replay settings", error.problems, str(error))

    def _log_summary(self, summary: ReplaySummary) -> None:
        """The summary line, one line per breakdown row, parked examples and notes; a dry run says "would"."""
        said = {action: verb(action, summary.dry_run) for action in (Action.REPLAY, Action.PARK, Action.DROP)}
        ending = (
            "nothing written or committed"
            if summary.dry_run
            else f"{summary.transactions} transactions, {summary.aborted_batches} aborted batches"
        )
        self.log.info(
            "%s %s: %d read, %d selected, %s %d, %s %d, %s %d, skipped %d (status %s, %s)",
            "DRY RUN" if summary.dry_run else "replay",
            summary.dlq_topic,
            summary.scanned,
            summary.selected,
            said[Action.REPLAY],
            summary.decided(Action.REPLAY),
            said[Action.PARK],
            summary.decided(Action.PARK),
            said[Action.DROP],
            summary.decided(Action.DROP),
            summary.skipped,
            summary.status,
            ending,
        )
        for row in summary.to_dict()["breakdown"]:
            self.log.info(
                "  %-12s %6d -> %s  stage=%s exception=%s%s",
                verb(Action(row["action"]), summary.dry_run),
                row["count"],
                row["topic"] or "-",
                row["stage"] or "-",
                row["exception_class"] or "-",
                f" reason={row['reason']}" if row["reason"] else "",
            )
        for example in summary.park_examples:
            self.log.info("  %s %s", "would park" if summary.dry_run else "parked", example)
        if summary.parked > len(summary.park_examples):
            self.log.info(
                "  ... and %d more %s records",
                summary.parked - len(summary.park_examples),
                "would-be-parked" if summary.dry_run else "parked",
            )
        for note in summary.notes:
            self.log.info("  note: %s", note)
        if summary.status == "max_records" and summary.dry_run:
            self.log.info("max_records reached; a dry run commits nothing, so the next run starts where this one did")
        elif summary.status == "max_records":
            self.log.info("max_records reached; the next run continues from the committed offsets")
        elif summary.status == "idle":
            self.log.warning("the run ended before the planned end offsets: %s", "; ".join(summary.notes))


def fan_out_branch(replay_tasks: Any, single_task_id: str = "replay", split_task_id: str = "partition_groups") -> str:
    """The task a replay DAG's branch follows: ``single_task_id`` for one replay task, ``split_task_id`` for more.

    A bad number fails the task naming it, without retrying. Use it as ``@task.branch``'s body (the example DAG does).
    """
    try:
        tasks = replay_tasks_of(replay_tasks, MAX_REPLAY_TASKS)
    except InvalidReplayOptions as error:
        fail_on_invalid_settings(log, "DLQ replay settings", error.problems, str(error))
    return single_task_id if tasks == 1 else split_task_id


class DlqPartitionGroupsOperator(BaseOperator):
    """Split a DLQ's partitions over ``replay_tasks`` mapped replay tasks: what each one gets, for ``expand_kwargs``.

    Returns one dict per task (``partitions``, ``max_records_per_second``, ``max_records``): contiguous, even
    groups of the DLQ's partitions (or of ``partitions``), and each task's share of the whole replay's rate
    limit and ``max_records`` (:func:`airflow_kerr.replay.fanout.task_arguments`). Map the replay over it::

        split = DlqPartitionGroupsOperator(task_id="partition_groups", dlq_topic=..., replay_tasks=4)
        DeadLetterQueueReplayOperator.partial(task_id="replay_partitions", dlq_topic=..., ...).expand_kwargs(
            split.output
        )

    Bad settings (or a DLQ that does not exist) fail the task, naming each one, without retrying.

    :param dlq_topic: the DLQ topic whose partitions are split.
    :param replay_tasks: how many mapped replay tasks (1 to 64; at most one per partition).
    :param partitions: split only these DLQ partitions (a list, or ``0-3,7`` text; default all).
    :param max_records_per_second: the whole replay's rate limit, shared out evenly.
    :param max_records: the whole replay's ``max_records``, shared out evenly.
    :param kafka_config_id: the apache-kafka provider's ``kafka`` connection.
    """

    template_fields: Sequence[str] = (
        "dlq_topic",
        "replay_tasks",
        "partitions",
        "max_records_per_second",
        "max_records",
        "kafka_config_id",
    )
    ui_color = "#f6e7db"

    def __init__(
        self,
        *,
        dlq_topic: str,
        replay_tasks: int | str = 1,
        partitions: Sequence[int] | str | None = None,
        max_records_per_second: float | str | None = None,
        max_records: int | str | None = None,
        kafka_config_id: str = "kafka_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dlq_topic = dlq_topic
        self.replay_tasks = replay_tasks
        self.partitions = partitions
        self.max_records_per_second = max_records_per_second
        self.max_records = max_records
        self.kafka_config_id = kafka_config_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, topic_partitions

        problems: list[str] = []
        try:
            tasks = replay_tasks_of(self.replay_tasks, MAX_REPLAY_TASKS)
            options = ReplayOptions.build(
                dlq_topic=self.dlq_topic,
                partitions=self.partitions,
                max_records_per_second=self.max_records_per_second,
                max_records=self.max_records,
            )
        except InvalidReplayOptions as error:
            fail_on_invalid_settings(self.log, "DLQ replay settings", error.problems, str(error))
        consumer = offset_consumer(KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config())
        try:
            found = [p for _, p in topic_partitions(consumer, options.dlq_topic)]
        except OffsetLookupError as error:
            problems.append(f"dlq_topic={options.dlq_topic!r}: {error}")
            found = []
        finally:
            consumer.close()
        unknown = sorted(set(options.partitions or ()) - set(found))
        if found and unknown:
            problems.append(f"partitions={self.partitions!r}: {options.dlq_topic} has no partition {unknown}")
        if problems:
            fail_on_invalid_settings(self.log, "DLQ replay settings", problems, "; ".join(problems))
        arguments = task_arguments(
            list(options.partitions or found),
            tasks,
            max_records_per_second=options.max_records_per_second,
            max_records=options.max_records,
        )
        for index, task in enumerate(arguments):
            self.log.info("replay task %d: partitions %s", index, task["partitions"] or "all")
        return arguments
