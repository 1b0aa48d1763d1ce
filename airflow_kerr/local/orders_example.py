"""The orders example's topics and its downstream Kafka Connect sink, on the embedded stack.

``make demo`` and ``make ui`` both set them up, so the example DAGs run as they are:
the error-aware pipeline reads ``orders`` and writes ``orders.clean`` and ``orders.dlq``,
the tolerance DAGs pause and resume ``orders-sink``, which writes ``orders.clean`` to a file.
The Avro example (``avro_orders``) reads ``orders.avro`` and writes ``orders.avro.clean`` and ``orders.avro.dlq``.
"""

from __future__ import annotations

from airflow_kerr.examples.orders_tolerance import ORDERS_CONNECTOR
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config

TOPICS = {
    "orders": 2,
    "orders.clean": 1,
    "orders.dlq": 1,
    "orders.dlq.parked": 1,
    "orders.avro": 1,
    "orders.avro.clean": 1,
    "orders.avro.dlq": 1,
    "kerr.metrics": 1,
}
CONNECTOR = ORDERS_CONNECTOR
OUTPUT_FILE = "orders.jsonl"


def add_sink_connector(connect: ConnectWorker) -> None:
    """``orders-sink``: a FileStreamSink reading ``orders.clean`` into ``orders.jsonl`` in the worker's directory."""
    connect.add_connector(CONNECTOR, connector_config("orders.clean", OUTPUT_FILE))
