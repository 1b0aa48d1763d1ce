"""The orders pipeline's tolerance watch, shared by the breach and the recovery DAG.

Both assets must watch with the same settings: then their watchers share one poll loop
and one state (healthy or breached) on the triggerer, and a recovery always follows its
breach. Keeping the settings in one place makes that hold when someone edits a limit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

#: The Kafka Connect sink downstream of the pipeline, paused while the pipeline breaches.
ORDERS_CONNECTOR = "orders-sink"

#: More than 2 % of the records failing over 5 minutes, once at least 100 records were seen;
#: read every second from the job's metrics on ``kerr.metrics``. The watch pauses ``orders-sink``
#: the moment it sees a breach, before the breach DAG's run exists (that run follows up).
ORDERS_TOLERANCE: dict[str, Any] = {
    "pipeline": "orders_pipeline",
    "metrics_topic": "kerr.metrics",
    "dlq_topic": "orders.dlq",
    "max_error_rate": 0.02,
    "min_records": 100,
    "window": timedelta(minutes=5),
    "poll_interval": 1.0,
    "pause_on_breach": [ORDERS_CONNECTOR],
}
