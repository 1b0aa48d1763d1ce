"""What our event triggers (for ``AssetWatcher``) share: one poll loop per watch, saved once Airflow stored the event.

An event trigger runs for as long as the asset is watched, across triggerer restarts. Its
delivery promise is **at least once**: an event may be announced again after a restart,
but never silently lost. That needs to know when Airflow has stored an event, which only
the triggerer's shared-stream *ack mode* says (Airflow 3.3,
``airflow.triggers.shared_stream``): the triggerer runs one :class:`CursorStream` per
watch, fans its events out to every trigger with the same :meth:`WatchTrigger.shared_stream_key`,
and calls :meth:`CursorStream.advance` once each event's asset event is in the metadata
database. Only then is the watch's position saved (a :class:`WatchCursor`, i.e. a Kafka
consumer group commit). A restart before that reads the old position and announces the
same change again, with the same offsets or window, so a DAG can tell a repeat. An event
Airflow failed to store is announced again in the same session.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow.sdk import BaseHook, Connection
from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.shared_clients import SharedClients, SharedCursor, Subject, acquire, sharing_enabled
from airflow_kerr.kafka.tolerance import WINDOW_SCOPES
from airflow_kerr.kafka.watch_cursor import WatchCursor, WatchPosition
from airflow_kerr.triggers.base import KwargsTrigger

#: The longest wait between two tries of a failed look.
MAX_RETRY_WAIT_S = 60.0

T = TypeVar("T")
log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer
else:
    try:
        from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer
    except ImportError:  # Airflow 3.1 and 3.2: no shared streams; WatchTrigger.run() serves the watch alone

        class SharedStreamProducer:
            """Stand-in base class where Airflow has no shared streams (before 3.3)."""


#: Whether this Airflow's triggerer serves our watches from one shared stream in ack mode (Airflow 3.3+).
HAS_SHARED_STREAMS = SharedStreamProducer.__module__ == "airflow.triggers.shared_stream"


class CursorStream(SharedStreamProducer):
    """Poll every ``poll_interval`` seconds from the saved position; save a position once Airflow stored its event.

    A stream whose :meth:`observe` waits on the topic itself (``waits_in_observe``) is looked
    at again as soon as a look returns: the wait is the broker's, which answers when a record comes.

    A subclass says where the cursor lives (:meth:`cursor`), where a watch with no saved
    position starts (:meth:`first_position`), and what one look shows (:meth:`observe`:
    the events since ``self.position`` and the position after each).
    """

    def __init__(self, *, kafka_config_id: str, poll_interval: float) -> None:
        self.kafka_config_id = kafka_config_id
        self.poll_interval = poll_interval
        self.kafka_config: dict[str, Any] = {}
        self.position = WatchPosition()
        self.saved = WatchPosition()
        self._cursor: WatchCursor | SharedCursor | None = None
        #: The clients this watch shares with the other watches of its cluster (shared-stream mode, see
        #: :mod:`airflow_kerr.kafka.shared_clients`); None when it holds its own (standalone, or sharing off).
        self.shared: SharedClients | None = None
        #: What this watch's looks wait for news of on the shared clients (its DLQ topic, or its pipeline).
        self.shared_subject: Subject | None = None
        #: The connection, when read beforehand in the event loop (standalone mode, see WatchTrigger.run).
        self.connection: Connection | None = None
        #: Standalone mode (WatchTrigger.run): blocking calls run through asgiref's sync_to_async, so that a
        #: call to Airflow's supervisor from them (a secret to mask) goes back through the triggerer's event
        #: loop; Airflow 3.1's trigger runner breaks ("Response read out of order") on one from a bare thread.
        self.standalone = False
        #: Looks that read the topic, and tries that failed: evidence that a quiet watch did look.
        self.looks = 0
        self.failures = 0
        #: Whether :meth:`observe` itself waits on the topic up to ``poll_interval`` for news (then the loop does
        #: not sleep between looks: a record is seen when the broker has it, not at the next look).
        self.waits_in_observe = False

    def cursor(self) -> WatchCursor | SharedCursor:
        raise NotImplementedError

    def cursor_on(self, group: str, topic: str) -> WatchCursor | SharedCursor:
        """Group ``group``'s cursor on ``topic``: on the shared admin client when the watch shares its clients."""
        if self.shared is not None:
            return SharedCursor(self.shared, group, topic)
        return WatchCursor(self.kafka_config, group, topic)

    def share(self, clients: SharedClients) -> Subject | None:
        """Register with the cluster's shared clients; the subject to wait for news of, or None to read alone."""
        return None

    def unshare(self, clients: SharedClients) -> None:
        """Undo :meth:`share`."""

    def first_position(self) -> WatchPosition:
        raise NotImplementedError

    def observe(self) -> list[tuple[dict[str, Any], WatchPosition]]:
        raise NotImplementedError

    def read_config(self) -> None:
        """Read the connection's client config (once)."""
        if not self.kafka_config:
            hook = KafkaClusterHook(kafka_config_id=self.kafka_config_id, connection=self.connection)
            self.kafka_config = hook.client_config()

    def open(self) -> None:
        """Read the connection and the saved position; a first start saves where it starts, so nothing is missed."""
        self.read_config()
        cursor = self.cursor()
        try:
            saved = cursor.load()
            if saved is None:
                saved = self.first_position()
                cursor.save(saved)
        except Exception:
            cursor.close()  # a failed open is tried again with a new client
            raise
        self._cursor = cursor
        self.position = self.saved = saved

    async def open_stream(self) -> AsyncIterator[tuple[Any, Any]]:
        """Open, then look every ``poll_interval`` seconds, for as long as the asset is watched.

        A watcher is always on, so a failed look (the topic not created yet, the broker
        away) is logged and tried again, backing off to :data:`MAX_RETRY_WAIT_S`, rather
        than ending the watch.

        Where the watch shares its cluster's clients, each look first awaits their next read
        (see :mod:`airflow_kerr.kafka.shared_clients`), and reads what it brought.
        """
        await self._until_it_works("read the connection", self.read_config)
        if sharing_enabled():
            self.shared = acquire(self.kafka_config, WINDOW_SCOPES)
            self.shared_subject = self.share(self.shared)
            if self.shared_subject is None:
                await self.shared.release()
                self.shared = None
            else:
                await self.shared.first_read(self.shared_subject)
        await self._until_it_works("open the watch", self.open)
        while True:
            if self.shared is not None and self.shared_subject is not None:
                await self.shared.news(self.shared_subject, self.poll_interval)
            for event, position in await self._until_it_works("read the watched topic", self.observe):
                self.position = position
                yield event, position
            self.looks += 1
            if self.shared is None and not self.waits_in_observe:
                await asyncio.sleep(self.poll_interval)

    async def _until_it_works(self, what: str, call: Callable[[], T]) -> T:
        wait = self.poll_interval
        while True:
            try:
                if self.standalone:
                    return await sync_to_async(call, thread_sensitive=False)()
                return await asyncio.to_thread(call)
            except Exception as error:
                self.failures += 1
                problem = mask_text(str(error))
                log.warning("%s could not %s, trying again in %.0f s: %s", type(self).__name__, what, wait, problem)
            await asyncio.sleep(wait)
            wait = min(2 * wait, MAX_RETRY_WAIT_S)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Save the position after the last event Airflow stored; at the first one it did not, look again from there."""
        stored: WatchPosition | None = None
        for item in batch:
            if item.outcome.failed or not item.outcome.acked:
                self.position = stored or self.saved
                break
            stored = item.broker_payload
        if stored is not None and self._cursor is not None:
            await asyncio.to_thread(self._cursor.save, stored)
            self.saved = stored

    def save_position(self) -> None:
        """Save ``self.position`` (standalone mode, where no ack says when Airflow stored an event)."""
        if self._cursor is not None and self.position != self.saved:
            self._cursor.save(self.position)
            self.saved = self.position

    async def aclose(self) -> None:
        if self._cursor is not None:
            await asyncio.to_thread(self._cursor.close)
        if self.shared is not None:
            shared, self.shared = self.shared, None
            self.unshare(shared)
            await shared.release()


def default_cursor_group(kind: str, subject: str, settings: dict[str, Any]) -> str:
    """``kerr-watch.<kind>.<subject>.<hash of the settings>``: two watches with other settings keep apart positions."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"kerr-watch.{kind}.{subject}.{digest}"


