"""The DLQ view: dead letters an on-call person can read inside the Airflow UI, and a replay of what they select.

Airflow 3 mounts :data:`app` (FastAPI) in its api-server under ``/kerr`` and shows the
page in its navigation (``Browse → Dead letters``) through an external view; more
external views add a *Replay summary* tab to DAG run pages and a *Dead letters* tab to
task instances and DAG runs, where the same page shows exactly the dead letters that run
wrote (:mod:`airflow_kerr.plugins.run_dead_letters`: the offsets the job's DLQ producer
was told its records landed at, never a time window). Every route runs behind
Airflow's own authentication (the UI's session cookie or a bearer token) and asks
Airflow's auth manager whether the user may read the Kafka connection the view reads
through: whoever may read that connection may read its topics anyway.

Every answer, errors included, goes through the one masking rule
(:mod:`airflow_kerr.errors.masking`): a dead letter's exception message may quote a key, a
password or a token, and the page is read by people the connection's secrets were not
given to. A request the view cannot serve because of what it asks for (an unknown or
non-Kafka connection, a bad topic, selection or cursor) is answered with a 4xx naming the
parameter, its value and what is accepted, never with a 5xx.

What the routes read comes from :mod:`airflow_kerr.inspection`: headers
rather than a consumer group's position, a bounded amount per request, nothing ever
committed. The page adds the summary's chunks up itself, so the first figures show
within a second and say they are a sample until the count is complete.

The replay is launched through Airflow's public REST API from the browser, with the
user's own session, so Airflow checks the user's right to trigger ``dlq_replay`` as it
does for its own form. Airflow 3.3's trigger form cannot be opened prefilled from a URL
(the feature was merged and reverted upstream), so the page renders the replay DAG's
form itself, from the same field list the DAG's Params are built from.

Keys and values in Avro, Protobuf or JSON Schema are decoded through the Schema Registry
connection the page names (chosen, and authorised, as the Kafka connection is); only the
samples route reads it, so the counts never depend on the registry.

Settings (``[kerr]`` in airflow.cfg, or ``AIRFLOW__KERR__*``): ``dead_letter_topics``
(comma-separated DLQ topics always listed; others are discovered by their error
headers), ``dead_letter_view_conn_id`` (default ``kafka_default``),
``dead_letter_view_registry_conn_id`` (default ``schema_registry_default``),
``replay_dag_id`` (default ``dlq_replay``), ``dead_letter_view_max_reads`` (default 2: reads of
Kafka at once per api-server worker) and ``dead_letter_view_queue_seconds`` (default 10: how long
a request waits for one before a 429 with ``Retry-After``). A setting the view cannot use stops the
plugin loading (:meth:`DeadLetterViewPlugin.on_load`), never a request.

Under load (an incident, twenty people on one DLQ) the reads are shared and bounded
(:mod:`airflow_kerr.plugins.shared_reads`): the same question asked by many is read once,
answers are kept a few seconds, at most ``dead_letter_view_max_reads`` reads run at once and
each request ends within :data:`REQUEST_BOUND_S` while the broker answers.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails, DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.configuration import conf
from airflow.exceptions import AirflowNotFoundException
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from airflow_kerr.errors.dead_letter import is_topic_name, shown
from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.inspection.backlog import unread_for_group
from airflow_kerr.inspection.consumers import LOOKUP_TIMEOUT_S, TopicNotFound
from airflow_kerr.inspection.discovery import list_dead_letter_queues
from airflow_kerr.inspection.registry_values import RegistryValues
from airflow_kerr.inspection.samples import sample_dead_letters
from airflow_kerr.inspection.scan_consumers import config_identity
from airflow_kerr.inspection.selection import InvalidSelection, Selection
from airflow_kerr.inspection.summary import (
    NEWEST_FIRST_S,
    DeadLetterSummaryChunk,
    counting_selection,
    refigured,
    summarize,
)
from airflow_kerr.kafka.offsets import OffsetLookupError
from airflow_kerr.plugins.replay_summaries import replays_of_run
from airflow_kerr.plugins.run_dead_letters import TaskDeadLetters, dead_letters_of_run, offsets_on, task_of_job_run
from airflow_kerr.plugins.shared_reads import (
    FIRST_CHUNK_TTL_S,
    NEXT_CHUNK_TTL_S,
    SHORT_TTL_S,
    Busy,
    Read,
    SharedReads,
)
from airflow_kerr.replay.form import TRIGGER_FORM

LOG = logging.getLogger(__name__)
URL_PREFIX = "/kerr"
STATIC = Path(__file__).resolve().parent / "static"
CONFIG_SECTION = "kerr"
#: Bounds of one request: what a page may ask for, so no request reads a large DLQ whole.
MAX_SUMMARY_RECORDS = 500_000
MAX_SUMMARY_SECONDS = 2.0
MAX_SAMPLES = 100
#: Seconds the samples route reads for at most (``sample_dead_letters``'s ``max_seconds``).
SAMPLES_SECONDS = 2.0
#: Reads of Kafka at once per api-server worker, and seconds a request waits for one (then a 429), by default.
DEFAULT_MAX_READS = 2
DEFAULT_QUEUE_SECONDS = 10.0
#: The longest a request to each route takes while the broker answers each look-up within its timeout: the
#: wait for a read slot, the look-ups that fix a read's range, then the read's own bound (a summary's first
#: chunk reads the newest slices for up to NEWEST_FIRST_S; a following chunk reads for its max_seconds).
REQUEST_BOUND_S = {
    "summary": DEFAULT_QUEUE_SECONDS + LOOKUP_TIMEOUT_S + NEWEST_FIRST_S,
    "samples": DEFAULT_QUEUE_SECONDS + LOOKUP_TIMEOUT_S + SAMPLES_SECONDS,
}
#: The process's shared reads (one event loop per api-server worker).
SHARED = SharedReads()
SELECTION_KEYS = ("exception_class", "stage", "source_topic", "pipeline", "header_set", "start", "end")
#: Airflow keeps connection ids in a 250-character column; a control character is in no id (and a NUL
#: makes the environment-variable lookup raise).
MAX_CONN_ID_CHARS = 250
#: A consumer group id the backlog route looks up: any printable text Kafka takes, within reason.
MAX_GROUP_CHARS = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ViewSettings:
    """The view's settings from Airflow's configuration, read per request so a changed setting applies."""

    dead_letter_topics: tuple[str, ...]
    kafka_config_id: str
    replay_dag_id: str
    schema_registry_conn_id: str = "schema_registry_default"
    max_reads: int = DEFAULT_MAX_READS
    queue_seconds: float = DEFAULT_QUEUE_SECONDS

    @classmethod
    def from_airflow(cls, on_invalid: Callable[[InvalidViewSetting], None] | None = None) -> ViewSettings:
        """The settings now; a setting the view cannot use raises :class:`InvalidViewSetting` naming it, or, with
        ``on_invalid``, is passed to it and its default used instead."""
        topics = conf.get(CONFIG_SECTION, "dead_letter_topics", fallback="") or ""
        registry = conf.get(CONFIG_SECTION, "dead_letter_view_registry_conn_id", fallback="schema_registry_default")
        return cls(
            dead_letter_topics=tuple(t.strip() for t in topics.split(",") if t.strip()),
            kafka_config_id=conf.get(CONFIG_SECTION, "dead_letter_view_conn_id", fallback="kafka_default")
            or "kafka_default",
            replay_dag_id=conf.get(CONFIG_SECTION, "replay_dag_id", fallback="dlq_replay") or "dlq_replay",
            schema_registry_conn_id=registry or "schema_registry_default",
            max_reads=_setting(
                "dead_letter_view_max_reads",
                DEFAULT_MAX_READS,
                int,
                "a whole number of reads at once, 1 or more",
                on_invalid,
            ),
            queue_seconds=_setting(
                "dead_letter_view_queue_seconds", DEFAULT_QUEUE_SECONDS, float, "seconds to wait, 0 or more", on_invalid
            ),
        )

    @classmethod
    def for_request(cls) -> ViewSettings:
        """The settings for a request, which never answers 5xx for them: the plugin refused to load with a setting
        it cannot use (:meth:`DeadLetterViewPlugin.on_load`), so one that went bad since is logged and its default
        used."""
        return cls.from_airflow(on_invalid=lambda error: LOG.warning("%s; using its default", error))


def _setting(
    name: str,
    default: float,
    kind: Callable[[str], Any],
    accepted: str,
    on_invalid: Callable[[InvalidViewSetting], None] | None,
) -> Any:
    """The numeric ``[kerr]`` setting ``name``, its default when unset or (told to ``on_invalid``) bad; a bad one
    raises :class:`InvalidViewSetting` naming it, its value and what is accepted when there is no ``on_invalid``."""
    raw = conf.get(CONFIG_SECTION, name, fallback="") or ""
    if not raw.strip():
        return kind(str(default))
    try:
        value = kind(raw.strip())
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < (1 if kind is int else 0):  # an endless wait would be no bound
        error = InvalidViewSetting(f"[{CONFIG_SECTION}] {name}={raw!r}: expected {accepted}")
        if on_invalid is None:
            raise error
        on_invalid(error)
        return kind(str(default))
    return value


class InvalidViewSetting(ValueError):
    """A ``[kerr]`` setting of the view that cannot be used; the message names it, its value and what is accepted."""


class UnusableConnection(ValueError):
    """The connection exists but the view cannot read Kafka through it; the message says what is missing."""


def _kafka_config(kafka_config_id: str) -> dict[str, Any]:
    """The connection's librdkafka settings, as the replay operator reads them (imported here: the hook needs
    Airflow's provider stack, which the api-server has loaded by the time a request arrives).

    The connection is checked first, so a request naming ``spark_default`` or a ``kafka``
    connection without ``bootstrap.servers`` learns which and why, rather than getting the
    hook's bare ``ValueError`` as a 500.
    """
    from airflow_kerr.hooks.kafka import KafkaClusterHook

    hook = KafkaClusterHook(kafka_config_id=kafka_config_id)
    connection = hook.get_connection(kafka_config_id)
    named = f"kafka_config_id={shown(kafka_config_id)}"
    if connection.conn_type != "kafka":
        raise UnusableConnection(
            f"{named}: a {connection.conn_type or 'typeless'!r} connection; the DLQ view reads through a 'kafka' "
            "connection (the apache-kafka provider's type: extra JSON = librdkafka config with bootstrap.servers)"
        )
    extra = connection.extra_dejson
    if not isinstance(extra, dict) or not extra.get("bootstrap.servers"):
        raise UnusableConnection(
            f"{named}: its extra has no 'bootstrap.servers'; expected the cluster's librdkafka config as JSON, "
            'e.g. {"bootstrap.servers": "broker:9092"}'
        )
    try:
        return hook.client_config()
    except (ValueError, TypeError, ImportError) as error:  # the hook's checks and its callback imports
        raise UnusableConnection(f"{named}: the connection's config cannot be used: {error}") from None


#: Seconds a connection's Kafka config is kept once read. Under load (twenty pages chaining summary
#: chunks) every request read it from the metadata DB, taking pool connections Airflow's own pages wait
#: for; an edit on the Connections page applies within this. Who may read it is still asked per request.
CONNECTION_TTL_S = 5.0
_KEPT_CONFIGS: dict[str, tuple[float, dict[str, Any]]] = {}
_KEPT_CONFIGS_LOCK = threading.Lock()
#: Connections whose config is kept at most.
MAX_KEPT_CONFIGS = 32


def _kept_kafka_config(kafka_config_id: str) -> dict[str, Any]:
    """:func:`_kafka_config`, read at most once per :data:`CONNECTION_TTL_S` per connection (errors never kept)."""
    now = time.monotonic()
    with _KEPT_CONFIGS_LOCK:
        kept = _KEPT_CONFIGS.get(kafka_config_id)
    if kept is not None and kept[0] > now:
        return dict(kept[1])
    config = _kafka_config(kafka_config_id)
    with _KEPT_CONFIGS_LOCK:
        for conn_id in [c for c, (until, _) in _KEPT_CONFIGS.items() if until <= now]:
            del _KEPT_CONFIGS[conn_id]
        if len(_KEPT_CONFIGS) >= MAX_KEPT_CONFIGS:
            _KEPT_CONFIGS.clear()
        _KEPT_CONFIGS[kafka_config_id] = (now + CONNECTION_TTL_S, dict(config))
    return config


async def kafka_config_for(
    user: GetUserDep,
    kafka_config_id: Annotated[str | None, Query(description="The Kafka connection to read through")] = None,
) -> dict[str, Any]:
    """The Kafka config of the connection the request names, if Airflow lets this user read that connection."""
    from airflow.api_fastapi.app import get_auth_manager

    conn_id = kafka_config_id or ViewSettings.for_request().kafka_config_id
    if len(conn_id) > MAX_CONN_ID_CHARS or _CONTROL.search(conn_id):
        raise HTTPException(
            400,
            f"kafka_config_id={shown(conn_id)}: not a connection id "
            f"(expected at most {MAX_CONN_ID_CHARS} characters, none a control character)",
        )
    if not get_auth_manager().is_authorized_connection(
        method="GET", details=ConnectionDetails(conn_id=conn_id), user=user
    ):
        raise HTTPException(403, f"You may not read the connection {conn_id!r}, which the DLQ view reads through.")
    try:
        return await run_in_threadpool(_kept_kafka_config, conn_id)
    except AirflowNotFoundException:
        raise HTTPException(
            404, f"kafka_config_id={shown(conn_id)}: no such connection; create a 'kafka' connection of that id"
        ) from None
    except UnusableConnection as error:
        raise HTTPException(400, str(error)) from None


KafkaConfig = Annotated[dict[str, Any], Depends(kafka_config_for)]


def _registry_values(conn_id: str, named: bool) -> RegistryValues:
    """A decoder for the ``schema_registry`` connection ``conn_id`` (the hook needs Airflow's provider stack, as
    :func:`_kafka_config`'s does).

    The default connection may be missing: the samples then show framed values undecoded, each
    saying why. A connection the page names must exist (404), and any connection must be a
    usable ``schema_registry`` one (400 saying what is wrong).
    """
    from airflow_kerr.formats.registry_settings import InvalidRegistrySettings
    from airflow_kerr.hooks.schema_registry import SchemaRegistryConnectionError, SchemaRegistryHook

    hook = SchemaRegistryHook(schema_registry_conn_id=conn_id)
    shown_id = f"schema_registry_conn_id={shown(conn_id)}"
    try:
        connection = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        if named:
            raise
        return RegistryValues(
            None, absent=f"there is no Schema Registry connection {conn_id!r}; create one, or name one on the page"
        )
    if connection.conn_type != "schema_registry":
        raise UnusableConnection(
            f"{shown_id}: a {connection.conn_type or 'typeless'!r} connection; Schema Registry values are decoded "
            "through a 'schema_registry' connection (host = the registry's URL)"
        )
    try:
        return RegistryValues.from_config(hook.client_config())
    except (SchemaRegistryConnectionError, InvalidRegistrySettings) as error:
        raise UnusableConnection(f"{shown_id}: the connection cannot be used: {error}") from None


async def registry_for(
    user: GetUserDep,
    schema_registry_conn_id: Annotated[
        str | None, Query(description="The Schema Registry connection framed keys and values are decoded through")
    ] = None,
) -> RegistryValues:
    """The decoder for the registry connection the request names, if Airflow lets this user read that connection."""
    from airflow.api_fastapi.app import get_auth_manager

    conn_id = schema_registry_conn_id or ViewSettings.for_request().schema_registry_conn_id
    if len(conn_id) > MAX_CONN_ID_CHARS or _CONTROL.search(conn_id):
        raise HTTPException(
            400,
            f"schema_registry_conn_id={shown(conn_id)}: not a connection id "
            f"(expected at most {MAX_CONN_ID_CHARS} characters, none a control character)",
        )
    if not get_auth_manager().is_authorized_connection(
        method="GET", details=ConnectionDetails(conn_id=conn_id), user=user
    ):
        raise HTTPException(
            403, f"You may not read the connection {conn_id!r}, which the DLQ view decodes registry values through."
        )
    try:
        return await run_in_threadpool(_registry_values, conn_id, bool(schema_registry_conn_id))
    except AirflowNotFoundException:
        raise HTTPException(
            404,
            f"schema_registry_conn_id={shown(conn_id)}: no such connection; create a 'schema_registry' connection "
            "of that id",
        ) from None
    except UnusableConnection as error:
        raise HTTPException(400, str(error)) from None


Registry = Annotated[RegistryValues, Depends(registry_for)]


def _topic(topic: str) -> str:
    if not is_topic_name(topic):
        raise HTTPException(400, f"topic={shown(topic)}: not a Kafka topic name (1-249 of [a-zA-Z0-9._-])")
    return topic


def _shown(answer: dict[str, Any]) -> dict[str, Any]:
    """A route's answer as it leaves: every string masked. Its keys are data (topics, exception classes,
    partitions), so only the text rule applies; record values were masked by key when decoded."""
    masked: dict[str, Any] = mask_secrets(answer, by_key=False)
    return masked


def _selection(request: Request, run: RunScope | None = None, topic: str | None = None) -> Selection:
    """The page's selection; within a run's tab, narrowed to exactly the offsets that run wrote to ``topic``."""
    try:
        selection = Selection.from_query({key: request.query_params.get(key) for key in SELECTION_KEYS})
    except InvalidSelection as error:
        raise HTTPException(400, str(error)) from None
    if run is None or topic is None:
        return selection
    return replace(selection, dlq_offsets=offsets_on(list(run.tasks), topic))


@dataclass(frozen=True)
class RunScope:
    """A run tab's scope: the DAG run (and task instance) named by the page, with what its tasks wrote."""

    dag_id: str
    run_id: str
    task_id: str | None
    map_index: int | None
    tasks: tuple[TaskDeadLetters, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "tasks": [task.to_dict() for task in self.tasks],
        }


