"""``DeadLetterQueueSensor``: trip when a DLQ topic gained at least N records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_kerr.compat import AirflowException, AirflowSensorTimeout, conf
from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.dead_letters import (
    SINCE_TASK_START,
    baseline_offsets,
    dlq_growth,
    newest_dead_letters,
    validate_since,
)
from airflow_kerr.triggers.base import defer_sensor
from airflow_kerr.triggers.dead_letter_queue import DeadLetterQueueTrigger, dead_letter_result


class DeadLetterQueueSensor(BaseSensorOperator):
    """Wait until ``topic`` gained ``min_records`` records, then return the count and the newest error contexts.

    Growth is measured from end offsets, never by consuming the topic. ``since`` says
    where counting starts: ``task_start`` (the end offsets when this task starts),
    ``group:<id>`` (what that consumer group has not consumed yet), or explicit
    offsets ``{partition: offset}``. The result (XCom) holds the count and a sample of
    the newest records parsed with the errors core: stage, exception class and
    message, and the source topic, partition and offset. Credentials an exception message
    quotes are masked (:mod:`airflow_kerr.errors.masking`) in the XCom, the log and the
    failure message, since each is read by people who may not read the connection.

    Every writer's dead letters count alike (growth is offsets, whatever the headers), and the
    sample reads each through :func:`~airflow_kerr.errors.parse_dead_letter`: Kafka Connect's,
    KIP-1191's, Kafka Streams', Spring Kafka's (under their root cause), Schema Registry
    rules' (under ``rule:<name>``) and header-less ones (no class).

    :param deferrable: wait on the triggerer instead of occupying a worker slot.
    """

    template_fields: Sequence[str] = ("topic", "since", "kafka_config_id")

    def __init__(
        self,
        *,
        topic: str,
        kafka_config_id: str = "kafka_default",
        min_records: int = 1,
        since: str | Mapping[str | int, int] = SINCE_TASK_START,
        sample_size: int = 5,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(min_records, int) or min_records < 1:
            raise ValueError(f"min_records={min_records!r}: expected an integer >= 1")
        if isinstance(since, str) and "{{" not in since:
            validate_since(since)
        if since == SINCE_TASK_START and self.mode == "reschedule":
            raise ValueError(
                "since='task_start' with mode='reschedule' would restart counting at every poke: "
                "use mode='poke', deferrable=True, since='group:<id>' or explicit offsets"
            )
        self.topic = topic
        self.kafka_config_id = kafka_config_id
        self.min_records = min_records
        self.since = since
        self.sample_size = sample_size
        self.deferrable = deferrable
        self._baseline: dict[int, int] | None = None
        self._kafka_config: dict[str, Any] | None = None

    def _config(self) -> dict[str, Any]:
        """The connection's client config, read once per run rather than at every poke."""
        if self._kafka_config is None:
            self._kafka_config = KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config()
        return self._kafka_config

    def baseline(self) -> dict[int, int]:
        """Where counting starts, fixed at the first poke of this task."""
        if self._baseline is None:
            self._baseline = baseline_offsets(self._config(), self.topic, self.since)
            self.log.info("counting records of %s from offsets %s", self.topic, self._baseline)
        return self._baseline

    def poke(self, context: Context) -> PokeReturnValue | bool:
        config = self._config()
        growth = dlq_growth(config, self.topic, self.baseline())
        if growth.count < self.min_records:
            self.log.info("%s gained %d of %d records", self.topic, growth.count, self.min_records)
            return False
        sample = newest_dead_letters(config, self.topic, growth, self.sample_size)
        result = mask_secrets(dead_letter_result(self.topic, growth, sample), by_key=False)
        self.log.info("%s gained %d records; newest: %s", self.topic, growth.count, result["sample"][:1])
        return PokeReturnValue(is_done=True, xcom_value=result)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if isinstance(first, PokeReturnValue) and first.is_done:
            return first.xcom_value
        baseline = {str(k): v for k, v in self.baseline().items()}
        defer_sensor(
            self,
            DeadLetterQueueTrigger,
            topic=self.topic,
            baseline=baseline,
            min_records=self.min_records,
            sample_size=self.sample_size,
            kafka_config_id=self.kafka_config_id,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == "tripped":
            self.log.info("%s gained %d records", self.topic, event["result"]["count"])
            return mask_secrets(event["result"], by_key=False)
        if event.get("status") == "timeout":
            raise AirflowSensorTimeout(f"{self.topic} gained only {event.get('count')} of {self.min_records} records")
        raise AirflowException(mask_text(str(event.get("message", f"DLQ trigger failed: {event}"))))
