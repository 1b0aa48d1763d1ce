"""An asset watched through common.messaging's MessageQueueTrigger with the kerr+dlq scheme."""

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import Asset, AssetWatcher

DLQ_GREW = Asset(
    name="orders.dlq.grew",
    watchers=[
        AssetWatcher(
            name="orders.dlq.grew",
            trigger=MessageQueueTrigger(scheme="kerr+dlq", topic="orders.dlq", min_records=10),
        )
    ],
)