def _run_key(name: str, raw: str | None) -> str | None:
    """A DAG, run or task id from the query: unset when empty, a 400 when it cannot be an id."""
    if raw is None or not raw.strip():
        return None
    if len(raw) > MAX_CONN_ID_CHARS or _CONTROL.search(raw):
        raise HTTPException(
            400, f"{name}={shown(raw)}: not an id (at most {MAX_CONN_ID_CHARS} characters, none a control character)"
        )
    return raw


async def run_scope(request: Request, user: GetUserDep) -> RunScope | None:
    """The run a tab names (``dag_id``, ``run_id``, optionally ``task_id`` and ``map_index``), if the user may read
    its XCom; None on the Browse page, which names none."""
    from airflow.api_fastapi.app import get_auth_manager

    query = request.query_params
    dag_id, run_id = _run_key("dag_id", query.get("dag_id")), _run_key("run_id", query.get("run_id"))
    task_id = _run_key("task_id", query.get("task_id"))
    if dag_id is None and run_id is None and task_id is None:
        return None
    if dag_id is None or run_id is None:
        raise HTTPException(400, "dag_id and run_id: a run's dead letters need both (task_id and map_index narrow)")
    raw_index = (query.get("map_index") or "").strip()
    map_index: int | None = None
    if re.fullmatch(r"-?\d{1,9}", raw_index):
        map_index = int(raw_index)
    elif raw_index and not raw_index.startswith("{"):  # "{MAP_INDEX}": Airflow had no map index to put there
        raise HTTPException(400, f"map_index={shown(raw_index)}: expected a task's map index (-1 when not mapped)")
    if not get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.XCOM, details=DagDetails(id=dag_id), user=user
    ):
        raise HTTPException(403, f"You may not read the XCom of DAG {dag_id!r}, which names its runs' dead letters.")
    tasks = await run_in_threadpool(dead_letters_of_run, dag_id, run_id, task_id, map_index)
    return RunScope(dag_id, run_id, task_id, map_index, tuple(tasks))


