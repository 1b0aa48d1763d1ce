"""The dead-letter dialects of a Kafka estate: which headers each writer puts on a dead letter, and how.

Each dialect is a declaration, not code: the header names its writer uses for each field
of a :class:`~airflow_kerr.errors.dead_letter.DeadLetterRecord`, how it writes numbers, and
the prefixes of the headers it adds (removed when a record is replayed). One reader,
:mod:`airflow_kerr.errors.header_reader`, serves them all.

The writers, as their own source writes them:

- **Kafka Connect**, ``DeadLetterQueueReporter`` (``connect/runtime/.../errors/DeadLetterQueueReporter.java``):
  ``__connect.errors.*``, numbers as decimal text; the last of a repeated header is the newest failure.
- **KIP-1191** share-group DLQs: ``__dlq.errors.*``, decimal text; without
  ``errors.deadletterqueue.copy.record.enable`` (its default) the record has no key and no
  value and points at the original by topic, partition and offset.
- **Kafka Streams**, KIP-1034 (``streams/.../errors/internals/ExceptionHandlerUtils.java``):
  ``__streams.errors.*``, decimal text; bakdata's Streams error handling adds
  ``__streams.errors.processor.node.id`` and ``__streams.errors.task.id``.
- **Spring Kafka**, ``DeadLetterPublishingRecoverer`` (``spring-kafka/.../support/KafkaHeaders.java``,
  ``listener/DeadLetterRecordManager.java``): ``kafka_dlt-*``; partition a 4-byte and offset
  and timestamp 8-byte big-endian integers. Spring appends the ``original-*`` headers each
  time a record is dead-lettered again, so the *first* names where the data came from
  (a DLT of a DLT names the first topic first); exception headers replace the previous ones.
  Its non-blocking retries add ``retry_topic-*`` headers (attempts, backoff), which are
  bookkeeping of the failed delivery and are removed on replay like the error headers: a
  replayed record carrying ``retry_topic-attempts`` would resume its old retry count. Its
  dead letters count under their root cause (``kafka_dlt-exception-cause-fqcn``), the
  exception the listener's own code threw; the class Spring's error handler received
  (usually ``ListenerExecutionFailedException``) is ``wrapper_class``.
- **Confluent Schema Registry's DLQ rule action** (``confluent_kafka/schema_registry/rules/dlq/dlq_action.py``,
  ``DlqAction.java``): ``__rule.name``, ``mode``, ``subject``, ``topic`` (the source topic)
  and ``exception`` (the exception's *message*: no class, no partition, no offset). Its
  dead letters count under the exception class ``rule:<rule name>``.

A record carrying several sets takes each field from the first set, in :data:`DIALECTS`
order, that has it: Connect, KIP-1191, Streams, Spring, Schema Registry. Connect comes first
because our jobs write it and it says the most; a record that another writer dead-lettered
and a Connect sink then failed on carries both, and Connect's describes the newest failure.
A record with none of them is header-less (Airflow's ``KafkaSharedStreamProducer(dlq_topic=…)``
and most hand-written producers): its ``header_set`` is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class HeaderSet(StrEnum):
    """Which dialect's error headers a DLQ record carries."""

    CONNECT = "connect"
    DLQ = "dlq"
    STREAMS = "streams"
    SPRING = "spring"
    SCHEMA_REGISTRY = "schema_registry"


class Encoding(StrEnum):
    """How a dialect writes a number into a header."""

    #: ASCII decimal digits (Connect, KIP-1191, Streams).
    DECIMAL = "decimal"
    #: Java's ``ByteBuffer.putInt``/``putLong``: 4 or 8 bytes, big-endian, two's complement (Spring).
    BIG_ENDIAN = "big_endian"


#: The name under which a header-less record is shown, counted and filtered.
HEADER_LESS = "none"

