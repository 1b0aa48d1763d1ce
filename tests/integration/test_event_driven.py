"""Event-driven tolerance end to end: a poison batch pauses the real connector and alerts, nobody triggering anything.

Real: the embedded broker, a Kafka Connect worker running ``orders-sink``, ``airflow
standalone`` (api-server, scheduler, dag-processor, triggerer, LocalExecutor) running the
example DAGs ``on_tolerance_breach``, ``on_tolerance_recovery`` and ``dlq_auto_replay`` on
their watched assets, and a local webhook receiving the alert. ``dag.test()`` would run no
watcher, hence the whole stack. ``on_tolerance_recovery`` and the test's ``dlq_queue_watch``
are watched through common.messaging's real ``MessageQueueTrigger`` (schemes ``kerr+tolerance``
and ``kerr+dlq``), so the queue provider is tested on the real triggerer too.

Written by the test, for time: what the error-aware job leaves behind after a batch (its
dead letters and its task metrics record, in the job's own formats, through the package's
writers). Running the Spark job itself inside this stack took up to 5 minutes per batch on
2 cores, against the suite's budget; the job's outputs are tested against Spark in
``test_error_aware_job.py`` and ``test_error_aware_operator.py``, and ``make demo`` runs
the whole chain. The deployed copies of the two tolerance DAGs watch a 10 s window instead
of 5 minutes, so the poison batch leaves the window within the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_kerr.assets.watched import tolerance_asset
from airflow_kerr.errors import RetriableError, SourceRecord, Stage
from airflow_kerr.examples.orders_tolerance import ORDERS_TOLERANCE
from airflow_kerr.kafka.offsets import group_offsets, read_to_end
from airflow_kerr.local.broker import ensure_topics, free_port
from airflow_kerr.local.dead_letters import Failure, write_task_metrics
from airflow_kerr.local.dead_letters import write_dead_letters as write_failures
from airflow_kerr.local.demo import AlertReceiver
from airflow_kerr.local.orders_example import CONNECTOR
from airflow_kerr.local.ui import LocalUI, pid_alive, process_tree, start_local_ui
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger

pytestmark = [pytest.mark.connect]

#: Where and under which pipeline the example DAGs read the job's metrics (examples/orders_tolerance.py).
METRICS_TOPIC, PIPELINE = ORDERS_TOLERANCE["metrics_topic"], ORDERS_TOLERANCE["pipeline"]

REPO = Path(__file__).resolve().parents[2]
SETTINGS = "**ORDERS_TOLERANCE)"
WINDOW_S = 10.0
#: A DLQ watched through common.messaging's door, by a DAG the test deploys (``QUEUE_DAG``).
QUEUE_DLQ = "orders.queue.dlq"
QUEUE_DAG = f"""
import pendulum
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, Asset, AssetWatcher, task

DLQ = Asset(
    name="kerr.queue_watch.{QUEUE_DLQ}",
    watchers=[
        AssetWatcher(
            name="kerr.queue_watch.{QUEUE_DLQ}",
            trigger=MessageQueueTrigger(scheme="kerr+dlq", topic="{QUEUE_DLQ}", min_records=3, poll_interval=1.0),
        )
    ],
)
with DAG(dag_id="dlq_queue_watch", schedule=[DLQ], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, is_paused_upon_creation=False):
    @task
    def triage():
        return None

    triage()
"""


def tolerance_trigger() -> Any:
    """The deployed DAGs' tolerance watch (the example's settings with the test's window): its cursor group."""
    asset = tolerance_asset(event="breach", server="unused:9092", **{**ORDERS_TOLERANCE, "window": WINDOW_S})
    return asset.watchers[0].trigger