RunDep = Annotated[RunScope | None, Depends(run_scope)]


async def _read(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one bounded read in a worker thread: a bad selection is a 400, a missing topic a 404, and a broker that
    cannot be reached a 502, each saying so."""
    from confluent_kafka import KafkaException

    try:
        return await run_in_threadpool(function, *args, **kwargs)
    except InvalidSelection as error:
        raise HTTPException(400, str(error)) from None
    except TopicNotFound as error:
        raise HTTPException(404, str(error)) from None
    except (KafkaException, OffsetLookupError) as error:
        raise HTTPException(502, f"Kafka did not answer: {error.args[0] if error.args else error}") from None


def _encoded(answer: dict[str, Any]) -> bytes:
    """An answer as the route sends it: masked (:func:`_shown`), then JSON as FastAPI would write it."""
    return json.dumps(_shown(answer), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _read_and_prepare(prepare: Callable[[Any], Read], function: Any, *args: Any, **kwargs: Any) -> Read:
    """Read, then prepare what is shared (encoded bytes, or a summary chunk) and whether it may be kept."""
    return prepare(function(*args, **kwargs))


def _as_bytes(result: Any) -> Read:
    return _encoded(dict(result.to_dict())), True


async def _shared(key: Hashable, ttl_s: float, prepare: Callable[[Any], Read], function: Any, *args: Any,
                  **kwargs: Any) -> Any:  # fmt: skip
    """One bounded read answered to everyone asking ``key`` (:mod:`~airflow_kerr.plugins.shared_reads`).

    ``function`` reads in a worker thread and ``prepare`` turns its result into what is
    shared, there too. Every slot taken for the whole wait is a 429 with ``Retry-After``,
    which the page waits out and asks again; the read's own errors are :func:`_read`'s.
    """
    view = ViewSettings.for_request()

    async def read() -> Read:
        answer: Read = await _read(_read_and_prepare, prepare, function, *args, **kwargs)
        return answer

    try:
        return await SHARED.answer(key, ttl_s, view.max_reads, view.queue_seconds, read)
    except Busy as busy:
        raise HTTPException(429, str(busy), headers={"Retry-After": str(busy.retry_after_s)}) from None


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json")


app = FastAPI(title="Kerr dead letters", docs_url=None, redoc_url=None, openapi_url=None)
app.mount("/static", StaticFiles(directory=STATIC), name="static")


@app.get("/dead-letters", response_class=HTMLResponse, include_in_schema=False)
async def dead_letters_page(user: GetUserDep) -> FileResponse:
    """The page; it loads its figures from the routes below."""
    return FileResponse(STATIC / "dead_letters.html", headers={"Cache-Control": "no-store"})


@app.get("/replay-summary", response_class=HTMLResponse, include_in_schema=False)
async def replay_summary_page(user: GetUserDep) -> FileResponse:
    """A DAG run's replay summary: the page reads it from ``/api/replay-summary`` (mapped tasks added up)."""
    return FileResponse(STATIC / "replay_summary.html", headers={"Cache-Control": "no-store"})


#: The task instance tab's route in Airflow's UI (the ``url_route`` of its external view below).
TASK_TAB_ROUTE = "kerr-task-dead-letters"


@app.get("/run-tab", include_in_schema=False)
async def run_tab(user: GetUserDep, job_run_id: Annotated[str, Query(min_length=1, max_length=1000)]) -> Any:
    """Go to the Dead letters tab of the task instance whose job ran as ``job_run_id`` (the breach alert links here:
    the metrics it read name job runs, not task instances)."""
    from urllib.parse import quote

    from airflow.api_fastapi.app import get_auth_manager

    found = await run_in_threadpool(task_of_job_run, job_run_id)
    if found is None:
        raise HTTPException(
            404,
            f"job_run_id={shown(job_run_id)}: no error-aware task instance ran a job of that id "
            "(its XCom may have been cleared)",
        )
    dag_id, run_id, task_id, map_index = found
    if not get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.XCOM, details=DagDetails(id=dag_id), user=user
    ):
        raise HTTPException(403, f"You may not read the XCom of DAG {dag_id!r}, which names its runs' dead letters.")
    mapped = f"/mapped/{map_index}" if map_index >= 0 else ""
    # Relative to /kerr/run-tab, so it lands in Airflow's UI under whatever base path Airflow is served at.
    path = f"../dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return RedirectResponse(f"{path}{mapped}/plugin/{TASK_TAB_ROUTE}", status_code=302)


