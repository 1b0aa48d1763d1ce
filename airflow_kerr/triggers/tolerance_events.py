"""``ToleranceEventTrigger``: tolerance breach and recovery as asset events, for an ``AssetWatcher`` (Airflow 3.3)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_kerr.hooks.breach_pause import BreachPauser, connectors_to_pause
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.dead_letters import alert_sample
from airflow_kerr.kafka.shared_clients import SharedClients, SharedCursor, SharedMetricsView, Subject
from airflow_kerr.kafka.tolerance import ToleranceSpec, ToleranceSpecError, ToleranceWatch, reading_with_limits
from airflow_kerr.kafka.watch_cursor import WatchCursor, WatchPosition
from airflow_kerr.triggers.watch import CursorStream, WatchTrigger, default_cursor_group

FIRE_ON = ("breach", "recovery")

log = logging.getLogger(__name__)


class ToleranceTransitionStream(CursorStream):
    """Announces a breach when a healthy pipeline passes a limit, and recovery when a breached one is back under.

    The state (``healthy``, or ``breached`` with the breach's id) is the cursor's, saved
    once Airflow stored the event that changed it, so a breach is announced once however
    long it lasts, and a restart neither forgets an open breach nor loses one.

    With ``pause_on_breach`` (connector names) it asks Kafka Connect to pause them as soon
    as it sees the breach, before announcing it: the DAG the event starts follows up. The
    event says what was asked and when (``paused_on_breach``).
    """

    def __init__(
        self,
        *,
        spec: ToleranceSpec,
        cursor_group: str,
        kafka_config_id: str,
        poll_interval: float,
        pause_on_breach: Sequence[str] = (),
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
    ) -> None:
        super().__init__(kafka_config_id=kafka_config_id, poll_interval=poll_interval)
        self.spec = spec
        self.cursor_group = cursor_group
        self.pause_on_breach = list(pause_on_breach)
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self._watch: ToleranceWatch | None = None
        #: The connection to Kafka Connect read, and its client made, when the watch opens: a breach costs one PUT.
        self.pauser = BreachPauser(kafka_connect_conn_id, self.pause_on_breach)
        # The metrics mode follows the metrics topic and waits on it: a breach record is read when the broker
        # has it, not up to poll_interval later. The DLQ mode samples every poll_interval.
        self.waits_in_observe = spec.source == "metrics"

    def share(self, clients: SharedClients) -> Subject | None:
        """The metrics mode reads the follower its cluster's watches share; the sampled DLQ mode reads alone."""
        if self.spec.source != "metrics":
            return None
        clients.watch_metrics(self.spec.metrics_topic, self.spec.window_ms, self.poll_interval)
        return (self.spec.metrics_topic, str(self.spec.pipeline))

    def unshare(self, clients: SharedClients) -> None:
        if self.shared_subject is not None:
            clients.unwatch_metrics(self.spec.metrics_topic, self.spec.window_ms, self.poll_interval)

    def cursor(self) -> WatchCursor | SharedCursor:
        if self._watch is not None:
            self._watch.close()  # opened again after a failure: the old consumer goes
        self._watch = ToleranceWatch(kafka_config=self.kafka_config, wait_for="breach", spec=self.spec)
        if self.shared is not None and self.shared_subject is not None:
            self._watch.shared_view = SharedMetricsView(
                self.shared, self.spec.metrics_topic, str(self.spec.pipeline), self.spec.window_ms
            )
        return self.cursor_on(self.cursor_group, self.spec.watched_topic)

    def first_position(self) -> WatchPosition:
        return WatchPosition(state={"state": "healthy"})

    def open(self) -> None:
        super().open()
        self.pauser.prepare()

    async def aclose(self) -> None:
        await super().aclose()
        if self._watch is not None:
            await asyncio.to_thread(self._watch.close)
        self.pauser.close()

    def observe(self) -> list[tuple[dict[str, Any], WatchPosition]]:
        assert self._watch is not None
        state = self.position.state or {"state": "healthy"}
        breached = state.get("state") == "breached"
        self._watch.wait_for = "recovery" if breached else "breach"
        waits = self.waits_in_observe and self.shared is None  # a shared watch awaited the shared read instead
        holds, reading = self._watch.check(wait_s=self.poll_interval if waits else 0.0)
        if not holds or reading is None:
            return []
        if breached:
            event = {"status": "recovery", "breach_id": state.get("breach_id")}
            after = {"state": "healthy", "last_breach_id": state.get("breach_id")}
        else:
            paused = self.pauser.pause()  # first: seconds matter
            breach_id = f"{self.spec.pipeline or self.spec.dlq_topic}@{reading.window_end_ms}"
            dlq = self.spec.dlq_topic
            sample, problem = alert_sample(lambda: self.kafka_config, dlq)
            if problem:  # the breach is news without its sample; the alert says why it has none
                log.warning("no dead-letter sample from %s for the breach event: %s", dlq, problem)
            event = {"status": "breach", "breach_id": breach_id, "sample": sample, "sample_error": problem}
            if paused:
                event["paused_on_breach"] = paused
            after = {"state": "breached", "breach_id": breach_id, "since_ms": reading.window_end_ms}
        return [
            (
                {**event, **reading_with_limits(reading.as_dict(), self.spec, self._watch.wait_for)},
                WatchPosition(state=after),
            )
        ]


def invalid_settings(problems: Sequence[str]) -> ValueError:
    """The one error for bad tolerance watch settings, however the watch was asked for (asset, queue, trigger)."""
    return ValueError("invalid ToleranceEventTrigger arguments:\n  - " + "\n  - ".join(problems))


def checked_spec(build: Callable[[], ToleranceSpec], pause_on_breach: str | Sequence[str]) -> ToleranceSpec:
    """``build()``'s spec, or one error listing its problems and ``pause_on_breach``'s together.

    For the doors a DAG author writes flat settings into (``tolerance_asset``, the
    ``kerr+tolerance`` queue): every problem of the call is named at once, when the DAG
    file is parsed, in the words the trigger uses.
    """
    try:
        return build()
    except ToleranceSpecError as error:
        raise invalid_settings(error.problems + connectors_to_pause(pause_on_breach)[1]) from None


#: What both tolerance triggers (this one and the sensor's ``ToleranceTrigger``) keep of their
#: arguments: what is watched, on which connection, how often, and what a breach pauses.
WATCH_FIELDS = ("spec", "kafka_config_id", "poll_interval", "pause_on_breach", "kafka_connect_conn_id")


class ToleranceEventTrigger(WatchTrigger):
    """For an ``AssetWatcher``: fires on a tolerance breach, and (separately) on recovery from it.

    ``spec`` is the watch's :class:`~airflow_kerr.kafka.tolerance.ToleranceSpec` (or the
    dict its ``to_dict()`` wrote, as the triggerer hands it back); ``fire_on`` picks the
    transitions this trigger fires on. Two triggers with the same spec (one per asset:
    breach, recovery) share one poll loop and one state. The payload: ``status`` (``breach`` or
    ``recovery``), ``breach_id`` (the same on a breach and on its recovery, and on a
    repeat after a triggerer restart), the reading (``records_in``, ``errors``,
    ``error_rate``, ``window_start_ms``/``window_end_ms``) and the limits, ``pipeline``
    and ``dlq_topic``. Delivery is at least once (see :mod:`airflow_kerr.triggers.watch`).
    ``pause_on_breach`` names Kafka Connect connectors (on ``kafka_connect_conn_id``) the
    watch pauses the moment it sees a breach, before the event exists; the breach payload's
    ``paused_on_breach`` says, per connector, when Connect accepted the pause or why not.

    ``watch`` is the name a previous version stored the same dict under; a watcher stored
    that way is still read (it takes the place of ``spec``) and serializes the new way.
    The default cursor group hashes the spec's dict, which kept its keys, so an upgraded
    watch keeps its saved state.
    """

    fields = (*WATCH_FIELDS, "cursor_group", "fire_on")
    stream_fields = (*WATCH_FIELDS, "cursor_group")

    def __init__(
        self,
        spec: ToleranceSpec | Mapping[str, Any] | None = None,
        kafka_config_id: str = "kafka_default",
        poll_interval: float = 5.0,
        cursor_group: str | None = None,
        fire_on: str | Sequence[str] = FIRE_ON,
        pause_on_breach: Sequence[str] = (),
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
        watch: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        spec = spec if spec is not None else watch  # watch=: a previous version's name for the same dict
        problems: list[str] = []
        try:
            if spec is None:
                raise ToleranceSpecError(["spec: required (a ToleranceSpec or its to_dict())"])
            self.spec = spec if isinstance(spec, ToleranceSpec) else ToleranceSpec.from_dict(spec)
        except ToleranceSpecError as error:
            problems += error.problems
        fire = [fire_on] if isinstance(fire_on, str) else list(fire_on)
        problems += [f"fire_on={name!r}: expected {' or '.join(FIRE_ON)}" for name in fire if name not in FIRE_ON]
        pause, pause_problems = connectors_to_pause(pause_on_breach)
        problems += pause_problems
        if problems:
            raise invalid_settings(problems)
        self.kafka_config_id = kafka_config_id
        self.poll_interval = poll_interval
        subject = str(self.spec.pipeline or self.spec.dlq_topic)  # as before the spec: the group keeps its name
        self.cursor_group = cursor_group or default_cursor_group("tolerance", subject, self.spec.to_dict())
        self.fire_on = fire
        self.pause_on_breach = pause
        self.kafka_connect_conn_id = kafka_connect_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The fields, with the spec as the plain dict the triggerer can store as JSON."""
        classpath, kwargs = super().serialize()
        return classpath, {**kwargs, "spec": self.spec.to_dict()}

    @classmethod
    def stream(cls, settings: dict[str, Any]) -> CursorStream:
        return ToleranceTransitionStream(**{**settings, "spec": ToleranceSpec.from_dict(settings["spec"])})

    def fires_on(self, event: dict[str, Any]) -> bool:
        return event.get("status") in self.fire_on
