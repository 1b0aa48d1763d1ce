"""The DLQ view never answers 5xx for what a user asks (issue #24, point 4).

The plugin's real FastAPI app, served by a TestClient against the real broker: a
connection that is not a Kafka one or lacks ``bootstrap.servers`` is a 4xx naming it and
what is missing, an unknown connection a 404 naming it, and Hypothesis throws strings,
numbers, unicode, huge values, negative offsets and bad cursors at every route's
parameters without ever getting a 5xx. Only Airflow's authentication is stood in for (a
signed-in admin), which has its own tests upstream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.local.dead_letters import Failure, write_dead_letters
from tests.clock import RECENT_MS

#: Connections a request may name: one usable, the rest not Kafka ones or without bootstrap.servers.
CONNECTIONS = {
    "spark_default": {"conn_type": "spark", "host": "local[2]"},
    "kafka_connect_default": {"conn_type": "kafka_connect", "host": "localhost", "port": 8083},
    "kafka_no_bootstrap": {"conn_type": "kafka", "extra": {"group.id": "g"}},
    "kafka_empty_extra": {"conn_type": "kafka"},
}
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def dlq(kafka_bootstrap: str) -> str:
    """A small DLQ (four dead letters) for the routes to read, written once for the module."""
    from confluent_kafka.admin import AdminClient, NewTopic

    config: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap}
    topic = f"view-requests-{uuid.uuid4().hex[:8]}.dlq"
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(timeout=30)
    failures = [
        Failure(SourceRecord("orders", 0, i, RECENT_MS + i, key=b"k", value=b"{bad"), stage, error)
        for i, (stage, error) in enumerate(
            [(Stage.VALUE_CONVERTER, ValueError("bad json")), (Stage.TRANSFORMATION, KeyError("id"))] * 2
        )
    ]
    write_dead_letters(config, topic, failures)
    return topic


@pytest.fixture(scope="module")
def client(kafka_bootstrap: str) -> Iterator[TestClient]:
    """The plugin's app as the api-server mounts it, a signed-in admin asking, the test broker as kafka_default."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_kerr.plugins.dead_letter_view import app

    patch = pytest.MonkeyPatch()
    patch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    for conn_id, connection in CONNECTIONS.items():
        patch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    init_auth_manager()
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username="on-call", role="admin")
    try:
        with TestClient(app, raise_server_exceptions=False) as test_client:
            yield test_client
    finally:
        app.dependency_overrides.clear()
        patch.undo()


def detail(response: Any) -> str:
    return str(response.json()["detail"])


@pytest.mark.parametrize(
    ("conn_id", "says"),
    [
        ("spark_default", "a 'spark' connection; the DLQ view reads through a 'kafka' connection"),
        ("kafka_connect_default", "a 'kafka_connect' connection; the DLQ view reads through a 'kafka' connection"),
        ("kafka_no_bootstrap", "its extra has no 'bootstrap.servers'"),
        ("kafka_empty_extra", "its extra has no 'bootstrap.servers'"),
    ],
)
def test_a_connection_the_view_cannot_read_through_is_a_400_saying_why(
    client: TestClient, dlq: str, conn_id: str, says: str
) -> None:
    for path in ("/api/topics", f"/api/topics/{dlq}/summary", f"/api/topics/{dlq}/samples"):
        response = client.get(path, params={"kafka_config_id": conn_id})
        assert response.status_code == 400, (path, response.text)
        assert f"kafka_config_id={conn_id!r}" in detail(response) and says in detail(response)


def test_an_unknown_connection_is_a_404_naming_it(client: TestClient) -> None:
    response = client.get("/api/topics", params={"kafka_config_id": "no_such_conn"})
    assert response.status_code == 404
    assert "kafka_config_id='no_such_conn': no such connection" in detail(response)


def test_the_view_reads_through_a_kafka_connection(client: TestClient, dlq: str) -> None:
    """The fuzzing below means something only if the good requests succeed."""
    topics = client.get("/api/topics")
    assert topics.status_code == 200 and dlq in {t["name"] for t in topics.json()["topics"]}
    samples = client.get(f"/api/topics/{dlq}/samples", params={"limit": 2})
    assert samples.status_code == 200, samples.text
    assert client.get(f"/api/topics/{dlq}/summary").status_code == 200
    assert client.get(f"/api/topics/{dlq}/backlog", params={"group": "nobody"}).status_code == 200


# ------------------------------------------------------------------------------------------------ fuzzing

huge_numbers = st.sampled_from([-(10**30), -1, 0, 2**63, 10**4000, "1e308", "nan", "inf", "-inf", "0x10", "1_000"])
values = st.one_of(
    st.text(max_size=60),
    st.text(max_size=60).map(lambda s: s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    huge_numbers,
    st.sampled_from(["", " ", "\x00", "é🙂", "'; DROP TABLE x; --", "../../etc/passwd", "%00", "a" * 5000]),
    st.sampled_from(["2026-11-26T00:00:00Z", "1795250000000", "-5", "yesterday", "9999-12-31T23:59:59+14:00"]),
)
connections = st.one_of(st.none(), st.sampled_from(["kafka_default", *CONNECTIONS, "no_such_conn"]), values)
cursors = st.one_of(values, st.text("ABCDEFabcdef0123456789-_=.:", max_size=200))
selection = {key: values for key in ("exception_class", "stage", "source_topic", "pipeline", "start", "end")} | {
    "stage": st.one_of(values, st.sampled_from(["VALUE_CONVERTER", "transformation", "KEY_CONVERTER"]))
}


def topics(dlq: str) -> st.SearchStrategy[str]:
    """Mostly the real DLQ, so most requests reach the broker; else a missing topic or any text."""
    return st.one_of(st.sampled_from([dlq, dlq, dlq, "missing.dlq"]), st.text(min_size=1, max_size=300))


def query(**strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, str]]:
    """Some of the route's parameters, each any value (sent as its text, as a browser would)."""
    return st.fixed_dictionaries({}, optional=strategies).map(
        lambda chosen: {key: str(value) for key, value in chosen.items() if value is not None}
    )


