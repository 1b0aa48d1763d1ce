"""Avro orders in Confluent's wire format, with a few records of each way a converter fails.

The good orders are written as a Kafka estate writes them: by confluent-kafka's
``AvroSerializer``, which registers :data:`ORDER_SCHEMA` under ``<topic>-value`` and frames
each body with magic byte 0 and the schema id. Every ``bad_every``-th record is, in turn:

- ``not_framed``: a JSON value on the Avro topic ("Unknown magic byte!");
- ``too_short``: three bytes, shorter than the 5-byte header;
- ``unknown_schema_id``: a schema id the registry does not know (error code 40403);
- ``truncated``: a good body cut short, which does not decode;
- ``tombstone``: a null value, which is not a failure: it converts to null and reaches the sink;
- ``negative_amount``: a good Avro order whose amount is negative.

The first four fail at ``VALUE_CONVERTER`` and go to the DLQ with the text Connect's
``AvroConverter`` writes. A negative amount decodes, then fails the pipeline's transformation
:func:`add_amount_cents` (``TRANSFORMATION``, :class:`NegativeAmount`); its dead letter keeps
the original Avro bytes, so the DLQ view decodes it and a replay with the fix
:func:`repair_amount` (``value_format="avro"``) puts it back repaired.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_kerr.formats import WireFormat
from airflow_kerr.replay.policy import ReplayRecord
from airflow_kerr.spark.stages import PipelineRecord

ORDER_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"},
        ],
    }
)
#: What the sink writes: the order with its amount in cents.
ENRICHED_ORDER_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "EnrichedOrder",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "amount_cents", "type": "long"},
        ],
    }
)
#: The kinds of special record, taken in turn by every ``bad_every``-th record.
SPECIAL_KINDS = ("not_framed", "too_short", "unknown_schema_id", "truncated", "tombstone", "negative_amount")
#: A schema id no registry of the example has handed out.
UNKNOWN_SCHEMA_ID = 999_999_999


class NegativeAmount(ValueError):
    """An order that decoded but whose amount is negative: the transformation refuses it."""


def order_kind(index: int, bad_every: int) -> str:
    """``good`` or the special kind of record ``index`` (``bad_every=0``: every record is good)."""
    if not bad_every or index % bad_every != bad_every - 1:
        return "good"
    return SPECIAL_KINDS[(index // bad_every) % len(SPECIAL_KINDS)]


def order(index: int) -> dict[str, Any]:
    """Order ``index``, the same on every run, so a check can compare what the sink holds."""
    return {"id": f"o-{index}", "customer": f"c-{index % 97}", "amount": round(1 + (index * 7.31) % 499, 2)}


def negative_order(index: int) -> dict[str, Any]:
    """Order ``index`` with its amount negated: what a ``negative_amount`` record holds."""
    return {**order(index), "amount": -order(index)["amount"]}


def generate_avro_orders(
    kafka_config: Mapping[str, Any], registry_config: Mapping[str, Any], topic: str, count: int, bad_every: int = 20
) -> dict[str, int]:
    """Write ``count`` records to ``topic`` (the key of record ``i`` is ``o-<i>``); return how many of each kind."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient(dict(registry_config)), ORDER_SCHEMA)
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({**kafka_config, "linger.ms": 10})
    counts = dict.fromkeys(("good", *SPECIAL_KINDS), 0)
    for index in range(count):
        kind = order_kind(index, bad_every)
        counts[kind] += 1
        framed = serializer(negative_order(index) if kind == "negative_amount" else order(index), context)
        assert framed is not None
        value = {
            "good": framed,
            "negative_amount": framed,
            "not_framed": json.dumps(order(index)).encode(),
            "too_short": framed[:3],
            "unknown_schema_id": WireFormat.build(UNKNOWN_SCHEMA_ID, framed[5:]),
            "truncated": framed[:-3],
            "tombstone": None,
        }[kind]
        producer.produce(topic, key=f"o-{index}".encode(), value=value)
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not write every generated order to {topic}")
    return counts


def add_amount_cents(record: PipelineRecord) -> PipelineRecord:
    """Add the amount in cents; a tombstone (a null value) passes as it is, to delete its key downstream.

    A negative amount raises :class:`NegativeAmount`: the record goes to the DLQ at ``TRANSFORMATION``
    with its original bytes, for :func:`repair_amount` to replay.
    """
    if record.value is not None:
        amount = record.value["amount"]
        if amount < 0:
            raise NegativeAmount(
                f"order {record.value['id']}: amount {amount} is negative; an order's amount must be 0 or more"
            )
        record.value["amount_cents"] = round(amount * 100)
    return record


def repair_amount(record: ReplayRecord) -> ReplayRecord:
    """A replay fix on decoded orders (``value_format="avro"``): a negative amount becomes its absolute value.

    The replay hands the value decoded (a dict) and encodes what comes back with the record's schema.
    """
    value: Any = record.value
    if isinstance(value, dict) and isinstance(value.get("amount"), (int, float)):
        value["amount"] = abs(value["amount"])
    return record
