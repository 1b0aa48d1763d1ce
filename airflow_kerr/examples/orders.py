"""An orders stream with poison in it, and the transformations of the example pipeline.

Three kinds of bad record, one per way a record goes wrong in practice:

- malformed JSON: fails the VALUE_CONVERTER stage and goes to the DLQ;
- an invalid order (negative amount): :func:`validate_order` rejects it in the
  TRANSFORMATION stage and it goes to the DLQ;
- a flaky order: :func:`enrich_order`'s lookup fails once with a retriable error
  and succeeds when retried, so the record reaches the sink and the retry is
  counted in ``total-retries``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kerr.errors import RetriableError
from airflow_kerr.replay.policy import ReplayRecord
from airflow_kerr.spark.stages import PipelineRecord, batch_transformation

_FAILED_ONCE: set[tuple[str, int, int]] = set()


class InvalidOrder(ValueError):
    """An order that parsed but breaks a business rule."""


class TransientLookupError(RetriableError):
    """A lookup that timed out; retrying it succeeds."""


@dataclass(frozen=True)
class GeneratedOrders:
    """What :func:`generate_orders` wrote, by kind, for checking a run's counts."""

    total: int
    malformed: int
    invalid: int
    flaky: int

    @property
    def bad(self) -> int:
        return self.malformed + self.invalid

    @property
    def good(self) -> int:
        return self.total - self.bad

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "malformed": self.malformed,
            "invalid": self.invalid,
            "flaky": self.flaky,
            "good": self.good,
        }


def order_value(index: int, kind: str, rng: random.Random) -> bytes:
    """The value bytes of order ``index`` of the given kind (good, malformed, invalid or flaky)."""
    if kind == "malformed":
        return f'{{"id": "o-{index}", "amount": '.encode()
    amount = -round(rng.uniform(1, 50), 2) if kind == "invalid" else round(rng.uniform(1, 500), 2)
    order: dict[str, Any] = {"id": f"o-{index}", "customer": f"c-{index % 97}", "amount": amount}
    if kind == "flaky":
        order["flaky"] = True
    return json.dumps(order).encode()


def generate_orders(
    kafka_config: Mapping[str, Any],
    topic: str,
    count: int,
    malformed_every: int = 50,
    invalid_every: int = 70,
    flaky_every: int = 90,
    seed: int = 7,
) -> GeneratedOrders:
    """Write ``count`` orders to ``topic``; every Nth is malformed, invalid or flaky (0 disables a kind)."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({**kafka_config, "linger.ms": 10})
    kinds = {"malformed": 0, "invalid": 0, "flaky": 0}
    for index in range(count):
        kind = "good"
        for name, every in (("malformed", malformed_every), ("invalid", invalid_every), ("flaky", flaky_every)):
            if every and index % every == every - 1:
                kind = name
                break
        if kind != "good":
            kinds[kind] += 1
        headers: list[tuple[str, str | bytes | None]] = [("source", b"orders-generator"), ("kind", kind.encode())]
        producer.produce(topic, key=f"o-{index}".encode(), value=order_value(index, kind, rng), headers=headers)
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not write every generated order to {topic}")
    return GeneratedOrders(count, kinds["malformed"], kinds["invalid"], kinds["flaky"])


def validate_order(record: PipelineRecord) -> PipelineRecord:
    """Reject orders without an id or with an amount that is not positive."""
    order = record.value
    if not isinstance(order, dict) or "id" not in order:
        raise InvalidOrder(f"not an order: {order!r}")
    if not isinstance(order.get("amount"), (int, float)) or order["amount"] <= 0:
        raise InvalidOrder(f"order {order['id']} has a non-positive amount: {order.get('amount')!r}")
    return record


def enrich_order(record: PipelineRecord) -> PipelineRecord:
    """Add the amount in cents; a flaky order's lookup fails the first time it is tried."""
    order = record.value
    if order.get("flaky"):
        coordinates = (record.topic, record.partition, record.offset)
        if coordinates not in _FAILED_ONCE:
            _FAILED_ONCE.add(coordinates)
            raise TransientLookupError(f"customer lookup timed out for order {order['id']}")
    order["amount_cents"] = round(order["amount"] * 100)
    return record


@batch_transformation
def validate_orders(batch: Any) -> Any:
    """:func:`validate_order` for a whole Arrow batch: one bad order fails the call, naming the first one.

    The job then bisects the batch until each bad order is called alone, so every invalid
    order reaches the DLQ with the same exception and message as on the per-record path.
    """
    import pyarrow.compute as pc

    value = batch.column("value")
    if not _is_struct_with(value, "id", "amount"):
        raise InvalidOrder(f"not an order: {value.type}")
    ids, amounts = pc.struct_field(value, "id"), pc.struct_field(value, "amount")
    bad = pc.or_kleene(pc.invert(pc.is_valid(ids)), pc.invert(pc.greater(pc.fill_null(amounts, 0), 0)))
    if pc.any(bad).as_py():
        first = pc.index(bad, True).as_py()
        order_id, amount = ids[first].as_py(), amounts[first].as_py()
        if order_id is None:
            raise InvalidOrder(f"not an order: {batch.slice(first, 1).column('value').to_pylist()[0]!r}")
        raise InvalidOrder(f"order {order_id} has a non-positive amount: {amount!r}")
    return batch


@batch_transformation
def add_amount_cents(batch: Any) -> Any:
    """The amount in cents as a new field of each order (:func:`enrich_order` without its flaky lookup)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    value = batch.column("value")
    cents = pc.cast(pc.round(pc.multiply(pc.struct_field(value, "amount"), 100)), pa.int64())
    fields = [value.field(index) for index in range(value.type.num_fields)]
    names = [field.name for field in value.type]
    enriched = pa.StructArray.from_arrays([*fields, cents], names=[*names, "amount_cents"], mask=value.is_null())
    return batch.set_column(batch.schema.get_field_index("value"), "value", enriched)


def _is_struct_with(column: Any, *names: str) -> bool:
    import pyarrow as pa

    return pa.types.is_struct(column.type) and all(column.type.get_field_index(name) >= 0 for name in names)


def repair_order(record: ReplayRecord) -> ReplayRecord | None:
    """The replay fix for this example's DLQ: a negative amount becomes its absolute value.

    A malformed order cannot be repaired (its bytes were cut short), so the JSON error is
    raised: the replay parks the record with that error as the reason, for a person to look
    at, rather than dropping data. An order with a zero amount is dropped (returns None):
    there is nothing to charge.
    """
    order = json.loads(record.value or b"")
    if not isinstance(order, dict) or "id" not in order:
        raise InvalidOrder(f"not an order: {order!r}")
    amount = order.get("amount")
    if not isinstance(amount, (int, float)):
        raise InvalidOrder(f"order {order['id']} has no numeric amount: {amount!r}")
    if amount == 0:
        return None
    order["amount"] = abs(amount)
    order["repaired"] = True
    record.value = json.dumps(order).encode()
    return record
