"""The ``avro_orders`` example's records and transformation: which record is which kind, and what fails.

Pure functions of the example, checked without a broker; the example DAG's integration test
(``tests/integration/test_avro_orders_dag.py``) runs them in the real job.
"""

from __future__ import annotations

from collections import Counter

import pytest

from airflow_kerr.examples.avro_orders import (
    SPECIAL_KINDS,
    NegativeAmount,
    add_amount_cents,
    negative_order,
    order,
    order_kind,
)
from airflow_kerr.spark.stages import PipelineRecord


def _record(value: dict[str, object] | None) -> PipelineRecord:
    return PipelineRecord(key="o-29", value=value, topic="orders.avro", partition=0, offset=29, timestamp=None)


def test_every_nth_record_takes_each_special_kind_in_turn_negative_amounts_included() -> None:
    kinds = Counter(order_kind(index, 5) for index in range(60))
    assert kinds == {"good": 48, **dict.fromkeys(SPECIAL_KINDS, 2)}
    assert [index for index in range(60) if order_kind(index, 5) == "negative_amount"] == [29, 59]
    assert all(order_kind(index, 0) == "good" for index in range(60))


def test_a_negative_amount_fails_the_transformation_naming_the_order_and_the_amount() -> None:
    value = negative_order(29)
    assert value["amount"] == -order(29)["amount"] < 0
    with pytest.raises(NegativeAmount) as raised:
        add_amount_cents(_record(value))
    assert str(raised.value) == f"order o-29: amount {value['amount']} is negative; an order's amount must be 0 or more"


def test_a_good_order_gets_its_amount_in_cents_and_a_tombstone_passes() -> None:
    assert add_amount_cents(_record(order(3))).value == {**order(3), "amount_cents": round(order(3)["amount"] * 100)}
    assert add_amount_cents(_record(None)).value is None