@app.get("/api/settings")
async def settings(user: GetUserDep) -> dict[str, Any]:
    """What the page needs to start: the default connection, the replay DAG and its form's fields."""
    view = ViewSettings.for_request()
    return {
        "kafka_config_id": view.kafka_config_id,
        "schema_registry_conn_id": view.schema_registry_conn_id,
        "replay_dag_id": view.replay_dag_id,
        "dead_letter_topics": list(view.dead_letter_topics),
        "replay_form": [
            {
                "name": field.name,
                "default": field.default,
                "schema": field.schema,
                "title": field.title,
                "description": field.description,
                "section": field.section,
            }
            for field in TRIGGER_FORM
        ],
    }


@app.get("/api/replay-summary")
async def replay_summary(
    user: GetUserDep,
    dag_id: Annotated[str, Query(min_length=1, max_length=MAX_CONN_ID_CHARS)],
    run_id: Annotated[str, Query(min_length=1, max_length=MAX_CONN_ID_CHARS)],
) -> dict[str, Any]:
    """A DAG run's replays, each as one summary: a fanned-out replay's mapped tasks added up (Replay summary tab)."""
    from airflow.api_fastapi.app import get_auth_manager

    if not get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.XCOM, details=DagDetails(id=dag_id), user=user
    ):
        raise HTTPException(403, f"You may not read the XCom of DAG {dag_id!r}, which holds its replays' summaries.")
    replays = await run_in_threadpool(replays_of_run, dag_id, run_id)
    return _shown({"dag_id": dag_id, "run_id": run_id, "replays": replays})


