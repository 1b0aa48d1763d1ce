"""The benchmark's transformation as an importable module, so Spark's Python workers can load it by path."""

from __future__ import annotations

from typing import Any


def transform(record: Any) -> Any:
    """A business check and a derived field; raises for a non-positive amount."""
    order = record.value
    if order["amount"] <= 0:
        raise ValueError("non-positive amount")
    order["amount_cents"] = round(order["amount"] * 100)
    return record
