"""The replay's settings as its trigger form shows them: the one list the DAG and the operator derive from.

Each :class:`FormField` is one setting of :meth:`ReplayOptions.build`, under the
same name, with the form's default (safe: a dry run, a rate limit), its JSON
schema and the words shown beside it. The DAG's Params, its templated operator
arguments and the operator's ``template_fields`` are all built from
:data:`REPLAY_FORM`, and a unit test holds its names to ``ReplayOptions.build``'s,
so a new setting is written here once. Nothing here imports Airflow: the operator
turns these into ``Param`` objects.

How Airflow 3.3's trigger form reads these schemas, and so why they look as they do:

- A field is *required* (a star, and Trigger disabled while it is empty) whenever its
  ``type`` is set and does not include ``"null"``. Every setting that may be left unset
  (texts, lists, the header object, the dry-run box) therefore has ``["null", ...]``, and
  its default is valid. A field with a second non-null type would become a raw JSON box,
  so each has one.
- Before submit the form itself checks only: required fields, the JSON of list/object
  fields, ``minimum``/``maximum`` of a number (the input raises a value below the minimum
  to it when the field loses focus), ``maxLength`` of a text (the input takes no more
  characters), ``enum`` and ``examples`` (a select) and ``format: date-time`` (a date
  picker). ``pattern``, ``exclusiveMinimum`` and item schemas are checked only by the API
  server on submit, which answers with jsonschema's full dump, so they are not used for
  what the task can report in one readable line instead (topic names, regular
  expressions, ranges, items): :meth:`ReplayOptions.build` checks those before any record
  is read and the operator logs one line per problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_kerr.errors import Stage

SOURCE = "Source"
SELECTION = "Selection"
FIX = "Fix"
SAFETY = "Safety"
PACING = "Pacing"
STAGES = list(Stage.__members__)
#: Kafka's longest topic name; the form's text inputs take no more characters.
TOPIC_MAX_LENGTH = 249
#: Airflow's longest connection id.
CONN_ID_MAX_LENGTH = 250
#: The slowest replay the form offers; the rate input raises a lower value to this when it loses focus.
MIN_RECORDS_PER_SECOND = 1


@dataclass(frozen=True)
class FormField:
    """One replay setting in the trigger form: its default there, its JSON schema, title, help text and section."""

    name: str
    default: Any
    schema: dict[str, Any]
    title: str
    description: str
    section: str


def _text(name: str, title: str, description: str, section: str, **schema: Any) -> FormField:
    """An optional text setting: empty means unset (the form sends null, so the type allows it)."""
    return FormField(name, None, {"type": ["null", "string"], **schema}, title, description, section)


def _topic_text(name: str, title: str, description: str, section: str) -> FormField:
    """An optional topic name: no longer than Kafka allows, which the form's input enforces as you type."""
    return _text(name, title, description, section, maxLength=TOPIC_MAX_LENGTH)


#: The Kafka connection is a setting of the task, not of the replay: first in the form, not in ReplayOptions.
CONNECTION = FormField(
    "kafka_config_id",
    "kafka_default",
    {"type": "string", "minLength": 1, "maxLength": CONN_ID_MAX_LENGTH},
    "Kafka connection",
    "A `kafka` connection; its extra JSON is the librdkafka configuration.",
    SOURCE,
)

#: The Schema Registry connection is the task's too: used only by a fix on decoded values (key/value format).
REGISTRY_CONNECTION = FormField(
    "schema_registry_conn_id",
    None,
    {"type": ["null", "string"], "maxLength": CONN_ID_MAX_LENGTH},
    "Schema Registry connection",
    "A `schema_registry` connection. Needed only with a fix and a key or value format other than bytes; "
    "without a fix the registry is never called.",
    FIX,
)
#: The formats a fix may receive keys and values in: bytes as read, or decoded through the registry.
VALUE_FORMATS = ["bytes", "avro", "protobuf", "json_schema"]

