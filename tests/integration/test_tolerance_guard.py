"""The closed loop: a breach in the real job's metrics pauses a real Kafka Connect sink, alerts
(quoting the DLQ's newest dead letters, or saying why it could not), and resumes it after recovery."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from airflow_kerr.examples.orders import generate_orders
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config
from airflow_kerr.local.dead_letters import write_task_metrics
from airflow_kerr.local.hitl import answer_question
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec

pytestmark = [pytest.mark.spark, pytest.mark.airflow]
POKE_INTERVAL_S = 3.0


@dataclass
class Sink:
    """One FileStreamSink on the session's real Connect worker, deleted after the test."""

    worker: ConnectWorker
    name: str

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.worker.url}/connectors/{self.name}/status", timeout=30).json()
        return result

    def state(self) -> str:
        return str(self.status().get("connector", {}).get("state"))


@pytest.fixture
def connect(connect_worker: ConnectWorker, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectWorker]:
    """The session's real Connect worker as ``kafka_connect_default``."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT",
        json.dumps(
            {"conn_type": "kafka_connect", "host": connect_worker.host, "port": connect_worker.port, "schema": "http"}
        ),
    )
    yield connect_worker


def add_sink(worker: ConnectWorker, name: str, topic: str) -> Sink:
    response = httpx.post(
        f"{worker.url}/connectors", json={"name": name, "config": connector_config(topic, f"{name}.txt")}, timeout=30
    )
    assert response.status_code == 201, response.text
    sink = Sink(worker, name)
    deadline = time.monotonic() + 30
    while [t.get("state") for t in sink.status().get("tasks", [])] != ["RUNNING"]:
        assert time.monotonic() < deadline, f"{name} did not start: {sink.status()}"
        time.sleep(0.1)
    return sink


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[Any]]]:
    received: list[Any] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/alerts", received
    server.shutdown()


def guard_dag(write_dag: Callable[[str, str], Any], dag_id: str, **guard: Any) -> Any:
    """A DAG file holding one guard, written where dag.test() can run it."""
    return write_dag(
        dag_id,
        "import pendulum\n"
        "from airflow.sdk import DAG\n"
        "from airflow_kerr.task_groups.tolerance_guard import tolerance_guard\n"
        f"with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)):\n"
        f"    tolerance_guard(**{guard!r})\n",
    )


def test_example_guard_dag_parses(load_dag: Callable[[str], Any]) -> None:
    dag = load_dag("tolerance_guard")
    assert {t.task_id.split(".")[-1] for t in dag.tasks} >= {
        "wait_for_breach",
        "pause_connectors",
        "notify",
        "recovery_or_go_ahead",
        "wait_for_recovery",
        "resume_connectors",
        "verify_running",
    }


def test_breach_pauses_alerts_and_recovery_resumes(  # noqa: PLR0913 - pytest injects each fixture as an argument
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    connect: ConnectWorker,
    webhook: tuple[str, list[Any]],
    airflow_home: Any,
    monkeypatch: pytest.MonkeyPatch,
    write_dag: Callable[[str, str], Any],
) -> None:
    """``dag.test()`` here rather than the ``run_dag`` fixture: the test reads the task instances' start times."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    topic = create_topic(unique_topic, partitions=2)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    sink = add_sink(connect, f"orders-sink-{unique_topic[-8:]}", f"{topic}.clean")
    spec = PipelineSpec.from_dict(
        {
            "name": "guarded",
            "source": {"topics": [topic], "group_id": f"{topic}-g"},
            "value_converter": "json",
            "transformations": ["airflow_kerr.examples.orders.validate_order"],
            "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
            "kafka": kafka_config,
            "metrics_topic": f"{topic}.metrics",
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                # The error context the alert's top exceptions and stages are read from.
                "errors.deadletterqueue.context.headers.enable": True,
            },
        }
    )
    url, received = webhook
    dag = guard_dag(
        write_dag,
        f"guard_{unique_topic[-8:]}",
        connectors=sink.name,
        pipeline="guarded",
        metrics_topic=f"{topic}.metrics",
        dlq_topic=f"{topic}.dlq",
        max_error_rate=0.05,
        min_records=100,
        window=60,
        poke_interval=POKE_INTERVAL_S,
        breach_timeout=180,
        recovery_timeout=180,
        notifier={"webhook_url": url},
    )
    timeline: dict[str, float] = {}
    failures: list[BaseException] = []

    def pipeline_runs() -> None:
        try:
            time.sleep(2 * POKE_INTERVAL_S)
            timeline["poisoned"] = time.time()
            # Every fourth order is cut-short JSON: the DLQ's newest 20 are all the value converter's.
            generate_orders(kafka_config, topic, 300, malformed_every=4, invalid_every=0, flaky_every=0)
            run_job(spark, spec, run_id="poisoned")
            deadline = time.time() + 120
            while sink.state() != "PAUSED":
                assert time.time() < deadline, "the guard never paused the connector"
                time.sleep(0.05)
            timeline["paused"] = time.time()
            generate_orders(kafka_config, topic, 4000, malformed_every=0, invalid_every=0, flaky_every=0)
            run_job(spark, spec, run_id="clean")
            timeline["clean"] = time.time()
        except BaseException as exc:
            failures.append(exc)

    background = threading.Thread(target=pipeline_runs)
    background.start()
    dag_run = dag.test()
    background.join(timeout=300)
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    started = {ti.task_id.split(".")[-1]: ti.start_date for ti in dag_run.get_task_instances()}

    assert not failures, failures
    assert all(state == "success" for state in states.values()), states
    # In order: the poisoned run, the pause (asked by the sensor that saw its breach), the clean run. How
    # soon after a breach the guard pauses is measured by benchmarks/watcher_latency.py --path guard.
    assert timeline["paused"] < timeline["clean"], timeline
    assert sink.state() == "RUNNING"
    httpx.delete(f"{connect.url}/connectors/{sink.name}", timeout=30)
    alert, resolved = received
    assert alert["kerr"]["pipeline"] == "guarded"
    # One malformed order in four; the guard may trip on the first Spark task's metrics
    # before the second task has published its own, so the reading covers >= 100 records.
    details = alert["kerr"]
    assert details["records_in"] >= 100 and details["errors"] >= 20
    assert details["error_rate"] == pytest.approx(details["errors"] / details["records_in"])
    assert 0.2 <= details["error_rate"] <= 0.3
    assert details["max_error_rate"] == 0.05
    assert details["dlq_topic"] == f"{topic}.dlq"
    assert alert["text"].startswith("Tolerance breached in pipeline guarded: error rate ")
    # What the person paged reads: the DLQ's newest 20 dead letters (each Spark task flushes its
    # dead letters before its metrics, so at least one task's ~37 are there when the guard trips).
    text = alert["blocks"][0]["text"]["text"]
    assert "Top exceptions: json.decoder.JSONDecodeError (20)" in text, text
    assert "Failing stages: VALUE_CONVERTER (20)" in text, text
    assert f"Dead letter queue: {topic}.dlq (counts above: its newest 20 dead letters)" in text, text
    assert details["top_exception_classes"] == [["json.decoder.JSONDecodeError", 20]]
    assert details["sample_error"] is None
    # The sensor that saw the breach paused the sink itself, before the pause task had started.
    asked = details["paused_on_breach"][sink.name]
    assert asked["error"] is None, asked
    assert asked["asked_at_ms"] / 1000 >= timeline["poisoned"], "paused before any poisoned order was written"
    assert asked["asked_at_ms"] / 1000 < started["pause_connectors"].timestamp(), (asked, started)
    resolved_after_recovery(resolved["kerr"], alert["kerr"], asked["asked_at_ms"])
    assert resolved["text"].startswith(f"Resolved (breach) in pipeline guarded: {sink.name} running again after ")