class WatchTrigger(KwargsTrigger, BaseEventTrigger):
    """An event trigger served by a :class:`CursorStream` shared by every trigger with the same watch settings.

    ``stream_fields`` are the fields that define the watch (they make the shared-stream key
    and build the stream); other fields only filter what this trigger fires on.
    """

    stream_fields: ClassVar[tuple[str, ...]] = ()

    def shared_stream_key(self) -> Hashable:
        classpath, kwargs = self.serialize()
        return classpath, json.dumps({name: kwargs[name] for name in self.stream_fields}, sort_keys=True)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SharedStreamProducer:
        return cls.stream({name: kwargs[name] for name in cls.stream_fields})

    @classmethod
    def stream(cls, settings: dict[str, Any]) -> CursorStream:
        raise NotImplementedError

    def fires_on(self, event: dict[str, Any]) -> bool:
        """Whether this trigger fires for one of the stream's events (all of them unless a subclass filters)."""
        return True

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for event in shared_stream:
            if self.fires_on(event):
                # The payload becomes an asset event's extra (database, UI, the DAG it starts): credentials a
                # dead letter's exception message quoted are masked; its keys are data, so only the text rule.
                yield TriggerEvent(mask_secrets(event, by_key=False))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Serve the watch alone, where the triggerer has no shared streams (Airflow 3.1, 3.2).

        On Airflow 3.3 the triggerer does not call this: it runs the shared stream in ack mode.
        Here the events of one look are yielded (filtered by :meth:`fires_on` and masked as
        :meth:`filter_shared_stream` does), and their position is saved when the generator is
        resumed after the wait for the next look; see the module docstring for what a
        triggerer crash can do in between.
        """
        _, kwargs = self.serialize()
        stream = self.stream({name: kwargs[name] for name in self.stream_fields})
        stream.standalone = True
        # Here the position is saved after the wait between looks, which gives the triggerer time to store
        # the look's events first: a look that waits on the topic would shorten that wait, so it sleeps.
        stream.waits_in_observe = False
        try:
            # Read in the event loop: Airflow 3.1's trigger runner breaks on a lookup from a worker thread.
            wait = stream.poll_interval
            while stream.connection is None:
                try:
                    stream.connection = await BaseHook.aget_connection(stream.kafka_config_id)
                except Exception as error:
                    stream.failures += 1
                    log.warning(
                        "%s could not read connection %s, trying again in %.0f s: %s",
                        type(self).__name__,
                        stream.kafka_config_id,
                        wait,
                        mask_text(str(error)),
                    )
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, MAX_RETRY_WAIT_S)
            await stream._until_it_works("open the watch", stream.open)
            while True:
                for event, position in await stream._until_it_works("read the watched topic", stream.observe):
                    stream.position = position
                    if self.fires_on(event):
                        yield TriggerEvent(mask_secrets(event, by_key=False))
                stream.looks += 1
                if not stream.waits_in_observe:
                    await asyncio.sleep(stream.poll_interval)
                await stream._until_it_works("save the watch's position", stream.save_position)
        finally:
            await stream.aclose()