def assert_no_5xx(client: TestClient, path: str, params: dict[str, str]) -> None:
    response = client.get(path, params=params)
    event(f"HTTP {response.status_code}")  # --hypothesis-show-statistics: how many requests reached the broker
    assert response.status_code < 500, f"{path} {params!r} -> {response.status_code} {response.text[:500]}"
    if response.status_code >= 400:
        assert response.json()["detail"], "an error says what was wrong"


def path_of(topic: str, route: str) -> str:
    return f"/api/topics/{quote(topic, safe='')}/{route}"


@FUZZ
@given(data=st.data())
def test_any_connection_id_never_gets_a_5xx(client: TestClient, dlq: str, data: st.DataObject) -> None:
    """The connection parameter, on every route that reads through one (the others fuzz with the good one)."""
    route = data.draw(st.sampled_from(["/api/topics", path_of(dlq, "summary"), path_of(dlq, "samples")]))
    assert_no_5xx(client, route, data.draw(query(kafka_config_id=connections)))


@FUZZ
@given(data=st.data())
def test_summary_never_answers_5xx(client: TestClient, dlq: str, data: st.DataObject) -> None:
    params = data.draw(
        query(
            cursor=cursors,
            max_records=st.one_of(values, st.integers(-5, 600_000)),
            max_seconds=st.one_of(values, st.floats(-1, 3)),
            **selection,
        )
    )
    assert_no_5xx(client, path_of(data.draw(topics(dlq)), "summary"), params)


@FUZZ
@given(data=st.data())
def test_samples_never_answers_5xx(client: TestClient, dlq: str, data: st.DataObject) -> None:
    params = data.draw(query(limit=st.one_of(values, st.integers(-5, 200)), **selection))
    assert_no_5xx(client, path_of(data.draw(topics(dlq)), "samples"), params)


@FUZZ
@given(data=st.data())
def test_backlog_never_answers_5xx(client: TestClient, dlq: str, data: st.DataObject) -> None:
    params = data.draw(query(group=values))
    assert_no_5xx(client, path_of(data.draw(topics(dlq)), "backlog"), params)


def test_a_summary_cursor_from_elsewhere_is_a_400_naming_it(client: TestClient, dlq: str) -> None:
    first = client.get(f"/api/topics/{dlq}/summary", params={"max_records": 1})
    assert first.status_code == 200
    for cursor in ("not-a-cursor", "x" * 10_000, first.text[:40]):
        response = client.get(f"/api/topics/{dlq}/summary", params={"cursor": cursor})
        assert response.status_code == 400 and "cursor" in detail(response)


def test_pages_and_settings_answer(client: TestClient) -> None:
    for path in ("/dead-letters", "/replay-summary", "/api/settings"):
        assert client.get(path, params={"x": "\x00é" * 100}).status_code == 200


RUN_KEYS = {"dag_id": values, "run_id": values, "task_id": values, "map_index": st.one_of(values, st.integers(-2, 5))}


def test_a_runs_tab_names_what_it_needs_and_what_it_found(client: TestClient, dlq: str, airflow_home: Any) -> None:
    """The tab's requests against the real metadata DB: a run that left no record counts nothing, and a bad id is a
    400 naming it (the tab of a real job run: tests/ui/test_run_dead_letters_tab.py)."""
    run = {"dag_id": "no_such_dag", "run_id": "manual__1", "task_id": "t", "map_index": "-1"}
    found = client.get("/api/run", params=run).raise_for_status().json()
    assert found == {"dag_id": "no_such_dag", "run_id": "manual__1", "task_id": "t", "map_index": -1, "tasks": []}
    counted = client.get(path_of(dlq, "summary"), params=run).raise_for_status().json()
    assert counted["matched"] == 0 and counted["total"] == 0, "a run that wrote nothing shows nothing of the DLQ"
    assert client.get(path_of(dlq, "samples"), params=run).raise_for_status().json()["records"] == []
    assert client.get(path_of(dlq, "summary")).raise_for_status().json()["matched"] == 4, "Browse still counts all"

    for params, named in [
        ({"dag_id": "d"}, "dag_id and run_id: a run's dead letters need both"),
        ({**run, "map_index": "x"}, "map_index='x': expected a task's map index"),
        ({**run, "task_id": "t\x00"}, "task_id='t\\x00': not an id"),
    ]:
        response = client.get("/api/run", params=params)
        assert response.status_code == 400 and named in response.json()["detail"], response.text
    # Airflow leaves {MAP_INDEX} as it is when it has none to put there: any map index then.
    assert client.get("/api/run", params={**run, "map_index": "{MAP_INDEX}"}).json()["map_index"] is None
    missing = client.get("/run-tab", params={"job_run_id": "no_such_dag.manual__1.t.1"}, follow_redirects=False)
    assert missing.status_code == 404 and "no_such_dag.manual__1.t.1" in missing.json()["detail"]


@FUZZ
@given(data=st.data())
def test_a_runs_tab_never_answers_5xx(client: TestClient, dlq: str, airflow_home: Any, data: st.DataObject) -> None:
    route = data.draw(st.sampled_from(["/api/run", path_of(dlq, "summary"), path_of(dlq, "samples")]))
    assert_no_5xx(client, route, data.draw(query(**RUN_KEYS)))