@app.get("/api/topics")
async def topics(kafka_config: KafkaConfig) -> Response:
    """The configured DLQ topics and those found by their error headers."""
    configured = ViewSettings.for_request().dead_letter_topics
    # Shared while under way, never kept: a DLQ created a moment ago is listed at once.
    body = await _shared(
        ("topics", config_identity(kafka_config), configured),
        0.0,
        lambda found: (_encoded({"topics": [topic.to_dict() for topic in found]}), True),
        list_dead_letter_queues,
        kafka_config,
        configured,
    )
    return _json(body)


@app.get("/api/run")
async def run_dead_letters(run: RunDep) -> dict[str, Any]:
    """What a DAG run's error-aware tasks (or one task instance) wrote to their DLQs: topic, offsets, count."""
    if run is None:
        raise HTTPException(400, "dag_id and run_id: name the DAG run whose dead letters to show")
    return _shown(run.to_dict())


@app.get("/api/topics/{topic}/summary")
async def summary(
    topic: str,
    request: Request,
    kafka_config: KafkaConfig,
    run: RunDep,
    cursor: str | None = None,
    max_records: Annotated[int, Query(ge=1, le=MAX_SUMMARY_RECORDS)] = 200_000,
    max_seconds: Annotated[float, Query(gt=0, le=MAX_SUMMARY_SECONDS)] = 1.0,
) -> Response:
    """One bounded chunk of counts (a delta: the page adds chunks up); ``cursor`` continues where one ended.

    Shared: the scan reads by the selection's time, offsets and run only
    (:func:`~airflow_kerr.inspection.summary.counting_selection`), so everyone looking at the
    DLQ, whatever value they filter on, follows one scan's cursors; each answer applies its own
    value filter to the chunk's tally. A first chunk is kept for
    :data:`~airflow_kerr.plugins.shared_reads.FIRST_CHUNK_TTL_S`, a following one for
    :data:`~airflow_kerr.plugins.shared_reads.NEXT_CHUNK_TTL_S`; one that read nothing (its
    records had not come yet) is not kept, as it hands back the cursor it was asked with.
    """
    selection = _selection(request, run, topic)
    counting = counting_selection(selection)
    key = ("summary", config_identity(kafka_config), _topic(topic), counting.fingerprint(), cursor or None,
           max_records, max_seconds)  # fmt: skip
    chunk: DeadLetterSummaryChunk = await _shared(
        key,
        NEXT_CHUNK_TTL_S if cursor else FIRST_CHUNK_TTL_S,
        lambda chunk: (chunk, not (chunk.read == 0 and chunk.cursor is not None)),
        summarize,
        kafka_config,
        topic,
        selection=counting,
        cursor=cursor or None,
        max_records=max_records,
        max_seconds=max_seconds,
    )
    body = await run_in_threadpool(lambda: _encoded(dict(refigured(chunk, selection).to_dict())))
    return _json(body)