# Kafka Connect, DeadLetterQueueReporter.
HEADER_PREFIX = "__connect.errors."
ERROR_HEADER_ORIG_TOPIC = HEADER_PREFIX + "topic"
ERROR_HEADER_ORIG_PARTITION = HEADER_PREFIX + "partition"
ERROR_HEADER_ORIG_OFFSET = HEADER_PREFIX + "offset"
ERROR_HEADER_CONNECTOR_NAME = HEADER_PREFIX + "connector.name"
ERROR_HEADER_TASK_ID = HEADER_PREFIX + "task.id"
ERROR_HEADER_STAGE = HEADER_PREFIX + "stage"
ERROR_HEADER_EXECUTING_CLASS = HEADER_PREFIX + "class.name"
ERROR_HEADER_EXCEPTION = HEADER_PREFIX + "exception.class.name"
ERROR_HEADER_EXCEPTION_MESSAGE = HEADER_PREFIX + "exception.message"
ERROR_HEADER_EXCEPTION_STACK_TRACE = HEADER_PREFIX + "exception.stacktrace"

# KIP-1191, share-group dead letter queues.
DLQ_HEADER_PREFIX = "__dlq.errors."
DLQ_HEADER_TOPIC = DLQ_HEADER_PREFIX + "topic"
DLQ_HEADER_PARTITION = DLQ_HEADER_PREFIX + "partition"
DLQ_HEADER_OFFSET = DLQ_HEADER_PREFIX + "offset"
DLQ_HEADER_GROUP = DLQ_HEADER_PREFIX + "group"
DLQ_HEADER_DELIVERY_COUNT = DLQ_HEADER_PREFIX + "delivery.count"
DLQ_HEADER_MESSAGE = DLQ_HEADER_PREFIX + "message"

# Kafka Streams, KIP-1034 (ExceptionHandlerUtils), and bakdata's two extra headers.
STREAMS_HEADER_PREFIX = "__streams.errors."
STREAMS_HEADER_EXCEPTION = STREAMS_HEADER_PREFIX + "exception"
STREAMS_HEADER_MESSAGE = STREAMS_HEADER_PREFIX + "message"
STREAMS_HEADER_STACKTRACE = STREAMS_HEADER_PREFIX + "stacktrace"
STREAMS_HEADER_TOPIC = STREAMS_HEADER_PREFIX + "topic"
STREAMS_HEADER_PARTITION = STREAMS_HEADER_PREFIX + "partition"
STREAMS_HEADER_OFFSET = STREAMS_HEADER_PREFIX + "offset"
STREAMS_HEADER_PROCESSOR_NODE = STREAMS_HEADER_PREFIX + "processor.node.id"
STREAMS_HEADER_TASK_ID = STREAMS_HEADER_PREFIX + "task.id"

# Spring Kafka, KafkaHeaders (DeadLetterPublishingRecoverer) and RetryTopicHeaders.
SPRING_HEADER_PREFIX = "kafka_dlt-"
SPRING_RETRY_PREFIX = "retry_topic-"
SPRING_ORIGINAL_TOPIC = "kafka_dlt-original-topic"
SPRING_ORIGINAL_PARTITION = "kafka_dlt-original-partition"
SPRING_ORIGINAL_OFFSET = "kafka_dlt-original-offset"
SPRING_ORIGINAL_TIMESTAMP = "kafka_dlt-original-timestamp"
SPRING_ORIGINAL_TIMESTAMP_TYPE = "kafka_dlt-original-timestamp-type"
SPRING_ORIGINAL_CONSUMER_GROUP = "kafka_dlt-original-consumer-group"
SPRING_EXCEPTION_FQCN = "kafka_dlt-exception-fqcn"
SPRING_EXCEPTION_CAUSE_FQCN = "kafka_dlt-exception-cause-fqcn"
SPRING_EXCEPTION_MESSAGE = "kafka_dlt-exception-message"
SPRING_EXCEPTION_STACKTRACE = "kafka_dlt-exception-stacktrace"
SPRING_KEY_EXCEPTION_FQCN = "kafka_dlt-key-exception-fqcn"
SPRING_KEY_EXCEPTION_MESSAGE = "kafka_dlt-key-exception-message"
SPRING_KEY_EXCEPTION_STACKTRACE = "kafka_dlt-key-exception-stacktrace"
SPRING_RETRY_ATTEMPTS = "retry_topic-attempts"
SPRING_RETRY_ORIGINAL_TIMESTAMP = "retry_topic-original-timestamp"
SPRING_RETRY_BACKOFF_TIMESTAMP = "retry_topic-backoff-timestamp"