class EventStack:
    """What the test drives: the Airflow UI's processes (broker and Connect worker included), the alert receiver."""

    def __init__(self, ui: LocalUI, receiver: AlertReceiver) -> None:
        self.ui = ui
        self.bootstrap_servers = ui.bootstrap_servers
        self.receiver = receiver

    def connector_state(self) -> str:
        assert self.ui.connect is not None
        return str(self.ui.connect.status(CONNECTOR)["connector"]["state"])

    def watcher_started(self, trigger: Any, topic: str) -> bool:
        """Whether the watcher running ``trigger``'s watch opened: its cursor group committed on ``topic``."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        return bool(group_offsets(config, trigger.cursor_group, [(topic, 0)]))

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        found = self.answer(lambda api: api.get(f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after"}), None)
        return list(found["dag_runs"])

    def run_payloads(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The watcher payloads of the asset events that started a run."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents"
        found = wait_for(
            f"{dag_id}'s asset events",
            lambda: self.answer(lambda api: api.get(path), None).get("asset_events"),
            60,
            self,
        )
        return [event["extra"]["payload"] for event in found]

    def answer(self, request: Callable[[Any], Any], default: Any) -> Any:
        """The JSON of one API request, or ``{"state": default}`` when the api-server is too busy to answer.

        While the Spark job runs, both cores are taken and the api-server may not answer a
        poll within its timeout; the next poll asks again, the caller's deadline decides.
        """
        try:
            with self.ui.api(timeout_s=60) as api:
                return request(api).raise_for_status().json()
        except httpx.TimeoutException:
            return {"state": default, "dag_runs": []}


def wait_for(description: str, condition: Callable[[], Any], timeout_s: float, stack: EventStack) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{description}: not within {timeout_s:.0f} s; Airflow log:\n{stack.ui.log_tail(80)}")
        time.sleep(0.5)
    return value


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventStack]:
    """``make ui``'s stack on its own broker (the example DAGs use fixed topic names), with the DAGs deployed."""
    home = tmp_path_factory.mktemp("kerr-events")
    dags = home / "dags"
    dags.mkdir()
    for name in ("on_tolerance_breach.py", "on_tolerance_recovery.py", "dlq_auto_replay.py"):
        text = (REPO / "dags" / name).read_text()
        if name.startswith("on_tolerance"):
            assert SETTINGS in text, f"{name} no longer watches with {SETTINGS!r}; update this test's copy"
            text = text.replace(SETTINGS, f'**{{**ORDERS_TOLERANCE, "window": {WINDOW_S}}})')
        (dags / name).write_text(text)
    (dags / "dlq_queue_watch.py").write_text(QUEUE_DAG)
    receiver = AlertReceiver()
    ui = start_local_ui(
        home,
        port=free_port(),
        connect_port=free_port(),
        seed_sample_dlq=False,
        wait_for_dags=("on_tolerance_breach", "on_tolerance_recovery", "dlq_auto_replay", "dlq_queue_watch"),
        dags=dags,
        environment={"AIRFLOW_CONN_KERR_ALERT_WEBHOOK": json.dumps({"conn_type": "http", "host": receiver.url})},
    )
    assert ui.process is not None and ui.broker is not None, "the stack runs its own broker with the example topics"
    ensure_topics(ui.bootstrap_servers, {QUEUE_DLQ: 1})  # before its watcher's first look backs off for long
    try:
        yield EventStack(ui, receiver)
    finally:
        started = process_tree(ui.process.pid)
        ui.stop()
        receiver.stop()
    left = [process for process in started if pid_alive(process)]
    assert not left, f"processes of the stack still run after stop(): {left}"