@app.get("/api/topics/{topic}/backlog")
async def backlog(topic: str, kafka_config: KafkaConfig, group: str) -> Response:
    """How many records a replay group has not read yet (its committed offsets; the group is never joined)."""
    if not group.strip() or len(group) > MAX_GROUP_CHARS or _CONTROL.search(group):
        raise HTTPException(
            400,
            f"group={shown(group)}: expected the replay's consumer group id "
            f"(1-{MAX_GROUP_CHARS} characters, not only spaces, no control character)",
        )
    # Shared while under way, never kept: the page watches a replay's backlog go down.
    key = ("backlog", config_identity(kafka_config), _topic(topic), group)
    return _json(await _shared(key, 0.0, _as_bytes, unread_for_group, kafka_config, topic, group))


@app.get("/api/topics/{topic}/samples")
async def samples(
    topic: str,
    request: Request,
    kafka_config: KafkaConfig,
    registry: Registry,
    run: RunDep,
    limit: Annotated[int, Query(ge=1, le=MAX_SAMPLES)] = 20,
) -> Response:
    """The newest dead letters matching the selection (within a run's tab: of that run only), decoded, masked.

    Registry formats decode through ``registry``. Shared, and kept for
    :data:`~airflow_kerr.plugins.shared_reads.SHORT_TTL_S` (the newest dead letters may be that old).
    """
    selection = _selection(request, run, topic)
    registry_id = (
        request.query_params.get("schema_registry_conn_id") or ViewSettings.for_request().schema_registry_conn_id
    )
    key = ("samples", config_identity(kafka_config), registry_id, _topic(topic), selection.fingerprint(), limit)
    body = await _shared(
        key,
        SHORT_TTL_S,
        _as_bytes,
        sample_dead_letters,
        kafka_config,
        topic,
        selection=selection,
        limit=limit,
        max_seconds=SAMPLES_SECONDS,
        registry=registry,
    )
    return _json(body)