REPLAY_FORM: tuple[FormField, ...] = (
    FormField(
        "dlq_topic",
        "orders.dlq",
        {"type": "string", "minLength": 1, "maxLength": TOPIC_MAX_LENGTH},
        "DLQ topic",
        "The dead letter queue to replay (Kafka Connect, KIP-1191 or Kafka Streams headers).",
        SOURCE,
    ),
    _text(
        "replay_group",
        "Replay consumer group",
        "Default kerr-replay.<DLQ topic>. The run starts at this group's committed offsets and commits "
        "past every record it reads, selected or not; use a new group to read the DLQ from the start.",
        SOURCE,
    ),
    FormField(
        "source_topics",
        [],
        {"type": ["null", "array"], "items": {"type": "string"}},
        "Source topics",
        "Only records that failed on these topics (one per line). Empty: any topic.",
        SELECTION,
    ),
    FormField(
        "stages",
        [],
        {"type": ["null", "array"], "items": {"type": "string", "enum": STAGES}, "examples": STAGES},
        "Failed stages",
        "Only records that failed in these stages. Empty: any stage.",
        SELECTION,
    ),
    _text(
        "exception_class_regex",
        "Exception class (regex)",
        "Only records whose exception class matches this regular expression (searched), e.g. InvalidOrder or ^json\\..",
        SELECTION,
    ),
    _text(
        "start_time",
        "From time",
        "Only records whose timestamp (the failed record's own, kept by the DLQ) is at or after this.",
        SELECTION,
        format="date-time",
    ),
    _text("end_time", "Until time", "Only records whose timestamp is before this.", SELECTION, format="date-time"),
    FormField(
        "start_offset",
        None,
        {"type": ["null", "integer"], "minimum": 0},
        "From DLQ offset",
        "Read each DLQ partition from this offset (inclusive).",
        SELECTION,
    ),
    FormField(
        "end_offset",
        None,
        {"type": ["null", "integer"], "minimum": 0},
        "Until DLQ offset",
        "Read each DLQ partition up to this offset (exclusive); later records wait for another run.",
        SELECTION,
    ),
    _text(
        "dlq_offsets",
        "Exactly these DLQ offsets",
        "Only the records at these DLQ offsets, as partition:first-last (last included), e.g. 0:10-19, 1:5. "
        "The Dead letters tab of a job run fills this with the offsets that run wrote.",
        SELECTION,
    ),
    _text(
        "partitions",
        "DLQ partitions",
        "Only these partitions of the DLQ, as 0-3,7. Empty: every partition. With several parallel replay tasks "
        "they are split between them.",
        SELECTION,
    ),
    FormField(
        "header_match",
        {},
        {"type": ["null", "object"]},
        "Header match",
        'Only records carrying all these headers with these values, e.g. {"kind": "invalid"}.',
        SELECTION,
    ),
    _text(
        "fix",
        "Fix function",
        "Dotted path of fn(ReplayRecord) -> ReplayRecord or None. None drops the record; an exception parks it "
        "with the exception as the reason. Empty: replay the records unchanged.",
        FIX,
        examples=["airflow_kerr.examples.orders.repair_order"],
    ),
    FormField(
        "value_format",
        "bytes",
        {"type": "string", "enum": VALUE_FORMATS},
        "Value format",
        "With a fix: avro, protobuf or json_schema hands the fix the decoded value (Confluent's wire format, "
        "through the Schema Registry connection) and re-encodes what it returns. bytes: the fix gets the bytes.",
        FIX,
    ),
    FormField(
        "key_format",
        "bytes",
        {"type": "string", "enum": VALUE_FORMATS},
        "Key format",
        "As Value format, for the record key.",
        FIX,
    ),
    FormField(
        "reencode_with",
        "record",
        {"type": "string", "enum": ["record", "latest"]},
        "Re-encode with",
        "record: the schema each record was written with (by its id). latest: the latest schema of the target "
        "topic's subject. A fixed value that does not fit is parked with the serializer's reason.",
        FIX,
    ),
    FormField(
        "dry_run",
        True,
        # The box is always ticked or not; "null" only keeps the form from marking it required.
        {"type": ["null", "boolean"]},
        "Dry run",
        "Write and commit nothing; report what would be replayed, parked and dropped. Untick to replay.",
        SAFETY,
    ),
    _topic_text(
        "target_topic",
        "Target topic override",
        "Write every record here instead of the source topic named in its DLQ headers.",
        SAFETY,
    ),
    _text(
        "target_allowlist",
        "Allowed targets (regex)",
        "Park any record whose target topic does not fully match this regular expression. Internal topics "
        "(starting with __) and the DLQ itself are never written to, whatever this says.",
        SAFETY,
    ),
    FormField(
        "max_replays",
        3,
        {"type": "integer", "minimum": 1, "maximum": 100},
        "Max replays per record",
        "A record that came back to the DLQ after this many replays is parked instead of looping.",
        SAFETY,
    ),
    _topic_text(
        "parking_topic",
        "Parking topic",
        "Where records that must not go back are written, with a reason header. Default <DLQ topic>.parked "
        "(created with the DLQ's partition count if missing).",
        SAFETY,
    ),
    FormField(
        "transaction_timeout_s",
        60,
        {"type": "integer", "minimum": 1, "maximum": 900},
        "Transaction timeout (seconds)",
        "The longest one transaction may take, retries included. If the broker does not answer within it, the "
        "open transaction is aborted and the run fails saying what was committed; the next run continues from there.",
        SAFETY,
    ),
    FormField(
        "max_records_per_second",
        500,
        {"type": ["null", "number"], "minimum": MIN_RECORDS_PER_SECOND},
        "Max records per second",
        f"Write rate limit, at least {MIN_RECORDS_PER_SECOND} (a lower or negative value is raised to "
        f"{MIN_RECORDS_PER_SECOND}). Empty: as fast as the cluster takes them.",
        PACING,
    ),
    FormField(
        "max_records",
        None,
        {"type": ["null", "integer"], "minimum": 1},
        "Max records",
        "Stop after this many selected records; the next run continues from there. Empty: no limit.",
        PACING,
    ),
    FormField(
        "batch_size",
        1000,
        {"type": "integer", "enum": [50, 100, 500, 1000, 5000]},
        "Records per transaction",
        "Larger batches commit less often; with a rate limit a batch holds at most one second's worth.",
        PACING,
    ),
    FormField(
        "progress_interval_s",
        5,
        {"type": "integer", "enum": [2, 5, 10, 30, 60]},
        "Progress every (seconds)",
        "How often the task log shows done / total / rate / ETA.",
        PACING,
    ),
)