# Confluent Schema Registry, DlqAction (the rule's name, mode, subject, source topic and exception message).
RULE_HEADER_PREFIX = "__rule."
RULE_HEADER_NAME = RULE_HEADER_PREFIX + "name"
RULE_HEADER_MODE = RULE_HEADER_PREFIX + "mode"
RULE_HEADER_SUBJECT = RULE_HEADER_PREFIX + "subject"
RULE_HEADER_TOPIC = RULE_HEADER_PREFIX + "topic"
RULE_HEADER_EXCEPTION = RULE_HEADER_PREFIX + "exception"
#: The exception class a Schema Registry dead letter counts under: the rule action writes none.
RULE_EXCEPTION_CLASS_PREFIX = "rule:"


@dataclass(frozen=True)
class Dialect:
    """One writer's dead-letter headers.

    ``fields`` maps a :class:`DeadLetterRecord` field to the headers that carry it, best
    first (Spring's key exception stands in when no value exception was written).
    ``numbers`` is how this writer encodes the numeric fields; ``binary`` lists headers
    written as big-endian integers, with their width in bytes (0: as many as the number
    needs), so that they are shown as numbers. ``first_wins`` are headers the writer
    appends again on each new failure, whose first occurrence is the original (for every
    other header the last one wins).
    ``prefixes`` cover every header the writer adds: all of them are error headers, shown
    with the error context and never written back by a replay.
    """

    header_set: HeaderSet
    prefixes: tuple[str, ...]
    fields: Mapping[str, tuple[str, ...]]
    numbers: Encoding = Encoding.DECIMAL
    binary: Mapping[str, int] = field(default_factory=dict)
    first_wins: frozenset[str] = frozenset()
    #: Where the declaration was checked: the writer's own source file.
    source: str = ""

    @property
    def names(self) -> frozenset[str]:
        """Every header name the writer writes for a field: a record carrying one is in this dialect."""
        return frozenset(name for names in self.fields.values() for name in names)