def test_a_poison_batch_pauses_the_connector_and_alerts_once_then_a_clean_batch_resumes_it(stack: EventStack) -> None:
    wait_for(
        "the tolerance watcher to start (its cursor group to commit)",
        lambda: stack.watcher_started(tolerance_trigger(), "kerr.metrics"),
        180,
        stack,
    )
    assert stack.connector_state() == "RUNNING"

    config = {"bootstrap.servers": stack.bootstrap_servers}
    poison_batch(config, records_in=500, malformed=50)
    wait_for("orders-sink to be PAUSED", lambda: stack.connector_state() == "PAUSED", 120, stack)
    wait_for("the breach alert", lambda: stack.receiver.alerts, 120, stack)
    [breach_run] = stack.runs("on_tolerance_breach")
    assert breach_run["run_type"] == "asset_triggered"
    [breach] = stack.run_payloads("on_tolerance_breach", breach_run["dag_run_id"])
    asked = breach["paused_on_breach"]["orders-sink"]
    assert asked["error"] is None, asked
    queued = datetime.fromisoformat(breach_run["queued_at"].replace("Z", "+00:00")).timestamp()
    assert asked["asked_at_ms"] / 1000 < queued, ("the watcher paused before the DAG run existed", asked, breach_run)
    text = stack.receiver.alerts[0]["blocks"][0]["text"]["text"]
    assert "Tolerance breached in pipeline orders_pipeline" in text
    assert "Top exceptions: json.decoder.JSONDecodeError" in text and "Failing stages: VALUE_CONVERTER" in text, text
    details = stack.receiver.alerts[0]["kerr"]
    assert details["error_rate"] == 0.1 and details["max_error_rate"] == 0.02 and details["records_in"] == 500, details

    time.sleep(WINDOW_S)  # the poison batch leaves the window
    write_task_metrics(config, METRICS_TOPIC, PIPELINE, records_in=500, errors=0)  # a clean batch
    wait_for("orders-sink to run again", lambda: stack.connector_state() == "RUNNING", 180, stack)
    [recovery_run] = wait_for(
        "the recovery run to succeed",
        lambda: [run for run in stack.runs("on_tolerance_recovery") if run["state"] == "success"],
        120,
        stack,
    )
    assert recovery_run["run_type"] == "asset_triggered"
    assert [run["state"] for run in stack.runs("on_tolerance_breach")] == ["success"], "one breach, one run"
    assert len(stack.receiver.alerts) == 1, "one alert per breach"


def test_the_opt_in_auto_replay_puts_back_only_retriable_dead_letters_as_they_land(stack: EventStack) -> None:
    """dlq_auto_replay, unpaused, is started by the DLQ's watcher and replays exactly the retriable classes."""
    config = {"bootstrap.servers": stack.bootstrap_servers}
    ensure_topics(stack.bootstrap_servers, {"orders.auto": 1})
    with stack.ui.api() as api:
        api.patch("/dags/dlq_auto_replay", json={"is_paused": False}).raise_for_status()
        # The watcher of a DAG just unpaused starts at its next parse, up to 2 min away on the local stack
        # (ui.IDLE_SETTINGS): ask for that parse now, as the UI's "Reparse DAG" button does.
        token = api.get("/dags/dlq_auto_replay").raise_for_status().json()["file_token"]
        api.put(f"/parseDagFile/{token}").raise_for_status()
    wait_for(
        "the DLQ watcher to start (its cursor group to commit)",
        lambda: stack.watcher_started(DeadLetterQueueEventTrigger(topic="orders.dlq", min_records=1), "orders.dlq"),
        180,
        stack,
    )
    errors = [RetriableError("lookup timed out"), ValueError("negative amount"), RetriableError("broker away")]
    write_dead_letters(config, "orders.dlq", "orders.auto", errors)

    [run] = wait_for(
        "a successful dlq_auto_replay run",
        lambda: [run for run in stack.runs("dlq_auto_replay") if run["state"] == "success"],
        180,
        stack,
    )
    assert run["run_type"] == "asset_triggered"
    replayed = read_to_end(config, "orders.auto")
    assert sorted(m.value() for m in replayed) == [b"order-0", b"order-2"], "only the retriable ones, once each"