def resolved_after_recovery(resolved: dict[str, Any], alert: dict[str, Any], paused_at_ms: int) -> None:
    """One episode, then its "resolved" message: the 75 malformed orders counted once, the peak near 25 %."""
    assert resolved["event"] == "breach_resolved"
    assert resolved["episode_key"] == alert["episode_key"]
    assert resolved["episode_started_at_ms"] == paused_at_ms
    figures = resolved["figures"]
    assert figures["records_failed"] == 75 and figures["records_in"] >= 300, figures
    assert 0.2 <= figures["peak_error_rate"] <= 0.3, figures
    assert resolved["answer"] is None, "nobody was asked: recovery resumed it"


def test_an_unreadable_dlq_still_alerts_and_says_why_the_sample_is_missing(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    connect: ConnectWorker,
    webhook: tuple[str, list[Any]],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
    write_dag: Callable[[str, str], Any],
) -> None:
    """The DLQ topic was never created: the guard pauses, alerts with the reason, and resumes on the go-ahead."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    metrics = create_topic(f"{unique_topic}.metrics")
    sink = add_sink(connect, f"orders-sink-{unique_topic[-8:]}", create_topic(f"{unique_topic}.clean"))
    missing_dlq = f"{unique_topic}.dlq"
    write_task_metrics(kafka_config, metrics, "unreadable", records_in=200, errors=50)
    url, received = webhook
    dag = guard_dag(
        write_dag,
        f"guard_{unique_topic[-8:]}",
        connectors=sink.name,
        pipeline="unreadable",
        metrics_topic=metrics,
        dlq_topic=missing_dlq,
        max_error_rate=0.05,
        min_records=100,
        window=60,
        poke_interval=1,
        breach_timeout=60,
        recovery_timeout=60,
        notifier={"webhook_url": url},
    )

    states = run_dag(dag, resume_without_recovery=True)
    httpx.delete(f"{connect.url}/connectors/{sink.name}", timeout=30)

    group = "tolerance_guard"
    assert states[f"{group}.notify"] == "success" and states[f"{group}.verify_running"] == "success", states
    assert states[f"{group}.wait_for_recovery"] == "skipped", states
    alert, resolved = received
    # One episode: the alert and the "resolved" message share its key; the go-ahead is named as the decision.
    assert resolved["kerr"]["event"] == "breach_resolved" and alert["kerr"]["event"] == "tolerance_breach"
    assert resolved["kerr"]["episode_key"] == alert["kerr"]["episode_key"]
    assert resolved["kerr"]["answer"]["chosen"] == "Resume now", resolved["kerr"]
    assert "Decision: Resume now (trigger form (resume_without_recovery))" in resolved["text"] + str(resolved["blocks"])
    text = alert["blocks"][0]["text"]["text"]
    assert text.startswith("Tolerance breached in pipeline unreadable: error rate 25.00% (limit 5.00%)"), text
    assert (
        f"Top exceptions and failing stages unknown: the dead letter sample could not be read from {missing_dlq}: "
        f"OffsetLookupError: topic {missing_dlq!r} is not available on the broker" in text
    ), text
    assert "Top exceptions:" not in text and "Failing stages:" not in text, text
    assert alert["kerr"]["sample_error"].startswith("OffsetLookupError: "), alert["kerr"]


def _answer_when_asked(dag_id: str, task_id: str, chosen: str, user: str, failures: list[BaseException]) -> None:
    """Answer the guard's question once it is asked, through Airflow's own response route (``local.hitl``).

    No api-server runs beside ``dag.test()`` here; the browser test
    (tests/ui/test_guard_question.py) answers through the real UI.
    """
    try:
        answer_question(dag_id, task_id, chosen, user)
    except BaseException as exc:
        failures.append(exc)


def test_the_on_call_answer_resumes_and_the_resolved_message_names_who_gave_it(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    connect: ConnectWorker,
    webhook: tuple[str, list[Any]],
    airflow_home: Any,
    monkeypatch: pytest.MonkeyPatch,
    write_dag: Callable[[str, str], Any],
) -> None:
    """Breach → pause → alert with the question's link → "Resume now" by ``oncall`` → RUNNING → "resolved"."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")
    metrics = create_topic(f"{unique_topic}.metrics")
    dlq = create_topic(f"{unique_topic}.dlq")
    sink = add_sink(connect, f"orders-sink-{unique_topic[-8:]}", create_topic(f"{unique_topic}.clean"))
    job_run = f"error_aware_{unique_topic[-8:]}.manual__1.orders_pipeline.1"
    write_task_metrics(
        kafka_config,
        metrics,
        "asked",
        records_in=200,
        errors=50,
        run_id=job_run,
        dead_letter_topic=dlq,
        dead_letter_offsets={"0": [[0, 50]]},
    )
    url, received = webhook
    dag_id = f"guard_{unique_topic[-8:]}"
    dag = guard_dag(
        write_dag,
        dag_id,
        connectors=sink.name,
        pipeline="asked",
        metrics_topic=metrics,
        dlq_topic=dlq,
        max_error_rate=0.05,
        min_records=100,
        window=60,
        poke_interval=1,
        breach_timeout=60,
        recovery_timeout=60,
        notifier={"webhook_url": url},
        ask=True,
    )
    failures: list[BaseException] = []
    answerer = threading.Thread(
        target=_answer_when_asked, args=(dag_id, "tolerance_guard.ask_on_call", "Resume now", "oncall", failures)
    )
    answerer.start()
    dag_run = dag.test()
    answerer.join(timeout=60)
    status = sink.status()
    httpx.delete(f"{connect.url}/connectors/{sink.name}", timeout=30)

    assert not failures, failures
    states = {ti.task_id.split(".")[-1]: str(ti.state) for ti in dag_run.get_task_instances()}
    assert states["ask_on_call"] == "success" and states["resume_connectors"] == "success", states
    assert states["wait_for_recovery"] == "skipped" and states["keep_paused"] == "skipped", states
    assert status["connector"]["state"] == "RUNNING", status
    alert, resolved = received
    assert alert["kerr"]["question_link"] == (
        f"http://airflow.example:8080/dags/{dag_id}/runs/{quote(dag_run.run_id, safe='')}"
        "/tasks/tolerance_guard.ask_on_call/required_actions?map_index=-1"
    )
    assert (
        alert["kerr"]["dlq_link"]
        == f"http://airflow.example:8080/kerr/dead-letters?topic={dlq}&kafka_config_id=kafka_default"
    )
    # Straight to the Dead letters tab of the job run that wrote the window's dead letters.
    tab = f"http://airflow.example:8080/kerr/run-tab?job_run_id={job_run}"
    assert alert["kerr"]["run_links"] == [{"run": job_run, "link": tab}], alert["kerr"]
    assert f"Dead letters of run {job_run}: {tab}" in alert["blocks"][0]["text"]["text"]
    assert resolved["kerr"]["episode_key"] == alert["kerr"]["episode_key"]
    assert resolved["kerr"]["answer"]["chosen"] == "Resume now"
    assert resolved["kerr"]["answer"]["responded_by"] == "oncall" and resolved["kerr"]["answer"]["timed_out"] is False
    figures = resolved["kerr"]["figures"]
    assert figures["records_failed"] == 50 and figures["records_in"] == 200, figures
    assert figures["peak_error_rate"] == pytest.approx(0.25), figures
    assert resolved["text"].startswith(f"Resolved (breach) in pipeline asked: {sink.name} running again after ")
    text = resolved["blocks"][0]["text"]["text"]
    assert "Records failed: 50 of 200; peak error rate 25.00% (limit 5.00%)." in text, text
    assert "Decision: Resume now (oncall)" in text, text
    # The answer is in the run too: the question's XCom.
    answer = next(ti for ti in dag_run.get_task_instances() if ti.task_id.endswith("ask_on_call")).xcom_pull(
        task_ids="tolerance_guard.ask_on_call", key="answer"
    )
    assert answer["responded_by"] == "oncall", answer