@app.exception_handler(HTTPException)
async def readable_errors(request: Request, error: HTTPException) -> JSONResponse | HTMLResponse:
    """JSON for the page's calls; for a page opened without a session, a line saying to sign in to Airflow."""
    if request.url.path.rstrip("/").endswith(("/dead-letters", "/replay-summary")) and error.status_code == 401:
        return HTMLResponse(
            "<p>Sign in to Airflow first, then open <em>Dead letters</em> from its menu.</p>", status_code=401
        )
    detail = mask_text(error.detail) if isinstance(error.detail, str) else mask_secrets(error.detail, by_key=False)
    return JSONResponse({"detail": detail}, status_code=error.status_code, headers=error.headers)


class DeadLetterViewPlugin(AirflowPlugin):
    """Registers the DLQ view's routes and its two places in the Airflow UI (declared in the provider's info)."""

    name = "kerr_dead_letters"

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Refuse to load with a ``[kerr]`` setting the view cannot use, as Airflow refuses a bad setting of its own at
        start: Airflow logs ``Failed to load plugin kerr_dead_letters`` with the setting, its value and what is
        accepted, and lists it among the plugin import errors, rather than the view answering 500s."""
        ViewSettings.from_airflow()

    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Kerr dead letters"}]
    external_views = [
        {
            "name": "Dead letters",
            "href": f"{URL_PREFIX}/dead-letters",
            "url_route": "kerr-dead-letters",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Replay summary",
            "href": f"{URL_PREFIX}/replay-summary?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
            "url_route": "kerr-replay-summary",
            "destination": "dag_run",
        },
        {
            "name": "Dead letters",
            "href": f"{URL_PREFIX}/dead-letters?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
            "url_route": "kerr-run-dead-letters",
            "destination": "dag_run",
        },
        {
            "name": "Dead letters",
            "href": (
                f"{URL_PREFIX}/dead-letters?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}"
                "&map_index={MAP_INDEX}"
            ),
            "url_route": TASK_TAB_ROUTE,
            "destination": "task_instance",
        },
    ]