CONNECT = Dialect(
    HeaderSet.CONNECT,
    (HEADER_PREFIX,),
    {
        "source_topic": (ERROR_HEADER_ORIG_TOPIC,),
        "source_partition": (ERROR_HEADER_ORIG_PARTITION,),
        "source_offset": (ERROR_HEADER_ORIG_OFFSET,),
        "connector_name": (ERROR_HEADER_CONNECTOR_NAME,),
        "task_id": (ERROR_HEADER_TASK_ID,),
        "stage": (ERROR_HEADER_STAGE,),
        "executing_class": (ERROR_HEADER_EXECUTING_CLASS,),
        "exception_class": (ERROR_HEADER_EXCEPTION,),
        "exception_message": (ERROR_HEADER_EXCEPTION_MESSAGE,),
        "exception_stacktrace": (ERROR_HEADER_EXCEPTION_STACK_TRACE,),
    },
    source="connect/runtime/src/main/java/org/apache/kafka/connect/runtime/errors/DeadLetterQueueReporter.java",
)
KIP_1191 = Dialect(
    HeaderSet.DLQ,
    (DLQ_HEADER_PREFIX,),
    {
        "source_topic": (DLQ_HEADER_TOPIC,),
        "source_partition": (DLQ_HEADER_PARTITION,),
        "source_offset": (DLQ_HEADER_OFFSET,),
        "group": (DLQ_HEADER_GROUP,),
        "delivery_count": (DLQ_HEADER_DELIVERY_COUNT,),
        "exception_message": (DLQ_HEADER_MESSAGE,),
    },
    source="KIP-1191: Dead-letter queues for share groups",
)
STREAMS = Dialect(
    HeaderSet.STREAMS,
    (STREAMS_HEADER_PREFIX,),
    {
        "source_topic": (STREAMS_HEADER_TOPIC,),
        "source_partition": (STREAMS_HEADER_PARTITION,),
        "source_offset": (STREAMS_HEADER_OFFSET,),
        "exception_class": (STREAMS_HEADER_EXCEPTION,),
        "exception_message": (STREAMS_HEADER_MESSAGE,),
        "exception_stacktrace": (STREAMS_HEADER_STACKTRACE,),
        "executing_class": (STREAMS_HEADER_PROCESSOR_NODE,),
    },
    source="streams/src/main/java/org/apache/kafka/streams/errors/internals/ExceptionHandlerUtils.java",
)
SPRING = Dialect(
    HeaderSet.SPRING,
    (SPRING_HEADER_PREFIX, SPRING_RETRY_PREFIX),
    {
        "source_topic": (SPRING_ORIGINAL_TOPIC,),
        "source_partition": (SPRING_ORIGINAL_PARTITION,),
        "source_offset": (SPRING_ORIGINAL_OFFSET,),
        "source_timestamp": (SPRING_ORIGINAL_TIMESTAMP,),
        "group": (SPRING_ORIGINAL_CONSUMER_GROUP,),
        # The root cause is what the listener's own code threw; the fqcn is usually Spring's
        # ListenerExecutionFailedException around it, the same for every failure.
        "exception_class": (SPRING_EXCEPTION_CAUSE_FQCN, SPRING_EXCEPTION_FQCN, SPRING_KEY_EXCEPTION_FQCN),
        "wrapper_class": (SPRING_EXCEPTION_FQCN, SPRING_KEY_EXCEPTION_FQCN),
        "exception_message": (SPRING_EXCEPTION_MESSAGE, SPRING_KEY_EXCEPTION_MESSAGE),
        "exception_stacktrace": (SPRING_EXCEPTION_STACKTRACE, SPRING_KEY_EXCEPTION_STACKTRACE),
    },
    numbers=Encoding.BIG_ENDIAN,
    binary={
        SPRING_ORIGINAL_PARTITION: 4,
        SPRING_ORIGINAL_OFFSET: 8,
        SPRING_ORIGINAL_TIMESTAMP: 8,
        SPRING_RETRY_ATTEMPTS: 4,
        # BigInteger.valueOf(..).toByteArray() (retrytopic/DeadLetterPublishingRecovererFactory.java):
        # as many bytes as the number needs, 6 for today's epoch milliseconds.
        SPRING_RETRY_ORIGINAL_TIMESTAMP: 0,
        SPRING_RETRY_BACKOFF_TIMESTAMP: 0,
    },
    first_wins=frozenset(
        (
            SPRING_ORIGINAL_TOPIC,
            SPRING_ORIGINAL_PARTITION,
            SPRING_ORIGINAL_OFFSET,
            SPRING_ORIGINAL_TIMESTAMP,
            SPRING_ORIGINAL_TIMESTAMP_TYPE,
            SPRING_ORIGINAL_CONSUMER_GROUP,
        )
    ),
    source="spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java",
)
SCHEMA_REGISTRY = Dialect(
    HeaderSet.SCHEMA_REGISTRY,
    (RULE_HEADER_PREFIX,),
    {
        "source_topic": (RULE_HEADER_TOPIC,),
        "rule_name": (RULE_HEADER_NAME,),
        "rule_mode": (RULE_HEADER_MODE,),
        "rule_subject": (RULE_HEADER_SUBJECT,),
        "exception_message": (RULE_HEADER_EXCEPTION,),
    },
    source="confluent_kafka/schema_registry/rules/dlq/dlq_action.py",
)

#: Every dialect, in order of precedence.
DIALECTS: tuple[Dialect, ...] = (CONNECT, KIP_1191, STREAMS, SPRING, SCHEMA_REGISTRY)
DIALECT_OF: Mapping[HeaderSet, Dialect] = {dialect.header_set: dialect for dialect in DIALECTS}
#: The prefixes of every header a dead-letter writer adds: removed on replay, shown as the error context.
ERROR_HEADER_PREFIXES: tuple[str, ...] = tuple(prefix for dialect in DIALECTS for prefix in dialect.prefixes)
#: A field's headers across every dialect, in order of precedence.
FIELD_HEADERS: Mapping[str, tuple[str, ...]] = {
    name: tuple(header for dialect in DIALECTS for header in dialect.fields.get(name, ()))
    for name in dict.fromkeys(name for dialect in DIALECTS for name in dialect.fields)
}
#: Headers written as big-endian integers, with their width in bytes.
BINARY_HEADERS: Mapping[str, int] = {name: width for dialect in DIALECTS for name, width in dialect.binary.items()}
#: Headers whose first occurrence counts (see :attr:`Dialect.first_wins`).
FIRST_WINS: frozenset[str] = frozenset().union(*(dialect.first_wins for dialect in DIALECTS))


def header_set_name(header_set: HeaderSet | None) -> str:
    """The name a dialect is shown, counted and filtered under; ``"none"`` for a header-less record."""
    return HEADER_LESS if header_set is None else header_set.value
