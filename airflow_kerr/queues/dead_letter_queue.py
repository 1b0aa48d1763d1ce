"""``MessageQueueTrigger(scheme="kerr+dlq", topic=...)``: a DLQ's growth, through common.messaging's door.

Airflow's standard way to start a DAG on outside events is common.messaging's
``MessageQueueTrigger`` in an ``AssetWatcher``; it asks the registered queue providers
which one serves its ``scheme`` and builds that provider's trigger from its other keyword
arguments. Ours builds :class:`~airflow_kerr.triggers.dead_letter_queue_events.DeadLetterQueueEventTrigger`
(``topic``, ``kafka_config_id``, ``min_records``, ``poll_interval``, ``sample_size``,
``count_limit``, ``cursor_group``), the trigger behind
:func:`~airflow_kerr.assets.watched.dead_letter_queue_asset`. The scheme is ours, not
``kafka``: the apache-kafka provider's ``kafka`` scheme delivers raw messages, this one
delivers "the DLQ grew by N, these classes failed" with a stored position.
"""

from __future__ import annotations

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider
from airflow.triggers.base import BaseEventTrigger

from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger


class DeadLetterQueueMessageQueueProvider(BaseMessageQueueProvider):
    """Serves ``scheme="kerr+dlq"`` with :class:`DeadLetterQueueEventTrigger` (scheme-based dispatch only)."""

    scheme = "kerr+dlq"

    def trigger_class(self) -> type[BaseEventTrigger]:
        return DeadLetterQueueEventTrigger