#: The most mapped replay tasks the form offers: more than a DLQ's partitions is never useful, and each task
#: holds a producer and a consumer on the cluster.
MAX_REPLAY_TASKS = 64

#: How many mapped tasks share the DLQ's partitions: a setting of the DAG (its fan-out), not of one replay task.
REPLAY_TASKS = FormField(
    "replay_tasks",
    1,
    {"type": "integer", "minimum": 1, "maximum": MAX_REPLAY_TASKS},
    "Parallel replay tasks",
    "Split the DLQ's partitions over this many mapped replay tasks, each with its own transaction and the replay "
    "group's offsets of its partitions; the executor runs them side by side. The rate limit and Max records are "
    "shared out between them. 1: one task, as before. At most one task per partition.",
    PACING,
)

#: The whole trigger form, in order: the task's two connections, every replay setting, then the fan-out. The DAG's
#: Params and the DLQ view's replay dialog are both built from it, so the view offers every field the DAG takes.
TRIGGER_FORM: tuple[FormField, ...] = (CONNECTION, REGISTRY_CONNECTION, *REPLAY_FORM, REPLAY_TASKS)

#: The trigger form's fields that are not the operator's arguments (the DAG's fan-out reads them).
DAG_ONLY: frozenset[str] = frozenset({REPLAY_TASKS.name})

#: The replay settings' names, in the form's order: ``ReplayOptions.build``'s keyword arguments.
REPLAY_SETTINGS: tuple[str, ...] = tuple(form_field.name for form_field in REPLAY_FORM)
