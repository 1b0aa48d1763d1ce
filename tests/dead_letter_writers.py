"""Dead letters built byte for byte as each writer in a Kafka estate writes them, for tests.

Each builder follows its writer's own source, named in its docstring, and returns the
keyword arguments of confluent-kafka's ``Producer.produce`` (``topic``, ``key``, ``value``,
``headers`` and, where the writer sets it, ``timestamp`` and ``partition``). They are written
here from the upstream code rather than taken from the product, so that a test compares the
product with the writer, not with itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Original:
    """The record that failed, as its consumer saw it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------- Spring


SPRING_LISTENER_FAILED = "org.springframework.kafka.listener.ListenerExecutionFailedException"


def spring_dlt(
    original: Original,
    *,
    dlt_topic: str | None = None,
    exception: str = SPRING_LISTENER_FAILED,
    message: str | None = "Listener method threw exception",
    cause: str | None = "java.lang.IllegalStateException",
    cause_message: str | None = "bad order",
    group: str | None = "orders-service",
    key_failure: bool = False,
) -> dict[str, Any]:
    """Spring Kafka's ``DeadLetterPublishingRecoverer``, with its default settings.

    Follows ``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``
    (``enrichHeadersAndCreateProducerRecord``, ``addExceptionInfoHeaders``, ``maybeAddOriginalHeaders``)
    and ``support/KafkaHeaders.java`` for the names:

    - the original headers are copied, then the exception headers appended: ``kafka_dlt-exception-fqcn``
      (``kafka_dlt-key-exception-fqcn`` for a key deserialization failure), ``-cause-fqcn`` (the root
      cause: the exception itself when it has none), ``-message`` (``message; cause message`` when the
      root cause is another exception, left out when both are null) and ``-stacktrace``;
    - then the originals: topic (UTF-8), partition (``ByteBuffer.putInt``: 4 bytes big-endian), offset
      and timestamp (``putLong``: 8 bytes), timestamp type (``TimestampType.toString()``, ``CreateTime``)
      and, for a ``ListenerExecutionFailedException`` that knows its group, the consumer group;
    - the record keeps the original key, value and timestamp, and goes to ``<topic>-dlt`` on the
      original's partition (the default destination resolver).
    """
    root_class, root_message = (cause, cause_message) if cause is not None else (exception, message)
    text = message
    if cause is not None:
        text = None if message is None else f"{message}; "
        if cause_message is not None:
            text = cause_message if text is None else text + cause_message
    trace = f"{exception}: {message}\n\tat com.example.OrdersListener.listen(OrdersListener.java:42)\n"
    if cause is not None:
        trace += f"Caused by: {root_class}: {root_message}\n\tat com.example.Orders.parse(Orders.java:17)\n"
    prefix = "kafka_dlt-key-exception-" if key_failure else "kafka_dlt-exception-"
    headers: list[Header] = list(original.headers)
    headers.append((prefix + "fqcn", exception.encode()))
    headers.append(("kafka_dlt-exception-cause-fqcn", (root_class or exception).encode()))
    if text is not None:
        headers.append((prefix + "message", text.encode()))
    headers.append((prefix + "stacktrace", trace.encode()))
    headers.append(("kafka_dlt-original-topic", original.topic.encode()))
    headers.append(("kafka_dlt-original-partition", struct.pack(">i", original.partition)))
    headers.append(("kafka_dlt-original-offset", struct.pack(">q", original.offset)))
    headers.append(("kafka_dlt-original-timestamp", struct.pack(">q", original.timestamp)))
    headers.append(("kafka_dlt-original-timestamp-type", b"CreateTime"))
    if group is not None and exception == SPRING_LISTENER_FAILED:
        headers.append(("kafka_dlt-original-consumer-group", group.encode()))
    return {
        "topic": dlt_topic or f"{original.topic}-dlt",
        "partition": original.partition,
        "timestamp": original.timestamp,
        "key": original.key,
        "value": original.value,
        "headers": headers,
    }


# ----------------------------------------------------------------------------------------------- Schema Registry