def test_a_message_queue_trigger_with_the_kerr_dlq_scheme_starts_a_dag_when_the_dlq_grows(stack: EventStack) -> None:
    """common.messaging's ``MessageQueueTrigger(scheme="kerr+dlq")`` finds our queue provider on the real triggerer.

    Two dead letters stay under the watch's ``min_records=3`` and start nothing; the third
    starts one run, and the run's asset event carries the growth summary of all three.
    """
    wait_for(
        "the queue-door DLQ watcher to start (its cursor group to commit)",
        lambda: stack.watcher_started(
            DeadLetterQueueEventTrigger(topic=QUEUE_DLQ, min_records=3, poll_interval=1.0), QUEUE_DLQ
        ),
        180,
        stack,
    )
    config = {"bootstrap.servers": stack.bootstrap_servers}
    write_dead_letters(config, QUEUE_DLQ, "orders.queued", [ValueError("negative amount"), ValueError("no customer")])
    write_dead_letters(config, QUEUE_DLQ, "orders.queued", [RetriableError("broker away")])
    [run] = wait_for(
        "a successful dlq_queue_watch run",
        lambda: [run for run in stack.runs("dlq_queue_watch") if run["state"] == "success"],
        180,
        stack,
    )
    assert run["run_type"] == "asset_triggered"
    assert len(stack.runs("dlq_queue_watch")) == 1, "two dead letters, under min_records, started no run"
    [payload] = stack.run_payloads("dlq_queue_watch", run["dag_run_id"])
    assert (payload["status"], payload["topic"], payload["count"]) == ("grew", QUEUE_DLQ, 3), payload
    assert payload["counts_by_class"] == {"ValueError": 2, "airflow_kerr.errors.exceptions.RetriableError": 1}, payload


def test_the_connections_are_rows_of_the_metadata_db_and_in_no_airflow_process_environment(stack: EventStack) -> None:
    """The Connections page shows them, and an edit there is what the components read (no variable hides it)."""
    assert stack.ui.connect is not None and stack.ui.process is not None
    found = stack.answer(lambda api: api.get("/connections", params={"limit": 100}), None)
    connections = {c["connection_id"]: c for c in found.get("connections", [])}
    assert {"kafka_default", "spark_default", "kafka_connect_default"} <= set(connections), found
    local_settings = stack.ui.broker.client_config if stack.ui.broker is not None else {}
    assert json.loads(connections["kafka_default"]["extra"]) == {
        "bootstrap.servers": stack.bootstrap_servers,
        **local_settings,
    }, "the embedded broker's clients get its receive limit (LOCAL_CLIENT_CONFIG)"
    connect = connections["kafka_connect_default"]
    assert (connect["conn_type"], connect["host"], connect["port"]) == (
        "kafka_connect",
        stack.ui.connect.host,
        stack.ui.connect.port,
    )
    assert (connections["spark_default"]["conn_type"], connections["spark_default"]["host"]) == ("spark", "local[2]")

    environments = {}
    for pid, _ in process_tree(stack.ui.process.pid):
        try:
            environments[pid] = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # a task's process that ended meanwhile
    assert len(environments) >= 5, "standalone and its api-server, scheduler, dag-processor and triggerer"
    names = {b"AIRFLOW_CONN_KAFKA_DEFAULT", b"AIRFLOW_CONN_SPARK_DEFAULT", b"AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"}
    variables = {pid: {v.split(b"=")[0] for v in environment} for pid, environment in environments.items()}
    shadowing = {pid: hiding for pid, present in variables.items() if (hiding := present & names)}
    assert not shadowing, f"connection variables in Airflow's processes, hiding the DB rows: {shadowing}"


def write_dead_letters(config: dict[str, Any], dlq: str, source: str, errors: list[Exception]) -> None:
    """One DLQ record per error, in Connect's format, for records of ``source`` with values ``order-<i>``."""
    now_ms = int(time.time() * 1000)
    failures = [
        Failure(SourceRecord(source, 0, o, now_ms, key=b"k", value=f"order-{o}".encode()), Stage.TRANSFORMATION, error)
        for o, error in enumerate(errors)
    ]
    assert write_failures(config, dlq, failures) == len(errors)


def poison_batch(config: dict[str, Any], records_in: int, malformed: int) -> None:
    """What the error-aware job leaves after a batch with ``malformed`` bad JSON records: dead letters, then metrics."""
    try:
        json.loads("{bad")
    except ValueError as error:
        malformed_json = error
    now_ms = int(time.time() * 1000)
    records = [SourceRecord("orders", 0, o, now_ms, key=b"k", value=b"{bad") for o in range(malformed)]
    converter = "airflow_kerr.spark.stages.JsonConverter"
    failures = [Failure(r, Stage.VALUE_CONVERTER, malformed_json, converter) for r in records]
    assert write_failures(config, "orders.dlq", failures) == malformed
    write_task_metrics(config, METRICS_TOPIC, PIPELINE, records_in=records_in, errors=malformed)
