"""``ToleranceSensor``: trip on a tolerance breach, or once a pipeline has recovered from one."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_kerr.compat import AirflowException, AirflowSensorTimeout, conf
from airflow_kerr.hooks.breach_pause import BreachPauser, connectors_to_pause
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.tolerance import (
    ToleranceSpec,
    ToleranceSpecError,
    ToleranceWatch,
    reading_with_limits,
    wait_for_problems,
)
from airflow_kerr.triggers.base import defer_sensor
from airflow_kerr.triggers.tolerance import ToleranceTrigger

#: The flat watch settings' defaults (``pipeline`` … ``dlq_topic``): with ``spec`` given, they must stay so.
FLAT_DEFAULTS = (None, "kerr.metrics", timedelta(minutes=5), None, None, 100, "metrics", None)


class ToleranceSensor(BaseSensorOperator):
    """Watch a pipeline's error rate and error count inside a sliding ``window``.

    ``wait_for="breach"`` trips when the window's failed records exceed
    ``max_errors`` or its error rate exceeds ``max_error_rate`` (the rate only once
    the window saw ``min_records`` records, so three bad records out of four do not
    page anyone). ``wait_for="recovery"`` trips once a window with at least
    ``min_records`` records is under every limit: use it before resuming.

    ``source="metrics"`` reads the job's metrics records (``pipeline`` on
    ``metrics_topic``). ``source="dlq"`` needs no metrics: the rate is the growth of
    ``dlq_topic`` over what consumer group ``group_id`` consumed of
    ``source_topics`` inside the window, so it also guards a Kafka Connect sink
    that writes a DLQ. The result (XCom) is the reading that tripped the sensor.

    ``pause_on_breach`` names Kafka Connect connectors (on ``kafka_connect_conn_id``) to
    pause the moment the breach is seen, in the poke or the trigger that saw it, before
    any downstream task starts (seconds count while bad records flow into a sink); the
    result's ``paused_on_breach`` says, per connector, when Connect accepted the pause or
    why it did not. A pause task downstream then follows up and waits for PAUSED.

    The watch settings (``pipeline`` … ``group_id``) make one
    :class:`~airflow_kerr.kafka.tolerance.ToleranceSpec`, checked here when the DAG file is
    parsed and built again from the rendered templates when the task runs
    (:meth:`tolerance_spec`); the trigger and the watch take that spec. Code that already
    holds a spec (the tolerance guard) passes it as ``spec`` instead of those arguments.
    """

    template_fields: Sequence[str] = ("pipeline", "metrics_topic", "dlq_topic", "source_topics", "group_id")

    def __init__(  # noqa: PLR0913 - a DAG author's keyword arguments, kept flat at this edge (issue #28); the spec is built here
        self,
        *,
        kafka_config_id: str = "kafka_default",
        pipeline: str | None = None,
        metrics_topic: str = "kerr.metrics",
        window: timedelta | float = timedelta(minutes=5),
        max_error_rate: float | None = None,
        max_errors: int | None = None,
        min_records: int = 100,
        wait_for: str = "breach",
        source: str = "metrics",
        dlq_topic: str | None = None,
        source_topics: Sequence[str] | None = None,
        group_id: str | None = None,
        pause_on_breach: str | Sequence[str] = (),
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        spec: ToleranceSpec | None = None,
        **kwargs: Any,
    ) -> None:
        settings = locals()
        super().__init__(**kwargs)
        problems = wait_for_problems(wait_for)
        flat = (pipeline, metrics_topic, window, max_error_rate, max_errors, min_records, source, dlq_topic)
        if spec is not None and (flat, source_topics, group_id) != (FLAT_DEFAULTS, None, None):
            problems.append("spec: given with watch settings (pipeline … group_id); give the one or the others")
        if spec is None:
            try:
                spec = ToleranceSpec.from_settings(settings)
            except ToleranceSpecError as error:
                problems += error.problems
        pause, pause_problems = connectors_to_pause(pause_on_breach)
        problems += pause_problems
        if pause and wait_for != "breach":
            problems.append(f"pause_on_breach={pause_on_breach!r}: only with wait_for='breach', not {wait_for!r}")
        if problems or spec is None:
            raise ValueError("invalid ToleranceSensor arguments:\n  - " + "\n  - ".join(problems))
        self.kafka_config_id = kafka_config_id
        # Kept flat: the names are template fields, rendered before tolerance_spec() rebuilds the spec.
        self.pipeline = spec.pipeline
        self.metrics_topic = spec.metrics_topic
        self.window_ms = spec.window_ms
        self.max_error_rate = spec.max_error_rate
        self.max_errors = spec.max_errors
        self.min_records = spec.min_records
        self.wait_for = wait_for
        self.source = spec.source
        self.dlq_topic = spec.dlq_topic
        self.source_topics = list(spec.source_topics)
        self.group_id = spec.group_id
        self.pause_on_breach = pause
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self.deferrable = deferrable
        self._watch: ToleranceWatch | None = None
        self._pauser: BreachPauser | None = None

    def tolerance_spec(self) -> ToleranceSpec:
        """The spec of the settings as they stand: after rendering, with the templated names filled in."""
        return ToleranceSpec.from_settings(vars(self))

    def watch_settings(self) -> dict[str, Any]:
        """The plain settings the trigger took before :class:`ToleranceSpec` (``wait_for`` plus the spec's dict)."""
        return {"wait_for": self.wait_for, **self.tolerance_spec().to_dict()}

    def watch(self) -> ToleranceWatch:
        if self._watch is None:
            config = KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config()
            self._watch = ToleranceWatch(kafka_config=config, wait_for=self.wait_for, spec=self.tolerance_spec())
        return self._watch

    def poke(self, context: Context) -> PokeReturnValue | bool:
        self.pauser()  # ready before the breach
        watch = self.watch()
        holds, reading = watch.check()
        self.log.info("%s? %s", self.wait_for, watch.describe(reading))
        if not holds or reading is None:
            return False
        paused = self.pauser().pause()
        self.pauser().close()
        return PokeReturnValue(is_done=True, xcom_value=self.result(reading.as_dict(), paused))

    def pauser(self) -> BreachPauser:
        """The pause of ``pause_on_breach``, its Connect connection read and client made at the first poke.

        Kept from poke to poke, as the watch is: a breach then costs one PUT, not a connection
        read and a new client as well.
        """
        if self._pauser is None:
            self._pauser = BreachPauser(self.kafka_connect_conn_id, self.pause_on_breach)
            self._pauser.prepare()
        return self._pauser

    def result(self, reading: dict[str, Any], paused: dict[str, Any] | None = None) -> dict[str, Any]:
        """The reading plus the limits it was judged against, for notifiers and branches downstream."""
        result = reading_with_limits(reading, self.tolerance_spec(), self.wait_for)
        return {**result, "paused_on_breach": paused} if paused else result

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        defer_sensor(
            self,
            ToleranceTrigger,
            spec=self.tolerance_spec(),
            wait_for=self.wait_for,
            kafka_config_id=self.kafka_config_id,
            pause_on_breach=self.pause_on_breach,
            kafka_connect_conn_id=self.kafka_connect_conn_id,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == self.wait_for:
            return self.result(event["reading"], event.get("paused_on_breach"))
        if event.get("status") == "timeout":
            raise AirflowSensorTimeout(f"no {self.wait_for} within the timeout; last reading {event.get('reading')}")
        raise AirflowException(event.get("message", f"tolerance trigger failed: {event}"))