def schema_registry_rule(
    original: Original,
    *,
    dlq_topic: str,
    rule: str = "checkSsnLen",
    mode: str = "READ",
    subject: str | None = None,
    exception: str | None = "Expr failed: 'message.ssn.size() == 9'",
) -> dict[str, Any]:
    """Confluent Schema Registry's DLQ rule action, as confluent-kafka-python's ``DlqAction.run`` writes it.

    Follows ``confluent_kafka/schema_registry/rules/dlq/dlq_action.py`` (``run``, ``_populate_headers``)
    and the names in ``confluent_kafka/schema_registry/common/serde.py``: the incoming headers,
    then ``__rule.name``, ``__rule.mode`` (the executing mode's value), ``__rule.subject``,
    ``__rule.topic`` (the topic being read or written) and, when there was an exception,
    ``__rule.exception`` (``str(ex)``: its message). On READ the key and value are the original
    wire bytes; no partition, offset or timestamp is set (the producer stamps the record).
    """
    headers: list[Header] = list(original.headers)
    headers.append(("__rule.name", rule.encode()))
    headers.append(("__rule.mode", mode.encode()))
    headers.append(("__rule.subject", (subject or f"{original.topic}-value").encode()))
    headers.append(("__rule.topic", original.topic.encode()))
    if exception is not None:
        headers.append(("__rule.exception", exception.encode()))
    return {"topic": dlq_topic, "key": original.key, "value": original.value, "headers": headers}


def avro_wire(schema_id: int, payload: bytes) -> bytes:
    """Schema Registry's wire format: magic byte 0, the schema id as 4 bytes big-endian, the payload."""
    return b"\x00" + struct.pack(">i", schema_id) + payload


# ----------------------------------------------------------------------------------------------- header-less


def header_less(original: Original, *, dlq_topic: str) -> dict[str, Any]:
    """Airflow's apache-kafka ``KafkaSharedStreamTrigger`` with ``dlq_topic``: key and value, nothing else.

    Follows ``airflow/providers/apache/kafka/triggers/shared_stream.py`` (``_send_to_dlq``:
    ``producer.produce(topic, value=payload.value, key=payload.key)``).
    """
    return {"topic": dlq_topic, "key": original.key, "value": original.value}


# ----------------------------------------------------------------------------------------------- KIP-1191


def kip_1191(
    original: Original,
    *,
    dlq_topic: str,
    group: str = "orders-share-group",
    delivery_count: int = 5,
    message: str | None = "delivery attempts exhausted",
    copy_record: bool = False,
) -> dict[str, Any]:
    """A KIP-1191 share-group dead letter: ``__dlq.errors.*`` with decimal text numbers.

    Follows KIP-1191 ("Dead-letter queues for share groups"): topic, partition and offset of
    the original, the group, the delivery count and the optional message. Without
    ``errors.deadletterqueue.copy.record.enable`` (its default) the record has no key and no
    value: a pointer to the original.
    """
    headers: list[Header] = list(original.headers) if copy_record else []
    headers += [
        ("__dlq.errors.topic", original.topic.encode()),
        ("__dlq.errors.partition", str(original.partition).encode()),
        ("__dlq.errors.offset", str(original.offset).encode()),
        ("__dlq.errors.group", group.encode()),
        ("__dlq.errors.delivery.count", str(delivery_count).encode()),
    ]
    if message is not None:
        headers.append(("__dlq.errors.message", message.encode()))
    return {
        "topic": dlq_topic,
        "key": original.key if copy_record else None,
        "value": original.value if copy_record else None,
        "headers": headers,
    }


# ----------------------------------------------------------------------------------------------- Streams (bakdata)


def streams_bakdata(
    original: Original,
    *,
    dlq_topic: str,
    exception: str = "org.apache.kafka.common.errors.SerializationException",
    message: str = "Unknown magic byte!",
    processor: str = "KSTREAM-MAPVALUES-0000000001",
    task: str = "0_1",
) -> dict[str, Any]:
    """Kafka Streams' KIP-1034 headers with bakdata's processor node and task ids.

    Follows ``streams/src/main/java/org/apache/kafka/streams/errors/internals/ExceptionHandlerUtils.java``
    (``__streams.errors.exception``, ``message``, ``stacktrace``, ``topic``, ``partition``,
    ``offset``, decimal text) and bakdata's error handling, which adds
    ``__streams.errors.processor.node.id`` and ``__streams.errors.task.id``.
    """
    headers: list[Header] = list(original.headers)
    headers += [
        ("__streams.errors.exception", exception.encode()),
        ("__streams.errors.message", message.encode()),
        ("__streams.errors.stacktrace", f"{exception}: {message}\n\tat Topology.process\n".encode()),
        ("__streams.errors.topic", original.topic.encode()),
        ("__streams.errors.partition", str(original.partition).encode()),
        ("__streams.errors.offset", str(original.offset).encode()),
        ("__streams.errors.processor.node.id", processor.encode()),
        ("__streams.errors.task.id", task.encode()),
    ]
    return {
        "topic": dlq_topic,
        "timestamp": original.timestamp,
        "key": original.key,
        "value": original.value,
        "headers": headers,
    }
